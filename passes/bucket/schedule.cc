#include "passes/bucket/schedule.h"

#include <charconv>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "ir/collectives.h"
#include "ir/error.h"
#include "passes/analysis/blocks.h"
#include "passes/analysis/cost_model.h"
#include "passes/analysis/fsdp.h"
#include "passes/analysis/memory.h"
#include "passes/analysis/mutation.h"
#include "passes/analysis/phase.h"
#include "passes/analysis/simulator.h"
#include "passes/bucket/max_tree.h"
#include "passes/pass_manager.h"
#include "passes/plan/reference_plan.h"

namespace jfx {
namespace {

struct ScheduleStatistics : StatisticSet {
  Statistic blocks{this, "blocks", "blocks found by the block analysis"};
  Statistic prefetched{this, "prefetched", "all-gathers moved earlier"};
  Statistic prefetch_lowered{this, "prefetch-lowered",
                             "all-gathers prefetched less than asked, to stay under memory-limit"};
  Statistic waits_deferred{this, "waits-deferred", "reduce-scatter waits moved later"};
  Statistic defer_skipped{this, "defer-skipped-memory",
                          "reduce-scatter waits not deferred, to stay under memory-limit"};
  Statistic moved_nodes{this, "moved-nodes", "nodes moved in all"};
  Statistic peak_before{this, "memory-peak-before", "estimated peak bytes of the input"};
  Statistic memory_limit{this, "memory-limit", "the bound in bytes"};
  Statistic peak_estimate{this, "memory-peak-estimate", "estimated peak bytes of the output"};
  Statistic auto_candidates{this, "auto-candidates", "prefetch=auto: prefetch distances timed"};
  Statistic auto_prefetch{this, "auto-prefetch", "prefetch=auto: the distance chosen"};
  Statistic simulated_step{this, "simulated-step-us",
                           "prefetch=auto: the chosen distance's simulated step; "
                           "memory-limit=reference with hardware: the result's (microseconds)"};
  Statistic reference_peak{this, "reference-peak",
                           "memory-limit=reference: the reference plan's estimated peak bytes"};
  Statistic reference_step{this, "reference-step-us",
                           "memory-limit=reference with hardware: the reference plan's step"};
  Statistic reference_fallback{this, "reference-fallback",
                               "memory-limit=reference: 1 when the reference plan was faster and "
                               "replaced the result"};
};
const ScheduleStatistics& scheduleStats() {
  static const ScheduleStatistics s;
  return s;
}

// A launch chain longer than this is not parameter preparation; stop there.
constexpr size_t kMaxChain = 1024;

// Parameter preparation that may run earlier than written: casts, views, flattens, the bucket's
// cat, zero padding. Everything else is compute and stays where it is.
bool isLaunchPrep(const Node* n) {
  if (!n->isPure()) return false;
  switch (n->info().category) {
    case OpCategory::View:
    case OpCategory::Copy:
    case OpCategory::Getitem:
    case OpCategory::Index:
      return true;
    case OpCategory::Factory:
      return n->inputs().empty();
    default:
      return false;
  }
}

// Users of a deferred wait that may move down with it: views and casts with one operand.
bool isMovableDown(const Node* n) {
  if (!isLaunchPrep(n) && !(n->isPure() && n->info().category == OpCategory::Elementwise &&
                            n->info().alias == AliasKind::None))
    return false;
  const auto& ins = n->inputs();
  for (const Node* p : ins)
    if (p != ins.front()) return false;
  return !ins.empty();
}

int64_t freshBytes(const Node* n) {
  switch (n->info().category) {
    case OpCategory::View:
    case OpCategory::Getitem:
    case OpCategory::Wait:
      return 0;
    default:
      return n->val().bytes();
  }
}

struct Unit {
  Node* coll;
  Node* wait;
};

class Scheduler {
 public:
  Scheduler(Graph& g, const ScheduleOptions& opts, PassContext& ctx)
      : g_(g),
        opts_(opts),
        ctx_(ctx),
        phases_(ctx.analyses.get<PhaseInfo>(g)),
        fsdp_(ctx.analyses.get<FsdpAnalysis>(g)),
        written_(ctx.analyses.get<WrittenStorage>(g)) {}
  bool run();
  // Every node run() moved, in the order they were first moved.
  const std::vector<Node*>& movedNodes() const { return moved_list_; }

