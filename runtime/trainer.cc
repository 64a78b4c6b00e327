#include "runtime/trainer.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/randint.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/zeros.h>
#include <c10/core/GradMode.h>
#if JFX_WITH_CUDA
#include <c10/cuda/CUDAFunctions.h>
#endif
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <thread>

#include "ir/error.h"
#include "ir/fsdp_chains.h"
#include "ir/io.h"
#include "ir/mutation.h"
#include "runtime/executor.h"
#include "runtime/graph_queries.h"
#include "runtime/input_checks.h"
#include "runtime/process_groups.h"
#include "runtime/progress.h"
#include "runtime/rank_error.h"
#include "runtime/safetensors.h"
#include "runtime/sharding.h"
#include "runtime/tensor_io.h"
#include "runtime/watchdog.h"

namespace jfx::rt {
namespace {

// How much longer than --timeout-s a rank may stand still before its watchdog ends it: room for
// c10d to raise its own timeout error first, which names the collective.
constexpr int kWatchdogGraceSeconds = 5;

// FNV-1a over the parts: seeds that depend only on names, never on process or pointer state.
uint64_t mixSeed(uint64_t seed, std::initializer_list<std::string_view> parts) {
  uint64_t h = 1469598103934665603ull ^ seed;
  for (std::string_view p : parts) {
    for (unsigned char c : p) {
      h ^= c;
      h *= 1099511628211ull;
    }
    h ^= 0xff;  // separator, so ("ab","c") != ("a","bc")
    h *= 1099511628211ull;
  }
  return h;
}

at::Generator generator(uint64_t seed) {
  return at::make_generator<at::CPUGeneratorImpl>(seed);
}

std::string shapeStr(c10::IntArrayRef s) {
  return c10::str(s);
}

struct Input {
  GraphInput info;
  const Node* node = nullptr;
  ShardLayout layout;
  at::Tensor value;       // parameters and buffers: the local shard (the optimizer updates it)
  int64_t int_bound = 0;  // integer user inputs and buffers: values are drawn from [0, bound)
  bool is_fixed = false;  // a non-tensor input (a mesh, None, a scalar): `fixed` every step
  c10::IValue fixed;
};

void makeDirs(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    inputError("cannot create directory " + quoteForMessage(dir, kPathQuoteLimit) + ": " +
               ec.message());
}

void debugFail(const ExecOptions& o, int rank, int step) {
  if (o.debug_fail_rank != rank || o.debug_fail_step != step) return;
  std::fprintf(stderr, "jointfx exec: rank %d: --debug-fail-mode %s at step %d\n", rank,
               o.debug_fail_mode.c_str(), step);
  std::fflush(stderr);
  if (o.debug_fail_mode == "kill") std::raise(SIGKILL);
  if (o.debug_fail_mode == "hang")
    for (;;)
      std::this_thread::sleep_for(std::chrono::seconds(1));
  if (o.debug_fail_mode == "throw")
    throw RankError{kExecRankFailed, "injected failure (--debug-fail-mode throw)"};
  std::fflush(stdout);
  std::_Exit(kExecRankFailed);
}

// One rank's run of `jointfx exec`, in the order run() takes its steps. `pgs` belongs to the
// caller so that a failing rank can leave (std::_Exit) without first running c10d destructors
// that may wait for peers that are gone.
class RankRun {
 public:
  RankRun(const ExecOptions& o, const DistEnv& env, std::unique_ptr<ProcessGroups>& pgs)
      : o_(o), env_(env), pgs_(pgs), leader_(env.rank == 0) {}

  int run() {
    startWatchdog();
    loadAndPlaceGraph();
    createProcessGroups();
    planExecutor();
    // Launched by `jointfx exec --nproc N`, the launcher checked the data once for every rank.
    if (!o_.data_checked) checkData();
    enter("initializing the parameters");
    collectInputs();
    findParallelGroups();
    initParameters();
    mapOutputs();
    makeOptimizer();
    openLogs();
    // The loop, watched by the watchdog started at the top: every node counts as progress.
    running_.store(ex_.get());
    try {
      for (int step = 1; step <= o_.steps; ++step)
        runStep(step);
    } catch (...) {
      // The steps that ran are what a failed run is debugged from: keep them.
      if (log_) try {
          log_->commit();
        } catch (const JfxError&) {
        }
      throw;
    }
    finish();
    return kExecOk;
  }

 private:
  // ---- the watchdog (runtime/watchdog.h), from the first moment: a rank that makes no progress
  // for the timeout plus a grace for c10d's own error path gives up, whatever it is doing:
  // loading, the rendezvous (a TCPStore client waits in recv() for a master that accepted the
  // connection and never answers, whatever its timeout says), a collective, the final barrier.
  // Progress: each phase passed, and every node the executor finishes.
  void enter(const char* what) {
    phase_name_.store(what);
    phases_.fetch_add(1, std::memory_order_relaxed);
  }

