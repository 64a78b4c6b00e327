// bench_core: single-threaded throughput of the core on synthetic Llama joint graphs of ~10^4,
// 10^5 and 10^6 nodes (tools/synth). Each step runs --repeat times; the median is reported, as
// seconds and nodes/second. Not a test: it never fails on time (bench/README.md has the figures).
//
//   bench_core [--sizes 10000,100000,1000000] [--repeat 5] [--json OUT] [--tmp DIR]
//
// Times are thread CPU seconds (the machine may be shared; wall time is reported beside them).
// Steps: synth (build the graph), save/load JSON and text (files in --tmp, through ir/io.h, so
// the atomic write and the read are included), print (text IR to a string), verify, dce (the
// pass run directly; the graph has no dead code, so this is the cost of the scan), hub_edits (a
// node with as many users as the graph has nodes: rewire each user, then erase it). The project
// target is a figure, not a gate: 1M nodes load + verify + save <= 2 s on one core.
#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "ir/clone.h"
#include "ir/io.h"
#include "ir/text_format.h"
#include "ir/verifier.h"
#include "passes/pass.h"
#include "passes/transforms/dce.h"
#include "tools/synth/synth.h"

namespace {

using Clock = std::chrono::steady_clock;

double seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// CPU time of this thread: what one core spent, whatever else the machine is running.
double threadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Peak resident set size of the process so far, in bytes.
int64_t peakRssBytes() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<int64_t>(ru.ru_maxrss) * 1024;
}

struct Step {
  std::string name;
  double median_s = 0;  // thread CPU seconds (the figure reported)
  double min_s = 0;
  double wall_median_s = 0;
  int64_t nodes = 0;
};

struct Options {
  std::vector<int64_t> sizes{10'000, 100'000, 1'000'000};
  int repeat = 5;
  std::string json_out;
  std::string tmp;
};

std::vector<int64_t> parseSizes(const std::string& s) {
  std::vector<int64_t> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    out.push_back(std::stoll(item));
  return out;
}

Options parseArgs(int argc, char** argv) {
  Options o;
  for (int k = 1; k < argc; ++k) {
    std::string a = argv[k];
    auto value = [&]() -> std::string {
      if (k + 1 >= argc) {
        std::cerr << "bench_core: " << a << " needs a value\n";
        std::exit(2);
      }
      return argv[++k];
    };
    if (a == "--sizes")
      o.sizes = parseSizes(value());
    else if (a == "--repeat")
      o.repeat = std::max(1, std::stoi(value()));
    else if (a == "--json")
      o.json_out = value();
    else if (a == "--tmp")
      o.tmp = value();
    else {
      std::cerr << "usage: bench_core [--sizes N,N,...] [--repeat R] [--json OUT] [--tmp DIR]\n";
      std::exit(2);
    }
  }
  if (o.tmp.empty()) o.tmp = std::filesystem::temp_directory_path().string();
  return o;
}

