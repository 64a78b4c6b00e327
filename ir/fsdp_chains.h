// FSDP's collectives as seen from a graph's inputs and outputs: the all-gather that unshards a
// parameter placeholder and the reduce-scatter that produces a parameter's gradient output. The
// runtime asks these to lay out each input (which group a parameter is sharded over); passes use
// the fuller FsdpAnalysis (passes/analysis/fsdp.h), which walks back from every collective.
// docs/architecture.md, "FSDP structure".
#pragma once

#include <string_view>

#include "ir/graph.h"

namespace jfx {

// ---- The unshard chain's step, defined once (docs/architecture.md, "FSDP structure"): what may
// sit between a parameter's shard and its all-gather. FsdpAnalysis (passes/analysis/fsdp.h), the
// verifier's one-gather rule and the runtime's queries below all walk chains with these.

// A node that makes a fresh tensor from no node operand (zeros, full, empty): padding material
// for a shard, not a second data input.
bool isInputFreeFactory(const Node& n);

// Whether `n` can be a step of an unshard chain: a pure view, copy (a cast), index (a cat, a
// pad) or getitem. Going forward from a shard, any such user continues the chain (a bucket's cat
// joins several shards); going back to the root parameter needs its one data input
// (unshardChainInput).
bool isUnshardChainStep(const Node& n);

// The one data input an unshard chain steps back to from `n`: its one distinct node operand
// other than input-free factories (a padded shard: cat(shard, zeros) steps back to the shard).
// nullptr when `n` is no chain step or has no such single input.
Node* unshardChainInput(const Node& n);

// The parameter placeholder whose shard reaches `n` through unshard chain steps (n itself when it
// is one), else nullptr. Steps only backwards in program order, so a broken graph cannot make it
// loop.
const Node* shardParameterOf(const Node& n);

// The first all-gather (in program order, at the nearest depth) fed by `input` through unshard
// chain steps (a cat, after `bucket` flattened the unshard chain into one buffer): the
// parameter's FSDP unshard. nullptr when none within 8 such steps: the input is not
// sharded. Visits only those chains' nodes and their users.
const Node* unshardGatherOf(const Node& input);

// The reduce-scatter that produces `value` (a graph output) through its wait and the first input
// of views, copies and getitems (after `bucket`: the getitem of the bucket's split): a sharded
// parameter's gradient. nullptr when there is none within 8 steps.
const Node* gradientScatterOf(const Node& value);

// The collective of `kind` whose result `value` is, through its wait and the first input of
// views, copies and getitems (a bucket's pieces and casts), within 8 steps; else nullptr.
// gradientScatterOf is its reduce-scatter case; the memory analysis asks for all-gathers (a
// gathered parameter, also when a bucket copied it out).
const Node* producingCollective(const Node& value, CollectiveKind kind);

// The reduce-scatter of the gradient output of parameter `fqn` (the header's output specs), else
// nullptr.
const Node* parameterGradientScatter(const Graph& g, std::string_view fqn);

}  // namespace jfx
