// jointfx opt IN -o OUT --pipeline SPEC: load, run a pass pipeline, save.
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "passes/pass_manager.h"
#include "tools/jointfx/cli_range.h"
#include "tools/jointfx/cli_util.h"

namespace jfx::cli {

namespace {

struct OptArgs {
  std::string input;
  std::string output;
  std::string pipeline;
  std::string format;
  bool no_verify = false;
  bool verify_one_gather = false;
  bool verify_full = false;
  bool expensive_checks = false;
  bool print_ir_after_all = false;
  std::vector<std::string> print_ir_after;
  bool timing = false;
  bool stats = false;
  bool remarks = false;
  int stop_after = -1;
  std::string reproducer_dir;
  std::vector<std::string> set;  // KEY=VALUE or PASS.KEY=VALUE
};

int runOpt(const OptArgs& a) {
  auto format = outputFormat("opt", a.output, a.format);
  if (!format || wouldOverwriteInput("opt", {a.input}, a.output)) return kInputError;

  // Parse and configure every pass before loading: a typo in the pipeline costs nothing.
  std::vector<ConfiguredPass> passes;
  try {
    std::vector<PipelineEntry> pipeline = resolvePipeline(a.pipeline);
    applyOptionOverrides(pipeline, a.set);
    passes = buildPipeline(pipeline);
  } catch (const JfxError& e) {
    printError("opt", e.what());
    return kInputError;
  }

  std::unique_ptr<Graph> g = loadInput("opt", a.input);
  if (!g) return kInputError;
  // Verifying the input checks the identifier rule with the others.
  if (a.no_verify && refuseCodeInNames("opt", a.input, *g)) return kVerifyFailed;

  PassManagerOptions opts;
  opts.verify_each = !a.no_verify;
  opts.verify.one_gather_per_param_per_phase = a.verify_one_gather;
  opts.verify_full_each = a.verify_full;
  // The checks on the passes and the IR rather than on the graph (the unchanged-graph hash, the
  // whole-graph name-index and use-list check): off unless asked for, as in process; the test
  // suites turn them on with JOINTFX_EXPENSIVE_CHECKS=1 (docs/passes.md, "Verification").
  const char* env = std::getenv("JOINTFX_EXPENSIVE_CHECKS");
  const bool expensive = a.expensive_checks || (env && *env && std::string_view(env) != "0");
  opts.check_unchanged_hash = expensive;
  opts.verify.ir_invariants = expensive;
  opts.print_ir_after_all = a.print_ir_after_all;
  opts.print_ir_after = a.print_ir_after;
  opts.timing = a.timing;
  opts.stats = a.stats;
  opts.remarks = a.remarks;
  opts.stop_after = a.stop_after;
  opts.reproducer_dir = a.reproducer_dir;
  if (a.input != "-") opts.reproducer_stem = std::filesystem::path(a.input).stem().string();
  try {
    runPasses(*g, passes, opts);
  } catch (const PipelineVerifyError& e) {
    printError("opt", a.input + ": " + e.what());
    return kVerifyFailed;
  } catch (const JfxError& e) {
    printError("opt", a.input + ": " + e.what());
    return kInputError;
  }
  if (!saveOutput("opt", *g, a.output, *format)) return kInputError;
  // The process ends after this command. Freeing a graph node by node costs about as much as
  // copying it (bench_core's "free" step), so the graph is left to the
  // operating system; the static pointer keeps it reachable, so leak checkers do not report it
  // (clang's cc1 skips freeing its AST the same way, -disable-free).
  static Graph* left_to_exit = nullptr;
  left_to_exit = g.release();
  (void)left_to_exit;
  return kOk;
}

}  // namespace

void addOptCommand(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<OptArgs>();
  CLI::App* cmd = app.add_subcommand("opt", "Run a pass pipeline over a graph");
  cmd->add_option("input", args->input, "Graph file (.json, .jfx, or - for stdin)")->required();
  cmd->add_option("-o,--output", args->output,
                  "Output file (.json, .jfx, or - for stdout); never the input file")
      ->required();
  cmd->add_option("-p,--pipeline", args->pipeline,
                  "Passes, e.g. 'dce,bucket{cap-mb=64, kinds=ag,rs}', a shipped pipeline by "
                  "name (e.g. default, auto), or a pipeline .json file")
      ->required();
  cmd->add_option("--format", args->format, "Output format, overriding the extension")
      ->check(CLI::IsMember({"json", "text"}));
  cmd->add_flag("--no-verify", args->no_verify,
                "Do not verify the input, the output and the graph after each changing pass");
  cmd->add_flag("--verify-full", args->verify_full,
                "Verify the whole graph, and recompute the analyses a pass declares preserved, "
                "after each changing pass (default: the whole input and output, and between "
                "passes the nodes each pass touched)");
  cmd->add_flag("--expensive-checks", args->expensive_checks,
                "Also check the passes and the IR, not only the graph: a structural hash before "
                "and after each pass that reports no change, and the name index and use lists of "
                "the whole graph at each full verification (also JOINTFX_EXPENSIVE_CHECKS=1)");
  cmd->add_flag("--verify-one-gather", args->verify_one_gather,
                "Verification also requires one all-gather per parameter per phase");
  cmd->add_flag("--print-ir-after-all", args->print_ir_after_all,
                "Print the text IR to stderr after every pass");
  cmd->add_option("--print-ir-after", args->print_ir_after,
                  "Print the text IR to stderr after the named pass (repeatable)")
      ->allow_extra_args(false)  // one name per flag, so the positional input is not eaten
      ->delimiter(',');
  cmd->add_option("--set", args->set,
                  "KEY=VALUE: replace option KEY in every pass that gives it (e.g. "
                  "memory-limit=40GiB for -p auto, hardware=a100); PASS.KEY=VALUE: set it on "
                  "every pass named PASS (repeatable)")
      ->allow_extra_args(false);
  cmd->add_flag("--timing", args->timing, "Print a table of pass times to stderr");
  cmd->add_flag("--stats", args->stats, "Print pass statistics to stderr");
  cmd->add_flag("--remarks", args->remarks, "Print pass remarks to stderr");
  cmd->add_option("--stop-after", args->stop_after, "Run only the first N passes (for bisecting)")
      ->check(IntRange(0, 1000000));
  cmd->add_option("--reproducer-dir", args->reproducer_dir,
                  "When a pass fails, write its input graph here as INPUT-STEM.PASS.repro.jfx "
                  "(off by default; costs a graph copy per pass)")
      ->check(NonEmpty());
  cmd->callback([args, &exit_code] { exit_code = runOpt(*args); });
}

}  // namespace jfx::cli