 private:
  // The original step of the first node at or after `x` that this pass has not moved.
  size_t stepAt(Node* x) const {
    while (x && moved_[x->id()])
      x = x->next();
    return x ? idx_[x->id()] : idx_.size();
  }
  Node* previousInGroup(const Node* coll) const {
    const uint32_t p = prev_same_group_[coll->id()];
    return p ? g_.nodeById(p - 1) : nullptr;
  }
  bool fits(size_t lo, size_t hi, int64_t delta) const {
    if (!tree_ || delta <= 0 || lo >= hi) return true;
    // Also rejects any growth of a region that is over the limit already (the input's own peak).
    return saturatingAdd(tree_->max(lo, hi), delta) <= limit_;
  }
  void charge(size_t lo, size_t hi, int64_t delta) {
    if (tree_ && delta > 0) tree_->add(lo, hi, delta);
  }
  bool prefetch(const std::vector<Unit>& seq);
  bool deferWaits(const std::vector<Unit>& seq);
  // The launch chain of `coll` if it moved before `at`; `at` moves down past non-movable producers.
  std::vector<Node*> launchChain(Node* coll, Node*& at) const;
  void markMoved(Node* x) {
    if (!moved_[x->id()]) moved_list_.push_back(x);
    moved_[x->id()] = 1;
  }

