// export_nodes and graph_from_fx for jointfx._C: torch.fx nodes -> the JSON v1 "nodes" array,
// or straight to a jfx::Graph (fx_export.cc).
#pragma once

#include <pybind11/pybind11.h>

#include <cstddef>
#include <memory>

#include "ir/graph.h"

namespace jfx::python {

// A graph made by jointfx._C.graph_from_fx, and how its nodes were built.
struct FxGraph {
  std::unique_ptr<jfx::Graph> graph;  // null once an EditScript took it
  size_t direct = 0;                  // nodes built from the FX objects
  size_t via_json = 0;                // nodes read by the JSON reader
};

void registerFxExport(pybind11::module_& m);

}  // namespace jfx::python