  void startWatchdog() {
    rendezvous_phase_ = env_.master_port ? "the rendezvous at " + env_.master_addr + ":" +
                                               std::to_string(env_.master_port)
                                         : std::string("creating the process groups");
    watchdog_.emplace(
        std::chrono::seconds(o_.timeout_s + kWatchdogGraceSeconds),
        [this] {
          const Executor* x = running_.load();
          return phases_.load(std::memory_order_relaxed) + (x ? x->nodesFinished() : 0);
        },
        [this, who = env_.world_size > 1 ? "rank " + std::to_string(env_.rank) + ": "
                                         : std::string()](double stalled) {
          const Executor* x = running_.load();
          std::string node = x ? x->runningNode() : std::string();
          int step = current_step_.load();
          // Before the first step: the phase it is stuck in (the rendezvous, most often).
          std::string where =
              step > 0
                  ? "at step " + std::to_string(step) + (node.empty() ? "" : ", in node " + node) +
                        ", longer than the collective timeout (--timeout-s " +
                        std::to_string(o_.timeout_s) + ")"
                  : std::string("in ") + phase_name_.load() + ", longer than --timeout-s " +
                        std::to_string(o_.timeout_s) + " allows";
          std::fprintf(stderr, "jointfx exec: %sno progress for %.0f s %s; giving up\n",
                       who.c_str(), stalled, where.c_str());
          std::fflush(stdout);
          std::fflush(stderr);
          std::_Exit(kExecRankFailed);
        });
  }

  // ---- graph, device, groups
  void loadAndPlaceGraph() {
    try {
      g_ = loadGraph(o_.graph);
    } catch (const JfxError& e) {
      inputError(e.what());
    }
    std::string world_problem;
    try {
      world_problem = worldSizeProblem(g_->processGroups(), g_->extraJson(), env_.world_size);
    } catch (const JfxError& e) {
      inputError(e.what());  // a malformed mesh in the graph meta
    }
    if (!world_problem.empty()) inputError(world_problem);
    if (std::string p = deviceProblem(o_.device); !p.empty()) inputError(p);
    device_ = o_.device == "cuda" ? c10::Device(c10::kCUDA, static_cast<int8_t>(env_.local_rank))
                                  : c10::Device(c10::kCPU);
    if (std::string p = deviceKernelProblem(*g_, device_.type()); !p.empty()) inputError(p);
#if JFX_WITH_CUDA
    // NCCL communicators and the functional collectives' streams use the current device.
    if (device_.is_cuda()) {
      if (env_.local_rank >= static_cast<int>(at::getNumGPUs()))
        inputError("LOCAL_RANK " + std::to_string(env_.local_rank) + " but only " +
                   std::to_string(at::getNumGPUs()) + " CUDA device(s) are visible");
      c10::cuda::set_device(static_cast<c10::DeviceIndex>(env_.local_rank));
    }
#endif
    int threads = o_.threads;
    if (threads <= 0) {
      int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
      int local = env_.world_size;
      if (const char* lw = std::getenv("LOCAL_WORLD_SIZE")) local = std::max(1, std::atoi(lw));
      threads = std::max(1, cores / local);
    }
    at::set_num_threads(threads);
    at::manual_seed(o_.seed);  // random ops in the graph (dropout): same stream on every rank
  }

  void createProcessGroups() {
    enter(rendezvous_phase_.c_str());
    try {
      pgs_ = std::make_unique<ProcessGroups>(
          localizeGroups(g_->processGroups(), g_->extraJson(), env_.rank, env_.world_size), env_,
          o_.device == "cuda" ? CommBackend::Nccl : CommBackend::Gloo,
          std::chrono::seconds(o_.timeout_s), GlooOptions{o_.gloo_threads, o_.gloo_share_groups});
    } catch (const CommError& e) {
      throw RankError{kExecRankFailed, e.message()};
    } catch (const JfxError& e) {
      inputError(e.message());  // the header does not fit the world
    }
  }

  void planExecutor() {
    enter("planning the graph");
    ExecutorOptions eo;
    eo.device = device_;
    eo.check_meta = o_.check_meta;
    eo.profile = o_.profile;
    eo.measure_memory = o_.measure_memory;
    eo.memory_curve = o_.measure_memory && !memoryCsvPath().empty();
    try {
      ex_ = std::make_unique<Executor>(*g_, eo);
    } catch (const JfxError& e) {
      inputError(e.what());
    }
  }

  void checkData() {
    enter("checking the parameters and the batch");
    std::vector<std::string> warnings;
    std::string problem;
    try {
      problem = checkInputData(*g_, ex_->inputs(), o_, warnings);
    } catch (const JfxError& e) {
      inputError(e.what());
    }
    if (!problem.empty()) inputError(problem);
    if (env_.rank == 0) printWarnings(warnings);
  }

