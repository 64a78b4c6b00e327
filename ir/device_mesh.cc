#include "ir/device_mesh.h"

#include <nlohmann/json.hpp>

#include "ir/checked.h"
#include "ir/error.h"

namespace jfx {
namespace {

[[noreturn]] void malformed(const std::string& where, const std::string& what) {
  throw JfxError({}, "graph meta: " + where + " " + what +
                         " (expected \"mesh\": {\"shape\": [positive ints], \"dim_names\": "
                         "[one string per dim]})");
}

std::vector<int64_t> readShape(const nlohmann::json& mesh, int64_t& size) {
  auto it = mesh.find("shape");
  if (it == mesh.end()) malformed("meta.mesh", "has no shape");
  if (!it->is_array() || it->empty())
    malformed("meta.mesh.shape", "is " + it->dump() + ", not a non-empty list");
  std::vector<int64_t> shape;
  size = 1;
  for (size_t d = 0; d < it->size(); ++d) {
    const nlohmann::json& v = (*it)[d];
    std::string where = "meta.mesh.shape[" + std::to_string(d) + "]";
    if (!v.is_number_integer() || v.get<int64_t>() < 1)
      malformed(where, "is " + v.dump() + ", not a positive integer");
    auto total = checkedMul(size, v.get<int64_t>());
    if (!total) malformed("meta.mesh.shape", "has more ranks than fit in 64 bits");
    size = *total;
    shape.push_back(v.get<int64_t>());
  }
  return shape;
}

std::vector<std::string> readDimNames(const nlohmann::json& mesh, size_t dims) {
  std::vector<std::string> names;
  auto it = mesh.find("dim_names");
  if (it == mesh.end() || it->is_null()) return names;
  if (!it->is_array() || it->size() != dims)
    malformed("meta.mesh.dim_names",
              "is " + it->dump() + ", not a list of " + std::to_string(dims) + " names");
  for (size_t d = 0; d < dims; ++d) {
    if (!(*it)[d].is_string())
      malformed("meta.mesh.dim_names[" + std::to_string(d) + "]",
                "is " + (*it)[d].dump() + ", not a string");
    names.push_back((*it)[d].get<std::string>());
  }
  return names;
}

}  // namespace

std::optional<DeviceMesh> parseDeviceMesh(std::string_view meta_json) {
  if (meta_json.empty()) return std::nullopt;
  auto meta = nlohmann::json::parse(meta_json, nullptr, /*allow_exceptions=*/false);
  if (meta.is_discarded() || !meta.is_object())
    throw JfxError({}, "graph meta is not a JSON object");
  auto it = meta.find("mesh");
  if (it == meta.end()) return std::nullopt;
  if (!it->is_object()) malformed("meta.mesh", "is " + it->dump() + ", not an object");
  DeviceMesh mesh;
  mesh.shape = readShape(*it, mesh.size);
  mesh.dim_names = readDimNames(*it, mesh.shape.size());
  return mesh;
}

std::optional<DeviceMesh> graphDeviceMesh(const Graph& g) {
  return parseDeviceMesh(g.extraJson());
}

std::string meshShapeText(const DeviceMesh& mesh) {
  std::string text = "[";
  for (size_t d = 0; d < mesh.shape.size(); ++d)
    text += (d ? ", " : "") + std::to_string(mesh.shape[d]);
  return text + "]";
}

}  // namespace jfx
