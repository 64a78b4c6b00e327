// The LibTorch runtime as the CLI reaches it: the commands that run graphs (exec, calibrate,
// parity) call it through this table, which lives in a module beside the executable
// (libjointfx_runtime.so, tools/runtime_module.cc) that is opened on first use. Every other
// command never loads LibTorch, whose operator registrations cost a process CPU time and memory
// before main (bench/README.md, "Figures behind the code"). Built only with the runtime
// (JFX_HAVE_RUNTIME).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "runtime/calibrate.h"
#include "runtime/exec_command.h"
#include "runtime/grad_compare.h"

namespace jfx::cli {

struct RuntimeApi {
  // The sizes of the option structs the module was built with: a module from another build is
  // refused instead of misreading them.
  size_t exec_options_size;
  size_t calibrate_options_size;
  int (*run_exec)(const rt::ExecOptions& o);
  int (*run_calibrate)(const rt::CalibrateOptions& o, const rt::CalibrateModel& model);
  bool (*compare_grad_dirs)(const std::string& dir_a, const std::string& dir_b, int nproc,
                            int steps, std::vector<std::string>& report, rt::ParityUlp* ulp,
                            bool* buffers);
};

// What the module exports (C linkage: one name to look up).
inline constexpr const char* kRuntimeApiSymbol = "jfx_runtime_api";
using RuntimeApiFn = const RuntimeApi* (*)();

// The table, loading the module from the executable's directory the first time. nullptr, with
// `error` saying why (path and dlerror), when it cannot be loaded or does not match this build.
const RuntimeApi* runtimeApi(std::string& error);

// runtimeApi() for a command: prints "jointfx <command>: <why>" and returns nullptr on failure.
const RuntimeApi* runtimeFor(const char* command);

}  // namespace jfx::cli
