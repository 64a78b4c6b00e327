// bench_passes: the figures of docs/passes.md "Bucketing and scheduling".
//
//   bench_passes figures [--hardware FILE] [--preset NAME] [--device cuda|cpu] [--traced FILE]...
//     Simulated step, exposed communication and collective counts for no passes / bucket /
//     bucket + schedule, with reshard-after-forward always, never and default, on a synthetic Llama
//     (default llama3-8b on configs/hardware/h100.json) and on traced fixtures.
//   bench_passes timing [--preset NAME] [--nodes N] [--repeat R]
//     Wall time of each pass of the default pipeline on a synthetic graph (llama3-70b, or the
//     preset's layer count scaled to about N nodes).
// Benchmarks are not tests: nothing here gates on time.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ir/io.h"
#include "ir/verifier.h"
#include "passes/analysis/simulator.h"
#include "passes/registry.h"
#include "tools/synth/synth.h"

using namespace jfx;

namespace {

using Clock = std::chrono::steady_clock;

double cpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// The default pipeline (configs/pipelines/default.json) cut at `level`: 0 = the FSDP passes
// only (dce, tag-fsdp{reshard}, remat, dedup), 1 = + bucket, 2 = + split-comm-groups + schedule;
// reshard=default at level 2 is configs/pipelines/default.json.
std::vector<std::unique_ptr<Pass>> pipeline(const std::string& reshard, int level,
                                            int64_t prefetch = 1) {
  std::vector<std::unique_ptr<Pass>> out;
  auto add = [&](std::string_view name, std::map<std::string, std::string> opts = {}) {
    std::unique_ptr<Pass> p = createPass(name);
    p->configure(PassOptions(std::string(name), std::move(opts)));
    out.push_back(std::move(p));
  };
  add("dce");
  add("tag-fsdp", {{"reshard", reshard}});
  add("remat");
  add("dedup-fsdp-unshard");
  if (level >= 1) add("bucket", {{"plan", "blocks"}});
  if (level >= 2) {
    add("split-comm-groups");
    add("schedule", {{"prefetch", std::to_string(prefetch)}});
  }
  return out;
}

std::string humanBytes(int64_t b) {
  char buf[64];
  double v = static_cast<double>(b);
  if (b >= (int64_t{1} << 30))
    std::snprintf(buf, sizeof buf, "%.2f GiB", v / (1 << 30));
  else if (b >= (int64_t{1} << 20))
    std::snprintf(buf, sizeof buf, "%.2f MiB", v / (1 << 20));
  else
    std::snprintf(buf, sizeof buf, "%.2f KiB", v / 1024);
  return buf;
}

struct Row {
  std::string graph, variant;
  size_t nodes = 0;
  SimResult sim;
  double pass_seconds = 0;
};

Row measure(const std::string& graph, const std::string& variant, Graph& g,
            std::vector<std::unique_ptr<Pass>> passes, const CostModel& cm) {
  Row r;
  r.graph = graph;
  r.variant = variant;
  auto t0 = Clock::now();
  for (auto& p : passes) {
    PassContext ctx;
    p->run(g, ctx);
  }
  r.pass_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  // Report, do not stop: a figure is still worth having while another rule is being fixed.
  for (const VerifyIssue& issue : verifyGraph(g))
    if (issue.rule != "arity") {
      std::cerr << graph << " / " << variant << ": verifier: " << issue.str() << "\n";
      break;
    }
  r.nodes = g.size();
  r.sim = simulate(g, cm);
  return r;
}

void printRows(const std::vector<Row>& rows) {
  std::printf(
      "| graph | reshard | passes | nodes | collectives | step (ms) | exposed comm (ms) | exposed "
      "share | peak mem |\n");
  std::printf("|---|---|---|---:|---:|---:|---:|---:|---:|\n");
  for (const Row& r : rows) {
    size_t slash = r.variant.find('/');
    std::printf("| %s | %s | %s | %zu | %lld | %.2f | %.2f | %.1f%% | %s |\n", r.graph.c_str(),
                r.variant.substr(0, slash).c_str(), r.variant.substr(slash + 1).c_str(), r.nodes,
                static_cast<long long>(r.sim.num_collectives), r.sim.step * 1e3,
                r.sim.exposed_comm * 1e3, 100 * r.sim.exposedShare(),
                humanBytes(r.sim.peak_memory_bytes).c_str());
  }
}

const char* kLevels[] = {"none", "bucket", "bucket+schedule"};

int figures(int argc, char** argv) {
  std::string hardware = "configs/hardware/h100.json";  // run from the repository root
  std::string preset = "llama3-8b", device = "cuda";
  std::vector<std::string> traced;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--hardware")
      hardware = next();
    else if (a == "--preset")
      preset = next();
    else if (a == "--device")
      device = next();
    else if (a == "--traced")
      traced.push_back(next());
  }
  CostModel cm(loadHardwareProfile(hardware));
  std::vector<Row> rows;
  auto cfg = synthPreset(preset);
  if (!cfg) {
    std::cerr << "unknown preset " << preset << "\n";
    return 2;
  }
  cfg->device = device;
  for (const char* reshard : {"always", "never", "default"})
    for (int level = 0; level < 3; ++level) {
      auto g = synthLlamaJoint(*cfg);
      rows.push_back(measure("synth " + preset, std::string(reshard) + "/" + kLevels[level], *g,
                             pipeline(reshard, level), cm));
    }
  for (const std::string& path : traced) {
    std::string name = path.substr(path.find_last_of('/') + 1);
    for (const char* reshard : {"always", "never", "default"})
      for (int level = 0; level < 3; ++level) {
        auto g = loadGraph(path);
        rows.push_back(measure(name, std::string(reshard) + "/" + kLevels[level], *g,
                               pipeline(reshard, level), cm));
      }
  }
  std::printf("hardware: %s\n\n", cm.hardware().name.c_str());
  printRows(rows);
  return 0;
}

