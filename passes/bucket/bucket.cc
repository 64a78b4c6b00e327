#include "passes/bucket/bucket.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <exception>
#include <limits>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "ir/error.h"
#include "passes/analysis/blocks.h"
#include "passes/analysis/cost_model.h"
#include "passes/analysis/memory.h"
#include "passes/analysis/mutation.h"
#include "passes/analysis/phase.h"
#include "passes/analysis/simulator.h"
#include "passes/bucket/bucketer.h"
#include "passes/pass_manager.h"
#include "passes/plan/reference_plan.h"

namespace jfx {

std::string blockOfFqn(std::string_view fqn, const BlockAnalysis& blocks,
                       const std::vector<std::string>& head) {
  if (int32_t b = blocks.blockOfFqn(fqn); b >= 0) return blocks.blocks[static_cast<size_t>(b)].name;
  std::string_view top = fqn.substr(0, fqn.find('.'));
  for (const std::string& h : head)
    if (top == h) return "head";
  return std::string(top);
}

int64_t glooRingChunkElems(int64_t numel, int64_t elem_size, int64_t group_size) {
  // gloo/allreduce.cc, ring(): kMaxSegmentSize 1 MiB, at least two segments per rank, as many
  // segments per rank on every rank, segments rounded up to whole elements.
  constexpr int64_t kMaxSegmentBytes = 1 << 20;
  const int64_t G = std::max<int64_t>(1, group_size);
  const int64_t e = std::max<int64_t>(1, elem_size);
  const int64_t max_seg = e * std::max<int64_t>(1, kMaxSegmentBytes / e);
  const int64_t bytes = numel * e;
  int64_t segments = std::max((bytes + max_seg - 1) / max_seg, 2 * G);
  segments = (segments + G - 1) / G * G;
  const int64_t seg_elems = (numel + segments - 1) / segments;
  return segments / G * seg_elems;
}

std::vector<BucketCandidate> bucketAutoCandidates(const BucketOptions& base) {
  std::vector<BucketCandidate> out;
  auto add = [&](std::string name, BucketOptions::Plan plan, int64_t group, int64_t cap_mb) {
    BucketCandidate c;
    c.name = std::move(name);
    c.opts = base;
    c.opts.plan = plan;
    c.opts.group_blocks = group;
    c.opts.cap_bytes = cap_mb * 1024 * 1024;
    out.push_back(std::move(c));
  };
  add("blocks", BucketOptions::Plan::Blocks, 1, 0);
  add("blocks x2", BucketOptions::Plan::Blocks, 2, 0);
  add("blocks x4", BucketOptions::Plan::Blocks, 4, 0);
  for (int64_t mb : {16, 32, 64, 128, 256})
    add("size " + std::to_string(mb) + "MB", BucketOptions::Plan::Size, 1, mb);
  return out;
}

namespace {

// The memory bound of bucketCollectives for `g`: the input's estimated peak (asked for here), or
// the larger of it and memory-limit. memory-limit=reference applies the reference plan's bucket
// and schedule to `g` and undoes them, before the input's memory profile is computed, so that the
// profile is not held through the trial (it would add to the pass's peak).
struct Bound {
  int64_t peak_before = 0;
  int64_t bytes = 0;  // 0: none
};
Bound boundFor(Graph& g, const BucketOptions& opts, PassContext& ctx) {
  int64_t reference = -1;
  if (opts.memory_limit == kMemoryLimitReference) {
    reference = estimateReferenceTail(g, ctx).peak_bytes;
    ctx.stat(bucketStats().reference_peak, reference);
  }
  Bound b;
  b.peak_before = ctx.analyses.get<MemoryProfile>(g).peak_bytes;
  b.bytes = reference >= 0           ? std::max(reference, b.peak_before)
            : opts.memory_limit == 0 ? 0
            : opts.memory_limit < 0  ? b.peak_before
                                     : std::max(opts.memory_limit, b.peak_before);
  return b;
}

// A finding whenever the bound keeps collectives out of buckets (the warning below when it keeps
// every one out): how many, and under which bound.
void warnUnbucketedForMemory(bool changed, int64_t bound, PassContext& ctx) {
  auto it = ctx.stats.find("unbucketed.memory");
  if (!changed || it == ctx.stats.end() || it->second == 0) return;
  ctx.warn("bucket: " + std::to_string(it->second) +
           " collectives stay unbucketed to keep the estimated peak within the memory bound " +
           formatBytes(bound) + " (statistic unbucketed.memory)");
}

// After the final rewrite under `bound`: when the bound left out every collective a bucket would
// have merged, the pass changed nothing, and that is a warning (shown by default), not only a
// remark, so an unchanged graph is not taken for a bucketed one. Small models, whose weights
// outweigh their activations, are where it happens (convbn_w2 and vit_w2 under the default
// pipeline).
bool warnIfBoundLeftNothing(bool changed, size_t excluded, int64_t bound, PassContext& ctx) {
  if (!changed && excluded > 0)
    ctx.warn("bucket: formed no bucket: the memory bound " + formatBytes(bound) +
             " (memory-limit, or the input's own estimated peak if larger) left all " +
             std::to_string(excluded) +
             " collectives unbucketed, since their buckets raised the estimated peak above it; "
             "memory-limit=none or a device limit such as memory-limit=70GiB buckets them");
  return changed;
}

void remarkExcluded(const std::set<std::string>& excluded, int64_t bound, PassContext& ctx) {
  if (!excluded.empty())
    ctx.remark("bucket: " + std::to_string(excluded.size()) +
               " collectives left unbucketed to stay within the estimated peak " +
               formatBytes(bound));
}

// The estimated memory profile the bound is checked on.
MemoryProfile profileWith(const Graph& g, const PhaseInfo& phases) {
  MemoryOptions mo;  // the analysis manager's options, so a final profile can be handed to it
  mo.lifetimes = true;
  return analyzeMemory(g, phases, mo);
}

// Hands the phases and the memory profile of `g` as the pass leaves it on to the next passes
// (split-comm-groups and schedule reuse them).
void handOnProfile(const Graph& g, PhaseInfo phases, MemoryProfile prof, PassContext& ctx) {
  prof.storages = {};
  ctx.analyses.provide<PhaseInfo>(g, std::move(phases));
  ctx.analyses.provide<MemoryProfile>(g, std::move(prof), {AnalysisTraits<PhaseInfo>::name});
  ctx.preserve<PhaseInfo>();
  ctx.preserve<MemoryProfile>();
}

// After `trial` was bucketed to the profile `prof`, over `bound`: leaves out (adds the member
// collectives' names to `excluded`) the buckets that own or move a storage live at an over-bound
// step, or every bucket when the rise is not where a bucket lives.
void excludeOverBound(const Graph& trial,
                      const std::vector<std::pair<const Node*, size_t>>& touched,
                      const std::vector<std::vector<const Node*>>& members,
                      const MemoryProfile& prof, int64_t bound, std::set<std::string>& excluded) {
  // over[t]: steps up to t that are above the bound (prefix count).
  std::vector<int64_t> over(prof.curve.size() + 1, 0);
  for (size_t t = 0; t < prof.curve.size(); ++t)
    over[t + 1] = over[t] + (prof.curve[t] > bound);
  NodeMap<int32_t> bucket_of(trial, -1);
  for (const auto& [n, bi] : touched)
    bucket_of[n] = static_cast<int32_t>(bi);
  std::set<size_t> offending;
  for (const StorageLife& st : prof.storages) {
    const int32_t bi = bucket_of[st.owner];
    if (bi < 0) continue;
    const size_t hi =
        st.pinned() ? prof.curve.size() : std::min(size_t{st.last_use} + 1, prof.curve.size());
    if (over[hi] - over[std::min(size_t{st.born}, hi)] > 0)
      offending.insert(static_cast<size_t>(bi));
  }
  if (offending.empty())  // the rise is not where a bucket lives: bucket nothing
    for (size_t bi = 0; bi < members.size(); ++bi)
      offending.insert(bi);
  for (size_t bi : offending)
    for (const Node* coll : members[bi])
      excluded.insert(std::string(coll->name()));
}

constexpr int kBoundRounds = 8;

// The memory-bound rounds on copies: buckets a fork of `g` (whose analyses follow it from
// `source`) under `bound` (> 0), leaving out the buckets that own or move a storage live at an
// over-bound step, until the copy's estimated peak is within it. Fills `excluded` with the
// collectives left out; returns the settled fork, its phases and memory profile handed to its
// context, and its peak in `*peak`; or nothing when no round settled (then every collective is
// excluded). `first_round`: rounds already spent; each round counts memory-rounds in `sink`.
std::optional<ForkedGraph> boundedFork(const Graph& g, const BucketOptions& opts, int64_t bound,
                                       std::set<std::string>& excluded, const PassContext& source,
                                       PassContext& sink, int64_t* peak, int first_round) {
  for (int round = first_round; round < kBoundRounds; ++round) {
    ForkedGraph f = source.fork(g);
    Bucketer b(*f.graph, opts, *f.ctx, excluded);
    b.run();
    PhaseInfo phases = computePhases(*f.graph);
    MemoryProfile prof = profileWith(*f.graph, phases);
    if (prof.peak_bytes <= bound) {
      *peak = prof.peak_bytes;
      handOnProfile(*f.graph, std::move(phases), std::move(prof), *f.ctx);
      return f;
    }
    excludeOverBound(*f.graph, b.touched(), b.bucketMembers(), prof, bound, excluded);
    sink.stat(bucketStats().memory_rounds);
  }
  // Every candidate out: the graph stays as it is.
  g.forEach([&](const Node* n) {
    if (n->isCollective()) excluded.insert(std::string(n->name()));
  });
  return std::nullopt;
}

// Whether the block analysis of the input holds for the bucketed output: each bucket lies in one
// block or outside every block (plan=blocks, one block a bucket) and has at most
// kMaxParamsPerValue members, so the analysis reads a bucket's copy-in, gather and pieces as its
// parameters' values (passes/analysis/blocks.h) and finds the same first users.
bool blocksSurvive(const BucketOptions& opts,
                   const std::vector<std::vector<const Node*>>& bucket_members) {
  if (opts.plan != BucketOptions::Plan::Blocks || opts.group_blocks > 1) return false;
  return std::all_of(bucket_members.begin(), bucket_members.end(),
                     [](const auto& m) { return m.size() <= kMaxParamsPerValue; });
}

// Remarks and warnings held back while a round that may be undone runs, and the statistics to
// go back to: its statistics and remarks count only if it stands.
class HeldReports {
 public:
  explicit HeldReports(PassContext& ctx)
      : ctx_(ctx), stats_(ctx.stats), log_(ctx.log), warnings_(ctx.warnings) {
    if (ctx.log) ctx.log = &held_log_;
    if (ctx.warnings) ctx.warnings = &held_warnings_;
  }
  ~HeldReports() { ctx_.log = log_, ctx_.warnings = warnings_; }
  // The round stands: what it said goes out.
  void release() {
    if (log_) *log_ << held_log_.str();
    if (warnings_) *warnings_ << held_warnings_.str();
  }
  // The round is undone: its statistics too.
  void drop() { ctx_.stats = stats_; }

