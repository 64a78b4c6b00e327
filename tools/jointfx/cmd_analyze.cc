// jointfx analyze IN [--json] [--memory-csv FILE] [--comm-backend nccl|gloo] [--top K]
// [--hardware FILE [--trace FILE]]:
// what the analyses say about a graph. Sections, in order: graph, phases
// (passes/analysis/phase.h), fsdp (passes/analysis/fsdp.h), blocks (passes/analysis/blocks.h),
// memory (passes/analysis/memory.h),
// with --hardware the timeline simulation (passes/analysis/simulator.h), and the reference plan
// (passes/plan/reference_plan.h) beside the graph as given or, with --pipeline P, beside P's plan
// of the graph (--no-reference leaves it out). Exit
// codes: 0 ok, 1 the graph fails verification (the analyses assume a well-formed graph; --no-verify
// skips the check), 2 usage or input error.
//
// Extending: add options to AnalyzeArgs, compute in runAnalyze() next to the others, and add one
// JSON key and one text block (each section owns both, so --json and text stay in step).
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "ir/clone.h"
#include "ir/collectives.h"
#include "ir/verifier.h"
#include "passes/analysis/blocks.h"
#include "passes/analysis/fsdp.h"
#include "passes/analysis/memory.h"
#include "passes/analysis/phase.h"
#include "passes/analysis/simulator.h"
#include "passes/pass_manager.h"
#include "passes/plan/reference_plan.h"
#include "tools/jointfx/cli_range.h"
#include "tools/jointfx/cli_util.h"