int timing(int argc, char** argv) {
  std::string preset = "llama3-70b";
  int64_t nodes = 0;
  int repeat = 3;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : "0"; };
    if (a == "--preset")
      preset = next();
    else if (a == "--nodes")
      nodes = std::stoll(next());
    else if (a == "--repeat")
      repeat = std::stoi(next());
  }
  auto cfg = synthPreset(preset);
  if (!cfg) return 2;
  if (nodes > 0) cfg->layers = synthLayersForNodes(*cfg, nodes);
  std::printf("graph: synth %s, %lld layers\n", preset.c_str(),
              static_cast<long long>(cfg->layers));
  std::vector<std::string> names;
  std::vector<std::vector<double>> secs;
  size_t size_in = 0, size_out = 0;
  for (int rep = 0; rep < repeat; ++rep) {
    auto g = synthLlamaJoint(*cfg);
    size_in = g->size();
    auto passes = pipeline("default", 2);
    if (secs.empty()) secs.resize(passes.size());
    for (size_t k = 0; k < passes.size(); ++k) {
      if (rep == 0) names.emplace_back(passes[k]->name());
      PassContext ctx;
      // Thread CPU time: the benchmark machine is shared, and wall time would count the others.
      double t0 = cpuSeconds();
      passes[k]->run(*g, ctx);
      secs[k].push_back(cpuSeconds() - t0);
    }
    size_out = g->size();
  }
  std::printf("nodes: %zu in, %zu out; median of %d runs\n\n| pass | CPU seconds |\n|---|---:|\n",
              size_in, size_out, repeat);
  double total = 0;
  for (size_t k = 0; k < names.size(); ++k) {
    std::sort(secs[k].begin(), secs[k].end());
    double med = secs[k][secs[k].size() / 2];
    total += med;
    std::printf("| %s | %.3f |\n", names[k].c_str(), med);
  }
  std::printf("| total | %.3f |\n", total);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "figures") == 0) return figures(argc - 2, argv + 2);
  if (argc >= 2 && std::strcmp(argv[1], "timing") == 0) return timing(argc - 2, argv + 2);
  std::cerr << "usage: bench_passes figures [--hardware FILE] [--preset NAME] [--device cuda|cpu] "
               "[--traced FILE]...\n       bench_passes timing [--preset NAME] [--nodes N] "
               "[--repeat R]\n";
  return 2;
}
