// Timeline simulator: plays a graph's program order on one compute stream plus one stream per
// process group, with node times from the cost model, and reports the step time, how much of the
// communication the compute stream had to wait for (exposed), and the peak memory.
//
// Rules (the executor's behaviour, docs/passes.md "Bucketing and scheduling"):
//  - The host issues nodes in program order. A compute node runs on the compute stream after the
//    previous compute node and after its operands are ready.
//  - A collective is issued when the compute stream reaches it (its operands are then ready) and
//    starts when its group's stream is free: collectives of one group run one at a time, in
//    issue order (one NCCL communicator = one stream). Groups run concurrently, except that a
//    profile with "collective_streams": "per_rank_set" gives groups over the same ranks one
//    stream (jointfx exec's gloo backend runs them on one worker thread).
//  - A wait blocks the compute stream until its collective ends; that stall is exposed
//    communication. Collectives still running when compute finishes are exposed too (the tail).
//  - Peak memory is the memory analysis (passes/analysis/memory.h) of the same order.
//  - The lower bound is the largest of the streams' busy times and the critical path.
// O(N + E) time, O(N) memory; the trace, when asked for, holds one event per timed node.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "ir/graph.h"
#include "passes/analysis/cost_model.h"

namespace jfx {

class PhaseInfo;

struct SimOptions {
  bool record_trace = false;  // keep per-node events for chromeTrace()
  bool memory = true;         // run the memory analysis for peak_memory_bytes
  // The graph's phase analysis for the memory analysis, when the caller has it: phases do not
  // depend on the program order, so a planner that only reorders a graph computes them once.
  const PhaseInfo* phases = nullptr;
};

struct SimStream {
  std::string name;  // "compute" or the process group name
  double busy = 0;   // seconds with a kernel running
  int64_t ops = 0;
};

struct SimEvent {
  const Node* node;
  uint32_t stream;  // index into SimResult::streams
  double start;
  double duration;
  bool stall;  // a wait (or an early read) blocking the compute stream
};

struct SimResult {
  double step = 0;          // seconds until every stream is idle
  double compute = 0;       // sum of compute-stream kernel times
  double comm = 0;          // sum of collective times over all groups
  double exposed_comm = 0;  // compute stream idle, waiting for communication
  int64_t num_collectives = 0;
  int64_t collective_bytes = 0;    // sum of nccl-tests sizes
  int64_t peak_memory_bytes = -1;  // -1 when not computed
  // A lower bound on any schedule of this graph on this machine: no order can beat the busiest
  // stream (compute, or one process group's collectives, which run one at a time) nor the
  // longest dependency chain (node times summed along data edges, streams ignored).
  double critical_path = 0;
  double lower_bound = 0;          // max(compute, each group's busy time, critical_path)
  std::vector<SimStream> streams;  // compute first, then groups in order of first use
  std::vector<SimEvent> events;    // record_trace only; in issue order
  // record_trace with memory: (time, live bytes) when the live bytes change.
  std::vector<std::pair<double, int64_t>> memory_track;

  double exposedShare() const { return step > 0 ? exposed_comm / step : 0; }
  // step / lower_bound: 1.0 means no schedule can be faster under this cost model.
  double boundRatio() const { return lower_bound > 0 ? step / lower_bound : 1; }
};

SimResult simulate(const Graph& g, const CostModel& cost, const SimOptions& opts = {});

// `seconds` as "123.4 us" (in powers of ten from 10^15 us, so a huge but finite figure stays
// short): how the planners' remarks print a simulated step.
std::string formatMicros(double seconds);
// `seconds` as a whole number of microseconds (the planners' `simulated-step-us` statistic);
// a JfxError naming `what` when it does not fit an int64_t (no undefined conversion).
int64_t microsecondsStat(double seconds, const std::string& what);

// Human-readable table of the result (what `jointfx analyze --hardware` prints).
std::string simulationTable(const SimResult& r, const HardwareProfile& hw);
// The same as a JSON object (`jointfx analyze --hardware --json`).
nlohmann::json simulationJson(const SimResult& r, const HardwareProfile& hw);
// Chrome / Perfetto trace-event JSON (open in ui.perfetto.dev or chrome://tracing): one track per
// stream, one slice per timed node (name = node name, args = target), a memory counter track when
// the curve was recorded. Needs a result made with record_trace.
std::string chromeTrace(const SimResult& r);

}  // namespace jfx
