// Shipped pipelines and hardware profiles by name (passes/data_files.h), in a build from the
// checkout: the names are the checkout's configs/ files, whatever the working directory.
#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <string>

#include "ir/error.h"
#include "passes/analysis/cost_model.h"
#include "passes/data_files.h"
#include "passes/pass_manager.h"

using namespace jfx;
namespace fs = std::filesystem;

namespace {

const fs::path kConfigs = fs::path(JFX_SOURCE_DIR) / "configs";

std::vector<std::string> stems(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".json") out.push_back(e.path().stem().string());
  std::sort(out.begin(), out.end());
  return out;
}

std::string joined(const std::vector<std::string>& names) {
  std::string s;
  for (const std::string& n : names)
    s += (s.empty() ? "" : ", ") + n;
  return s;
}

}  // namespace

TEST_CASE("data names: a bare word of [A-Za-z0-9_-], at most 64 characters", "[data_files]") {
  for (const char* name : {"default", "h100", "my_cpu", "a-b", "X9"})
    CHECK(isDataName(name));
  CHECK(isDataName(std::string(64, 'a')));
  CHECK_FALSE(isDataName(std::string(65, 'a')));
  for (const char* spec : {"", "h100.json", "./h100", "configs/hardware/h100", "dce,remat",
                           "tag-fsdp{reshard=always}", "a b", "h100.", "\xc3\xa9"})
    CHECK_FALSE(isDataName(spec));
}

TEST_CASE("data files: the checkout's configs/ by name", "[data_files]") {
  REQUIRE(dataDirs().size() == 1);
  CHECK(fs::equivalent(dataDirs()[0], kConfigs));
  CHECK(installedPackageDirs().empty());  // not installed: no package around the test binary
  CHECK(dataNames(DataKind::Pipeline) == stems(kConfigs / "pipelines"));
  CHECK(dataNames(DataKind::Hardware) == stems(kConfigs / "hardware"));
  CHECK(fs::equivalent(findDataFile(DataKind::Hardware, "h100"), kConfigs / "hardware/h100.json"));
  CHECK(fs::equivalent(findDataFile(DataKind::Pipeline, "auto"), kConfigs / "pipelines/auto.json"));
  CHECK(findDataFile(DataKind::Pipeline, "h100").empty());  // kinds do not mix
  CHECK(findDataFile(DataKind::Hardware, "nope").empty());
  CHECK(findDataFile(DataKind::Hardware, "../hardware/h100").empty());  // never a path
}

TEST_CASE("data files: pipelines and profiles resolve by name, paths as given", "[data_files]") {
  const fs::path default_json = kConfigs / "pipelines/default.json";
  std::vector<PipelineEntry> by_name = resolvePipeline("default");
  std::vector<PipelineEntry> by_path = resolvePipeline(default_json.string());
  REQUIRE(by_name.size() == by_path.size());
  REQUIRE(by_name.size() > 3);
  for (size_t i = 0; i < by_name.size(); ++i) {
    CHECK(by_name[i].name == by_path[i].name);
    CHECK(by_name[i].options.values() == by_path[i].options.values());
  }
  // A pass's own name is the pass.
  REQUIRE(resolvePipeline("dce").size() == 1);
  CHECK(resolvePipeline("dce")[0].name == "dce");

  CHECK(loadHardwareProfile("h100").name == "h100");
  CHECK(resolveHardwareProfilePath("x/h100.json") == "x/h100.json");
  try {
    resolveHardwareProfilePath("h900");
    FAIL("h900 resolved");
  } catch (const JfxError& e) {
    std::string what = e.what();
    CHECK(what.find("unknown hardware profile 'h900'") != std::string::npos);
    CHECK(what.find("hardware profiles: " + joined(stems(kConfigs / "hardware"))) !=
          std::string::npos);
    CHECK(what.find((kConfigs / "hardware").string()) != std::string::npos);
  }
  try {
    resolvePipeline("defualt");
    FAIL("defualt resolved");
  } catch (const JfxError& e) {
    std::string what = e.what();
    CHECK(what.find("unknown pass or pipeline 'defualt'") != std::string::npos);
    CHECK(what.find("pipelines: " + joined(stems(kConfigs / "pipelines"))) != std::string::npos);
    CHECK(what.find("passes: dce") != std::string::npos);
  }
}
