#include "passes/fsdp/dedup_fsdp_unshard.h"

#include <algorithm>
#include <functional>
#include <vector>

#include "ir/error.h"
#include "passes/analysis/blocks.h"
#include "passes/analysis/fsdp.h"
#include "passes/analysis/mutation.h"
#include "passes/analysis/phase.h"

namespace jfx {
namespace {

using NodeMap = std::function<Node*(Node*)>;

// Structural equality of two argument trees where node references in `b` are first mapped.
bool sameArg(const Arg& a, const Arg& b, const NodeMap& map) {
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
bool sameComputation(const Node* a, const Node* b, const NodeMap& map) {
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

constexpr StatisticDecl kDedupStatistics[] = {
    {"chains-merged", "duplicate unshard chains pointed at the kept one"},
    {"nodes-erased", "gathers, waits, casts and views erased by the merges"},
    {"mismatched", "duplicate chains left alone: they gather the parameter differently"},
    {"written-in-place", "chains left alone: an op writes the gathered value in place"},
};

}  // namespace

std::span<const OptionDecl> DedupFsdpUnshardPass::options() const {
  return {};
}
std::span<const StatisticDecl> DedupFsdpUnshardPass::statistics() const {
  return kDedupStatistics;
}

bool DedupFsdpUnshardPass::run(Graph& g, PassContext& ctx) {
  const PhaseInfo& phases = ctx.analyses.get<PhaseInfo>(g);
  const FsdpAnalysis& fsdp = ctx.analyses.get<FsdpAnalysis>(g);
  // A gathered value some op writes in place is that reader's own copy: sharing it would let the
  // write reach the other chain's readers.
  const WrittenStorage& written = ctx.analyses.get<WrittenStorage>(g);
  const bool writes = written.any();
  // The block analysis, if cached, holds after the merges unless one erases a block's first
  // user: the kept chain is the same parameter's value as the duplicate.
  const std::vector<uint32_t> first_users =
      ctx.analyses.isCached(AnalysisTraits<BlockAnalysis>::name)
          ? ctx.analyses.get<BlockAnalysis>(g).firstUserIds()
          : std::vector<uint32_t>();
  bool blocks_hold = ctx.analyses.isCached(AnalysisTraits<BlockAnalysis>::name);
  auto erase = [&](Node* n) {
    if (std::binary_search(first_users.begin(), first_users.end(), n->id())) blocks_hold = false;
    g.erase(n);
    ctx.stat("nodes-erased");
  };

  // Group chains by (parameter position, side); within a group, the earliest wait first. Sorted
  // on keys read once per chain (66K chains at 10^6 nodes).
  struct Key {
    uint64_t param, wait;
    bool backward;
    const FsdpUnshardChain* chain;
  };
  std::vector<Key> keys;
  keys.reserve(fsdp.unshard.size());
  for (const auto& c : fsdp.unshard)
    keys.push_back({c.param->position(), c.wait->position(), phases.isBackward(c.all_gather), &c});
  std::sort(keys.begin(), keys.end(), [](const Key& a, const Key& b) {
    if (a.param != b.param) return a.param < b.param;
    if (a.backward != b.backward) return !a.backward;
    return a.wait < b.wait;
  });
  std::vector<const FsdpUnshardChain*> order;
  order.reserve(keys.size());
  for (const Key& k : keys)
    order.push_back(k.chain);

  // Nodes that used to belong to a duplicate chain: only merges involving one of them are made,
  // so the pass never rewrites views it did not create.
  std::vector<uint8_t> from_dup(g.maxId(), 0);
  bool changed = false;
  for (size_t i = 0; i < order.size();) {
    size_t j = i + 1;
    while (j < order.size() && order[j]->param == order[i]->param &&
           phases.isBackward(order[j]->all_gather) == phases.isBackward(order[i]->all_gather))
      ++j;
    const FsdpUnshardChain& keep = *order[i];
    for (size_t d = i + 1; d < j; ++d) {
      const FsdpUnshardChain& dup = *order[d];
      if (written.touches(keep.wait) || written.touches(dup.wait)) {
        ctx.stat("written-in-place");
        continue;
      }
      if (!sameGather(keep, dup)) {
        ctx.stat("mismatched");
        ctx.remark("dedup-fsdp-unshard: " + quoteForMessage(dup.all_gather->name()) + " gathers " +
                   quoteForMessage(keep.param->name()) + " differently from " +
                   quoteForMessage(keep.all_gather->name()) + "; left alone");
        continue;
      }
      for (Node* n : dup.post)
        from_dup[n->id()] = 1;
      g.replaceAllUsesWith(dup.wait, keep.wait);
      ctx.stat("chains-merged");
      changed = true;

      // Merge identical users level by level: after the wait's users are shared, two t(W) may
      // read the same W; the earlier one stays and takes the later one's uses.
      std::vector<Node*> work{keep.wait};
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
            if (ub->isDead() || !(from_dup[ua->id()] || from_dup[ub->id()])) continue;
            if (phases.isBackward(ua) != phases.isBackward(ub)) continue;
            if (!sameComputation(ua, ub, [](Node* n) { return n; })) continue;
            g.replaceAllUsesWith(ub, ua);
            erase(ub);
            work.push_back(ua);
          }
        }
      }
      // The duplicate's wait, gather and exclusive pre ops are dead now (users before producers).
      std::vector<Node*> dead{dup.wait, dup.all_gather};
      for (size_t k = dup.pre.size(); k-- > 0;)
        dead.push_back(dup.pre[k]);
      for (Node* n : dead) {
        if (n->isDead() || n->hasUses()) continue;
        erase(n);
      }
    }
    i = j;
  }
  // Merges make no writer: with nothing written, the written-storage answer holds too.
  if (blocks_hold) ctx.preserve<BlockAnalysis>();
  if (!writes) ctx.preserve<WrittenStorage>();
  return changed;
}

}  // namespace jfx
