#include "passes/fsdp/tag_fsdp.h"

#include <algorithm>
#include <limits>
#include <map>
#include <set>

#include "ir/clone.h"
#include "ir/error.h"
#include "passes/analysis/blocks.h"
#include "passes/analysis/fsdp.h"
#include "passes/analysis/memory.h"
#include "passes/analysis/phase.h"
#include "passes/bucket/schedule.h"
#include "passes/fsdp/remat.h"

namespace jfx {
namespace {

struct TagFsdpStatistics : StatisticSet {
  Statistic blocks{this, "blocks", "gathered blocks seen"};
  Statistic non_fsdp{this, "non-fsdp-collectives", "collectives that are not FSDP (left alone)"};
  Statistic replica_grads{this, "replica-grad-all-reduces",
                          "data-parallel gradient all-reduces without sharding (DDP): no chain "
                          "to tag, bucketed and scheduled by bucket and schedule"};
  Statistic nodes_tagged{this, "nodes-tagged", "nodes given a recompute tag"};
  Statistic user_tags_kept{this, "user-tags-kept", "MUST_* tags already on the graph, kept"};
  Statistic prefer_overridden{this, "prefer-tags-overridden",
                              "PREFER_* tags replaced by the policy"};
  Statistic chains_kept{this, "chains-kept",
                        "unshard chains tagged MUST_SAVE (kept unsharded into backward)"};
  Statistic chains_resharded{this, "chains-resharded",
                             "unshard chains tagged MUST_RECOMPUTE (re-gathered in backward)"};
  Statistic budget_keep_last{this, "budget-keep-last", "reshard=budget: the keep-last chosen"};
  Statistic budget_units{this, "budget-units",
                         "reshard=budget: units (blocks and the head) it could keep"};
  Statistic budget_peak{this, "budget-peak-estimate",
                        "reshard=budget: estimated peak bytes with the chosen keep-last"};
  Statistic budget_peak_always{this, "budget-peak-always",
                               "reshard=budget: estimated peak bytes with every block resharded"};
  Statistic budget_estimates{this, "budget-estimates",
                             "reshard=budget: peak estimates made (binary search)"};
  Statistic memory_limit{this, "memory-limit", "reshard=budget: the bound in bytes"};
};
const TagFsdpStatistics& tagFsdpStats() {
  static const TagFsdpStatistics s;
  return s;
}

bool isUserDecision(Recompute r) {
  return r == Recompute::MustSave || r == Recompute::MustRecompute ||
         r == Recompute::MustCpuOffload;
}

// The FQN that places a chain in a block: the parameter's, else the gather's module FQN, else the
// placeholder name (each such parameter is then its own block).
std::string chainFqn(const FsdpUnshardChain& c) {
  if (!c.param->inputFqn().empty()) return std::string(c.param->inputFqn());
  if (!c.all_gather->meta().module_fqn.empty())
    return std::string(c.all_gather->meta().module_fqn.str());
  return std::string(c.param->name());
}

std::string topLevelModule(const std::string& fqn) {
  return fqn.substr(0, fqn.find('.'));
}

// reshard=default: which chains keep their unsharded value (true) instead of resharding.
// `units` (when given) is set to the number of units keep-last counts: the gathered blocks plus
// the head (parameters before the first block), or the top-level modules when there are no
// blocks; keep-last=units keeps everything.
std::vector<bool> keepDecisions(const Graph& g, const std::vector<const FsdpUnshardChain*>& chains,
                                int64_t k, bool keep_tail, PassContext& ctx,
                                int64_t* units = nullptr) {
  std::vector<bool> keep(chains.size(), false);
  const BlockAnalysis& blocks = ctx.analyses.get<BlockAnalysis>(g);
  std::vector<int32_t> block(chains.size(), -1);
  std::set<int32_t> gathered;
  const Node* last_block_gather = nullptr;
  for (size_t i = 0; i < chains.size(); ++i) {
    block[i] = blocks.blockOf(chains[i]->param);
    if (block[i] < 0) continue;
    gathered.insert(block[i]);
    if (!last_block_gather || last_block_gather->isBefore(chains[i]->all_gather))
      last_block_gather = chains[i]->all_gather;
  }
  if (!gathered.empty()) {
    // The last K blocks in forward order (blocks are ordered by first use).
    std::set<int32_t> kept;
    for (auto it = gathered.rbegin();
         it != gathered.rend() && static_cast<int64_t>(kept.size()) < k; ++it)
      kept.insert(*it);
    // Parameters outside blocks: the tail (gathered after the last block's gathers) counts with
    // the last block, the head (everything else, embeddings first) as one block before the first.
    // keep-tail: the tail keeps its unsharded value whatever K is.
    const bool keep_head = k > static_cast<int64_t>(gathered.size());
    int64_t tail = 0;
    for (size_t i = 0; i < chains.size(); ++i) {
      if (block[i] >= 0) {
        keep[i] = kept.count(block[i]) > 0;
      } else if (last_block_gather->isBefore(chains[i]->all_gather)) {
        keep[i] = k >= 1 || keep_tail;
        tail += keep[i];
      } else {
        keep[i] = keep_head;
      }
    }
    std::string msg = "tag-fsdp: " + blocks.summary() + "; keeping " + std::to_string(kept.size()) +
                      " of " + std::to_string(gathered.size()) + " gathered blocks";
    if (!kept.empty())
      msg += " (" + blocks.blocks[static_cast<size_t>(*kept.begin())].name + " to " +
             blocks.blocks[static_cast<size_t>(*kept.rbegin())].name + ")";
    ctx.remark(msg + " and " + std::to_string(tail) + " parameter gathers after the last block");
    ctx.stat(tagFsdpStats().blocks, static_cast<int64_t>(gathered.size()));
    if (units) *units = static_cast<int64_t>(gathered.size()) + 1;
    return keep;
  }
  // No blocks: top-level modules in order of their first gather. Said loudly: this is rarely
  // what a model with repeated layers wants, and it used to pass unnoticed.
  std::vector<std::string> order;
  std::map<std::string, size_t> rank;
  for (const auto* c : chains) {
    std::string key = topLevelModule(chainFqn(*c));
    if (rank.emplace(key, order.size()).second) order.push_back(key);
  }
  if (units) *units = static_cast<int64_t>(order.size());
  const size_t first_kept = order.size() - std::min<size_t>(order.size(), static_cast<size_t>(k));
  for (size_t i = 0; i < chains.size(); ++i)
    keep[i] = rank.at(topLevelModule(chainFqn(*chains[i]))) >= first_kept;
  // reshard=always (k = 0) keeps nothing, so no unit choice is made that the warning could be
  // about (it used to say "keeps the last 0 of N top-level modules").
  if (!chains.empty() && k > 0)
    ctx.warn(blocks.noBlocksMessage("tag-fsdp") + "; reshard=default keeps the last " +
             std::to_string(order.size() - first_kept) + " of " + std::to_string(order.size()) +
             " top-level modules instead");
  return keep;
}

// Tags every forward unshard chain of `g`: keep (MUST_SAVE on its save points) or reshard
// (MUST_RECOMPUTE on the chain). `keep_last` < 0: reshard=never; otherwise reshard=default with
// that K (0 is reshard=always). Returns whether a tag changed; `units` as in keepDecisions.
bool tagChains(Graph& g, int64_t keep_last, bool keep_tail, PassContext& ctx,
               int64_t* units = nullptr) {
  const PhaseInfo& phases = ctx.analyses.get<PhaseInfo>(g);
  const FsdpAnalysis& fsdp = ctx.analyses.get<FsdpAnalysis>(g);
  ctx.stat(tagFsdpStats().non_fsdp, static_cast<int64_t>(fsdp.other_collectives.size()));
  ctx.stat(tagFsdpStats().replica_grads, static_cast<int64_t>(fsdp.replica_grads.size()));

  std::vector<const FsdpUnshardChain*> chains;
  for (const auto& c : fsdp.unshard)
    if (phases.isForwardOrLoss(c.all_gather)) chains.push_back(&c);

  std::vector<bool> keep(chains.size(), keep_last < 0);
  if (keep_last >= 0) keep = keepDecisions(g, chains, keep_last, keep_tail, ctx, units);

  bool changed = false;
  auto tag = [&](Node* n, Recompute r) {
    Recompute cur = n->meta().recompute;
    if (cur == r) return;
    if (isUserDecision(cur)) {
      ctx.stat(tagFsdpStats().user_tags_kept);
      return;
    }
    if (cur != Recompute::Unset) ctx.stat(tagFsdpStats().prefer_overridden);
    n->meta().recompute = r;
    ctx.stat(tagFsdpStats().nodes_tagged);
    changed = true;
  };
  for (size_t i = 0; i < chains.size(); ++i) {
    const FsdpUnshardChain& c = *chains[i];
    if (keep[i]) {
      ctx.stat(tagFsdpStats().chains_kept);
      for (Node* n : c.save_points)
        tag(n, Recompute::MustSave);
    } else {
      ctx.stat(tagFsdpStats().chains_resharded);
      for (Node* n : c.nodes())
        tag(n, Recompute::MustRecompute);
    }
  }
  return changed;
}

// The estimated peak (passes/analysis/memory.h) of `g` tagged with keep-last=K and realized by
// remat, on a copy: what the rest of a pipeline starts from (bucket and schedule never raise it
// by default).
int64_t peakWithKeepLast(const Graph& g, int64_t k, bool keep_tail, int64_t* units = nullptr) {
  auto copy = cloneGraph(g);
  PassContext quiet;
  tagChains(*copy, k, keep_tail, quiet, units);
  RematPass().run(*copy, quiet);
  return analyzeMemory(*copy, computePhases(*copy)).peak_bytes;
}

}  // namespace

std::span<const Statistic* const> TagFsdpPass::statistics() const {
  return tagFsdpStats().all();
}

void TagFsdpPass::initialize() {
  if (*reshard_ == Reshard::Budget && !memory_limit_.hasValue())
    throw JfxError({}, "reshard=budget needs memory-limit=BYTES (e.g. 40GiB)");
  if (*reshard_ != Reshard::Budget && memory_limit_.isSet())
    throw JfxError({}, "option 'memory-limit' is read by reshard=budget only");
}

bool TagFsdpPass::run(Graph& g, PassContext& ctx) {
  // Recompute tags are all this pass changes, and no analysis reads them.
  ctx.preserveAll();
  switch (*reshard_) {
    case Reshard::Always:
      return tagChains(g, 0, *keep_tail_, ctx);
    case Reshard::Never:
      return tagChains(g, -1, *keep_tail_, ctx);
    case Reshard::Default:
      return tagChains(g, *keep_last_, *keep_tail_, ctx);
    case Reshard::Budget:
      break;
  }
  // Keeping a unit unsharded saves its backward re-gather and costs its gathered bytes from
  // forward to backward. The candidates are keep-last=K for K = 0 (always) .. units (never):
  // blocks are kept from the last one backwards, because backward needs them first and their
  // re-gathers are the hardest to hide. More kept units never add communication, so the fastest
  // feasible candidate is the largest K whose peak fits. From K = 1 on the peak grows with K, so
  // a binary search over K finds it with O(log units) estimates, each a copy + remat + memory
  // analysis. K = 0 is the exception: backward re-gathers the last block at once, while the
  // loss's gradients are live, so resharding it can raise the peak (Llama-3 8B, 2 layers: 7.53
  // GiB against 6.96 GiB keeping it); the floor is the smaller of the two.
  int64_t units = 0;
  const int64_t limit = *memory_limit_;
  const int64_t always_peak = peakWithKeepLast(g, 0, *keep_tail_, &units);
  const int64_t last_kept_peak =
      units > 0 ? peakWithKeepLast(g, 1, *keep_tail_) : std::numeric_limits<int64_t>::max();
  int64_t evaluated = units > 0 ? 2 : 1;
  const int64_t floor_peak = std::min(always_peak, last_kept_peak);
  if (floor_peak > limit)
    ctx.emitError() << "reshard=budget: memory-limit " << formatBytes(limit)
                    << " is below the smallest estimated peak of any keep-last ("
                    << formatBytes(floor_peak) << ", " << floor_peak << " bytes, keeping the last "
                    << (floor_peak == always_peak ? 0 : 1)
                    << " units); the smallest feasible limit is " << floor_peak << " bytes";
  int64_t lo = last_kept_peak <= limit ? 1 : 0, hi = units;  // p(lo) <= limit
  int64_t lo_peak = lo == 1 ? last_kept_peak : always_peak;
  if (lo == 1 && units > 1) {
    const int64_t top = peakWithKeepLast(g, units, *keep_tail_);
    ++evaluated;
    if (top <= limit) {
      lo = units, lo_peak = top;
    } else {
      while (hi - lo > 1) {  // invariant: p(lo) <= limit < p(hi)
        const int64_t mid = lo + (hi - lo) / 2;
        const int64_t p = peakWithKeepLast(g, mid, *keep_tail_);
        ++evaluated;
        if (p <= limit)
          lo = mid, lo_peak = p;
        else
          hi = mid;
      }
    }
  }
  ctx.stat(tagFsdpStats().budget_keep_last, lo);
  ctx.stat(tagFsdpStats().budget_units, units);
  ctx.stat(tagFsdpStats().budget_peak, lo_peak);
  ctx.stat(tagFsdpStats().budget_peak_always, always_peak);
  ctx.stat(tagFsdpStats().budget_estimates, evaluated);
  ctx.stat(tagFsdpStats().memory_limit, limit);
  ctx.remark("tag-fsdp: reshard=budget: keeping the last " + std::to_string(lo) + " of " +
             std::to_string(units) + " units unsharded (keep-last=" + std::to_string(lo) +
             "), estimated peak " + formatBytes(lo_peak) + " under memory-limit " +
             formatBytes(limit) + " (every block resharded: " + formatBytes(always_peak) + ")");
  return tagChains(g, lo, *keep_tail_, ctx);
}

}  // namespace jfx
