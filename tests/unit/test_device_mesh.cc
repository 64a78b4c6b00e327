// ir/device_mesh.h: the typed view of graph meta "mesh", on traced graphs and on malformed meshes.
#include <catch2/catch.hpp>

#include <string>

#include "ir/device_mesh.h"
#include "ir/io.h"
#include "test_util.h"

namespace jfx {
namespace {

std::unique_ptr<Graph> traced(const std::string& name) {
  return loadGraph(std::string(JFX_SOURCE_DIR) + "/tests/data/traced/" + name + ".json");
}

}  // namespace

TEST_CASE("device mesh: read from traced graphs", "[meta]") {
  auto tp = traced("fsdp_tp_w4");
  std::optional<DeviceMesh> mesh = graphDeviceMesh(*tp);
  REQUIRE(mesh);
  CHECK(mesh->shape == std::vector<int64_t>{2, 2});
  CHECK(mesh->dim_names == std::vector<std::string>{"fsdp", "tp"});
  CHECK(mesh->size == 4);
  CHECK(meshShapeText(*mesh) == "[2, 2]");
  // The meta is kept as it was read: the typed view does not rewrite it.
  CHECK(tp->extraJson().find(R"("mesh":{"dim_names":["fsdp","tp"],"shape":[2,2]})") !=
        std::string::npos);

  auto fsdp = traced("fsdp_w2");
  mesh = graphDeviceMesh(*fsdp);
  REQUIRE(mesh);
  CHECK(mesh->shape == std::vector<int64_t>{2});
  CHECK(mesh->dim_names == std::vector<std::string>{"fsdp"});
  CHECK(mesh->size == 2);
}

TEST_CASE("device mesh: absent", "[meta]") {
  CHECK_FALSE(parseDeviceMesh(""));
  CHECK_FALSE(parseDeviceMesh(R"({"world_size":4})"));
  Graph g;
  CHECK_FALSE(graphDeviceMesh(g));
}

TEST_CASE("device mesh: dim_names are optional", "[meta]") {
  std::optional<DeviceMesh> mesh = parseDeviceMesh(R"({"mesh":{"shape":[3,2]}})");
  REQUIRE(mesh);
  CHECK(mesh->shape == std::vector<int64_t>{3, 2});
  CHECK(mesh->dim_names.empty());
  CHECK(mesh->size == 6);
}

TEST_CASE("device mesh: malformed meshes name the field", "[meta]") {
  using test::errorOf;
  auto err = [](const char* meta) { return errorOf([&] { (void)parseDeviceMesh(meta); }); };
  CHECK_THAT(err(R"({"mesh":[2,2]})"), Catch::Contains("meta.mesh is [2,2], not an object"));
  CHECK_THAT(err(R"({"mesh":{"dim_names":["dp"]}})"), Catch::Contains("meta.mesh has no shape"));
  CHECK_THAT(err(R"({"mesh":{"shape":[]}})"),
             Catch::Contains("meta.mesh.shape is [], not a non-empty list"));
  CHECK_THAT(err(R"({"mesh":{"shape":"2x2"}})"), Catch::Contains("meta.mesh.shape is \"2x2\""));
  CHECK_THAT(err(R"({"mesh":{"shape":[2,0]}})"),
             Catch::Contains("meta.mesh.shape[1] is 0, not a positive integer"));
  CHECK_THAT(err(R"({"mesh":{"shape":[2,1.5]}})"), Catch::Contains("meta.mesh.shape[1] is 1.5"));
  CHECK_THAT(err(R"({"mesh":{"shape":[4294967296,4294967296]}})"),
             Catch::Contains("meta.mesh.shape has more ranks than fit in 64 bits"));
  CHECK_THAT(err(R"({"mesh":{"shape":[2,2],"dim_names":["dp"]}})"),
             Catch::Contains("meta.mesh.dim_names is [\"dp\"], not a list of 2 names"));
  CHECK_THAT(err(R"({"mesh":{"shape":[2],"dim_names":[7]}})"),
             Catch::Contains("meta.mesh.dim_names[0] is 7, not a string"));
  CHECK_THAT(err("[1]"), Catch::Contains("graph meta is not a JSON object"));
}

}  // namespace jfx
