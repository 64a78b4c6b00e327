#include "tools/jointfx/runtime_api.h"

#include <dlfcn.h>

#include <cstring>
#include <filesystem>
#include <system_error>

#include "passes/data_files.h"
#include "tools/jointfx/cli_util.h"

namespace jfx::cli {
namespace {

// Beside the executable (a build from the checkout), else in the installed package that the
// wheel put it in, beside torch (passes/data_files.h finds the package from the command).
std::string modulePath() {
  constexpr const char* kName = "libjointfx_runtime.so";
  std::error_code ec;
  std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  std::filesystem::path beside = (ec ? std::filesystem::path(".") : exe.parent_path()) / kName;
  if (std::filesystem::exists(beside, ec)) return beside.string();
  for (const std::filesystem::path& pkg : installedPackageDirs())
    if (std::filesystem::exists(pkg / kName, ec)) return (pkg / kName).string();
  return beside.string();  // dlopen's error names it
}

const RuntimeApi* load(std::string& error) {
  std::string path = modulePath();
  // RTLD_NOW: a missing symbol fails here, not in the middle of a run.
  void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* why = ::dlerror();
    error = "cannot load the LibTorch runtime " + path + ": " + (why ? why : "unknown error");
    if (why && (std::strstr(why, "libtorch") || std::strstr(why, "libc10")))
      error +=
          " (an installed jointfx takes LibTorch from the torch package beside it, in the "
          "same site-packages: install the torch version it was built with there)";
    return nullptr;
  }
  auto fn = reinterpret_cast<RuntimeApiFn>(::dlsym(handle, kRuntimeApiSymbol));
  const RuntimeApi* api = fn ? fn() : nullptr;
  if (!api) {
    error = path + " has no " + kRuntimeApiSymbol + ": not a jointfx runtime module";
    return nullptr;
  }
  if (api->exec_options_size != sizeof(rt::ExecOptions) ||
      api->calibrate_options_size != sizeof(rt::CalibrateOptions)) {
    error = path + " was built from another version of jointfx (rebuild both)";
    return nullptr;
  }
  return api;  // the module stays loaded for the life of the process
}

}  // namespace

const RuntimeApi* runtimeApi(std::string& error) {
  static std::string load_error;
  static const RuntimeApi* api = load(load_error);
  if (!api) error = load_error;
  return api;
}

const RuntimeApi* runtimeFor(const char* command) {
  std::string error;
  const RuntimeApi* api = runtimeApi(error);
  if (!api) printError(command, error);
  return api;
}

}  // namespace jfx::cli
