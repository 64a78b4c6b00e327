#include "tools/jointfx/runtime_api.h"

#include <dlfcn.h>

#include <filesystem>
#include <system_error>

#include "tools/jointfx/cli_util.h"

namespace jfx::cli {
namespace {

std::string modulePath() {
  std::error_code ec;
  std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  std::filesystem::path dir = ec ? std::filesystem::path(".") : exe.parent_path();
  return (dir / "libjointfx_runtime.so").string();
}

const RuntimeApi* load(std::string& error) {
  std::string path = modulePath();
  // RTLD_NOW: a missing symbol fails here, not in the middle of a run.
  void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* why = ::dlerror();
    error = "cannot load the LibTorch runtime " + path + ": " + (why ? why : "unknown error");
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