  // ---- inputs and their layouts
  void collectInputs() {
    auto phs = g_->placeholders();
    if (phs.size() != ex_->inputs().size()) inputError("placeholder count changed while planning");
    for (size_t i = 0; i < phs.size(); ++i) {
      Input in;
      in.info = ex_->inputs()[i];
      in.node = phs[i];
      if (std::string e = inputProblem(in.info); !e.empty()) inputError(e);
      if (!in.info.meta.isTensor()) {
        in.fixed = nonTensorInput(in.info);
        in.is_fixed = true;
        inputs_.push_back(std::move(in));
        continue;
      }
      in.layout.local_shape = in.info.meta.tensor.shape;
      if (in.info.kind == InputKind::UserInput || in.info.kind == InputKind::None ||
          (in.info.kind == InputKind::Buffer && isIntegral(in.info.meta.tensor.dtype))) {
        in.int_bound = inferIntBound(phs[i]);
      } else if (const Node* ag = unshardGatherOf(*phs[i])) {
        setGroup(in, groupNameOf(ag), "gathered");
      } else if (in.info.kind == InputKind::Parameter) {
        // Read by no gather: a tracer that lifts a tied weight under each of its FQNs leaves
        // every placeholder but one unread, and such a parameter still gets its own gradient,
        // reduce-scattered. It is sharded the way that gradient is, or the optimizer's update
        // would not fit it.
        if (const Node* rs = parameterGradientScatter(*g_, in.info.fqn))
          setGroup(in, groupNameOf(rs), "reduce-scattered");
      }
      inputs_.push_back(std::move(in));
    }
  }

  void setGroup(Input& in, std::string group, const char* how) {
    in.layout.group = std::move(group);
    auto r = pgs_->rankIn(in.layout.group);
    auto n = pgs_->sizeOf(in.layout.group);
    if (!r || !n)
      inputError(quoteForMessage(in.info.fqn) + " is " + how + " over group " +
                 quoteForMessage(in.layout.group) + ", which this rank is not in");
    in.layout.group_rank = *r;
    in.layout.group_size = *n;
  }

  void findParallelGroups() {
    // Data parallelism follows FSDP: ranks with the same place in the FSDP group (TP peers) must
    // see the same batch.
    for (const Input& in : inputs_)
      if (!in.layout.group.empty()) {
        dp_group_ = in.layout.group;
        break;
      }
    dp_rank_ = dp_group_.empty() ? env_.rank : *pgs_->rankIn(dp_group_);
    dp_size_ = dp_group_.empty() ? env_.world_size : *pgs_->sizeOf(dp_group_);
    // Tensor parallelism: a group of this rank's that meets the FSDP group only in this rank
    // (split-comm-groups' copies of the FSDP group have the same ranks and do not count).
    const std::vector<int64_t>* dp = dp_group_.empty() ? nullptr : pgs_->ranksOf(dp_group_);
    if (!dp) return;
    for (const ProcessGroupInfo& pg : g_->processGroups()) {
      const std::vector<int64_t>* ranks = pgs_->ranksOf(pg.name);
      if (!ranks || ranks->size() < 2) continue;
      size_t shared = 0;
      for (int64_t r : *ranks)
        shared += std::count(dp->begin(), dp->end(), r);
      if (shared == 1) {
        tp_group_ = pg.name;
        break;
      }
    }
  }

  // ---- parameters and buffers: from the file, else seeded (same full tensor on every rank)
  void initParameters() {
    try {
      if (!o_.params.empty()) params_file_ = SafetensorsFile::read(o_.params);
      if (!o_.batch.empty()) batch_file_ = SafetensorsFile::read(o_.batch);
    } catch (const JfxError& e) {
      inputError(e.what());
    }
    const std::map<std::string, std::string> buffer_init = bufferInit();
    for (Input& in : inputs_) {
      if (in.info.kind != InputKind::Parameter && in.info.kind != InputKind::Buffer) continue;
      at::Tensor local =
          shard(fullValue(in, buffer_init), in.info.fqn, in.layout, *pgs_, tp_group_);
      in.value = local.to(device_, atenDtype(in.info.meta.tensor.dtype)).contiguous();
    }
  }

