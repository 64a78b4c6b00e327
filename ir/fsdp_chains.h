// FSDP's collectives as seen from a graph's inputs and outputs: the all-gather that unshards a
// parameter placeholder and the reduce-scatter that produces a parameter's gradient output. The
// runtime asks these to lay out each input (which group a parameter is sharded over); passes use
// the fuller FsdpAnalysis (passes/analysis/fsdp.h), which walks back from every collective.
// docs/architecture.md, "FSDP structure".
#pragma once

#include <string_view>

#include "ir/graph.h"

namespace jfx {

// The first all-gather (in program order, at the nearest depth) fed by `input` through views,
// copies and index ops (cat, after `bucket` flattened the unshard chain into one buffer):
// the parameter's FSDP unshard. nullptr when none within 8 such steps: the input is not
// sharded. Visits only those chains' nodes and their users.
const Node* unshardGatherOf(const Node& input);

// The reduce-scatter that produces `value` (a graph output) through its wait and the first input
// of views, copies and getitems (after `bucket`: the getitem of the bucket's split): a sharded
// parameter's gradient. nullptr when there is none within 8 steps.
const Node* gradientScatterOf(const Node& value);

// The reduce-scatter of the gradient output of parameter `fqn` (the header's output specs), else
// nullptr.
const Node* parameterGradientScatter(const Graph& g, std::string_view fqn);

}  // namespace jfx
