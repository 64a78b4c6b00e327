// The graph executor, modelled on torch/nativert: plan a Graph once against the c10 dispatcher,
// then run it any number of times with callBoxed.
//
// Planning resolves every call_function target to a c10::OperatorHandle ("aten.mm.default" ->
// aten::mm overload ""), converts each node's args and kwargs to IValues by the op's schema
// (positional, then kwargs by name, then schema defaults), prefills every constant, and computes
// which values die after each node. Anything it cannot do fails at plan time with a JfxError that
// names the node and its target, so a bad graph never gets as far as a collective.
//
// Note [Lifetimes]
// A value is dropped right after its last reader runs, so peak memory follows the graph's own
// order (that is what the scheduling passes optimize). A functional collective's input and output
// stay alive until its wait_tensor has run: the collective may still be reading the input and
// writing the output on the backend's thread until then. Graph outputs live until the end.
//
// Note [Measured memory] (runtime/memory_meter.h): every run measures its peak of live tensor
// bytes (ExecutorStats::peak_bytes), defined as `jointfx analyze` estimates it. The run's inputs
// are held until it returns, as a training loop holds its batch and parameters: the estimate
// counts them live the whole step.
//
// Note [Devices]
// Device arguments (factory ops' device=) are rewritten to the executor's device, so a graph
// traced on "cpu" or on fake "cuda:0" runs wherever the executor runs.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/ivalue.h>
#include <c10/core/Device.h>

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace jfx::rt {

struct ExecutorOptions {
  c10::Device device = c10::Device(c10::kCPU);
  // After every op, compare the output's dtype and shape with the node's val meta; a mismatch is
  // an error naming the node. Cheap next to the op itself, and it catches mistranslated args.
  bool check_meta = true;
  // Check at plan time that every constant group_name of a collective is registered with c10d.
  bool check_groups = true;
  // Time every node of every run (two clock reads per node) for profile().
  bool profile = false;
  // Measure each run's peak of live tensor bytes (Note [Measured memory]).
  bool measure_memory = true;
  // Also the high-water mark of every node (ExecutorStats::memory_curve): a few more atomic
  // operations per node on CPU, two allocator-statistics calls per node on CUDA.
  bool memory_curve = false;
};

// Time spent in one op target over all profiled runs.
struct OpProfile {
  std::string target;
  size_t calls = 0;
  double seconds = 0;
};

// A placeholder as the executor sees it: its position among the graph inputs, name, kind, FQN
// and expected tensor meta (dtype Undefined when the graph has none).
struct GraphInput {
  std::string name;
  InputKind kind = InputKind::None;
  std::string fqn;
  ValueMeta meta;
};

struct ExecutorStats {
  size_t steps = 0;            // call_function and getitem nodes executed per run
  size_t max_live_values = 0;  // most values held at once in the last run (for lifetime tests)
  // The last run's measured memory (Note [Measured memory]): the storages of its inputs, and the
  // peak of live tensor bytes, inputs included. -1 when not measured (measure_memory off, or
  // memory_unmeasured says why).
  int64_t input_bytes = -1;
  int64_t peak_bytes = -1;
  std::string memory_unmeasured;
  // With ExecutorOptions::memory_curve: the live tensor bytes at their highest while each step
  // ran, inputs included, one per step (stepName(k)); the peak is their maximum.
  std::vector<int64_t> memory_curve;
};

class Executor {
 public:
  // Plans `g`. The Executor keeps no reference to `g`. Throws JfxError.
  explicit Executor(const Graph& g, ExecutorOptions opts = {});
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  const std::vector<GraphInput>& inputs() const { return inputs_; }
  size_t numOutputs() const { return num_outputs_; }

  // Runs the graph on one value per placeholder (in placeholder order) and returns the output
  // node's list. A failing op throws JfxError naming the node, its target and LibTorch's message.
  std::vector<c10::IValue> run(std::vector<c10::IValue> inputs);

  const ExecutorStats& stats() const { return stats_; }
  // The node of step k (call_function and getitem nodes in program order).
  const std::string& stepName(size_t k) const;

  // With ExecutorOptions::profile: seconds per target summed over every run so far, largest
  // first (ties by target name). Empty without it.
  std::vector<OpProfile> profile() const;

  // Where run() is, for a watchdog on another thread: nodes finished over all runs, and the
  // node running now as "'name' (target)" ("" outside run()).
  uint64_t nodesFinished() const { return nodes_finished_.load(std::memory_order_relaxed); }
  std::string runningNode() const;

 private:
  struct Step;     // one planned node (defined in executor.cc)
  struct Planner;  // the constructor's steps (executor.cc)
  struct Run;      // one call of run() (executor.cc)
  ExecutorOptions opts_;
  std::vector<GraphInput> inputs_;
  std::vector<uint32_t> input_slots_;
  std::vector<std::pair<uint32_t, c10::IValue>> constants_;  // get_attr slots and their tensors
  std::vector<Step> steps_;
  std::vector<int64_t> output_slots_;        // -1: a constant None in the output list
  std::vector<uint32_t> free_after_inputs_;  // placeholders nobody reads
  std::vector<double> step_seconds_;         // per step, summed over runs (profile only)
  std::vector<size_t> step_calls_;
  size_t num_slots_ = 0;
  size_t num_outputs_ = 0;
  ExecutorStats stats_;
  std::atomic<uint64_t> nodes_finished_{0};
  std::atomic<int64_t> running_{-1};  // index into steps_, -1 outside run()
};

// Empty when an executor can supply input `in` (a tensor, a mesh, None or a scalar whose value
// the graph records), else why not, naming the placeholder. Checked before any rank starts.
std::string inputProblem(const GraphInput& in);
// The value of a non-tensor input that inputProblem accepts: a scalar from its val meta, else
// None (a DeviceMesh placeholder: aten ops never read it; it rides to the outputs).
c10::IValue nonTensorInput(const GraphInput& in);

// Splits "aten.mm.default" into ("aten::mm", "") and "aten.add.Tensor" into ("aten::add",
// "Tensor"); accepts a leading "torch.ops.". nullopt if the target has fewer than three parts.
std::optional<std::pair<std::string, std::string>> dispatcherName(std::string_view target);

// Empty when every call of `g` has a kernel for `device`'s backend in this process's dispatcher
// (composite and fallback kernels count); else an error naming the first node without one and
// how many others lack one. A graph traced on CPU can carry CPU-only ops (SDPA becomes
// aten._scaled_dot_product_flash_attention_for_cpu), which CUDA cannot run. Nodes whose op does
// not resolve are left to the Executor's own errors.
std::string deviceKernelProblem(const Graph& g, c10::DeviceType device);

}  // namespace jfx::rt