// Runs `body` `repeat` times; `setup` (untimed) runs before each.
Step measure(const std::string& name, int64_t nodes, int repeat, const std::function<void()>& setup,
             const std::function<void()>& body) {
  std::vector<double> cpu, wall;
  for (int r = 0; r < repeat; ++r) {
    if (setup) setup();
    auto t0 = Clock::now();
    double c0 = threadCpuSeconds();
    body();
    cpu.push_back(threadCpuSeconds() - c0);
    wall.push_back(seconds(t0, Clock::now()));
  }
  Step s;
  s.name = name;
  s.median_s = median(cpu);
  s.min_s = *std::min_element(cpu.begin(), cpu.end());
  s.wall_median_s = median(wall);
  s.nodes = nodes;
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace jfx;
  Options opt = parseArgs(argc, argv);
  nlohmann::json report = nlohmann::json::array();

  for (int64_t target : opt.sizes) {
    SynthConfig cfg;  // the tiny model's shapes; node count grows with the layer count
    cfg.param_dtype = ScalarType::BFloat16;
    cfg.layers = synthLayersForNodes(cfg, target);
    std::unique_ptr<Graph> g;
    // Fewer repeats for the largest graphs keeps a full run to a few minutes on one core.
    int repeat = target >= 1'000'000 ? std::min(opt.repeat, 3) : opt.repeat;
    std::printf("target %lld nodes: %lld layers, repeat %d\n", static_cast<long long>(target),
                static_cast<long long>(cfg.layers), repeat);
    std::fflush(stdout);

    std::vector<Step> steps;
    steps.push_back(measure(
        "synth", 0, repeat, [&] { g.reset(); }, [&] { g = synthLlamaJoint(cfg); }));
    const auto n = static_cast<int64_t>(g->size());
    steps.back().nodes = n;

    std::string base =
        (std::filesystem::path(opt.tmp) / ("jfx_bench_" + std::to_string(target))).string();
    std::string json_path = base + ".json", text_path = base + ".jfx";
    steps.push_back(measure("save_json", n, repeat, nullptr,
                            [&] { saveGraph(*g, json_path, GraphFormat::Json); }));
    steps.push_back(measure("save_text", n, repeat, nullptr,
                            [&] { saveGraph(*g, text_path, GraphFormat::Text); }));
    size_t printed = 0;
    steps.push_back(
        measure("print", n, repeat, nullptr, [&] { printed = printTextGraph(*g).size(); }));
    size_t issues = 0;
    steps.push_back(
        measure("verify", n, repeat, nullptr, [&] { issues = verifyGraph(*g).size(); }));
    bool changed = false;
    steps.push_back(measure("dce", n, repeat, nullptr, [&] {
      Dce dce;
      PassContext ctx;
      changed = dce.run(*g, ctx);
    }));
    // Whole-graph copies, as the planner and the memory-bound bucket make them: cloneGraph
    // (compacted, fresh ids) and Graph::copy (exact); and freeing one, which costs about as much.
    std::unique_ptr<Graph> other;
    steps.push_back(measure(
        "clone", n, repeat, [&] { other.reset(); }, [&] { other = cloneGraph(*g); }));
    steps.push_back(measure(
        "copy", n, repeat, [&] { other.reset(); }, [&] { other = g->copy(); }));
    steps.push_back(measure(
        "free", n, repeat, [&] { other = g->copy(); }, [&] { other.reset(); }));
    g.reset();
    // One node with n users, each rewired to another node and then erased, oldest first: the
    // edits passes make around a mesh placeholder or a big activation (Note [Use lists]).
    std::unique_ptr<Graph> hub_graph;
    std::vector<Node*> hub_users;
    Node* hub_to = nullptr;
    steps.push_back(measure(
        "hub_edits", n, repeat,
        [&] {
          hub_graph = std::make_unique<Graph>();
          hub_users.clear();
          Node* hub = hub_graph->create(OpKind::Placeholder, Symbol::intern("hub"), {}, {}, "hub");
          hub_to = hub_graph->create(OpKind::Placeholder, Symbol::intern("to"), {}, {}, "to");
          for (int64_t i = 0; i < n; ++i)
            hub_users.push_back(hub_graph->createCall("aten.neg.default", {Arg::ofNode(hub)}));
        },
        [&] {
          for (Node* u : hub_users)
            hub_graph->replaceInput(u, 0, hub_to);
          for (Node* u : hub_users)
            hub_graph->erase(u);
        }));
    hub_graph.reset();
    steps.push_back(measure(
        "load_json", n, repeat, [&] { g.reset(); }, [&] { g = loadGraph(json_path); }));
    steps.push_back(measure(
        "load_text", n, repeat, [&] { g.reset(); }, [&] { g = loadGraph(text_path); }));
    g.reset();

    auto json_bytes = static_cast<int64_t>(std::filesystem::file_size(json_path));
    auto text_bytes = static_cast<int64_t>(std::filesystem::file_size(text_path));
    std::filesystem::remove(json_path);
    std::filesystem::remove(text_path);

    auto med = [&](const std::string& name) {
      for (const Step& s : steps)
        if (s.name == name) return s.median_s;
      return 0.0;
    };
    double lvs_json = med("load_json") + med("verify") + med("save_json");
    double lvs_text = med("load_text") + med("verify") + med("save_text");
    for (const Step& s : steps)
      std::printf("  %-10s cpu %9.4f s (min %.4f)  wall %9.4f s  %11.0f nodes/s\n", s.name.c_str(),
                  s.median_s, s.min_s, s.wall_median_s, static_cast<double>(s.nodes) / s.median_s);
    std::printf(
        "  nodes %lld, JSON %lld B, text %lld B, verify issues %zu, dce changed %d, printed %zu B, "
        "peak RSS %lld MB\n  load+verify+save: JSON %.3f s, text %.3f s\n",
        static_cast<long long>(n), static_cast<long long>(json_bytes),
        static_cast<long long>(text_bytes), issues, changed ? 1 : 0, printed,
        static_cast<long long>(peakRssBytes() >> 20), lvs_json, lvs_text);
    std::fflush(stdout);

    nlohmann::json row = {{"target_nodes", target},
                          {"nodes", n},
                          {"layers", cfg.layers},
                          {"repeat", repeat},
                          {"json_bytes", json_bytes},
                          {"text_bytes", text_bytes},
                          {"verify_issues", issues},
                          {"load_verify_save_json_s", lvs_json},
                          {"load_verify_save_text_s", lvs_text},
                          {"peak_rss_bytes", peakRssBytes()}};
    for (const Step& s : steps)
      row["steps"][s.name] = {{"cpu_median_s", s.median_s},
                              {"cpu_min_s", s.min_s},
                              {"wall_median_s", s.wall_median_s},
                              {"nodes_per_cpu_s", static_cast<double>(s.nodes) / s.median_s}};
    report.push_back(row);
  }

  // Medians, one column per graph size.
  std::printf("\nmedian thread-CPU seconds\n%-10s", "step");
  for (const auto& row : report)
    std::printf(" %14s", (std::to_string(row["nodes"].get<int64_t>()) + " nodes").c_str());
  std::printf("\n");
  for (const char* step : {"synth", "save_json", "load_json", "save_text", "load_text", "print",
                           "verify", "dce", "hub_edits", "clone", "copy", "free"}) {
    std::printf("%-10s", step);
    for (const auto& row : report)
      std::printf(" %14.4f", row["steps"][step]["cpu_median_s"].get<double>());
    std::printf("\n");
  }
  if (!opt.json_out.empty()) {
    std::ofstream out(opt.json_out);
    out << report.dump(2) << "\n";
    if (!out) {
      std::cerr << "bench_core: cannot write " << opt.json_out << "\n";
      return 2;
    }
  }
  return 0;
}
