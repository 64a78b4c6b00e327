// jointfx exec IN [--nproc N] [--steps S] ...: runs a graph on LibTorch (docs/executor.md).
// Without the runtime (configured without -DJFX_WITH_TORCH=ON) --help leaves it out and running it
// says how to get it.
#include <memory>
#include <string>

#include "runtime/exec_command.h"
#include "tools/jointfx/cli_util.h"
#include "tools/jointfx/exec_options.h"
#if JFX_HAVE_RUNTIME
#include "tools/jointfx/runtime_api.h"
#endif

namespace jfx::cli {

void addExecCommand(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<rt::ExecOptions>();
  CLI::App* cmd = app.add_subcommand(
      "exec",
      "Run a graph on LibTorch: N ranks on gloo (or NCCL), a training loop, losses and "
      "gradients (exit 3 if a rank fails)");
  cmd->option_defaults()->always_capture_default();
  cmd->footer("Exit codes: 0 ok, 2 usage or input error (includes plan errors), 3 a rank failed.");
  cmd->add_option("input", o->graph, "Graph file (.json or .jfx)")->required();
  addRunOptions(cmd, *o);
  cmd->add_option("--save-grads", o->save_grads,
                  "Directory for grads.step<S>.rank<R>.safetensors (gradients + __loss__)")
      ->check(NonEmpty());
  cmd->add_option("--save", o->save, "Directory for state.rank<R>.safetensors after the run")
      ->check(NonEmpty());
  cmd->add_option(
         "--log", o->log,
         "JSONL loss log, - for stdout ({rank} in the path: one file per rank; else rank 0 only)")
      ->check(NonEmpty());
  cmd->add_option("--memory-csv", o->memory_csv,
                  "CSV step,node,live_bytes: the last step's measured live tensor bytes at each "
                  "node, inputs included ({rank} in the path: one file per rank; else rank 0 "
                  "only)")
      ->check(NonEmpty());
  cmd->add_option("--progress", o->progress, "Progress bar on stderr: auto (a TTY), always, never")
      ->check(CLI::IsMember({"auto", "always", "never"}));
  cmd->add_flag("-q,--quiet", o->quiet, "No loss lines on stdout");
#if !JFX_HAVE_RUNTIME
  cmd->group("");  // absent from --help; running it says how to get it (kNoRuntimeMessage)
#endif
  cmd->callback([o, &exit_code] {
#if JFX_HAVE_RUNTIME
    const RuntimeApi* rt = runtimeFor("exec");
    exit_code = rt ? rt->run_exec(*o) : kInputError;
#else
    printError("exec", kNoRuntimeMessage);
    exit_code = kInputError;
#endif
  });
  // parity shares exec's options; registering it here keeps main.cc to one line for both.
  addParityCommand(app, exit_code);
}

}  // namespace jfx::cli