  Graph& g_;
  const ScheduleOptions& opts_;
  PassContext& ctx_;
  // Of the graph before this pass edits it (cached along the pipeline).
  const PhaseInfo& phases_;
  const FsdpAnalysis& fsdp_;
  const WrittenStorage& written_;  // values written in place: their readers stay where they are
  // By node id, 4 bytes each (steps and ids fit 32 bits): the pass holds them beside its input's
  // memory profile and its tree, at the pipeline's peak (bench/README.md, "Figures behind the
  // code").
  std::vector<uint32_t> idx_;  // original step
  std::vector<uint8_t> moved_;
  std::vector<Node*> moved_list_;
  std::vector<uint32_t> prev_same_group_;  // the previous collective of its group: id + 1, or 0
  std::optional<MaxTree> tree_;
  int64_t limit_ = 0;  // bytes, when tree_ is set
};

std::vector<Node*> Scheduler::launchChain(Node* coll, Node*& at) const {
  for (;;) {
    std::vector<Node*> chain{coll};
    std::vector<Node*> work(coll->inputs().begin(), coll->inputs().end());
    Node* barrier = nullptr;
    while (!work.empty()) {
      Node* p = work.back();
      work.pop_back();
      if (p->isBefore(at) || std::find(chain.begin(), chain.end(), p) != chain.end()) continue;
      if (!isLaunchPrep(p) || written_.touches(p) || chain.size() >= kMaxChain) {
        if (!barrier || barrier->isBefore(p)) barrier = p;
        continue;
      }
      chain.push_back(p);
      work.insert(work.end(), p->inputs().begin(), p->inputs().end());
    }
    if (!barrier) {
      std::sort(chain.begin(), chain.end(),
                [](const Node* a, const Node* b) { return a->isBefore(b); });
      return chain;
    }
    at = barrier->next();  // the chain can start only after what it reads
  }
}

bool Scheduler::prefetch(const std::vector<Unit>& seq) {
  bool changed = false;
  for (size_t j = 1; j < seq.size(); ++j) {
    Node* coll = seq[j].coll;
    // Try the full distance first, then shorter ones while the memory limit says no.
    int64_t k = opts_.prefetch;
    bool limited = false;
    for (; k >= 1; --k) {
      size_t anchor = j >= static_cast<size_t>(k) ? j - static_cast<size_t>(k) : 0;
      Node* at = seq[anchor].wait;
      // Stay behind the previous collective of the same group (one NCCL stream, fixed order).
      if (Node* prev = previousInGroup(coll); prev && !prev->isBefore(at)) at = prev->next();
      if (!at->isBefore(coll)) break;  // already issued at least this early
      std::vector<Node*> chain = launchChain(coll, at);
      // Chain nodes already sitting at the insertion point stay; the rest move up before `at`.
      while (at && std::find(chain.begin(), chain.end(), at) != chain.end())
        at = at->next();
      std::vector<Node*> movers;
      for (Node* x : chain)
        if (at->isBefore(x)) movers.push_back(x);
      if (movers.empty()) break;
      int64_t delta = 0;
      for (Node* x : movers)
        delta += freshBytes(x);
      size_t lo = stepAt(at), hi = idx_[coll->id()];
      if (!fits(lo, hi, delta)) {
        limited = true;
        continue;
      }
      g_.placeBefore(movers, at);
      for (Node* x : movers)
        markMoved(x);
      charge(lo, hi, delta);
      ctx_.stat(scheduleStats().prefetched);
      ctx_.stat(scheduleStats().moved_nodes, static_cast<int64_t>(movers.size()));
      changed = true;
      break;
    }
    if (limited) {
      ctx_.stat(scheduleStats().prefetch_lowered);
      ctx_.remark("schedule: prefetch of " + quoteForMessage(coll->name()) + " lowered from " +
                  std::to_string(opts_.prefetch) + " to " +
                  std::to_string(std::max<int64_t>(k, 0)) + " (memory-limit " +
                  formatBytes(limit_) + ")");
    }
  }
  return changed;
}

bool Scheduler::deferWaits(const std::vector<Unit>& seq) {
  bool changed = false;
  for (size_t i = 0; i + 1 < seq.size(); ++i) {
    Node* wait = seq[i].wait;
    Node* next_launch = seq[i + 1].coll;
    if (!wait->isBefore(next_launch)) continue;
    // Move the wait and its movable users to just after the next launch, or to just before the
    // first user that cannot move, whichever comes first.
    Node* at = next_launch->next();
    std::vector<Node*> movers{wait};
    std::vector<Node*> work{wait};
    while (!work.empty()) {
      Node* x = work.back();
      work.pop_back();
      for (const Use& use : x->uses()) {
        Node* u = use.user;
        if (!u->isBefore(at) || std::find(movers.begin(), movers.end(), u) != movers.end())
          continue;
        if (isMovableDown(u) && !written_.touches(u)) {
          movers.push_back(u);
          work.push_back(u);
        } else {
          at = u;  // a compute user (or the next launch itself) bounds the deferral
        }
      }
    }
    std::erase_if(movers, [&](Node* x) { return !x->isBefore(at); });
    if (movers.empty() || movers.front() != wait) continue;
    std::sort(movers.begin(), movers.end(),
              [](const Node* a, const Node* b) { return a->isBefore(b); });
    if (at == wait->next() && movers.size() == 1) continue;  // nothing to gain
    // The collective's input stays alive until its wait.
    int64_t delta = seq[i].coll->input(0) ? seq[i].coll->input(0)->val().bytes() : 0;
    size_t lo = idx_[wait->id()], hi = stepAt(at);
    if (!fits(lo, hi, delta)) {
      ctx_.stat(scheduleStats().defer_skipped);
      ctx_.remark("schedule: wait of " + quoteForMessage(seq[i].coll->name()) +
                  " not deferred (memory-limit " + formatBytes(limit_) + ")");
      continue;
    }
    g_.placeBefore(movers, at);
    for (Node* x : movers)
      markMoved(x);
    charge(lo, hi, delta);
    ctx_.stat(scheduleStats().waits_deferred);
    ctx_.stat(scheduleStats().moved_nodes, static_cast<int64_t>(movers.size()));
    changed = true;
  }
  return changed;
}

bool Scheduler::run() {
  // Walks of the list, not a vector of it, which would be held through the pass.
  idx_.assign(g_.maxId(), 0);
  moved_.assign(g_.maxId(), 0);
  prev_same_group_.assign(g_.maxId(), 0);
  size_t steps = 0;
  for (const Node* n = g_.first(); n; n = n->next())
    idx_[n->id()] = static_cast<uint32_t>(steps++);

  // Units: FSDP all-gathers per (group, side), FSDP gradient collectives per (kind, group).
  std::map<std::pair<std::string, bool>, std::vector<Unit>> gathers;
  std::map<std::pair<int, std::string>, std::vector<Unit>> reductions;
  std::map<std::string, Node*> last_of_group;
  for (Node* n : g_.collectives()) {
    std::string group(collectiveGroupName(*n));
    Node*& last = last_of_group[group];
    prev_same_group_[n->id()] = last ? last->id() + 1 : 0;
    last = n;
    if (n->uses().size() != 1 || !n->uses().front().user->isWait()) continue;
    // A collective over a buffer the graph writes in place (a synced running statistic) stays
    // where it reads the value the program order gives it.
    if (written_.touches(n)) continue;
    Unit u{n, n->uses().front().user};
    CollectiveRole role = fsdp_.roleOf(n);
    CollectiveKind kind = collectiveKind(*n);
    bool bucket = hasFsdpBucketMeta(*n);
    if (kind == CollectiveKind::AllGather && (role == CollectiveRole::FsdpUnshard || bucket))
      gathers[{group, phases_.isBackward(n)}].push_back(u);
    else if ((kind == CollectiveKind::ReduceScatter || kind == CollectiveKind::AllReduce) &&
             (role == CollectiveRole::FsdpReduceGrad || role == CollectiveRole::FsdpGradAllReduce ||
              bucket))
      reductions[{static_cast<int>(kind), group}].push_back(u);
  }

  if (!ctx_.quiet()) {
    const BlockAnalysis& blocks = ctx_.analyses.get<BlockAnalysis>(g_);
    ctx_.stat(scheduleStats().blocks, static_cast<int64_t>(blocks.blocks.size()));
    bool any_gather = false;
    for (auto& [key, seq] : gathers)
      any_gather |= !seq.empty();
    if (blocks.blocks.empty() && any_gather && blocks.parameters > 0)
      ctx_.warn(blocks.noBlocksMessage("schedule") +
                "; prefetching gather by gather, without a block to bound the distance");
    else if (!blocks.blocks.empty())
      ctx_.remark("schedule: " + blocks.summary());
  }

  if (opts_.memory_limit != 0) {
    const MemoryProfile& prof = ctx_.analyses.get<MemoryProfile>(g_);
    // The default: never above the input's own estimated peak.
    limit_ = opts_.memory_limit < 0 ? prof.peak_bytes : opts_.memory_limit;
    // Straight from the curve, not a copy of it beside the tree.
    const size_t known = std::min(prof.curve.size(), steps);
    tree_.emplace(steps, [&](size_t i) { return i < known ? prof.curve[i] : int64_t{0}; });
    ctx_.stat(scheduleStats().peak_before, prof.peak_bytes);
    ctx_.stat(scheduleStats().memory_limit, limit_);
    if (prof.peak_bytes > limit_)
      ctx_.remark("schedule: the input's estimated peak " + formatBytes(prof.peak_bytes) +
                  " already exceeds memory-limit " + formatBytes(limit_) +
                  "; moves may not raise it further");
  }

  bool changed = false;
  // Forward side first, then backward: each side is its own sequence, so no prefetch crosses
  // the loss (the backward's first re-gather is not pulled into the forward).
  if (opts_.prefetch > 0) {
    for (bool backward : {false, true})
      for (auto& [key, seq] : gathers)
        if (key.second == backward) changed |= prefetch(seq);
  }
  if (opts_.defer_reduce_scatter)
    for (auto& [key, seq] : reductions)
      changed |= deferWaits(seq);
  if (tree_) ctx_.stat(scheduleStats().peak_estimate, tree_->max());
  return changed;
}

}  // namespace

std::span<const Statistic* const> SchedulePass::statistics() const {
  return scheduleStats().all();
}

void SchedulePass::initialize() {
  opts_.auto_prefetch = *prefetch_ < 0;
  if (!opts_.auto_prefetch) opts_.prefetch = *prefetch_;
  opts_.max_prefetch = max_prefetch_.valueOr(3);
  if (!opts_.auto_prefetch && max_prefetch_.isSet())
    throw JfxError({}, "option 'max-prefetch' is read by prefetch=auto only");
  opts_.defer_reduce_scatter = *defer_rs_;
  opts_.memory_limit = *memory_limit_;
  const bool reference = opts_.memory_limit == kMemoryLimitReference;
  if (opts_.auto_prefetch && reference)
    throw JfxError({},
                   "memory-limit=reference is for a fixed prefetch (the reference plan prefetches "
                   "1); prefetch=auto takes BYTES, input or none");
  if (!hardware_->empty() && reference) {
    opts_.cost = std::make_shared<const CostModel>(loadHardwareProfile(*hardware_));
  } else if (opts_.auto_prefetch) {
    if (hardware_->empty())
      throw JfxError({},
                     "prefetch=auto needs hardware=FILE (a profile such as "
                     "configs/hardware/h100.json) to time its candidates");
    opts_.cost = std::make_shared<const CostModel>(loadHardwareProfile(*hardware_));
  } else if (!hardware_->empty()) {
    throw JfxError({},
                   "option 'hardware' is read by prefetch=auto and memory-limit=reference only");
  }
}

bool SchedulePass::run(Graph& g, PassContext& ctx) {
  if (opts_.memory_limit != kMemoryLimitReference) return scheduleCollectives(g, opts_, ctx);
  return scheduleWithinReference(g, opts_, ctx);
}

bool scheduleWithinReference(Graph& g, const ScheduleOptions& opts, PassContext& ctx) {
  const ReferenceEstimate ref = estimateReferenceTail(g, ctx, opts.cost.get());
  ScheduleOptions bounded = opts;
  bounded.memory_limit = std::max(ref.peak_bytes, ctx.analyses.get<MemoryProfile>(g).peak_bytes);
  const ScheduleStatistics& st = scheduleStats();
  ctx.stat(st.reference_peak, ref.peak_bytes);
  // Recorded, so that a faster reference plan replaces this one on the same nodes (ids kept).
  g.beginUndo();
  bool changed = false;
  try {
    changed = scheduleCollectives(g, bounded, ctx);
  } catch (...) {
    g.rollback();
    throw;
  }
  if (!opts.cost) {
    g.commitUndo();
    return changed;
  }
  SimOptions so;
  so.memory = false;
  const double step = simulate(g, *opts.cost, so).step;
  const double ref_step = ref.step;
  ctx.stat(st.simulated_step, microsecondsStat(step, "memory-limit=reference"));
  ctx.stat(st.reference_step, microsecondsStat(ref_step, "memory-limit=reference"));
  // Within the simulator's rounding of the same plan (1e-9 relative) the result stands.
  if (ref_step >= step * (1 - 1e-9)) {
    g.commitUndo();
    return changed;
  }
  // The reference plan is faster: take its choices (its buckets and schedule on this input).
  char buf[160];
  std::snprintf(buf, sizeof buf,
                "schedule: the reference plan's simulated step %.1f us beats this plan's %.1f us "
                "(%s); taking the reference plan",
                ref_step * 1e6, step * 1e6, opts.cost->hardware().name.c_str());
  ctx.warn(buf);
  ctx.stat(st.reference_fallback);
  ctx.stats[std::string(st.peak_estimate.name())] = ref.peak_bytes;
  g.rollback();
  applyReferenceTail(g, ctx);
  ctx.analyses.clear();
  ctx.preserved = PreservedAnalyses{};
  return true;
}

namespace {

// The schedule{...} spec of `opts` with prefetch distance `k`, for a nested pipeline.
std::string fixedSpec(const ScheduleOptions& opts, int64_t k) {
  const std::string limit = opts.memory_limit < 0    ? "input"
                            : opts.memory_limit == 0 ? "none"
                                                     : std::to_string(opts.memory_limit);
  return "schedule{prefetch=" + std::to_string(k) + ", memory-limit=" + limit +
         ", defer-rs=" + (opts.defer_reduce_scatter ? "true" : "false") + "}";
}

// Undoes every edit made while it lives (Note [Undo] in ir/graph.h): the graph's revision comes
// back too, so the analyses of the graph as it was serve again.
struct Speculation {
  Graph& g;
  explicit Speculation(Graph& graph) : g(graph) { g.beginUndo(); }
  ~Speculation() { g.rollback(); }
};

}  // namespace

bool scheduleCollectives(Graph& g, const ScheduleOptions& opts, PassContext& ctx) {
  if (!opts.auto_prefetch) return Scheduler(g, opts, ctx).run();
  if (!opts.cost) apiMisuse("scheduleCollectives: prefetch=auto needs ScheduleOptions::cost");
  // prefetch=auto: every K as a nested pipeline on the graph itself, undone after each, so every
  // K starts from the same graph and reads its analyses (phases, FSDP chains, in-place writes,
  // the input's memory curve; a rollback gives the graph back its revision, under which they were
  // computed). The shortest simulated step within the limit wins; ties to the smaller K. The
  // limit check is the memory analysis of the scheduled order: the same estimate the caller
  // would measure on the output (when the input already exceeds the limit, the input's peak).
  SimOptions so;
  so.phases = &ctx.analyses.get<PhaseInfo>(g);
  const int64_t peak_before = ctx.analyses.get<MemoryProfile>(g).peak_bytes;
  const int64_t limit = opts.memory_limit == 0  ? 0
                        : opts.memory_limit < 0 ? peak_before
                                                : std::max(opts.memory_limit, peak_before);
  int64_t best = -1;
  double best_step = std::numeric_limits<double>::infinity();
  double step_k0 = 0;
  std::string report;
  for (int64_t k = 0; k <= opts.max_prefetch; ++k) {
    SimResult sim;
    {
      Speculation trial(g);
      ctx.runPipeline(g, fixedSpec(opts, k));
      sim = simulate(g, *opts.cost, so);
    }
    report += (report.empty() ? "K=" : ", K=") + std::to_string(k) + " " + formatMicros(sim.step);
    if (k == 0) step_k0 = sim.step;
    if (limit > 0 && sim.peak_memory_bytes > limit) {
      report += " (over the limit)";
      continue;
    }
    if (sim.step < best_step) best = k, best_step = sim.step;
  }
  // K = 0 moves only within the limit; keep it regardless (and report its step, not the
  // infinity no candidate replaced).
  if (best < 0) best = 0, best_step = step_k0;
  const ScheduleStatistics& st = scheduleStats();
  ctx.stat(st.auto_candidates, opts.max_prefetch + 1);
  ctx.stat(st.auto_prefetch, best);
  ctx.stat(st.simulated_step, microsecondsStat(best_step, "prefetch=auto"));
  ctx.remark("schedule: prefetch=auto chose K=" + std::to_string(best) + " (simulated step, " +
             opts.cost->hardware().name + ", memory-limit " +
             (limit > 0 ? formatBytes(limit) : std::string("none")) + "): " + report);
  const PipelineResult chosen = ctx.runPipeline(g, fixedSpec(opts, best), {.report = true});
  for (const auto& [name, value] : chosen.passes.front().stats)
    ctx.stats[name] += value;
  return chosen.passes.front().changed;
}

}  // namespace jfx