 private:
  PassContext& ctx_;
  Statistics stats_;
  std::ostream* log_;
  std::ostream* warnings_;
  std::ostringstream held_log_, held_warnings_;
};

// Undoes the graph's edits since construction unless commit() (Note [Undo] in ir/graph.h); an
// exception inside leaves the graph as it was.
class Recording {
 public:
  explicit Recording(Graph& g) : g_(g) { g_.beginUndo(); }
  ~Recording() {
    if (g_.recordingUndo()) g_.rollback();
  }
  void commit() { g_.commitUndo(); }
  void rollback() { g_.rollback(); }

 private:
  Graph& g_;
};

// Round one of the bound on the graph itself, recording how to undo it: most graphs stay within
// the bound with every bucket, and then this is the only rewrite (bucketing a trial copy and then
// the graph again cost twice the rewrite, plus a copy; an exact copy to go back to cost a second
// graph's memory). Returns whether it changed the graph when it stands; nothing when it went
// over the bound and was undone, with `excluded` extended by what to leave out next.
std::optional<bool> bucketInPlace(Graph& g, const BucketOptions& opts, int64_t bound, bool writes,
                                  std::set<std::string>& excluded, PassContext& ctx) {
  Recording recording(g);
  HeldReports held(ctx);
  // The input's block analysis, copied before the rewrite drops the cache: the output's too
  // when it survives bucketing, and the input's again after a rollback (which restores every
  // node). The input's phases hold for the output (the rewrite reads them, 1 byte a node): every
  // node it makes carries its bucket's phase in its meta, which PhaseInfo::of answers for a node
  // newer than the analysis; a surviving node keeps its operands' dataflow; and a bucket never
  // mixes phases. Unless the loss value was a bucket member (an all-reduced loss under
  // fsdp-only=false): then they are computed afresh. --verify-full recomputes them and compares
  // (test_analysis_manager.cc, every traced fixture).
  std::optional<BlockAnalysis> input_blocks;
  std::optional<PhaseInfo> phases = ctx.analyses.get<PhaseInfo>(g);
  bool changed = false;
  std::vector<std::pair<const Node*, size_t>> touched;
  std::vector<std::vector<const Node*>> members;
  {
    Bucketer b(g, opts, ctx, excluded);
    changed = b.run();
    touched = b.takeTouched();
    members = b.takeBucketMembers();
    if (changed && b.blocks()) input_blocks = *b.blocks();
  }  // its tables go before the output is profiled, at the pass's peak
  if (phases->lossNode() && phases->lossNode()->isDead()) phases.reset();
  // The cached analyses describe the input: dropped before the output is profiled they stay out
  // of the pass's peak, which is the pipeline's (bench/README.md, "Figures behind the code").
  if (changed) ctx.analyses.clear();
  if (!phases) phases = computePhases(g);
  MemoryProfile prof = profileWith(g, *phases);
  if (prof.peak_bytes <= bound) {
    recording.commit();
    handOnProfile(g, std::move(*phases), std::move(prof), ctx);
    if (input_blocks && blocksSurvive(opts, members)) {
      ctx.analyses.provide<BlockAnalysis>(g, std::move(*input_blocks),
                                          {AnalysisTraits<PhaseInfo>::name});
      ctx.preserve<BlockAnalysis>();
    }
    if (!writes) {
      ctx.analyses.provide<WrittenStorage>(g, WrittenStorage::nothingWritten());
      ctx.preserve<WrittenStorage>();
    }
    held.release();
    return changed;
  }
  excludeOverBound(g, touched, members, prof, bound, excluded);
  recording.rollback();
  held.drop();
  // The graph is as before: the block analysis is the input's.
  if (input_blocks)
    ctx.analyses.provide<BlockAnalysis>(g, std::move(*input_blocks),
                                        {AnalysisTraits<PhaseInfo>::name});
  return std::nullopt;
}

bool bucketFixed(Graph& g, const BucketOptions& opts, PassContext& ctx) {
  const BucketStatistics& st = bucketStats();
  std::set<std::string> excluded;
  // Written storage holds when the input writes nothing: buckets make no writer. Asked before
  // the rewrite, after which a request would compute it afresh.
  const bool writes = ctx.analyses.get<WrittenStorage>(g).any();
  if (opts.memory_limit == 0) {
    Bucketer b(g, opts, ctx, excluded);
    const bool changed = b.run();
    if (blocksSurvive(opts, b.bucketMembers())) ctx.preserve<BlockAnalysis>();
    if (!writes) ctx.preserve<WrittenStorage>();
    return changed;
  }
  // Memory bound: while the estimated peak is above the bound, leave out the buckets whose new or
  // moved storages are live at an over-bound step. A few rounds settle it (each drops every
  // offending bucket at once); past 8 rounds nothing is bucketed.
  const auto [peak_before, bound] = boundFor(g, opts, ctx);
  ctx.stat(st.peak_before, peak_before);
  ctx.stat(st.memory_limit, bound);
  if (std::optional<bool> changed = bucketInPlace(g, opts, bound, writes, excluded, ctx))
    return *changed;
  ctx.stat(st.memory_rounds);
  int64_t peak = 0;
  boundedFork(g, opts, bound, excluded, ctx, ctx, &peak, 1);
  remarkExcluded(excluded, bound, ctx);
  Bucketer last(g, opts, ctx, excluded);
  const bool changed = last.run();
  if (blocksSurvive(opts, last.bucketMembers())) ctx.preserve<BlockAnalysis>();
  if (!writes) ctx.preserve<WrittenStorage>();
  warnUnbucketedForMemory(changed, bound, ctx);
  return warnIfBoundLeftNothing(changed, excluded.size(), bound, ctx);
}

// One candidate of plan=auto, scored.
struct Outcome {
  bool over = false;
  double step = 0;
  int64_t peak = 0;
  std::set<std::string> excluded;
  std::exception_ptr error;
};

// Candidate `cand` on a fork of `g` (whose analyses follow it from `ctx`): bucketed under the
// bound as bucketFixed would, then scored as the default pipeline goes on, split-comm-groups and
// schedule{prefetch=1} under the same bound (schedule{prefetch=auto} tunes the distance later),
// by the simulated step.
Outcome evaluateCandidate(const Graph& g, const BucketCandidate& cand, int64_t bound,
                          int64_t peak_before, const PassContext& ctx, const CostModel& cost) {
  Outcome out;
  PassContext rounds;  // the candidate's statistics: nobody reads them
  int64_t peak = peak_before;
  std::optional<ForkedGraph> f;
  if (bound > 0) {
    f = boundedFork(g, cand.opts, bound, out.excluded, ctx, rounds, &peak, 0);
  } else {
    f = ctx.fork(g);
    Bucketer(*f->graph, cand.opts, *f->ctx, out.excluded).run();
    PhaseInfo phases = computePhases(*f->graph);
    peak = analyzeMemory(*f->graph, phases).peak_bytes;
    f->ctx->analyses.provide<PhaseInfo>(*f->graph, std::move(phases));
  }
  if (!f) f = ctx.fork(g), peak = peak_before;
  if (bound > 0 && peak > bound) {  // cannot happen (the rounds keep the bound); be safe
    out.over = true;
    return out;
  }
  f->ctx->runPipeline(*f->graph, "split-comm-groups,schedule{prefetch=1, memory-limit=" +
                                     (bound > 0 ? std::to_string(bound) : "none") + "}");
  SimOptions so;
  so.memory = false;
  out.step = simulate(*f->graph, cost, so).step;
  out.peak = peak;
  return out;
}

// Every candidate, on `threads` threads (0: one per hardware thread, at most one per candidate).
// Each reads only `g`, `ctx` (forking it) and the cost model, so the outcomes do not depend on
// the thread count; a candidate's error is rethrown in candidate order.
std::vector<Outcome> evaluateCandidates(const Graph& g, const std::vector<BucketCandidate>& cands,
                                        int64_t bound, int64_t peak_before, const PassContext& ctx,
                                        const BucketOptions& opts) {
  std::vector<Outcome> outcomes(cands.size());
  const size_t hw = std::max(1u, std::thread::hardware_concurrency());
  const size_t n_threads =
      std::min(cands.size(), opts.threads > 0 ? static_cast<size_t>(opts.threads) : hw);
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i; (i = next.fetch_add(1)) < cands.size();) {
      try {
        outcomes[i] = evaluateCandidate(g, cands[i], bound, peak_before, ctx, *opts.cost);
      } catch (...) {
        outcomes[i].error = std::current_exception();
      }
    }
  };
  {
    std::vector<std::jthread> pool;
    for (size_t t = 1; t < n_threads; ++t)
      pool.emplace_back(worker);
    worker();
  }  // joined
  for (const Outcome& out : outcomes)
    if (out.error) std::rethrow_exception(out.error);
  return outcomes;
}