  // How the module initializes each buffer when no --params file gives it (graph meta
  // "buffer_init", written by the tracer: docs/graph-format.md).
  std::map<std::string, std::string> bufferInit() const {
    std::map<std::string, std::string> buffer_init;
    if (g_->extraJson().empty()) return buffer_init;
    auto meta = nlohmann::json::parse(g_->extraJson(), nullptr, false);
    if (!meta.is_object() || !meta.contains("buffer_init")) return buffer_init;
    const auto& bi = meta["buffer_init"];
    if (!bi.is_object()) inputError(o_.graph + ": meta.buffer_init is not an object");
    for (auto it = bi.begin(); it != bi.end(); ++it) {
      if (!it.value().is_string() || (it.value() != "zeros" && it.value() != "ones"))
        inputError(o_.graph + ": meta.buffer_init[" + quoteForMessage(it.key()) +
                   "] is not \"zeros\" or \"ones\"");
      buffer_init[it.key()] = it.value().get<std::string>();
    }
    return buffer_init;
  }

  // The full (unsharded) value of a parameter or buffer.
  at::Tensor fullValue(const Input& in,
                       const std::map<std::string, std::string>& buffer_init) const {
    const TensorMeta& m = in.info.meta.tensor;
    auto init = buffer_init.find(in.info.fqn);
    if (params_file_) {
      const SafetensorsEntry* e = params_file_->find(in.info.fqn);
      if (!e)
        inputError(o_.params + ": no tensor " + quoteForMessage(in.info.fqn) + " (input " +
                   quoteForMessage(in.info.name) + ")");
      return readTensor(*params_file_, *e);
    }
    if (in.info.kind == InputKind::Buffer && init != buffer_init.end()) {
      // As the module's constructor does (BatchNorm: running_mean zeros, running_var ones,
      // num_batches_tracked 0). Buffers are not FSDP-sharded: the shape is the placeholder's.
      return init->second == "ones" ? at::ones(atenSizes(m.shape), at::kFloat)
                                    : at::zeros(atenSizes(m.shape), at::kFloat);
    }
    // The padded full tensor [s * G, ...]: the padding rows never reach the loss (the graph
    // slices them off after the gather), so their values do not matter, and the shape, hence
    // the init, is the same before and after any pass.
    std::vector<int64_t> shape = m.shape;
    if (!shape.empty()) shape[0] *= in.layout.group_size;
    auto gen = generator(mixSeed(o_.seed, {"param", in.info.fqn}));
    // Norm weights and other vectors start at one, matrices small and random (as the tracer's
    // init_weights does), so a few steps of training stay finite.
    if (in.info.kind == InputKind::Buffer) {
      // Integer and bool buffers hold indices, positions and flags (BERT's position_ids): random
      // normals would become negative indices. They are drawn as integer user inputs are.
      if (isIntegral(m.dtype))
        return at::randint(0, in.int_bound > 0 ? in.int_bound : 2, shape, gen, at::kLong);
      return at::randn(shape, gen, at::kFloat);
    }
    if (shape.size() == 1) return at::ones(shape, at::kFloat);
    return at::randn(shape, gen, at::kFloat).mul_(0.02);
  }

  // ---- outputs: which is the loss, which gradient belongs to which parameter
  void mapOutputs() {
    const auto& specs = g_->outputSpecs();
    std::map<std::string, size_t> param_by_fqn, buffer_by_fqn;
    for (size_t i = 0; i < inputs_.size(); ++i) {
      if (inputs_[i].info.kind == InputKind::Parameter) param_by_fqn[inputs_[i].info.fqn] = i;
      if (inputs_[i].info.kind == InputKind::Buffer) buffer_by_fqn[inputs_[i].info.fqn] = i;
    }
    std::vector<uint8_t> inplace_written = analyzeBufferMutations(*g_).written_alias;
    if (!specs.empty()) {
      if (specs.size() != ex_->numOutputs())
        inputError("header lists " + std::to_string(specs.size()) + " outputs, the graph has " +
                   std::to_string(ex_->numOutputs()));
      bool have_loss = false;
      for (size_t k = 0; k < specs.size(); ++k) {
        if (specs[k].kind == OutputKind::Loss && !have_loss) {
          loss_index_ = k;
          have_loss = true;
        } else if (specs[k].kind == OutputKind::Gradient) {
          auto it = param_by_fqn.find(specs[k].fqn);
          if (it == param_by_fqn.end())
            inputError("output " + std::to_string(k) + " is the gradient of " +
                       quoteForMessage(specs[k].fqn) + ", which is no parameter input");
          grad_outputs_.emplace_back(k, it->second);
        } else if (specs[k].kind == OutputKind::BufferMutation) {
          auto it = buffer_by_fqn.find(specs[k].fqn);
          if (it == buffer_by_fqn.end())
            inputError("output " + std::to_string(k) + " updates buffer " +
                       quoteForMessage(specs[k].fqn) + ", which is no buffer input");
          buffer_outputs_.emplace_back(k, it->second);
          buffer_inputs_.push_back(it->second);
        }
      }
    } else if (ex_->numOutputs() == 1 + param_by_fqn.size()) {
      // No header: [loss, *grads] in parameter order, the tracer's convention.
      size_t k = 1;
      for (size_t i = 0; i < inputs_.size(); ++i)
        if (inputs_[i].info.kind == InputKind::Parameter) grad_outputs_.emplace_back(k++, i);
    }
    for (size_t i = 0; i < inputs_.size(); ++i)
      if (inputs_[i].node && inputs_[i].node->id() < inplace_written.size() &&
          inplace_written[inputs_[i].node->id()])
        buffer_inputs_.push_back(i);
    std::sort(buffer_inputs_.begin(), buffer_inputs_.end());
    buffer_inputs_.erase(std::unique(buffer_inputs_.begin(), buffer_inputs_.end()),
                         buffer_inputs_.end());
  }

