// Times each analysis the passes share (phases, FSDP, blocks, memory) and the verifier:
// thread CPU seconds per call, the median of --repeat calls on the same graph.
//
//   bench_analyses [--repeat R] [GRAPH...]
//
// Without graph files it builds the synthetic Llama graphs of bench_core (tools/synth: about
// 10^4, 10^5 and 10^6 nodes, bf16). The verifier runs as `jointfx opt` runs it (the IR
// invariants, names and use lists, are its expensive checks).
//
// The graph stays loaded between calls, so what is timed is the analysis alone: its walks of
// the node list, its side tables and its page faults (each call allocates its tables afresh, as
// the analysis manager does after a pass changed the graph).
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "ir/io.h"
#include "ir/verifier.h"
#include "passes/analysis/blocks.h"
#include "passes/analysis/fsdp.h"
#include "passes/analysis/memory.h"
#include "passes/analysis/phase.h"
#include "tools/synth/synth.h"

namespace {

double threadCpu() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

double medianOf(int repeat, const std::function<void()>& f) {
  std::vector<double> t;
  for (int i = 0; i < repeat; ++i) {
    const double t0 = threadCpu();
    f();
    t.push_back(threadCpu() - t0);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int repeat = 5;
  std::vector<std::string> files;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--repeat") == 0 && i + 1 < argc)
      repeat = std::max(1, std::atoi(argv[++i]));
    else if (argv[i][0] == '-') {
      std::fprintf(stderr, "usage: bench_analyses [--repeat R] GRAPH...\n");
      return 2;
    } else {
      files.emplace_back(argv[i]);
    }
  }
  std::vector<std::string> names = files;
  if (files.empty())
    for (const char* n : {"synth 10^4", "synth 10^5", "synth 10^6"})
      names.emplace_back(n);
  std::printf("| graph | nodes | phases | fsdp | blocks | memory | verify |\n");
  std::printf("|---|---:|---:|---:|---:|---:|---:|\n");
  int64_t target = 10'000;
  for (const std::string& name : names) {
    std::unique_ptr<jfx::Graph> g;
    if (files.empty()) {
      jfx::SynthConfig cfg;  // as bench_core: the tiny model's shapes, bf16
      cfg.param_dtype = jfx::ScalarType::BFloat16;
      cfg.layers = jfx::synthLayersForNodes(cfg, target);
      g = jfx::synthLlamaJoint(cfg);
      target *= 10;
    } else {
      g = jfx::loadGraph(name);
    }
    const jfx::PhaseInfo phases = jfx::computePhases(*g);
    // Each result is kept until the next call so that freeing it is not timed.
    size_t sink = 0;
    const double t_phases = medianOf(repeat, [&] { sink += jfx::computePhases(*g).byId().size(); });
    const double t_fsdp =
        medianOf(repeat, [&] { sink += jfx::analyzeFsdp(*g, phases).unshard.size(); });
    const double t_blocks =
        medianOf(repeat, [&] { sink += jfx::analyzeBlocks(*g, phases).blocks.size(); });
    const double t_memory = medianOf(repeat, [&] {
      jfx::MemoryOptions mo;
      mo.lifetimes = true;
      sink += jfx::analyzeMemory(*g, phases, mo).curve.size();
    });
    jfx::VerifyOptions
        vo;  // as `jointfx opt` verifies (the IR invariants are its expensive checks)
    vo.ir_invariants = false;
    const double t_verify = medianOf(repeat, [&] { sink += jfx::verifyGraph(*g, vo).size(); });
    std::printf("| %s | %zu | %.4f | %.4f | %.4f | %.4f | %.4f |\n", name.c_str(), g->size(),
                t_phases, t_fsdp, t_blocks, t_memory, t_verify);
    if (sink == 0) std::printf("(no results)\n");
  }
  return 0;
}
