// A deep copy of a graph: the same nodes in the same order with the same names, args, values and
// meta, and the same header (process groups, output specs, constants, graph meta). For passes that
// try a transformation on a scratch copy before deciding (tag-fsdp{reshard=budget}); O(N + E),
// several times cheaper than a round trip through a format.
#pragma once

#include <memory>

#include "ir/graph.h"

namespace jfx {

std::unique_ptr<Graph> cloneGraph(const Graph& g);

}  // namespace jfx
