#include "tools/jointfx/parity.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ir/error.h"
#include "ir/hash.h"
#include "ir/io.h"
#include "passes/pass_manager.h"
#include "runtime/grad_compare.h"
#include "tools/jointfx/cli_util.h"
#include "tools/jointfx/runtime_api.h"

namespace jfx::cli {

using rt::ExecOptions;
using rt::kExecInputError;
using rt::kExecMismatch;
using rt::kExecOk;

namespace {

// One run for parity: loss and gradients of every step into `dir`, nothing on stdout.
int runForParity(const ExecOptions& base, const std::string& graph, const std::string& dir) {
  ExecOptions e = base;
  e.graph = graph;
  e.save_grads = dir;
  e.log = dir + "/loss.rank{rank}.jsonl";
  e.save.clear();
  e.quiet = true;
  e.progress = "never";
  const RuntimeApi* rt = runtimeFor("parity");
  return rt ? rt->run_exec(e) : kExecInputError;
}

// Each rank's measured peak of live tensor bytes over the steps of a run (`peak_bytes` in its
// loss logs, Note [Measured memory] in runtime/memory_meter.h); -1 where a log has none.
std::vector<int64_t> peaksOf(const std::string& dir, int nproc) {
  std::vector<int64_t> peaks;
  for (int r = 0; r < nproc; ++r) {
    int64_t peak = -1;
    std::ifstream in(dir + "/loss.rank" + std::to_string(r) + ".jsonl");
    for (std::string line; std::getline(in, line);) {
      auto j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_object() && j.contains("peak_bytes") && j["peak_bytes"].is_number_integer())
        peak = std::max(peak, j["peak_bytes"].get<int64_t>());
    }
    peaks.push_back(peak);
  }
  return peaks;
}

std::string peaksText(const std::vector<int64_t>& peaks) {
  std::string s;
  for (int64_t p : peaks)
    s += (s.empty() ? "" : ", ") + (p < 0 ? std::string("n/a") : std::to_string(p) + " B");
  return s;
}

}  // namespace

namespace {

// One B: its name in the report, its graph file, its run directory, what its pipeline changed.
struct Candidate {
  std::string label, graph, dir, change;
};

// A after each pipeline ("" is the empty pipeline: A written back, a format round trip), with a
// line per pipeline in `changes`. Every pipeline is resolved before any runs, so a typo in the
// last one does not cost the runs of the others.
std::vector<std::unique_ptr<Graph>> runPipelines(const std::string& a,
                                                 const std::vector<std::string>& pipelines,
                                                 std::vector<std::string>& changes) {
  std::vector<std::vector<PipelineEntry>> resolved;
  for (const std::string& p : pipelines)
    resolved.push_back(p.empty() ? std::vector<PipelineEntry>{} : resolvePipeline(p));
  std::vector<std::unique_ptr<Graph>> graphs;
  for (const auto& p : resolved) {
    std::unique_ptr<Graph> g = loadGraph(a);
    uint64_t before = structuralHash(*g);
    size_t nodes_before = g->size();
    PassManagerOptions pm;
    if (!p.empty()) runPipeline(*g, p, pm);
    // Say whether the pipeline changed anything: identical results of an unchanged graph
    // prove nothing about the pipeline.
    changes.push_back(structuralHash(*g) == before ? std::string("graph unchanged")
                                                   : std::to_string(nodes_before) + " -> " +
                                                         std::to_string(g->size()) + " nodes");
    graphs.push_back(std::move(g));
  }
  return graphs;
}

// Where the runs go: --keep, else a fresh temporary directory (`remove` set: it goes at the end
// unless something differs). Empty after printing the error.
std::string makeWorkDir(const ParityOptions& o, bool& remove) {
  namespace fs = std::filesystem;
  if (!o.keep.empty()) {
    fs::create_directories(o.keep);
    return o.keep;
  }
  std::string tmpl = (fs::temp_directory_path() / "jointfx-parity-XXXXXX").string();
  if (!::mkdtemp(tmpl.data())) {
    printError("parity", "cannot create a temporary directory");
    return {};
  }
  remove = true;
  return tmpl;
}

// Compares B's run with A's and prints the line for B (and its differences); true when
// bitwise identical.
bool reportComparison(const ParityOptions& o, const std::string& work, const Candidate& c) {
  std::vector<std::string> report;
  bool buffers = false;
  rt::ParityUlp ulp;
  const RuntimeApi* rt = runtimeFor("parity");  // loaded by the runs before
  bool same = rt && rt->compare_grad_dirs(work + "/a", c.dir, o.exec.nproc, o.exec.steps, report,
                                          &ulp, &buffers);
  std::string label = o.a + " vs " + c.label;
  if (same) {
    std::printf("parity: %s: %s bitwise identical (%d rank%s, %d step%s%s)\n", label.c_str(),
                buffers ? "loss, gradients and updated buffers" : "loss and gradients",
                o.exec.nproc, o.exec.nproc == 1 ? "" : "s", o.exec.steps,
                o.exec.steps == 1 ? "" : "s", c.change.c_str());
    return true;
  }
  // How far apart, not only that: the largest ulp distance over all steps, and per step
  // (step 1 shows a pass's own effect; later steps add what the optimizer carried over).
  auto fmt = [](int64_t u) { return u < 0 ? std::string("n/a") : std::to_string(u); };
  auto overall = [](const std::vector<int64_t>& v) {
    int64_t m = 0;
    for (int64_t u : v)
      m = (u < 0 || m < 0) ? -1 : std::max(m, u);
    return m;
  };
  std::string per_step;
  for (size_t s = 0; s < ulp.loss.size(); ++s)
    per_step += (s ? "; " : "") + std::string("step ") + std::to_string(s + 1) + ": loss " +
                fmt(ulp.loss[s]) + ", gradients " + fmt(ulp.gradients[s]);
  std::printf(
      "parity: %s: DIFFERENT (%zu difference%s%s): max ulp distance: loss %s, gradients %s "
      "(%s)\n",
      label.c_str(), report.size(), report.size() == 1 ? "" : "s", c.change.c_str(),
      fmt(overall(ulp.loss)).c_str(), fmt(overall(ulp.gradients)).c_str(), per_step.c_str());
  for (size_t i = 0; i < report.size() && i < 50; ++i)
    std::printf("  %s\n", report[i].c_str());
  if (report.size() > 50) std::printf("  ... %zu more\n", report.size() - 50);
  std::printf("  run directories kept in %s\n", work.c_str());
  return false;
}

}  // namespace

