// The pass manager: parses pipelines, runs passes, and makes every pass observable (verify after
// each changing pass, print IR, time, statistics, stop after N, and a hash check that catches a
// pass claiming "unchanged" while it changed the graph).
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

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

struct PassManagerOptions {
  bool verify_each = true;
  VerifyOptions verify;
  bool print_ir_after_all = false;
  std::vector<std::string> print_ir_after;  // pass names
  bool timing = false;
  bool stats = false;
  int stop_after = -1;  // run only the first N passes (bisecting); -1 = all
  bool check_unchanged_hash = true;
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
  double total_seconds = 0;
};

// Throws JfxError when a pass fails, when verification fails after a changing pass (the message
// names the pass and the first issues), or when a pass reports "unchanged" but the hash changed.
PipelineResult runPipeline(Graph& g, const std::vector<PipelineEntry>& pipeline,
                           const PassManagerOptions& opts);

}  // namespace jfx
