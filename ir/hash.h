// A structural hash of a graph: order, names, targets, args, kwargs, val, meta and header. Two
// graphs that print the same hash the same. Used by the pass manager to catch a pass that reports
// "unchanged" but changed the graph.
#pragma once

#include <cstdint>

#include "ir/graph.h"

namespace jfx {

uint64_t structuralHash(const Graph& g);

}  // namespace jfx