  // ---- optimizer over the local shards that get gradients
  void makeOptimizer() {
    std::vector<at::Tensor> trained;
    for (auto [k, i] : grad_outputs_)
      trained.push_back(inputs_[i].value);
    if (!trained.empty() && o_.optimizer == "sgd") {
      opt_ = std::make_unique<torch::optim::SGD>(
          trained,
          torch::optim::SGDOptions(o_.lr).momentum(o_.momentum).weight_decay(o_.weight_decay));
    } else if (!trained.empty() && o_.optimizer == "adamw") {
      opt_ = std::make_unique<torch::optim::AdamW>(trained,
                                                   torch::optim::AdamWOptions(o_.lr)
                                                       .betas(std::make_tuple(o_.beta1, o_.beta2))
                                                       .eps(o_.eps)
                                                       .weight_decay(o_.weight_decay));
    }
  }

  // ---- logs
  // This rank's --memory-csv, or "" when it writes none.
  std::string memoryCsvPath() const {
    if (o_.memory_csv.empty() || (!leader_ && o_.memory_csv.find("{rank}") == std::string::npos))
      return {};
    return rankPath(o_.memory_csv, env_.rank);
  }

  // The last step's measured curve (Note [Measured memory]), as analyze --memory-csv writes the
  // estimated one.
  void writeMemoryCsv() {
    std::string path = memoryCsvPath();
    if (path.empty()) return;
    const ExecutorStats& st = ex_->stats();
    std::string csv = "step,node,live_bytes\n";
    for (size_t k = 0; k < st.memory_curve.size(); ++k)
      csv += std::to_string(k) + "," + ex_->stepName(k) + "," + std::to_string(st.memory_curve[k]) +
             "\n";
    try {
      if (auto parent = std::filesystem::path(path).parent_path(); !parent.empty())
        makeDirs(parent.string());
      writeFileAtomic(path, csv);
    } catch (const JfxError& e) {
      throw RankError{kExecRankFailed, e.what()};
    }
  }

  void openLogs() {
    // The log (one line per step) follows writeFileAtomic's rules (ir/io.h): a regular file is
    // written beside its target and takes its place at the end of the run (a failed run keeps
    // the steps it made); "-", a FIFO or a device is written as the steps come.
    if (!o_.log.empty() && (leader_ || o_.log.find("{rank}") != std::string::npos)) {
      std::string path = rankPath(o_.log, env_.rank);
      if (auto parent = std::filesystem::path(path).parent_path(); !parent.empty() && path != "-")
        makeDirs(parent.string());
      try {
        log_ = std::make_unique<StreamedOutput>(path);
      } catch (const JfxError& e) {
        inputError("cannot write log: " + std::string(e.what()));
      }
    }
    if (!o_.save_grads.empty()) makeDirs(o_.save_grads);
    if (!o_.save.empty()) makeDirs(o_.save);
    bool tty = ::isatty(2) != 0;
    bar_.emplace(leader_ && (o_.progress == "always" || (o_.progress == "auto" && tty)), o_.steps);
  }

  // ---- one training step
  void runStep(int step) {
    current_step_ = step;
    phases_.fetch_add(1, std::memory_order_relaxed);
    debugFail(o_, env_.rank, step);
    std::vector<c10::IValue> args = stepArguments(step);

    auto t0 = std::chrono::steady_clock::now();
    std::vector<c10::IValue> outs;
    try {
      outs = ex_->run(std::move(args));
    } catch (const JfxError& e) {
      throw RankError{kExecRankFailed, "step " + std::to_string(step) + ": " + e.what()};
    }
    // CUDA kernels run after run() returns: a step's time includes them only once the device
    // has drained its queues.
    if (device_.is_cuda()) at::detail::getCUDAHooks().deviceSynchronize(device_.index());
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    total_seconds_ += seconds;
    phases_.fetch_add(1, std::memory_order_relaxed);

    if (loss_index_ >= outs.size() || !outs[loss_index_].isTensor())
      throw RankError{kExecRankFailed,
                      "output " + std::to_string(loss_index_) + " is not a tensor"};
    updateBuffers(outs);
    at::Tensor loss = outs[loss_index_].toTensor();
    double loss_value = loss.numel() == 1 ? loss.to(at::kCPU).to(at::kDouble).item<double>() : 0.0;
    if (!o_.save_grads.empty()) saveGrads(step, loss, outs);
    max_peak_bytes_ = std::max(max_peak_bytes_, ex_->stats().peak_bytes);
    report(step, loss, loss_value, seconds);
    if (opt_) optimizerStep(outs);
  }

