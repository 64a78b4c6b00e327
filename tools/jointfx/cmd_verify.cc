// jointfx verify IN: loads a graph, runs the structural verifier, prints one line per issue.
#include <iostream>
#include <memory>
#include <string>

#include "ir/verifier.h"
#include "tools/jointfx/cli_range.h"
#include "tools/jointfx/cli_util.h"

namespace jfx::cli {

namespace {
struct VerifyArgs {
  std::string input;
  bool one_gather = false;
  size_t max_issues = 100;
  bool quiet = false;
};
}  // namespace

void addVerifyCommand(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<VerifyArgs>();
  CLI::App* cmd =
      app.add_subcommand("verify", "Check a graph's structural rules (exit 1 if any fail)");
  cmd->add_option("input", args->input, "Graph file (.json, .jfx, or - for stdin)")->required();
  cmd->add_flag("--one-gather", args->one_gather,
                "Also require at most one all-gather per parameter per phase");
  cmd->add_option("--max-issues", args->max_issues, "Stop after this many issues")
      ->check(IntRange(1, 1000000000));
  cmd->add_flag("-q,--quiet", args->quiet, "Print nothing when the graph verifies");
  cmd->callback([args, &exit_code] {
    std::unique_ptr<Graph> g = loadInput("verify", args->input);
    if (!g) {
      exit_code = kInputError;
      return;
    }
    VerifyOptions opts;
    opts.one_gather_per_param_per_phase = args->one_gather;
    opts.max_issues = args->max_issues;
    auto issues = verifyGraph(*g, opts);
    for (const auto& issue : issues)  // an issue about a read node names its place itself
      std::cout << (issue.where.empty() ? args->input + ": " : "") << issue.str() << "\n";
    if (!issues.empty()) {
      std::cout << args->input << ": " << issues.size()
                << (issues.size() == opts.max_issues ? "+" : "") << " issue"
                << (issues.size() == 1 ? "" : "s") << "\n";
      exit_code = kVerifyFailed;
      return;
    }
    if (!args->quiet) std::cout << args->input << ": ok (" << g->size() << " nodes)\n";
    exit_code = kOk;
  });
}

}  // namespace jfx::cli
