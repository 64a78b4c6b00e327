// remat: realizes MUST_RECOMPUTE / PREFER_RECOMPUTE tags on a joint fwd+loss+bwd graph, where no
// partitioner exists to consume them.
//
// Does: for each recompute-tagged forward node that a backward node reads, clones its recompute
// chain (transitively through tagged producers, stopping at saved values and graph inputs) once,
// right before the earliest backward consumer; points the backward users at the clones; erases
// forward originals left without users. Clones are backward phase and named "<orig>_recomputed".
// Assumes: phases as passes/analysis/phase.h derives them. A getitem without a tag inherits its
// producer's. SAC region rule (PyTorch's cleanup_recompute_tags): a tagged node read in forward
// by a tagged node of a later ac_graph_id region is treated as saved.
// Errors: a random op (Node::isRandom: every Tag.nondeterministic_seeded overload, in-place ones
// such as bernoulli_ included) or an op that writes an argument (OpInfo::mutates) in a chain to
// clone throws JfxError naming it and the backward node that needs it, before the graph is
// touched. FSDP chains tagged by tag-fsdp come out with one gather per parameter per
// phase (VerifyOptions::one_gather_per_param_per_phase) when the input had one per phase.
// Cost: O(N + E).
#pragma once

#include "passes/pass.h"

namespace jfx {

class RematPass : public Pass {
 public:
  std::span<const Statistic* const> statistics() const override;
  bool run(Graph& g, PassContext& ctx) override;
};

}  // namespace jfx
