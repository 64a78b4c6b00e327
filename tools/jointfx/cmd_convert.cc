// jointfx convert IN -o OUT: JSON <-> text, losslessly. Does not verify, so a broken graph can
// still be turned into text to look at; only the identifier rule is checked (a graph whose names
// are code is refused: exit 1).
#include <memory>
#include <string>

#include "tools/jointfx/cli_util.h"

namespace jfx::cli {

namespace {
struct ConvertArgs {
  std::string input;
  std::string output;
  std::string format;
};
}  // namespace

void addConvertCommand(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<ConvertArgs>();
  CLI::App* cmd = app.add_subcommand("convert", "Convert a graph between JSON and text IR");
  cmd->add_option("input", args->input, "Graph file (.json, .jfx, or - for stdin)")->required();
  cmd->add_option("-o,--output", args->output, "Output file (.json, .jfx, or - for stdout)")
      ->required();
  cmd->add_option("--format", args->format, "Output format, overriding the extension")
      ->check(CLI::IsMember({"json", "text"}));
  cmd->callback([args, &exit_code] {
    exit_code = kInputError;
    auto format = outputFormat("convert", args->output, args->format);
    if (!format || wouldOverwriteInput("convert", {args->input}, args->output)) return;
    std::unique_ptr<Graph> g = loadInput("convert", args->input);
    if (!g) return;
    if (refuseCodeInNames("convert", args->input, *g)) {
      exit_code = kVerifyFailed;
      return;
    }
    if (!saveOutput("convert", *g, args->output, *format)) return;
    exit_code = kOk;
  });
}

}  // namespace jfx::cli
