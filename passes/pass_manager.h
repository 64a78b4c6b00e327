// The pass manager: parses pipelines, runs passes, and makes every pass observable through
// instrumentation (passes/instrumentation.h): verification after each changing pass, print IR,
// timing, statistics, reproducers, and the check that catches a pass claiming "unchanged" while
// it changed the graph (its structure always, its meta with the hash). Stop after N.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "ir/error.h"
#include "ir/graph.h"
#include "ir/verifier.h"
#include "passes/instrumentation.h"
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
// A spec with a '/' or ending in .json, or naming an existing file, loads that file; a bare name
// that is no pass is a shipped pipeline (default, auto: passes/data_files.h); otherwise it is
// parsed as text.
std::vector<PipelineEntry> resolvePipeline(const std::string& spec_or_path);

// Hooks: called around each pass of the top-level pipeline with its name, its 0-based index in
// the pipeline and the graph; the after-hook also gets whether the pass reported a change. The
// after-hooks run once the pass's checks (hash, verification) have passed, so they never see a
// graph the manager is about to reject. Hooks must not change the graph. (A
// PassInstrumentation sees more: nested pipelines, failures, the pass's context.)
using BeforePassHook = std::function<void(std::string_view pass, size_t index, const Graph& g)>;
using AfterPassHook =
    std::function<void(std::string_view pass, size_t index, const Graph& g, bool changed)>;

// Per-run option overrides (`jointfx opt --set`): "KEY=VALUE" replaces KEY in every entry that
// gives it (memory-limit, hardware: the settings configs/pipelines/auto.json leaves to the run);
// "PASS.KEY=VALUE" sets KEY on every entry named PASS. Throws JfxError when one matches nothing.
void applyOptionOverrides(std::vector<PipelineEntry>& pipeline,
                          const std::vector<std::string>& overrides);

struct PassManagerOptions {
  // Verification: the full check (verifyGraph) on the input and on the pipeline's output, and
  // between passes the per-node rules on the nodes each changing pass touched (verifyNodes over
  // Graph's change journal), which costs in proportion to the change; after a changing last pass
  // the output's full check takes the place of its touched-node check. verify_full_each (or a
  // whole-graph rule such as verify.one_gather_per_param_per_phase) runs the full check after
  // every changing pass instead.
  bool verify_each = true;
  bool verify_full_each = false;
  VerifyOptions verify;
  bool print_ir_after_all = false;
  std::vector<std::string> print_ir_after;  // pass names
  bool timing = false;
  bool stats = false;
  int stop_after = -1;  // run only the first N passes (bisecting); -1 = all
  // A pass that reports "unchanged" while the graph's structure changed (Graph::revision moved)
  // always fails, at O(1). The structural hash also catches edits of node meta and values, at a
  // whole-graph walk before and after every such pass: an expensive check (MLIR keeps its
  // operation-fingerprint check for expensive-check builds), on by default here, off in
  // `jointfx opt` and in process unless expensive checks are asked for.
  bool check_unchanged_hash = true;
  bool remarks = false;         // route PassContext::remark() to `out`
  std::ostream* out = nullptr;  // where IR dumps, timing and stats go (stderr when null)
  std::vector<BeforePassHook> before_pass;  // in order, before each pass runs
  std::vector<AfterPassHook> after_pass;    // in order, after each pass (after print-ir-after)
  // The caller's instrumentation, outermost first (its after-hooks run after every check):
  // observes every pass, nested pipelines' too. Not owned.
  std::vector<PassInstrumentation*> instrumentations;
  // Reproducers: when set, the graph is copied before each pass (only then: this costs nothing
  // when empty), and when a pass fails (it throws, reports "unchanged" but changed the graph, or
  // the graph fails verification after it) its input is written as text IR to
  // `<reproducer_dir>/<reproducer_stem>.<pass>.repro.jfx` (atomically; the directory is created)
  // and the error message says where and which `jointfx opt` command reproduces the failure.
  std::string reproducer_dir;
  std::string reproducer_stem = "graph";  // usually the input file's stem
};

struct PassRecord {
  std::string name;
  std::string options;  // as printed: "{k=v}"
  bool changed = false;
  double seconds = 0;      // wall clock
  double cpu_seconds = 0;  // process CPU time (all threads): what a loaded machine leaves alone
  Statistics stats;
};

struct PipelineResult {
  std::vector<PassRecord> passes;
  double total_seconds = 0;     // passes, verification and hashing
  double verify_seconds = 0;    // full checks (input, output) and the touched-node checks between
  size_t verify_runs = 0;       // full checks
  size_t verify_node_runs = 0;  // touched-node checks
  // The part of verify_seconds spent after passes (touched-node checks, or full checks with
  // verify_full_each), as opposed to the whole-graph checks of the input and the output.
  double verify_between_seconds = 0;
  size_t verify_between_runs = 0;
  double hash_seconds = 0;  // structural hashes behind check_unchanged_hash
  size_t hash_runs = 0;
  // Per analysis (passes/analysis_manager.h): computed and served from the cache. A nested
  // pipeline's are in its own result.
  std::map<std::string_view, AnalysisManager::Counts> analyses;
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
// ones), an option the pass does not declare, or a value it refuses.
std::vector<ConfiguredPass> buildPipeline(const std::vector<PipelineEntry>& pipeline);

// Throws JfxError when a pass fails (its message names the pass: "pass 'remat' (#3) failed: ..."),
// when verification fails after a changing pass (the message names the pass and the first
// issues), or when a pass reports "unchanged" but the graph changed.
PipelineResult runPipeline(Graph& g, const std::vector<PipelineEntry>& pipeline,
                           const PassManagerOptions& opts);
// runPipeline over passes built elsewhere (tests run passes that are not in the registry).
PipelineResult runPasses(Graph& g, std::vector<ConfiguredPass>& passes,
                         const PassManagerOptions& opts);

}  // namespace jfx
