#include "passes/fsdp/dedup_fsdp_unshard.h"

#include <algorithm>
#include <functional>
#include <vector>

#include "ir/error.h"
#include "ir/walk.h"
#include "passes/analysis/blocks.h"
#include "passes/analysis/fsdp.h"
#include "passes/analysis/mutation.h"
#include "passes/analysis/phase.h"

namespace jfx {
namespace {

using NodeRemap = std::function<Node*(Node*)>;

// Structural equality of two argument trees where node references in `b` are first mapped.
bool sameArg(const Arg& a, const Arg& b, const NodeRemap& map) {
  if (a.kind() != b.kind()) return false;
  if (a.isNode()) return a.node() == map(b.node());
  if (a.isSequence()) {
    if (a.items().size() != b.items().size()) return false;
    for (size_t i = 0; i < a.items().size(); ++i)
      if (!sameArg(a.items()[i], b.items()[i], map)) return false;
    return true;
  }
  return a == b;
}

// Same op, constants and (mapped) operands: `b` computes what `a` computes.
bool sameComputation(const Node* a, const Node* b, const NodeRemap& map) {
  if (a->op() != b->op() || a->target() != b->target() || a->numArgs() != b->numArgs() ||
      a->kwargs().size() != b->kwargs().size())
    return false;
  for (size_t i = 0; i < a->numArgs(); ++i)
    if (!sameArg(a->arg(i), b->arg(i), map)) return false;
  for (size_t i = 0; i < a->kwargs().size(); ++i)
    if (a->kwargs()[i].first != b->kwargs()[i].first ||
        !sameArg(a->kwargs()[i].second, b->kwargs()[i].second, map))
      return false;
  return true;
}

// The duplicate gathers the same bytes as the kept chain: its pre ops and all-gather match
// position by position, operands mapped onto the kept chain's.
bool sameGather(const FsdpUnshardChain& keep, const FsdpUnshardChain& dup) {
  if (keep.pre.size() != dup.pre.size()) return false;
  auto map_pre = [&](size_t upto) {
    return [&keep, &dup, upto](Node* n) -> Node* {
      for (size_t i = 0; i < upto; ++i)
        if (dup.pre[i] == n) return keep.pre[i];
      return n;  // the parameter, or a padding factory shared by both
    };
  };
  for (size_t i = 0; i < dup.pre.size(); ++i)
    if (dup.pre[i] != keep.pre[i] && !sameComputation(keep.pre[i], dup.pre[i], map_pre(i)))
      return false;
  return sameComputation(keep.all_gather, dup.all_gather, map_pre(dup.pre.size()));
}

bool isMergeable(const Node* n) {
  const OpInfo& info = n->info();
  if (!n->isPure()) return false;
  OpCategory c = info.category;
  return c == OpCategory::View || c == OpCategory::Copy || c == OpCategory::Getitem ||
         n->is("aten.cat.default") || n->is("aten.stack.default");
}

}  // namespace

namespace {

struct DedupStatistics : StatisticSet {
  Statistic chains_merged{this, "chains-merged",
                          "duplicate unshard chains pointed at the kept one"};
  Statistic nodes_erased{this, "nodes-erased",
                         "gathers, waits, casts and views erased by the merges"};
  Statistic mismatched{this, "mismatched",
                       "duplicate chains left alone: they gather the parameter differently"};
  Statistic written_in_place{this, "written-in-place",
                             "chains left alone: an op writes the gathered value in place"};
};
const DedupStatistics& dedupStats() {
  static const DedupStatistics s;
  return s;
}

}  // namespace

std::span<const Statistic* const> DedupFsdpUnshardPass::statistics() const {
  return dedupStats().all();
}

namespace {

// The pass's state over one graph.
class Dedup {
 public:
  Dedup(Graph& g, PassContext& ctx)
      : g_(g),
        ctx_(ctx),
        stats_(dedupStats()),
        phases_(ctx.analyses.get<PhaseInfo>(g)),
        fsdp_(ctx.analyses.get<FsdpAnalysis>(g)),
        // A gathered value some op writes in place is that reader's own copy: sharing it would
        // let the write reach the other chain's readers.
        written_(ctx.analyses.get<WrittenStorage>(g)),
        from_dup_(g, 0) {
    // The block analysis, if cached, holds after the merges unless one erases a block's first
    // user: the kept chain is the same parameter's value as the duplicate.
    if (ctx.analyses.isCached(AnalysisTraits<BlockAnalysis>::name)) {
      first_users_ = ctx.analyses.get<BlockAnalysis>(g).firstUserIds();
      blocks_hold_ = true;
    }
  }
  bool run();

 private:
  std::vector<const FsdpUnshardChain*> orderedChains() const;
  bool merge(const FsdpUnshardChain& keep, const FsdpUnshardChain& dup);
  void mergeIdenticalUsers(Node* wait);
  void erase(Node* n) {
    if (std::binary_search(first_users_.begin(), first_users_.end(), n->id())) blocks_hold_ = false;
    g_.erase(n);
    ctx_.stat(stats_.nodes_erased);
  }

