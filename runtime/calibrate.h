// `jointfx calibrate`: measures the machine it runs on and writes a hardware profile
// (configs/hardware/*.json format, loadable by `jointfx analyze --hardware`). Torch-free header:
// the CLI includes it whether or not the runtime is built.
//
// Everything is measured the way `jointfx exec` pays it: per-node costs by running small graphs
// through the Executor (a chain of tiny adds: kernel_overhead_us; a chain of views:
// host_overhead_us), collectives as all_gather_into_tensor / reduce_scatter_tensor + wait_tensor
// nodes on a process group of `world` ranks started by the exec launcher (gloo on CPU, NCCL on
// CUDA), matmul rates with at::mm per dtype, memory bandwidth with a large out-of-place add.
// Every rank measures at once (the ranks share the host as exec's ranks do); the launcher
// combines the ranks' figures (the mean) and writes the profile with a `sources` entry per
// figure saying how and where it was measured.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "ir/graph.h"

namespace jfx::rt {

inline constexpr const char* kNoWorkload = "none";

struct CalibrateOptions {
  int world = 1;                  // ranks (one process each) for the collectives and for compute
  std::string output = "-";       // profile path ("-": stdout); written atomically
  std::string base;               // optional profile whose unmeasured fields are kept
  std::string device = "cpu";     // cpu (gloo) or cuda (NCCL)
  std::string name;               // profile name; default "calibrated-<host>"
  bool quick = false;             // smaller sizes and fewer repetitions (seconds, for tests)
  int threads = 0;                // intra-op threads per rank; 0: cores / world, as exec
  int gloo_threads = 1;           // as exec --gloo-threads
  bool gloo_share_groups = true;  // as exec (!--gloo-separate-groups)
  int timeout_s = 120;            // rendezvous and collective timeout
  bool verbose = false;           // each measurement on stderr as it is taken
  // A graph (.json or .jfx) whose compute, run on every rank with its collectives made local,
  // scales kernel_overhead_us and host_overhead_us to what a node costs in a real graph. Empty:
  // CalibrateModel::default_workload; kNoWorkload: none (the chains' figures as measured).
  std::string workload;
  std::string workload_label;  // how the profile's sources name it (set by the launcher)
  // Set by the launcher for its ranks: where each rank writes its figures (JSON).
  std::string rank_dir;
};

// What calibrate needs from the cost model (passes/analysis/cost_model.h), handed in by the CLI:
// the runtime depends on ir/ only, and these three are the whole of its use of the model.
struct CalibrateModel {
  // Seconds the cost model's roofline charges for the work of `g`'s nodes, summed, on a machine
  // of `peak_flops` (FLOP/s, every dtype) and `memory_bandwidth` (bytes/s), kernel overhead 0.
  std::function<double(const Graph& g, double peak_flops, double memory_bandwidth)> work_seconds;
  // How many of `g`'s nodes the model charges kernel_overhead (nodes that launch a kernel) and
  // host_overhead (call_function nodes that launch none).
  std::function<std::pair<int64_t, int64_t>(const Graph& g)> overhead_nodes;
  // The workload when CalibrateOptions::workload is empty (may be unset: none), and its name.
  std::function<std::unique_ptr<Graph>()> default_workload;
  std::string default_workload_label;
  // Throws JfxError naming `filename` unless `json_text` is a hardware profile the cost model
  // loads.
  std::function<void(std::string_view json_text, const std::string& filename)> check_profile;
};

// Runs the measurement (launching `world` ranks of this executable when world > 1) and writes
// the profile. Prints errors as "jointfx calibrate: ..." and returns 0, 2 (bad options, no CUDA)
// or 3 (a rank failed). Never throws.
int runCalibrate(const CalibrateOptions& o, const CalibrateModel& model);

}  // namespace jfx::rt
