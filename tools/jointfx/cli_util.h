// Helpers the subcommands share: loading an input with a located error, choosing and checking
// an output path, and printing errors the same way everywhere ("jointfx <cmd>: <message>").
#pragma once

#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ir/error.h"
#include "ir/io.h"
#include "ir/verifier.h"
#include "tools/jointfx/commands.h"

namespace jfx::cli {

inline void printError(const std::string& cmd, const std::string& message) {
  std::cerr << "jointfx " << cmd << ": " << message << "\n";
}

// What exec, parity and calibrate say in a build without the LibTorch runtime, where --help does
// not list them.
inline constexpr const char* kNoRuntimeMessage =
    "this jointfx was built without the LibTorch runtime: in a checkout, scripts/build (or cmake "
    "-DJFX_WITH_TORCH=ON); with pip, install torch first, then `pip install "
    "--no-build-isolation .` (docs/python-api.md, \"Installing\")";

// nullptr after printing the error.
inline std::unique_ptr<Graph> loadInput(const std::string& cmd, const std::string& path) {
  try {
    return loadGraph(path);
  } catch (const JfxError& e) {
    printError(cmd, e.what());
  } catch (const std::exception& e) {
    printError(cmd, path + ": error: " + e.what());
  }
  return nullptr;
}

// A graph file is data: a command that writes a graph out without verifying it (convert,
// `opt --no-verify`) still refuses one whose names torch.fx would paste into Python source as
// code (rule identifier, docs/graph-format.md). True after printing each issue.
inline bool refuseCodeInNames(const std::string& cmd, const std::string& path, const Graph& g) {
  std::vector<VerifyIssue> issues = verifyIdentifiers(g);
  if (issues.empty()) return false;
  for (const auto& issue : issues)
    std::cerr << path << ": " << issue.str() << "\n";
  const size_t n = issues.size();
  printError(cmd, path + ": error: " + std::to_string(n) +
                      (n == VerifyOptions{}.max_issues ? "+" : "") +
                      (n == 1 ? " name or key is" : " names or keys are") +
                      " not a Python identifier (rule identifier): a graph file is data, it "
                      "must not hold code; nothing written");
  return true;
}

// The output format: --format when given, else the extension; stdout defaults to text.
inline std::optional<GraphFormat> outputFormat(const std::string& cmd, const std::string& path,
                                               const std::string& forced) {
  if (forced == "json") return GraphFormat::Json;
  if (forced == "text") return GraphFormat::Text;
  if (path == "-") return GraphFormat::Text;
  if (auto f = formatFromPath(path)) return f;
  printError(cmd, path + ": error: cannot tell the output format (expected a .json or .jfx " +
                      "extension, or --format json|text)");
  return std::nullopt;
}

// Never overwrite an input: true (after printing the error) when `out` is the same file as one of
// `inputs` (ir/io.h, sameFileAs).
inline bool wouldOverwriteInput(const std::string& cmd, const std::vector<std::string>& inputs,
                                const std::string& out) {
  auto in = sameFileAs(out, inputs);
  if (!in) return false;
  printError(cmd, out + ": error: refusing to write the output over the input file " +
                      quoteForMessage(*in, kPathQuoteLimit));
  return true;
}

inline bool saveOutput(const std::string& cmd, const Graph& g, const std::string& path,
                       GraphFormat format) {
  try {
    saveGraph(g, path, format);
    return true;
  } catch (const JfxError& e) {
    printError(cmd, e.what());
  } catch (const std::exception& e) {
    printError(cmd, path + ": error: " + e.what());
  }
  return false;
}

}  // namespace jfx::cli
