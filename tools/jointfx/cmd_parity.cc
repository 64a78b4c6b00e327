// jointfx parity A [B] [--pipeline P]... --nproc N --steps S: runs two graphs (or one graph before
// and after a pass pipeline) with the same data and compares the loss and every gradient of
// every step on every rank bit for bit (docs/executor.md). Exit 0 identical, 1 different.
#include <memory>
#include <string>

#include "tools/jointfx/cli_util.h"
#include "tools/jointfx/exec_options.h"
#include "tools/jointfx/parity.h"

namespace jfx::cli {

void addParityCommand(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<ParityOptions>();
  o->exec.steps = 3;
  CLI::App* cmd = app.add_subcommand(
      "parity",
      "Run graph A and graph B (or A after --pipeline) on the same data; exit 1 unless loss "
      "and gradients match bitwise on every rank and step");
  cmd->option_defaults()->always_capture_default();
  cmd->footer("Exit codes: 0 identical, 1 different, 2 usage or input error, 3 a run failed.");
  cmd->add_option("a", o->a, "Reference graph (.json or .jfx)")->required();
  cmd->add_option("b", o->b, "Graph to compare (default: A after --pipeline)");
  cmd->add_option("-p,--pipeline", o->pipelines,
                  "Pass pipeline that turns A into B (passes, a shipped pipeline by name, or a "
                  ".json file); repeat "
                  "it to compare several pipelines against one run of A; none: A itself, "
                  "round-tripped through JSON")
      ->allow_extra_args(false);
  cmd->add_option("--keep", o->keep, "Keep the run directories (graphs, gradients, logs) here")
      ->check(NonEmpty());
  addRunOptions(cmd, o->exec);
#if !JFX_HAVE_RUNTIME
  cmd->group("");  // absent from --help; running it says how to get it (kNoRuntimeMessage)
#endif
  cmd->callback([o, &exit_code] {
#if JFX_HAVE_RUNTIME
    exit_code = runParity(*o);
#else
    printError("parity", kNoRuntimeMessage);
    exit_code = kInputError;
#endif
  });
}

}  // namespace jfx::cli