// plan=auto (bucket.h): every candidate on a copy, bucketed under the same bound, then
// split-comm-groups and schedule{prefetch=1} under that bound, simulated; the shortest step
// wins, ties to the earlier candidate.
bool bucketAuto(Graph& g, const BucketOptions& opts, PassContext& ctx) {
  if (!opts.cost) apiMisuse("bucketCollectives: plan=auto needs BucketOptions::cost");
  const auto [peak_before, bound] = boundFor(g, opts, ctx);
  const std::vector<BucketCandidate> cands = bucketAutoCandidates(opts);
  // What every candidate's copy starts from, computed here, where the forks only read them.
  ctx.analyses.get<PhaseInfo>(g);
  ctx.analyses.get<FsdpAnalysis>(g);
  ctx.analyses.get<WrittenStorage>(g);
  ctx.analyses.get<BlockAnalysis>(g);
  std::vector<Outcome> outcomes = evaluateCandidates(g, cands, bound, peak_before, ctx, opts);
  size_t best = 0;
  double best_step = std::numeric_limits<double>::infinity();
  std::string report;
  for (size_t i = 0; i < cands.size(); ++i) {
    if (outcomes[i].over) {
      report += "; " + cands[i].name + ": over the bound";
      continue;
    }
    report += (report.empty() ? "" : ", ") + cands[i].name + " " + formatMicros(outcomes[i].step);
    if (outcomes[i].step < best_step) best = i, best_step = outcomes[i].step;
  }
  const BucketStatistics& st = bucketStats();
  ctx.stat(st.auto_candidates, static_cast<int64_t>(cands.size()));
  ctx.stat(st.auto_plan, static_cast<int64_t>(best));
  if (!(best_step < std::numeric_limits<double>::infinity()))  // cannot happen: see `over`
    throw JfxError({}, "plan=auto: no candidate was simulated within the bound");
  ctx.stat(st.simulated_step, microsecondsStat(best_step, "plan=auto"));
  ctx.stat(st.peak_estimate, outcomes[best].peak);
  ctx.remark("bucket: plan=auto chose " + quoteForMessage(cands[best].name) +
             " (simulated step with " +
             "split-comm-groups and schedule{prefetch=1} under the bound " +
             (bound > 0 ? formatBytes(bound) : std::string("none")) + ", " +
             opts.cost->hardware().name + "): " + report);
  // The winner again, on the graph itself, leaving out what its bounded copy left out (the same
  // rewrite: Bucketer is deterministic given the exclusions).
  const std::set<std::string>& excluded = outcomes[best].excluded;
  if (bound > 0) {
    ctx.stat(st.peak_before, peak_before);
    ctx.stat(st.memory_limit, bound);
    remarkExcluded(excluded, bound, ctx);
  }
  const bool changed = Bucketer(g, cands[best].opts, ctx, excluded).run();
  warnUnbucketedForMemory(changed, bound, ctx);
  return warnIfBoundLeftNothing(changed, excluded.size(), bound, ctx);
}

}  // namespace

