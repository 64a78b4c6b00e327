#include "passes/transforms/dce.h"

#include <vector>

namespace jfx {

namespace {

struct DceStatistics : StatisticSet {
  Statistic nodes_removed{this, "nodes-removed", "unused nodes erased"};
};
const DceStatistics& dceStats() {
  static const DceStatistics s;
  return s;
}

}  // namespace

std::span<const Statistic* const> Dce::statistics() const {
  return dceStats().all();
}

bool Dce::isRemovable(const Node& n, bool remove_random) {
  if (n.op() == OpKind::GetAttr) return true;
  if (n.op() != OpKind::CallFunction) return false;
  const OpInfo& info = n.info();
  if (info.category == OpCategory::Unknown) return false;
  if (info.side_effect || info.category == OpCategory::Collective ||
      info.category == OpCategory::Wait)
    return false;
  // Writes an argument (in place, out=, or another such as BatchNorm's running stats): its
  // effect outlives its unused result.
  if (info.mutates || info.alias == AliasKind::InPlace || info.alias == AliasKind::Out)
    return false;
  if (n.kwarg("out") != nullptr) return false;  // an out= overload writes its argument
  if (n.isRandom() && !remove_random) return false;
  return true;
}

bool Dce::run(Graph& g, PassContext& ctx) {
  // Users come after their operands, so by the time the reverse walk reaches a node, every user
  // it had is either kept or already erased. Each erase unlinks the node's operand slots in O(1)
  // (Note [Use lists]), so a node losing many users costs nothing extra.
  int64_t removed = 0;
  for (Node* n = g.last(); n;) {
    Node* prev = n->prev();
    if (!n->hasUses() && isRemovable(*n, *remove_random_)) {
      g.erase(n);
      ++removed;
    }
    n = prev;
  }
  ctx.stat(dceStats().nodes_removed, removed);
  return removed != 0;
}

}  // namespace jfx
