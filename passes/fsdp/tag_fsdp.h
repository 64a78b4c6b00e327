// tag-fsdp: writes the reshard-after-forward policy onto FSDP unshard chains as recompute tags.
//
// Does: for each forward unshard chain (passes/analysis/fsdp.h), reshard -> MUST_RECOMPUTE on the
// pre-gather cast/views, the all-gather, the wait and the wait's view chain; keep -> MUST_SAVE on
// the chain's save points (its last non-view nodes). Tags only: `remat` realizes them.
// Assumes: a joint graph; nothing about activation checkpointing. Collectives that are not FSDP
// unshard chains (TP, EP, backward gathers) are untouched.
//
// Options:
//   reshard=always|never|default   (default: default)
//   keep-last=K                    (default: 1; read by reshard=default only)
//   keep-tail=true|false           (default: false)
//   memory-limit=BYTES             (reshard=budget only, required; suffixes as in schedule)
// reshard=budget keeps as many blocks unsharded as fit: the largest K whose estimated peak after
// tagging with keep-last=K and remat (passes/analysis/memory.h, measured on a copy) is at most
// memory-limit, found by binary search; K = units is reshard=never. More kept blocks never add
// communication, so within this family that is the fastest plan that fits. An error names the
// smallest feasible limit when even reshard=always does not fit. Statistics: budget-keep-last,
// budget-units, budget-peak-estimate, budget-peak-always, budget-estimates, memory-limit.
// reshard=default reshards every block except the last K (blocks: passes/analysis/blocks.h,
// the repeated indexed submodules such as layers.N, transformer.h.N, stages.M.blocks.N, ordered
// by first use in forward). Parameters outside blocks: those gathered after the last block's
// gathers (final norm, output projection) count with the last block and are kept when K >= 1,
// because backward needs them first (torchtitan does the same); the others (embeddings) form one
// block before the first, kept only when K exceeds the number of blocks. So K = 0 is
// reshard=always and a K past the depth is reshard=never. A graph with no block at all uses
// top-level modules (the first FQN component) as blocks, ordered by their first gather, keeps
// the last K, and warns.
//
// keep-tail=true keeps the tail (the parameters gathered after the last block's gathers: final
// norm, output projection) unsharded whatever reshard says but never, as torchtitan's FSDP2 default
// does for [norm, output]: backward reads them first, so their re-gather hides behind nothing.
// GraphTrainer's memory policy leaves the loss epilogue saved even under
// `fsdp_reshard_after_forward=always`, which jointfx.torchtitan therefore maps to reshard=always
// with keep-tail=true. Without blocks there is no tail and the option does nothing.
//
// Precedence: a MUST_SAVE or MUST_RECOMPUTE already on a node is the user's decision and wins.
// A PREFER_SAVE / PREFER_RECOMPUTE is overridden: SAC and full AC put PREFER_* on every op of a
// region (all-gathers included), and letting that decide would silently undo reshard=never.
#pragma once

#include <cstdint>
#include <string>

#include "passes/pass.h"

namespace jfx {

class TagFsdpPass : public Pass {
 public:
  enum class Reshard { Always, Never, Default, Budget };

  TagFsdpPass() = default;
  TagFsdpPass(Reshard reshard, int64_t keep_last) {
    reshard_.setValue(reshard);
    keep_last_.setValue(keep_last);
  }

  std::span<const Statistic* const> statistics() const override;
  bool run(Graph& g, PassContext& ctx) override;

 private:
  void initialize() override;

  EnumOption<Reshard> reshard_{this,
                               "reshard",
                               {{"always", Reshard::Always},
                                {"never", Reshard::Never},
                                {"default", Reshard::Default},
                                {"budget", Reshard::Budget}},
                               Reshard::Default,
                               "reshard after forward: always, never, all but the last keep-last "
                               "blocks, or the most kept blocks under memory-limit"};
  Option<int64_t> keep_last_{this,
                             "keep-last",
                             1,
                             "reshard=default: blocks kept unsharded from the last one backwards",
                             {0, 1000000}};
  Option<bool> keep_tail_{this, "keep-tail", false,
                          "keep the parameters gathered after the last block (final norm, output "
                          "projection) unsharded whatever reshard says"};
  BytesOption memory_limit_{this, "memory-limit", std::nullopt,
                            "reshard=budget only (and required there): peak bound, e.g. 40GiB"};
};

}  // namespace jfx
