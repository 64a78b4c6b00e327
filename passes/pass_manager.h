// The pass manager: parses pipelines, runs passes, and makes every pass observable (verify after
// each changing pass, print IR, time, statistics, stop after N, and a hash check that catches a
// pass claiming "unchanged" while it changed the graph).
#pragma once

#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "ir/error.h"
#include "ir/graph.h"
#include "ir/verifier.h"
#include "passes/pass.h"

namespace jfx {

struct PipelineEntry {
  std::string name;
  PassOptions options;
};

// "dce,tag-fsdp{reshard=always},bucket{cap-mb=64, kinds=ag,rs}". Throws JfxError on a syntax
// error (with the column) or an unknown pass name.
std::vector<PipelineEntry> parsePipeline(std::string_view spec);
// configs/pipelines/*.json: {"passes": [{"name": "dce"}, {"name": "bucket", "options": {...}}]}.
std::vector<PipelineEntry> loadPipelineFile(const std::string& path);
// A spec naming an existing .json file loads it; otherwise it is parsed as text.
std::vector<PipelineEntry> resolvePipeline(const std::string& spec_or_path);

// Per-run option overrides (`jointfx opt --set`): "KEY=VALUE" replaces KEY in every entry that
// gives it (memory-limit, hardware: the settings configs/pipelines/auto.json leaves to the run);
// "PASS.KEY=VALUE" sets KEY on every entry named PASS. Throws JfxError when one matches nothing.
void applyOptionOverrides(std::vector<PipelineEntry>& pipeline,
                          const std::vector<std::string>& overrides);

struct PassManagerOptions {
  bool verify_each = true;
  VerifyOptions verify;
  bool print_ir_after_all = false;
  std::vector<std::string> print_ir_after;  // pass names
  bool timing = false;
  bool stats = false;
  int stop_after = -1;  // run only the first N passes (bisecting); -1 = all
  bool check_unchanged_hash = true;
  bool remarks = false;         // route PassContext::remark() to `out`
  std::ostream* out = nullptr;  // where IR dumps, timing and stats go (stderr when null)
};

struct PassRecord {
  std::string name;
  std::string options;  // as printed: "{k=v}"
  bool changed = false;
  double seconds = 0;
  Statistics stats;
};

struct PipelineResult {
  std::vector<PassRecord> passes;
  double total_seconds = 0;   // passes, verification and hashing
  double verify_seconds = 0;  // the input's verification and each one after a changing pass
  size_t verify_runs = 0;
  double hash_seconds = 0;  // structural hashes behind check_unchanged_hash
  size_t hash_runs = 0;
};

// Thrown when the graph fails verification (before the first pass, or after a changing pass), so
// callers can tell "the graph is wrong" (CLI exit 1) from "the input or a pass failed" (exit 2).
class PipelineVerifyError : public JfxError {
 public:
  PipelineVerifyError(std::string pass, std::vector<VerifyIssue> issues, const std::string& msg)
      : JfxError({}, msg), pass_(std::move(pass)), issues_(std::move(issues)) {}
  const std::string& pass() const { return pass_; }  // "" when the input failed
  const std::vector<VerifyIssue>& issues() const { return issues_; }

 private:
  std::string pass_;
  std::vector<VerifyIssue> issues_;
};

// A pass created from the registry and configured from its entry's options.
struct ConfiguredPass {
  std::unique_ptr<Pass> pass;
  std::string options;  // as printed: "{k=v}"
};

// Creates and configures every pass before any runs, so a typo in the last pass's options fails
// before the first pass touches the graph. Throws JfxError on an unknown pass (listing the known
// ones) or an option key the pass did not read.
std::vector<ConfiguredPass> buildPipeline(const std::vector<PipelineEntry>& pipeline);

// Throws JfxError when a pass fails, when verification fails after a changing pass (the message
// names the pass and the first issues), or when a pass reports "unchanged" but the hash changed.
PipelineResult runPipeline(Graph& g, const std::vector<PipelineEntry>& pipeline,
                           const PassManagerOptions& opts);
// runPipeline over passes built elsewhere (tests run passes that are not in the registry).
PipelineResult runPasses(Graph& g, std::vector<ConfiguredPass>& passes,
                         const PassManagerOptions& opts);

}  // namespace jfx