  Graph& g_;
  PassContext& ctx_;
  const DedupStatistics& stats_;
  const PhaseInfo& phases_;
  const FsdpAnalysis& fsdp_;
  const WrittenStorage& written_;
  std::vector<uint32_t> first_users_;
  bool blocks_hold_ = false;
  // Nodes that used to belong to a duplicate chain: only merges involving one of them are made,
  // so the pass never rewrites views it did not create.
  NodeMap<uint8_t> from_dup_;
};

// Chains grouped by (parameter position, side); within a group, the earliest wait first. Sorted
// on keys read once per chain (a chain per gather: a tenth of a graph's nodes or more).
std::vector<const FsdpUnshardChain*> Dedup::orderedChains() const {
  struct Key {
    uint64_t param, wait;
    bool backward;
    const FsdpUnshardChain* chain;
  };
  std::vector<Key> keys;
  keys.reserve(fsdp_.unshard.size());
  for (const auto& c : fsdp_.unshard)
    keys.push_back({c.param->position(), c.wait->position(), phases_.isBackward(c.all_gather), &c});
  std::sort(keys.begin(), keys.end(), [](const Key& a, const Key& b) {
    if (a.param != b.param) return a.param < b.param;
    if (a.backward != b.backward) return !a.backward;
    return a.wait < b.wait;
  });
  std::vector<const FsdpUnshardChain*> order;
  order.reserve(keys.size());
  for (const Key& k : keys)
    order.push_back(k.chain);
  return order;
}

// Points `dup`'s users at `keep`'s wait when both gather the same bytes; returns whether it did.
bool Dedup::merge(const FsdpUnshardChain& keep, const FsdpUnshardChain& dup) {
  if (written_.touches(keep.wait) || written_.touches(dup.wait)) {
    ctx_.stat(stats_.written_in_place);
    return false;
  }
  if (!sameGather(keep, dup)) {
    ctx_.stat(stats_.mismatched);
    ctx_.remark("dedup-fsdp-unshard: " + quoteForMessage(dup.all_gather->name()) + " gathers " +
                quoteForMessage(keep.param->name()) + " differently from " +
                quoteForMessage(keep.all_gather->name()) + "; left alone");
    return false;
  }
  for (Node* n : dup.post)
    from_dup_[n] = 1;
  g_.replaceAllUsesWith(dup.wait, keep.wait);
  ctx_.stat(stats_.chains_merged);
  mergeIdenticalUsers(keep.wait);
  // The duplicate's wait, gather and exclusive pre ops are dead now (users before producers).
  std::vector<Node*> dead{dup.wait, dup.all_gather};
  for (size_t k = dup.pre.size(); k-- > 0;)
    dead.push_back(dup.pre[k]);
  for (Node* n : dead)
    if (!n->isDead() && !n->hasUses()) erase(n);
  return true;
}

// Merges identical users level by level: after the wait's users are shared, two t(W) may read
// the same W; the earlier one stays and takes the later one's uses.
void Dedup::mergeIdenticalUsers(Node* wait) {
  std::vector<Node*> work{wait};
  while (!work.empty()) {
    Node* x = work.back();
    work.pop_back();
    std::vector<Node*> users = x->users();
    std::sort(users.begin(), users.end(),
              [](const Node* a, const Node* b) { return a->isBefore(b); });
    for (size_t a = 0; a < users.size(); ++a) {
      Node* ua = users[a];
      if (ua->isDead() || !isMergeable(ua)) continue;
      for (size_t b = a + 1; b < users.size(); ++b) {
        Node* ub = users[b];
        if (ub->isDead() || !(from_dup_[ua] || from_dup_[ub])) continue;
        if (phases_.isBackward(ua) != phases_.isBackward(ub)) continue;
        if (!sameComputation(ua, ub, [](Node* n) { return n; })) continue;
        g_.replaceAllUsesWith(ub, ua);
        erase(ub);
        work.push_back(ua);
      }
    }
  }
}

bool Dedup::run() {
  const std::vector<const FsdpUnshardChain*> order = orderedChains();
  bool changed = false;
  for (size_t i = 0; i < order.size();) {
    size_t j = i + 1;
    while (j < order.size() && order[j]->param == order[i]->param &&
           phases_.isBackward(order[j]->all_gather) == phases_.isBackward(order[i]->all_gather))
      ++j;
    for (size_t d = i + 1; d < j; ++d)
      changed |= merge(*order[i], *order[d]);
    i = j;
  }
  // Merges make no writer: with nothing written, the written-storage answer holds too.
  if (blocks_hold_) ctx_.preserve<BlockAnalysis>();
  if (!written_.any()) ctx_.preserve<WrittenStorage>();
  return changed;
}

}  // namespace

bool DedupFsdpUnshardPass::run(Graph& g, PassContext& ctx) {
  return Dedup(g, ctx).run();
}

}  // namespace jfx