namespace jfx::cli {

namespace {

struct AnalyzeArgs {
  std::string input;
  bool json = false;
  bool no_verify = false;
  std::string memory_csv;  // "" = none
  std::string comm_backend = "nccl";
  size_t top = 10;
  std::string hardware;  // "" = no simulation
  std::string trace;     // "" = none; needs hardware
  bool no_reference = false;
  std::string pipeline;  // "" = compare the reference plan with the graph as given
};

std::string phaseOf(const PhaseInfo& phases, const Node* n) {
  return n ? std::string(phaseName(phases.of(n))) : "unknown";
}

// ---- graph
void graphSection(const Graph& g, nlohmann::json& j, std::ostream& text) {
  int64_t inputs = 0, params = 0, param_bytes = 0;
  g.forEach([&](const Node* n) {
    if (n->op() != OpKind::Placeholder) return;
    ++inputs;
    if (n->inputKind() == InputKind::Parameter) {
      ++params;
      param_bytes += n->val().bytes();
    }
  });
  j["graph"] = {{"nodes", g.size()},
                {"inputs", inputs},
                {"parameters", params},
                {"parameter_bytes", param_bytes}};
  text << "graph: " << g.size() << " nodes, " << inputs << " inputs (" << params << " parameters, "
       << formatBytes(param_bytes) << ")\n";
}

// ---- phases
void phaseSection(const Graph& g, const PhaseInfo& phases, nlohmann::json& j, std::ostream& text) {
  std::map<std::string, int64_t> counts;
  for (Phase p : {Phase::Forward, Phase::Loss, Phase::Backward})
    counts[std::string(phaseName(p))] = 0;
  g.forEach([&](const Node* n) {
    if (n->op() == OpKind::CallFunction) ++counts[std::string(phaseName(phases.of(n)))];
  });
  j["phases"] = {{"counts", counts},
                 {"loss_node", phases.lossNode() ? phases.lossNode()->name() : ""},
                 {"from_meta", phases.fromMeta()},
                 {"from_autograd_flag", phases.fromAutogradFlag()},
                 {"from_structure", phases.fromStructure()}};
  text << "phases: forward " << counts["forward"] << ", loss " << counts["loss"] << ", backward "
       << counts["backward"] << " (from meta " << phases.fromMeta() << ", autograd flag "
       << phases.fromAutogradFlag() << ", structure " << phases.fromStructure() << ")\n";
}

// ---- fsdp
void fsdpSection(const Graph& g, const PhaseInfo& phases, const FsdpAnalysis& fsdp,
                 nlohmann::json& j, std::ostream& text) {
  // All-gathers (FSDP or not) by derived phase: the figure reshard-after-forward changes.
  std::map<std::string, int64_t> gathers;
  for (Phase p : {Phase::Forward, Phase::Loss, Phase::Backward})
    gathers[std::string(phaseName(p))] = 0;
  g.forEach([&](const Node* n) {
    if (collectiveKind(*n) == CollectiveKind::AllGather)
      ++gathers[std::string(phaseName(phases.of(n)))];
  });
  // (parameter, side) pairs gathered more than once: what dedup-fsdp-unshard removes.
  std::map<std::pair<uint32_t, bool>, int> per_param;
  int64_t fwd_chains = 0, bwd_chains = 0;
  nlohmann::json chains = nlohmann::json::array();
  for (const auto& c : fsdp.unshard) {
    bool bwd = phases.isBackward(c.all_gather);
    (bwd ? bwd_chains : fwd_chains) += 1;
    ++per_param[{c.param->id(), bwd}];
    std::vector<std::string> saves;
    for (const Node* s : c.save_points)
      saves.push_back(std::string(s->name()));
    chains.push_back({{"param", c.param->name()},
                      {"fqn", c.param->inputFqn()},
                      {"all_gather", c.all_gather->name()},
                      {"phase", phaseOf(phases, c.all_gather)},
                      {"pre", c.pre.size()},
                      {"post", c.post.size()},
                      {"save_points", saves},
                      {"recompute", std::string(recomputeName(c.wait->meta().recompute))}});
  }
  int64_t twice = 0;
  for (const auto& kv : per_param)
    twice += kv.second > 1;
  int64_t hsdp = 0;
  for (const auto& gc : fsdp.grads)
    hsdp += gc.all_reduce != nullptr;
  std::vector<std::string> others;
  for (const Node* n : fsdp.other_collectives)
    others.push_back(std::string(n->name()));
  j["fsdp"] = {{"unshard_chains", {{"forward", fwd_chains}, {"backward", bwd_chains}}},
               {"all_gathers_by_phase", gathers},
               {"params_gathered_more_than_once_per_phase", twice},
               {"gradient_chains", fsdp.grads.size()},
               {"hsdp_all_reduces", hsdp},
               {"other_collectives", others},
               {"chains", chains}};
  text << "fsdp:\n"
       << "  unshard chains: " << fwd_chains << " forward, " << bwd_chains << " backward\n"
       << "  all-gathers by phase: forward " << gathers["forward"] << ", loss " << gathers["loss"]
       << ", backward " << gathers["backward"] << "\n"
       << "  parameters gathered more than once per phase: " << twice << "\n"
       << "  gradient chains: " << fsdp.grads.size() << " (hsdp all-reduces: " << hsdp << ")\n"
       << "  other collectives (left alone): " << others.size() << "\n";
}

// ---- blocks (passes/analysis/blocks.h): what tag-fsdp, bucket and schedule treat as a block
void blocksSection(const BlockAnalysis& blocks, nlohmann::json& j, std::ostream& text) {
  nlohmann::json list = nlohmann::json::array();
  for (const Block& b : blocks.blocks)
    list.push_back({{"name", b.name},
                    {"container", b.container},
                    {"index", b.index},
                    {"parameters", b.params.size()}});
  j["blocks"] = {{"containers", blocks.containers},
                 {"parallel_containers", blocks.parallel_containers},
                 {"heterogeneous_containers", blocks.heterogeneous_containers},
                 {"parameters", blocks.parameters},
                 {"parameters_in_blocks", blocks.parameters_in_blocks},
                 {"blocks", list}};
  text << "blocks: " << blocks.summary() << "\n";
  if (blocks.blocks.empty() && blocks.parameters > 0)
    text << "  " << blocks.noBlocksMessage("analyze") << "\n";
  if (!blocks.parallel_containers.empty()) {
    text << "  side by side inside a block (not blocks):";
    for (const std::string& c : blocks.parallel_containers)
      text << " " << (c.empty() ? "(root)" : c);
    text << "\n";
  }
  if (!blocks.heterogeneous_containers.empty()) {
    text << "  lists of different modules (not blocks):";
    for (const std::string& c : blocks.heterogeneous_containers)
      text << " " << (c.empty() ? "(root)" : c);
    text << "\n";
  }
  for (size_t i = 0; i < blocks.blocks.size(); ++i)
    text << "  " << i << ": " << blocks.blocks[i].name << " (" << blocks.blocks[i].params.size()
         << " parameters)\n";
}

// ---- memory
void memorySection(const PhaseInfo& phases, const MemoryProfile& mem, bool gloo, nlohmann::json& j,
                   std::ostream& text) {
  nlohmann::json per_phase = nlohmann::json::object();
  for (Phase p : {Phase::Forward, Phase::Loss, Phase::Backward}) {
    const PhasePeak& pp = mem.peakOf(p);
    if (pp.node)
      per_phase[std::string(phaseName(p))] = {{"bytes", pp.bytes}, {"node", pp.node->name()}};
  }
  nlohmann::json largest = nlohmann::json::array();
  for (const LiveTensor& t : mem.largest_at_peak)
    largest.push_back({{"node", t.owner->name()},
                       {"element", t.element},
                       {"bytes", t.bytes},
                       {"graph_input", t.is_input},
                       {"phase", phaseOf(phases, t.owner)}});
  nlohmann::json by_class = nlohmann::json::object();
  for (size_t c = 0; c < kPeakClasses; ++c)
    by_class[std::string(peakClassName(static_cast<PeakClass>(c)))] = mem.peak_by_class[c];
  j["memory"] = {{"peak_bytes", mem.peak_bytes},
                 {"peak_by_class", by_class},
                 {"peak_node", mem.peak_node ? mem.peak_node->name() : ""},
                 {"peak_phase", phaseOf(phases, mem.peak_node)},
                 {"input_bytes", mem.input_bytes},
                 {"comm_backend", gloo ? "gloo" : "nccl"},
                 {"phase_peaks", per_phase},
                 {"largest_at_peak", largest}};
  text << (gloo ? "memory (estimated, with gloo's buffers):\n" : "memory (estimated):\n")
       << "  peak: " << formatBytes(mem.peak_bytes);
  if (mem.peak_node)
    text << " at '" << mem.peak_node->name() << "' (" << phaseOf(phases, mem.peak_node) << ")";
  text << "\n  graph inputs: " << formatBytes(mem.input_bytes) << "\n  at the peak:";
  const char* sep = " ";
  for (size_t c = 0; c < kPeakClasses; ++c) {
    if (mem.peak_by_class[c] == 0) continue;
    std::string name(peakClassName(static_cast<PeakClass>(c)));
    std::replace(name.begin(), name.end(), '_', ' ');
    text << sep << name << " " << formatBytes(mem.peak_by_class[c]);
    sep = ", ";
  }
  text << "\n";
  for (Phase p : {Phase::Forward, Phase::Loss, Phase::Backward}) {
    const PhasePeak& pp = mem.peakOf(p);
    if (pp.node)
      text << "  " << phaseName(p) << " peak: " << formatBytes(pp.bytes) << " at '"
           << pp.node->name() << "'\n";
  }
  if (!mem.largest_at_peak.empty()) text << "  largest live tensors at the peak:\n";
  for (const LiveTensor& t : mem.largest_at_peak) {
    text << "    " << formatBytes(t.bytes) << "  " << t.owner->name();
    if (t.element == StorageLife::kStaging) {
      text << " (gloo staging)\n";
      continue;
    }
    if (t.element) text << "[" << t.element << "]";
    text << " (" << (t.is_input ? "graph input" : phaseOf(phases, t.owner)) << ")\n";
  }
}

std::string memoryCsv(const Graph& g, const PhaseInfo& phases, const MemoryProfile& mem) {
  std::ostringstream os;
  os << "step,node,phase,live_bytes\n";
  size_t i = 0;
  for (const Node* n = g.first(); n && i < mem.curve.size(); n = n->next(), ++i)
    os << i << "," << n->name() << "," << phaseOf(phases, n) << "," << mem.curve[i] << "\n";
  return os.str();
}

// ---- reference plan (passes/plan/reference_plan.h): FSDP2's plan for this graph, beside the
// graph as given or, with --pipeline, beside that pipeline's plan of the same graph.
struct PlanColumn {
  int64_t peak = 0;
  std::optional<SimResult> sim;
  ReferencePlan counts;  // the collective counts only
};

PlanColumn columnOf(const Graph& g, const MemoryOptions& mopts, const CostModel* cost) {
  PlanColumn c;
  PhaseInfo phases = computePhases(g);
  MemoryOptions mo = mopts;
  mo.top_k = 0;
  c.peak = analyzeMemory(g, phases, mo).peak_bytes;
  countPlanCollectives(g, phases, c.counts);
  if (cost) {
    SimOptions so;
    so.memory = false;
    c.sim = simulate(g, *cost, so);
    c.sim->peak_memory_bytes = c.peak;
  }
  return c;
}

nlohmann::json columnJson(const PlanColumn& c, const CostModel* cost) {
  nlohmann::json r = {{"peak_memory_bytes", c.peak},
                      {"all_gathers_forward", c.counts.forward_all_gathers},
                      {"all_gathers_backward", c.counts.backward_all_gathers},
                      {"reduce_scatters", c.counts.reduce_scatters}};
  if (c.sim) {
    nlohmann::json s = simulationJson(*c.sim, cost->hardware());
    for (auto it = s.begin(); it != s.end(); ++it)
      if (!r.contains(it.key())) r[it.key()] = it.value();
  }
  return r;
}

// `pipeline`: the entries of --pipeline (empty: compare with the graph as given).
int referenceSection(const Graph& g, const MemoryProfile& mem, const MemoryOptions& mopts,
                     const CostModel* cost, const std::optional<SimResult>& sim,
                     const std::string& pipeline_name, const std::vector<PipelineEntry>& pipeline,
                     nlohmann::json& j, std::ostream& text) {
  PlanColumn ref, left;
  try {
    ReferencePlan plan = buildReferencePlan(g, mopts);
    ref = columnOf(*plan.graph, mopts, cost);
    if (!pipeline.empty()) {
      std::unique_ptr<Graph> copy = cloneGraph(g);
      PassManagerOptions pm;
      pm.verify_each = false;
      pm.check_unchanged_hash = false;
      std::ostringstream sink;  // the pipeline's warnings are for `jointfx opt`
      pm.out = &sink;
      runPipeline(*copy, pipeline, pm);
      left = columnOf(*copy, mopts, cost);
    }
  } catch (const JfxError& e) {
    printError("analyze", std::string("the reference plan: ") + e.what());
    return kInputError;
  }
  if (pipeline.empty()) {
    left.peak = mem.peak_bytes;
    left.sim = sim;
    countPlanCollectives(g, computePhases(g), left.counts);
  } else {
    nlohmann::json p = columnJson(left, cost);
    p["pipeline"] = pipeline_name;
    j["pipeline_plan"] = p;
  }
  nlohmann::json r = columnJson(ref, cost);
  r["pipeline"] = referencePipelineSpec();
  j["reference_plan"] = r;

  char line[160];
  text << "reference plan (FSDP2: one bucket per unit, prefetch 1, reshard after forward but the "
          "last unit):\n";
  auto row = [&](const char* what, const std::string& a, const std::string& b) {
    std::snprintf(line, sizeof line, "  %-22s %16s %16s\n", what, a.c_str(), b.c_str());
    text << line;
  };
  row("", pipeline.empty() ? "this graph" : "pipeline", "reference");
  row("estimated peak", formatBytes(left.peak), formatBytes(ref.peak));
  if (left.sim && ref.sim) {
    char a[32], b[32];
    std::snprintf(a, sizeof a, "%.1f us", left.sim->step * 1e6);
    std::snprintf(b, sizeof b, "%.1f us", ref.sim->step * 1e6);
    row("simulated step", a, b);
  }
  row("forward all-gathers", std::to_string(left.counts.forward_all_gathers),
      std::to_string(ref.counts.forward_all_gathers));
  row("backward all-gathers", std::to_string(left.counts.backward_all_gathers),
      std::to_string(ref.counts.backward_all_gathers));
  row("reduce-scatters", std::to_string(left.counts.reduce_scatters),
      std::to_string(ref.counts.reduce_scatters));
  return kOk;
}

// Writes a report file (--trace, --memory-csv) atomically; false after printing why not.
bool writeReportFile(const std::string& path, const std::string& content) {
  try {
    writeFileAtomic(path, content);
    return true;
  } catch (const JfxError& e) {  // names the file itself
    printError("analyze", e.what());
  } catch (const std::exception& e) {
    printError("analyze", path + ": error: " + e.what());
  }
  return false;
}

// The input, loaded and verified (unless --no-verify); null after printing why not, with `rc`.
std::unique_ptr<Graph> loadVerified(const AnalyzeArgs& args, int& rc) {
  rc = kInputError;
  std::unique_ptr<Graph> g = loadInput("analyze", args.input);
  if (!g) return nullptr;
  auto issues = args.no_verify ? std::vector<VerifyIssue>{} : verifyGraph(*g);
  if (issues.empty()) return g;
  for (const auto& issue : issues)  // an issue about a read node names its place itself
    std::cerr << (issue.where.empty() ? args.input + ": " : "") << issue.str() << "\n";
  printError("analyze", args.input + ": the graph fails verification (" +
                            std::to_string(issues.size()) + " issue" +
                            (issues.size() == 1 ? "" : "s") + "); analyses need a valid graph");
  rc = kVerifyFailed;
  return nullptr;
}

// --hardware: the simulation section (passes/analysis/simulator.h; the memory section already
// has the peak) and --trace. kOk, or the exit code after printing why not.
int simulationSection(const AnalyzeArgs& args, const Graph& g, const MemoryProfile& mem,
                      std::optional<CostModel>& cost, std::optional<SimResult>& simulated,
                      nlohmann::json& report, std::ostringstream& text) {
  try {
    cost.emplace(loadHardwareProfile(args.hardware));
  } catch (const JfxError& e) {
    printError("analyze", e.what());
    return kInputError;
  }
  SimOptions sopts;
  sopts.record_trace = !args.trace.empty();
  sopts.memory = sopts.record_trace;  // the trace's memory track; the peak is mem's either way
  SimResult sim;
  try {
    sim = simulate(g, *cost, sopts);
  } catch (const JfxError& e) {  // a node time that is not a finite number of seconds
    printError("analyze", args.input + ": " + e.what());
    return kInputError;
  }
  sim.peak_memory_bytes = mem.peak_bytes;
  report["simulation"] = simulationJson(sim, cost->hardware());
  text << simulationTable(sim, cost->hardware());
  simulated = sim;
  if (!args.trace.empty() && !writeReportFile(args.trace, chromeTrace(sim))) return kInputError;
  return kOk;
}

int runAnalyze(const AnalyzeArgs& args) {
  for (const std::string* out : {&args.memory_csv, &args.trace})
    if (!out->empty() && wouldOverwriteInput("analyze", {args.input, args.hardware}, *out))
      return kInputError;
  // The pipeline to compare is read (and its options checked) before the graph loads.
  std::vector<PipelineEntry> pipeline;
  if (!args.pipeline.empty()) {
    try {
      pipeline = resolvePipeline(args.pipeline);
      buildPipeline(pipeline);
    } catch (const JfxError& e) {
      printError("analyze", e.what());
      return kInputError;
    }
  }
  int rc = kOk;
  std::unique_ptr<Graph> g = loadVerified(args, rc);
  if (!g) return rc;
  PhaseInfo phases = computePhases(*g);
  FsdpAnalysis fsdp = analyzeFsdp(*g, phases);
  MemoryOptions mopts;
  mopts.top_k = args.top;
  const bool gloo = args.comm_backend == "gloo";
  mopts.backend = gloo ? CommBackend::Gloo : CommBackend::Nccl;
  MemoryProfile mem = analyzeMemory(*g, phases, mopts);

  nlohmann::json report = nlohmann::json::object();
  std::ostringstream text;
  graphSection(*g, report, text);
  phaseSection(*g, phases, report, text);
  fsdpSection(*g, phases, fsdp, report, text);
  blocksSection(analyzeBlocks(*g), report, text);
  memorySection(phases, mem, gloo, report, text);
  std::optional<CostModel> cost;
  std::optional<SimResult> simulated;
  if (!args.hardware.empty()) {
    rc = simulationSection(args, *g, mem, cost, simulated, report, text);
    if (rc != kOk) return rc;
  }
  if (!args.no_reference) {
    rc = referenceSection(*g, mem, mopts, cost ? &*cost : nullptr, simulated, args.pipeline,
                          pipeline, report, text);
    if (rc != kOk) return rc;
  }
  if (!args.memory_csv.empty() && !writeReportFile(args.memory_csv, memoryCsv(*g, phases, mem)))
    return kInputError;
  if (args.json)
    std::cout << report.dump(2) << "\n";
  else
    std::cout << text.str();
  return kOk;
}

}  // namespace

void addAnalyzeCommand(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<AnalyzeArgs>();
  CLI::App* cmd =
      app.add_subcommand("analyze", "Phases, FSDP chains and estimated peak memory of a graph");
  cmd->add_option("input", args->input, "Graph file (.json, .jfx, or - for stdin)")->required();
  cmd->add_flag("--json", args->json, "Print JSON for scripts");
  cmd->add_flag(
      "--no-verify", args->no_verify,
      "Analyze without verifying first (e.g. dead reads of a collective before its wait)");
  cmd->add_option("--memory-csv", args->memory_csv,
                  "Write the live-bytes curve (step,node,phase,live_bytes) to this CSV file")
      ->check(NonEmpty());
  cmd->add_option("--comm-backend", args->comm_backend,
                  "Whose communication buffers the memory estimate counts: nccl (none beyond the "
                  "collectives' tensors) or gloo (its staging copies, as `jointfx exec` on CPU "
                  "measures)")
      ->check(CLI::IsMember({"nccl", "gloo"}));
  cmd->add_option("--top", args->top, "Largest live tensors to list at the peak (default 10)")
      ->check(IntRange(0, 1000000000));
  cmd->add_option("--hardware", args->hardware,
                  "Simulate the step on this hardware profile (a shipped one by name, e.g. "
                  "h100, or a .json file): step time, compute, communication, exposed "
                  "communication")
      ->check(NonEmpty());
  cmd->add_option("--trace", args->trace,
                  "With --hardware: write a Chrome/Perfetto trace of the simulated step")
      ->check(NonEmpty())
      ->needs("--hardware");
  cmd->add_flag("--no-reference", args->no_reference,
                "Leave out the reference plan (FSDP2's plan for the graph, built on a copy by "
                "the passes of docs/passes.md 'Reference plan')");
  cmd->add_option("--pipeline", args->pipeline,
                  "Put this pipeline's plan of the graph (text or configs/pipelines/*.json, run "
                  "on a copy) beside the reference plan instead of the graph as given; JSON key "
                  "pipeline_plan")
      ->excludes("--no-reference");
  cmd->callback([args, &exit_code] { exit_code = runAnalyze(*args); });
}

}  // namespace jfx::cli