  // One value per placeholder for step `step`.
  std::vector<c10::IValue> stepArguments(int step) {
    std::vector<c10::IValue> args;
    args.reserve(inputs_.size());
    for (Input& in : inputs_) {
      if (in.is_fixed)
        args.push_back(in.fixed);
      else if (in.value.defined())
        args.emplace_back(in.value);
      else
        args.emplace_back(userInput(in, step));
    }
    return args;
  }

  // User inputs: this rank's slice of a global batch [dp_size * b, ...].
  at::Tensor userInput(const Input& in, int step) const {
    const TensorMeta& m = in.info.meta.tensor;
    at::Tensor t;
    if (batch_file_) {
      const SafetensorsEntry* e = batch_file_->find(in.info.name);
      if (!e) inputError(o_.batch + ": no tensor " + quoteForMessage(in.info.name));
      t = readTensor(*batch_file_, *e);
    } else {
      std::vector<int64_t> global = m.shape;
      if (!global.empty()) global[0] *= dp_size_;
      auto gen = generator(mixSeed(o_.seed, {"batch", in.info.name, std::to_string(step)}));
      if (dtypeIsFloatingPoint(m.dtype)) {
        t = at::randn(global, gen, at::kFloat);
      } else {
        int64_t high = o_.int_high > 0 ? o_.int_high : (in.int_bound > 0 ? in.int_bound : 2);
        if (m.dtype == ScalarType::Bool) high = 2;
        t = at::randint(0, high, global, gen, at::kLong);
      }
    }
    if (t.sizes() != atenSizes(m.shape)) {
      if (t.dim() == static_cast<int64_t>(m.shape.size()) && t.dim() > 0 &&
          t.size(0) == m.shape[0] * dp_size_)
        t = t.narrow(0, dp_rank_ * m.shape[0], m.shape[0]);
      else
        inputError("input " + quoteForMessage(in.info.name) + ": batch shape " +
                   shapeStr(t.sizes()) + " is neither the graph's " + shapeStr(atenSizes(m.shape)) +
                   " nor " + std::to_string(dp_size_) + " of them along dim 0");
    }
    t = t.to(device_, atenDtype(m.dtype)).contiguous();
    // This rank's slice alone, not a view of the global batch: the rank holds only its own
    // (and the measured memory counts the input storages, Note [Measured memory]).
    if (t.storage().nbytes() != t.nbytes()) t = t.clone();
    return t;
  }

  // Buffer updates carry to the next step: outputs of kind buffer_mutation are copied into the
  // buffer; in-place writes (native_batch_norm's running statistics) already went to it, since
  // the buffer tensor itself is the graph input.
  void updateBuffers(const std::vector<c10::IValue>& outs) {
    for (auto [k, i] : buffer_outputs_) {
      if (!outs[k].isTensor() || outs[k].toTensor().sizes() != inputs_[i].value.sizes())
        throw RankError{kExecRankFailed, "output " + std::to_string(k) + " (update of buffer " +
                                             quoteForMessage(inputs_[i].info.fqn) +
                                             ") is not a tensor of shape " +
                                             shapeStr(inputs_[i].value.sizes())};
      inputs_[i].value.copy_(outs[k].toTensor());
    }
  }

  void saveGrads(int step, const at::Tensor& loss, const std::vector<c10::IValue>& outs) {
    SafetensorsWriter w;
    addTensor(w, "__loss__", loss);
    for (auto [k, i] : grad_outputs_)
      addTensor(w, inputs_[i].info.fqn, outs[k].toTensor());
    // The updated buffers after this step, so parity compares running statistics too.
    for (size_t i : buffer_inputs_)
      addTensor(w, "buffer:" + inputs_[i].info.fqn, inputs_[i].value);
    w.setMetadata("step", std::to_string(step));
    w.setMetadata("rank", std::to_string(env_.rank));
    w.setMetadata("world_size", std::to_string(env_.world_size));
    w.setMetadata("graph", o_.graph);
    w.write(o_.save_grads + "/grads.step" + std::to_string(step) + ".rank" +
            std::to_string(env_.rank) + ".safetensors");
  }