bool bucketCollectives(Graph& g, const BucketOptions& opts, PassContext& ctx) {
  if (opts.plan == BucketOptions::Plan::Auto) return bucketAuto(g, opts, ctx);
  return bucketFixed(g, opts, ctx);
}

std::span<const Statistic* const> BucketPass::statistics() const {
  return bucketStats().all();
}

void BucketPass::initialize() {
  using Plan = BucketOptions::Plan;
  opts_.plan = *plan_;
  opts_.group_blocks = *group_;
  if (opts_.group_blocks > 1 && opts_.plan != Plan::Blocks)
    throw JfxError({}, "option 'group' is read by plan=blocks only");
  if (opts_.plan == Plan::Auto) {
    if (hardware_->empty())
      throw JfxError({},
                     "plan=auto needs hardware=FILE (a profile such as "
                     "configs/hardware/h100.json) to time its candidates");
    opts_.cost = std::make_shared<const CostModel>(loadHardwareProfile(*hardware_));
  } else if (!hardware_->empty()) {
    throw JfxError({}, "option 'hardware' is read by plan=auto only");
  }
  opts_.threads = *threads_;
  if (opts_.plan != Plan::Auto && opts_.threads != 0)
    throw JfxError({}, "option 'threads' is read by plan=auto only");
  const int64_t cap_mb = cap_mb_.isSet() ? *cap_mb_ : opts_.plan == Plan::Size ? 64 : 0;
  opts_.cap_bytes = cap_mb * 1024 * 1024;
  if (opts_.plan == Plan::Auto && cap_mb_.isSet())
    throw JfxError({}, "option 'cap-mb' is not read by plan=auto (it tries its own caps)");
  opts_.all_gather = kinds_.contains("ag");
  opts_.reduce_scatter = kinds_.contains("rs");
  opts_.all_reduce = kinds_.contains("ar");
  opts_.fsdp_only = *fsdp_only_;
  opts_.head = *head_;
  opts_.exact_rs_order = *exact_rs_order_;
  opts_.param_once = *param_once_;
  opts_.memory_limit = *memory_limit_;
}

}  // namespace jfx
