// The device mesh a graph was traced on, as its graph meta records it: meta "mesh" =
// {"shape": [d0, d1, ...], "dim_names": ["dp", "tp", ...]} (docs/graph-format.md). The meta stays
// stored and written verbatim (Graph::extraJson()); this reads the typed view of it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ir/graph.h"

namespace jfx {

struct DeviceMesh {
  std::vector<int64_t> shape;          // ranks along each dim, row-major; each >= 1
  std::vector<std::string> dim_names;  // one per dim, or empty when the tracer recorded none
  int64_t size = 1;                    // the product of shape: the mesh's rank count

  bool operator==(const DeviceMesh&) const = default;
};

// The mesh in graph meta JSON text (Graph::extraJson(): an object, or empty). nullopt when there
// is no "mesh" key. Throws JfxError naming meta.mesh (or the offending field, e.g.
// meta.mesh.shape[1]) when the mesh is malformed: not an object, a shape that is not a non-empty
// list of positive integers or whose product overflows, or dim_names that are not one string per
// dim.
std::optional<DeviceMesh> parseDeviceMesh(std::string_view meta_json);

// The mesh of `g`'s graph meta (parseDeviceMesh of g.extraJson()).
std::optional<DeviceMesh> graphDeviceMesh(const Graph& g);

// "[2, 2]": the shape as messages print it.
std::string meshShapeText(const DeviceMesh& mesh);

}  // namespace jfx