  // The step's loss: the JSONL log, the line on stdout, the progress bar.
  void report(int step, const at::Tensor& loss, double loss_value, double seconds) {
    if (log_) {
      nlohmann::ordered_json j;
      j["step"] = step;
      j["rank"] = env_.rank;
      j["loss"] = loss_value;
      j["loss_bits"] = tensorHex(loss);
      j["seconds"] = seconds;
      // Note [Measured memory]: this rank's peak of live tensor bytes in the step.
      if (ex_->stats().peak_bytes >= 0) j["peak_bytes"] = ex_->stats().peak_bytes;
      // Lines printed with printf go first: "-" shares this process's stdout.
      std::fflush(stdout);
      try {
        log_->write(j.dump() + "\n");
      } catch (const JfxError& e) {
        throw RankError{kExecRankFailed, "--log " + std::string(e.what())};
      }
    }
    if (leader_ && !o_.quiet) {
      bar_->clear();
      std::printf("step %d loss %s\n", step, formatLoss(loss_value).c_str());
      std::fflush(stdout);
    }
    bar_->update(step, loss_value, total_seconds_ / step);
  }

  void optimizerStep(const std::vector<c10::IValue>& outs) {
    c10::AutoGradMode no_grad(false);
    for (auto [k, i] : grad_outputs_) {
      at::Tensor grad = outs[k].toTensor();
      at::Tensor& p = inputs_[i].value;
      if (grad.sizes() != p.sizes())
        throw RankError{kExecRankFailed, "gradient of " + quoteForMessage(inputs_[i].info.fqn) +
                                             " is " + shapeStr(grad.sizes()) + ", its shard " +
                                             shapeStr(p.sizes())};
      p.mutable_grad() = grad.to(p.scalar_type());
    }
    opt_->step();
  }

  void commitLog() {
    if (!log_) return;
    try {
      log_->commit();
    } catch (const JfxError& e) {
      throw RankError{kExecRankFailed, "--log " + std::string(e.what())};
    }
  }

  // ---- the end: every rank done, then the state and the summary
  void finish() {
    // Nobody tears down its connections while a peer may still be reading from them.
    phases_.fetch_add(1, std::memory_order_relaxed);
    try {
      pgs_->worldBarrier("end");
    } catch (const JfxError& e) {
      throw RankError{kExecRankFailed, e.message()};
    }
    watchdog_.reset();
    if (!o_.save.empty()) saveState();
    writeMemoryCsv();
    commitLog();
    bar_->finish();
    if (leader_ && !o_.quiet) {
      std::string memory;
      if (max_peak_bytes_ >= 0)
        memory = ", peak tensor memory " + std::to_string(max_peak_bytes_) + " B" +
                 (env_.world_size == 1 ? "" : " (rank 0)");
      std::fprintf(stderr, "jointfx exec: %d step%s on %d rank%s, %.4f s/step%s\n", o_.steps,
                   o_.steps == 1 ? "" : "s", env_.world_size, env_.world_size == 1 ? "" : "s",
                   total_seconds_ / o_.steps, memory.c_str());
    }
    if (leader_ && o_.profile) printProfile(ex_->profile(), o_.steps);
  }

  void saveState() {
    SafetensorsWriter w;
    nlohmann::ordered_json shards = nlohmann::ordered_json::object();
    for (const Input& in : inputs_) {
      if (!in.value.defined()) continue;
      addTensor(w, in.info.fqn, in.value);
      shards[in.info.fqn] = {{"group", in.layout.group},
                             {"group_rank", in.layout.group_rank},
                             {"group_size", in.layout.group_size}};
      if (!opt_) continue;
      auto it = opt_->state().find(in.value.unsafeGetTensorImpl());
      if (it == opt_->state().end()) continue;
      if (auto* s = dynamic_cast<torch::optim::AdamWParamState*>(it->second.get())) {
        addTensor(w, "optim." + in.info.fqn + ".exp_avg", s->exp_avg());
        addTensor(w, "optim." + in.info.fqn + ".exp_avg_sq", s->exp_avg_sq());
      } else if (auto* sg = dynamic_cast<torch::optim::SGDParamState*>(it->second.get())) {
        if (sg->momentum_buffer().defined())
          addTensor(w, "optim." + in.info.fqn + ".momentum_buffer", sg->momentum_buffer());
      }
    }
    w.setMetadata("steps", std::to_string(o_.steps));
    w.setMetadata("rank", std::to_string(env_.rank));
    w.setMetadata("world_size", std::to_string(env_.world_size));
    w.setMetadata("optimizer", o_.optimizer);
    w.setMetadata("shards", shards.dump());
    w.write(o_.save + "/state.rank" + std::to_string(env_.rank) + ".safetensors");
  }

