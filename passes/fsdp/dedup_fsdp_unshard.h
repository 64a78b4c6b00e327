// dedup-fsdp-unshard: one unshard chain per parameter per phase.
//
// Does: groups the FSDP unshard chains (passes/analysis/fsdp.h) by parameter and phase side
// (forward/loss vs backward). Within a group the chain whose wait comes first is kept; every
// other chain whose pre-gather ops and all-gather match it (same targets, constants and group)
// has its wait's uses pointed at the kept wait, identical view/copy nodes that this creates are
// merged (the earlier one stays), and the duplicate gather, wait and casts are erased.
// Assumes: the kept wait precedes the duplicate's users, which holds since it is the earliest.
// Chains that gather the same parameter differently (another dtype) are left alone and counted
// as "mismatched". Never merges across the loss: that would undo reshard-after-forward.
// Cost: O(N + E) plus sorting the chains.
#pragma once

#include "passes/pass.h"

namespace jfx {

class DedupFsdpUnshardPass : public Pass {
 public:
  std::span<const Statistic* const> statistics() const override;
  bool run(Graph& g, PassContext& ctx) override;
};

}  // namespace jfx
