#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "ir/error.h"
#include "ir/hash.h"
#include "ir/io.h"
#include "ir/text_format.h"

using namespace jfx;
namespace fs = std::filesystem;

namespace {

const char* kGraph = R"(jointfx.graph 1
group "0" size=2 ranks=[0, 1]
default_device "cpu"

%w : f32[4, 8] = placeholder {input=parameter, fqn="w"}
%ag : f32[8, 8] = _c10d_functional.all_gather_into_tensor.default(%w, 2, "0") {phase=forward}
%output = output([%ag])
)";

// A fresh directory per test, removed afterwards.
struct TempDir {
  fs::path path;
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "jfx_io_XXXXXX").string();
    path = ::mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::permissions(path, fs::perms::owner_all, ec);
    fs::remove_all(path, ec);
  }
  std::string file(const char* name) const { return (path / name).string(); }
  size_t entries() const {
    return static_cast<size_t>(std::distance(fs::directory_iterator(path), {}));
  }
};

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string errorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const JfxError& e) {
    return e.what();
  }
  return "<no error>";
}

}  // namespace

TEST_CASE("io: formatFromPath", "[format]") {
  CHECK(formatFromPath("a/b.json") == GraphFormat::Json);
  CHECK(formatFromPath("b.jfx") == GraphFormat::Text);
  CHECK(!formatFromPath("b.txt"));
  CHECK(!formatFromPath("json"));
  CHECK(!formatFromPath("-"));
}

TEST_CASE("io: save and load in both formats", "[format]") {
  TempDir dir;
  auto g = parseTextGraph(kGraph, "g.jfx");
  for (GraphFormat f : {GraphFormat::Json, GraphFormat::Text}) {
    std::string path = dir.file(f == GraphFormat::Json ? "g.json" : "g.jfx");
    saveGraph(*g, path, f);
    CHECK(slurp(path) == serializeGraph(*g, f));
    auto back = loadGraph(path);
    CHECK(printTextGraph(*back) == kGraph);
    CHECK(structuralHash(*back) == structuralHash(*g));
    struct stat st;
    REQUIRE(::stat(path.c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0644);
  }
  CHECK(dir.entries() == 2);  // no temporaries left behind
}

TEST_CASE("io: writeFileAtomic replaces a file and keeps its mode", "[format]") {
  TempDir dir;
  std::string path = dir.file("out.jfx");
  writeFileAtomic(path, "old\n");
  ::chmod(path.c_str(), 0600);
  writeFileAtomic(path, "new\n");
  CHECK(slurp(path) == "new\n");
  struct stat st;
  REQUIRE(::stat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  CHECK(dir.entries() == 1);
}

TEST_CASE("io: failed writes leave the target untouched and no temporary", "[format]") {
  TempDir dir;
  // The target is a directory: rename fails, the directory and its contents stay.
  std::string target = dir.file("target.json");
  fs::create_directory(target);
  std::ofstream(target + "/keep") << "x";
  std::string e = errorOf([&] { writeFileAtomic(target, "data"); });
  CHECK(e.find(target) != std::string::npos);
  CHECK(fs::is_directory(target));
  CHECK(slurp(target + "/keep") == "x");
  CHECK(dir.entries() == 1);

  // The directory does not exist.
  std::string missing = dir.file("no/such/dir/g.json");
  e = errorOf([&] { writeFileAtomic(missing, "data"); });
  CHECK(e.find(missing) != std::string::npos);
  CHECK(e.find("temporary") != std::string::npos);

  // A read-only directory (skipped as root, who can write anyway).
  if (::geteuid() != 0) {
    std::string ro = dir.file("ro");
    fs::create_directory(ro);
    std::ofstream(ro + "/g.json") << "original";
    fs::permissions(ro, fs::perms::owner_read | fs::perms::owner_exec);
    e = errorOf([&] { writeFileAtomic(ro + "/g.json", "new"); });
    CHECK(e.find("g.json") != std::string::npos);
    CHECK(slurp(ro + "/g.json") == "original");
    fs::permissions(ro, fs::perms::owner_all);
  }
}

TEST_CASE("io: load errors name the file", "[format]") {
  TempDir dir;
  std::string missing = dir.file("missing.json");
  std::string e = errorOf([&] { loadGraph(missing); });
  CHECK(e.rfind(missing, 0) == 0);
  CHECK(e.find("cannot open") != std::string::npos);

  std::string unknown = dir.file("graph.txt");
  std::ofstream(unknown) << kGraph;
  e = errorOf([&] { loadGraph(unknown); });
  CHECK(e.rfind(unknown, 0) == 0);
  CHECK(e.find(".json or .jfx") != std::string::npos);

  std::string a_dir = dir.file("d.jfx");
  fs::create_directory(a_dir);
  e = errorOf([&] { loadGraph(a_dir); });
  CHECK(e.rfind(a_dir, 0) == 0);

  std::string bad = dir.file("bad.jfx");
  std::ofstream(bad) << "jointfx.graph 1\n%x = nope(\n";
  e = errorOf([&] { loadGraph(bad); });
  CHECK(e.rfind(bad + ":2:", 0) == 0);

  std::string bad_json = dir.file("bad.json");
  std::ofstream(bad_json) << "{\"format\":\"jointfx.graph\",\"version\":1,\"nodes\":[{]}";
  e = errorOf([&] { loadGraph(bad_json); });
  CHECK(e.rfind(bad_json + ":1:", 0) == 0);
}