  const ExecOptions& o_;
  const DistEnv& env_;
  std::unique_ptr<ProcessGroups>& pgs_;
  const bool leader_;
  // What the watchdog reads.
  std::atomic<uint64_t> phases_{0};
  std::atomic<int> current_step_{0};
  std::atomic<const Executor*> running_{nullptr};
  std::string rendezvous_phase_;
  std::atomic<const char*> phase_name_{"loading the graph"};
  std::unique_ptr<Graph> g_;
  c10::Device device_{c10::kCPU};
  std::unique_ptr<Executor> ex_;
  // After ex_: members go in reverse order, so the watchdog stops before the executor whose
  // progress it reads goes.
  std::optional<Watchdog> watchdog_;
  std::vector<Input> inputs_;
  std::string dp_group_, tp_group_;
  int dp_rank_ = 0, dp_size_ = 1;
  std::optional<SafetensorsFile> params_file_, batch_file_;
  size_t loss_index_ = 0;
  std::vector<std::pair<size_t, size_t>> grad_outputs_;    // (output index, input index)
  std::vector<std::pair<size_t, size_t>> buffer_outputs_;  // (output index, buffer input index)
  std::vector<size_t> buffer_inputs_;  // the buffers the graph updates, in input order
  std::unique_ptr<torch::optim::Optimizer> opt_;
  std::unique_ptr<StreamedOutput> log_;
  std::optional<ProgressBar> bar_;
  double total_seconds_ = 0;
  int64_t max_peak_bytes_ = -1;  // the largest step's measured peak on this rank
};

}  // namespace

std::string deviceProblem(const std::string& device) {
  if (device == "cpu") return {};
  if (device != "cuda")
    return "unknown device " + quoteForMessage(device) + " (expected cpu or cuda)";
#if JFX_WITH_CUDA
  if (!at::hasCUDA() || at::getNumGPUs() == 0)
    return "--device cuda: no CUDA device is visible to this process";
  return {};
#else
  return "--device cuda: this jointfx was built without CUDA/NCCL (configure with "
         "-DJFX_WITH_CUDA=ON)";
#endif
}

std::string deviceGraphProblem(const ExecOptions& o) {
#if JFX_WITH_CUDA
  if (o.device != "cuda") return {};
  try {
    return deviceKernelProblem(*loadGraph(o.graph), c10::kCUDA);
  } catch (const std::exception&) {
    return {};  // the graph's own errors come from preflight or the rank, with their context
  }
#else
  (void)o;
  return {};  // without CUDA kernels in the process, deviceProblem says so first
#endif
}

std::string preflight(const ExecOptions& o) {
  try {
    auto g = loadGraph(o.graph);
    ExecutorOptions eo;
    eo.check_groups = false;  // no groups exist in the launcher
    Executor ex(*g, eo);      // the graph's own errors first
    if (std::string p = deviceKernelProblem(*g, o.device == "cuda" ? c10::kCUDA : c10::kCPU);
        !p.empty())
      return p;
    for (const GraphInput& in : ex.inputs())
      if (std::string e = inputProblem(in); !e.empty()) return e;
    if (std::string p = worldSizeProblem(g->processGroups(), g->extraJson(), o.nproc); !p.empty())
      return p;
    std::vector<std::string> warnings;
    if (std::string p = checkInputData(*g, ex.inputs(), o, warnings); !p.empty()) return p;
    printWarnings(warnings);
  } catch (const JfxError& e) {
    return e.what();
  } catch (const c10::Error& e) {
    return e.what_without_backtrace();
  } catch (const std::exception& e) {
    return humanLibraryMessage(e.what());
  }
  return {};
}

int runRank(const ExecOptions& o) {
  DistEnv env;
  try {
    env = DistEnv::fromEnvironment();
  } catch (const JfxError& e) {
    std::fprintf(stderr, "jointfx exec: %s\n", e.message().c_str());
    return kExecInputError;
  }
  std::string who = env.world_size > 1 ? "rank " + std::to_string(env.rank) + ": " : "";
  int code = kExecOk;
  std::string message;
  std::unique_ptr<ProcessGroups> pgs;
  try {
    code = RankRun(o, env, pgs).run();
  } catch (const RankError& e) {
    code = e.code;
    message = e.message;
  } catch (const JfxError& e) {
    code = kExecRankFailed;
    message = e.what();
  } catch (const c10::Error& e) {
    code = kExecRankFailed;
    message = e.what_without_backtrace();
  } catch (const std::exception& e) {
    code = kExecRankFailed;
    message = humanLibraryMessage(e.what());  // never a C++ backtrace
  }
  if (code != kExecOk) {
    std::fprintf(stderr, "jointfx exec: %s%s\n", who.c_str(), message.c_str());
    if (env.from_environment) {
      // Peers may be gone mid-collective; c10d's destructors would wait on them. Leave now.
      std::fflush(stdout);
      std::fflush(stderr);
      std::_Exit(code);
    }
  }
  return code;
}

}  // namespace jfx::rt
