// libjointfx_runtime.so: the LibTorch runtime for the jointfx CLI, opened on first use
// (tools/jointfx/runtime_api.h). It holds runtime/ and LibTorch; jfx_ir comes from the
// executable that loads it.
#include "runtime/calibrate.h"
#include "runtime/exec_command.h"
#include "runtime/grad_compare.h"
#include "tools/jointfx/runtime_api.h"

namespace {

bool compareGradDirs(const std::string& dir_a, const std::string& dir_b, int nproc, int steps,
                     std::vector<std::string>& report, jfx::rt::ParityUlp* ulp, bool* buffers) {
  return jfx::rt::compareGradDirs(dir_a, dir_b, nproc, steps, report, ulp, buffers);
}

}  // namespace

extern "C" __attribute__((visibility("default"))) const jfx::cli::RuntimeApi* jfx_runtime_api() {
  static const jfx::cli::RuntimeApi api{sizeof(jfx::rt::ExecOptions),
                                        sizeof(jfx::rt::CalibrateOptions), &jfx::rt::runExec,
                                        &jfx::rt::runCalibrate, &compareGradDirs};
  return &api;
}
