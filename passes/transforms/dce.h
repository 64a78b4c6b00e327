// dce: dead-code elimination. Removes call_function and get_attr nodes whose results nobody reads
// and that have no effect beyond their result.
//
// Kept even when unused: placeholders and the output (the graph's interface); ops the op-info
// table marks side_effect (collectives, waits, asserts, anything returning nothing); ops that
// write an argument (OpInfo::mutates from the schema's alias annotations: in place, `out=`, or
// another argument such as BatchNorm's running stats); ops not in the table (their effects are
// unknown); and random ops (Node::isRandom, in-place ones included), unless
// `remove-random=true`. A random op's result may be unused while its draw still matters: removing
// it shifts the RNG stream every later random op reads, so the graph would no longer match eager
// PyTorch bit for bit (FX's Node.is_impure() treats seeded random ops as impure for the same
// reason).
//
// One reverse walk erases the dead (a node's users all come after it, so their fate is known when
// the walk reaches it); each erase is O(operands). O(N + E).
#pragma once

#include "passes/pass.h"

namespace jfx {

class Dce : public Pass {
 public:
  std::span<const Statistic* const> statistics() const override;
  bool run(Graph& g, PassContext& ctx) override;

  // Whether dce may remove `n` once it has no uses.
  static bool isRemovable(const Node& n, bool remove_random);

 private:
  Option<bool> remove_random_{this, "remove-random", false,
                              "also remove unused random ops (dropping one changes later draws)"};
};

}  // namespace jfx
