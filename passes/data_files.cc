#include "passes/data_files.h"

#include <dlfcn.h>
#include <link.h>

#include <algorithm>
#include <set>
#include <system_error>

#include "ir/error.h"

namespace jfx {
namespace {

namespace fs = std::filesystem;

// The binary this code was linked into, and whether it is the program itself (the `jointfx`
// command) or a shared object (the Python extension).
struct ThisBinary {
  fs::path path;
  bool is_program = true;
};

ThisBinary thisBinary() {
  ThisBinary b;
  Dl_info info{};
  link_map* map = nullptr;
  if (::dladdr1(reinterpret_cast<void*>(&thisBinary), &info, reinterpret_cast<void**>(&map),
                RTLD_DL_LINKMAP) != 0 &&
      map != nullptr && map->l_name != nullptr && map->l_name[0] != '\0') {
    // A shared object: l_name is the path it was opened by (the loader made it absolute when it
    // came from a search; a relative dlopen path is relative to the working directory).
    std::error_code ec;
    fs::path p = fs::absolute(map->l_name, ec);
    b.path = ec ? fs::path(map->l_name) : p;
    b.is_program = false;
    return b;
  }
  // The program: the loader's l_name is empty for it, and argv[0] may be a bare command name.
  std::error_code ec;
  b.path = fs::read_symlink("/proc/self/exe", ec);
  return b;
}

bool isDir(const fs::path& p) {
  std::error_code ec;
  return fs::is_directory(p, ec);
}

const char* kindFolder(DataKind kind) {
  return kind == DataKind::Pipeline ? "pipelines" : "hardware";
}

const char* kindWhat(DataKind kind) {
  return kind == DataKind::Pipeline ? "pipeline" : "hardware profile";
}

// From the environment's scripts folder (where pip puts the command) to its site-packages, one
// entry per install scheme of the Python the wheel was built for, ':'-separated; set by
// CMakeLists.txt in wheel builds only.
#ifndef JFX_SCRIPTS_TO_SITE_PACKAGES
#define JFX_SCRIPTS_TO_SITE_PACKAGES ""
#endif

}  // namespace

bool isDataName(std::string_view spec) {
  if (spec.empty() || spec.size() > 64) return false;
  return std::all_of(spec.begin(), spec.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_';
  });
}

std::vector<fs::path> installedPackageDirs() {
  ThisBinary self = thisBinary();
  if (self.path.empty()) return {};
  std::vector<fs::path> out;
  fs::path dir = self.path.parent_path();
  if (!self.is_program) {
    // The extension jointfx/_C*.so: its own folder is the package.
    if (isDir(dir / "configs")) out.push_back(dir);
    return out;
  }
  std::string_view rels = JFX_SCRIPTS_TO_SITE_PACKAGES;
  while (!rels.empty()) {
    size_t colon = rels.find(':');
    std::string_view rel = rels.substr(0, colon);
    rels = colon == std::string_view::npos ? std::string_view() : rels.substr(colon + 1);
    if (rel.empty()) continue;
    fs::path pkg = (dir / fs::path(rel) / "jointfx").lexically_normal();
    if (isDir(pkg) && std::find(out.begin(), out.end(), pkg) == out.end()) out.push_back(pkg);
  }
  return out;
}

std::vector<fs::path> dataDirs() {
  std::vector<fs::path> out;
  for (const fs::path& pkg : installedPackageDirs())
    if (isDir(pkg / "configs")) out.push_back(pkg / "configs");
#ifdef JFX_SOURCE_CONFIGS_DIR
  // A build from a checkout: the checkout's configs/, wherever the build folder is.
  if (isDir(JFX_SOURCE_CONFIGS_DIR)) out.emplace_back(JFX_SOURCE_CONFIGS_DIR);
#endif
  return out;
}

std::vector<std::string> dataNames(DataKind kind) {
  std::set<std::string> names;
  for (const fs::path& dir : dataDirs()) {
    std::error_code ec;
    for (fs::directory_iterator it(dir / kindFolder(kind), ec), end; !ec && it != end;
         it.increment(ec)) {
      const fs::path& p = it->path();
      if (p.extension() == ".json" && isDataName(p.stem().string())) names.insert(p.stem());
    }
  }
  return {names.begin(), names.end()};
}

std::string findDataFile(DataKind kind, std::string_view name) {
  if (!isDataName(name)) return "";
  for (const fs::path& dir : dataDirs()) {
    fs::path p = dir / kindFolder(kind) / (std::string(name) + ".json");
    std::error_code ec;
    if (fs::is_regular_file(p, ec)) return p.string();
  }
  return "";
}

std::string describeDataNames(DataKind kind) {
  std::string names;
  for (const std::string& n : dataNames(kind))
    names += (names.empty() ? "" : ", ") + n;
  std::string where;
  for (const fs::path& d : dataDirs())
    where += (where.empty() ? "" : ", ") + (d / kindFolder(kind)).string();
  if (where.empty())
    return "no data directory found: this jointfx is neither installed with its Python package "
           "nor built from a checkout; give a path";
  return std::string(kindWhat(kind)) + "s: " + (names.empty() ? "none" : names) + " (in " + where +
         ")";
}

std::string resolveHardwareProfilePath(const std::string& spec) {
  if (!isDataName(spec)) return spec;
  std::string path = findDataFile(DataKind::Hardware, spec);
  std::error_code ec;
  if (path.empty() && fs::is_regular_file(spec, ec)) return spec;  // a file named like a name
  if (path.empty())
    throw JfxError({}, "unknown hardware profile '" + spec +
                           "': " + describeDataNames(DataKind::Hardware) +
                           "; a path (with a '/' or ending in .json) is read as a file");
  return path;
}

}  // namespace jfx