int runParity(const ParityOptions& o) {
  try {
    if (o.a.empty()) {
      printError("parity", "no reference graph");
      return kExecInputError;
    }
    if (!o.b.empty() && !o.pipelines.empty()) {
      printError("parity", "give either a second graph or --pipeline, not both");
      return kExecInputError;
    }
    // Every B: the second graph, or A after each pipeline (none: the empty one).
    std::vector<std::string> pipelines = o.pipelines;
    if (pipelines.empty() && o.b.empty()) pipelines.push_back("");
    // "none" is A itself: the run-to-run baseline (a GPU's nondeterministic kernels show here).
    std::vector<std::string> texts = pipelines;
    for (std::string& p : texts)
      if (p == "none") p.clear();
    std::vector<std::string> changes;
    std::vector<std::unique_ptr<Graph>> graphs;
    if (o.b.empty()) graphs = runPipelines(o.a, texts, changes);

    bool remove_work = false;
    const std::string work = makeWorkDir(o, remove_work);
    if (work.empty()) return kExecInputError;
    std::vector<Candidate> bs;
    if (!o.b.empty()) {
      bs.push_back({o.b, o.b, work + "/b", ""});
    } else {
      for (size_t i = 0; i < graphs.size(); ++i) {
        std::string suffix = graphs.size() == 1 ? "" : std::to_string(i + 1);
        Candidate c{quoteForMessage(pipelines[i]), work + "/b" + suffix + ".json",
                    work + "/b" + suffix, "; " + changes[i]};
        // --keep may name a directory that holds an input.
        if (auto in = sameFileAs(c.graph, {o.a, o.exec.params, o.exec.batch})) {
          printError("parity", "--keep " + quoteForMessage(work, kPathQuoteLimit) + ": " +
                                   quoteForMessage(c.graph, kPathQuoteLimit) + " is the input " +
                                   quoteForMessage(*in, kPathQuoteLimit) +
                                   "; refusing to overwrite an input");
          return kExecInputError;
        }
        saveGraph(*graphs[i], c.graph, GraphFormat::Json);
        bs.push_back(std::move(c));
      }
      graphs.clear();
    }

    auto failed = [&](const std::string& which, const std::string& graph, int code) {
      printError("parity", "running " + which + " (" + graph + ") failed");
      // A run refused before it started (its error said why) left nothing worth keeping; one
      // that failed while running left its logs.
      if (code == kExecInputError && remove_work) {
        std::error_code ec;
        std::filesystem::remove_all(work, ec);
      } else {
        std::fprintf(stderr, "jointfx parity: run directories kept in %s\n", work.c_str());
      }
      return code;
    };
    if (int code = runForParity(o.exec, o.a, work + "/a"); code != kExecOk)
      return failed("A", o.a, code);
    bool all_same = true;
    for (const Candidate& c : bs) {
      if (int code = runForParity(o.exec, c.graph, c.dir); code != kExecOk)
        return failed("B " + c.label, c.graph, code);
      if (!reportComparison(o, work, c)) all_same = remove_work = false;
      // What each rank held at most, A beside B: what the pipeline did to memory, measured.
      std::printf("parity: peak tensor memory per rank (measured, largest step): A %s; B %s\n",
                  peaksText(peaksOf(work + "/a", o.exec.nproc)).c_str(),
                  peaksText(peaksOf(c.dir, o.exec.nproc)).c_str());
      std::fflush(stdout);
    }
    if (remove_work) std::filesystem::remove_all(work);
    return all_same ? kExecOk : kExecMismatch;
  } catch (const JfxError& e) {
    printError("parity", e.what());
  } catch (const std::exception& e) {
    printError("parity", humanLibraryMessage(e.what()));
  }
  return kExecInputError;
}

}  // namespace jfx::cli
