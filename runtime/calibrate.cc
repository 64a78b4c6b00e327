#include "runtime/calibrate.h"

#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <ATen/ops/add.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/zeros.h>
#if JFX_WITH_CUDA
#include <c10/cuda/CUDAFunctions.h>
#endif
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "ir/collectives.h"
#include "ir/error.h"
#include "ir/graph.h"
#include "ir/io.h"
#include "ir/json_document.h"
#include "runtime/executor.h"
#include "runtime/launcher.h"
#include "runtime/process_groups.h"
#include "runtime/tensor_io.h"
#include "runtime/trainer.h"

namespace jfx::rt {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr int kExitOk = 0, kExitInput = 2, kExitRank = 3;
constexpr const char* kGroup = "calib";  // the world group the collectives run on

void printError(const std::string& msg) {
  std::fprintf(stderr, "jointfx calibrate: %s\n", msg.c_str());
}

bool inWorker() {
  return std::getenv("RANK") && std::getenv("WORLD_SIZE");
}

std::string hostName() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof buf - 1) != 0) return "unknown-host";
  return buf;
}

std::string utcNow() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M UTC", &tm);
  return buf;
}

std::string cpuModel() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      auto colon = line.find(':');
      if (colon != std::string::npos) {
        std::string m = line.substr(colon + 1);
        m.erase(0, m.find_first_not_of(' '));
        return m;
      }
    }
  return "unknown CPU";
}

std::string fmt(double v, int digits = 3) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*g", digits, v);
  return buf;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n == 0 ? 0 : (n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2);
}

// ------------------------------------------------------------------------- one rank's figures

// The workload with its collectives made local, so that one rank runs the graph's compute alone:
// an all-gather becomes a cat of the group-size copies of its shard, a reduce-scatter a slice of
// its input, an all-reduce and a wait an alias. Every other node is left as it is. Throws
// JfxError naming the node for a collective that has no local stand-in.
void localizeCollectives(Graph& g) {
  std::vector<Node*> collectives;
  for (Node* n = g.first(); n; n = n->next())
    if (n->isCollective() || n->isWait()) collectives.push_back(n);
  for (Node* n : collectives) {
    // Only a single tensor in and out (not a coalesced list), and a stand-in of the same shape.
    Node* x = n->inputs().size() >= 1 ? n->inputs()[0] : nullptr;
    bool tensors = x && n->val().kind == ValueMeta::Kind::Tensor &&
                   x->val().kind == ValueMeta::Kind::Tensor && !x->val().tensor.shape.empty();
    auto noStandIn = [&] {
      return JfxError({}, "workload collective " + quoteForMessage(n->name()) + " (" +
                              std::string(n->target().str()) + ") has no local stand-in");
    };
    if (!tensors) throw noStandIn();
    const Dims& in = x->val().tensor.shape;
    const Dims& out = n->val().tensor.shape;
    Dims stand_in = in;  // the stand-in's output shape
    std::vector<Arg> args;
    std::string target = "aten.alias.default";
    int64_t size = collectiveGroupSize(*n, g);
    switch (collectiveKind(*n)) {
      case CollectiveKind::AllGather: {
        std::vector<Arg> copies(static_cast<size_t>(size), Arg::ofNode(x));
        target = "aten.cat.default";
        args = {Arg::ofList(std::move(copies))};
        stand_in = in.with(0, in[0] * size);
        break;
      }
      case CollectiveKind::ReduceScatter:
        target = "aten.slice.Tensor";
        args = {Arg::ofNode(x), Arg::ofInt(0), Arg::ofInt(0), Arg::ofInt(out.empty() ? 0 : out[0])};
        if (!out.empty() && out[0] <= in[0]) stand_in = in.with(0, out[0]);
        break;
      default:  // a wait, an all-reduce; an all-to-all or broadcast that keeps the shape
        args = {Arg::ofNode(x)};
    }
    if (stand_in != out) throw noStandIn();
    Node* local = g.createCall(target, std::move(args), {}, n, std::string(n->name()) + "_local");
    local->val() = n->val();
    local->meta().phase = n->meta().phase;
    g.replaceAllUsesWith(n, local);
    g.erase(n);
  }
  g.processGroups().clear();
}

struct Rank {
  const CalibrateOptions& o;
  c10::Device device;
  int rank = 0;
  int world = 1;

  void sync() const {
    if (device.is_cuda()) at::detail::getCUDAHooks().deviceSynchronize(device.index());
  }

  void log(const std::string& what) const {
    if (o.verbose && rank == 0) std::fprintf(stderr, "jointfx calibrate: %s\n", what.c_str());
  }

  // Seconds per call of `fn`: the median over `batches` batches of `reps` calls each, after one
  // warm-up call. A fixed count (not a time budget) so that every rank calls a collective the
  // same number of times.
  double timePerCall(const std::function<void()>& fn, int reps, int batches) const {
    fn();
    sync();
    std::vector<double> per;
    for (int b = 0; b < batches; ++b) {
      auto t0 = Clock::now();
      for (int i = 0; i < reps; ++i)
        fn();
      sync();
      per.push_back(std::chrono::duration<double>(Clock::now() - t0).count() / reps);
    }
    return median(per);
  }

  // Repetitions that make one batch of `fn` last about `seconds` (for local measurements only).
  int repsFor(const std::function<void()>& fn, double seconds) const {
    fn();
    sync();
    auto t0 = Clock::now();
    fn();
    sync();
    double once = std::max(1e-7, std::chrono::duration<double>(Clock::now() - t0).count());
    return static_cast<int>(std::clamp(seconds / once, 1.0, 1e6));
  }

  json matmul(at::ScalarType dt, int64_t n) const {
    auto opts = at::TensorOptions().dtype(dt).device(device);
    at::Tensor a = at::randn({n, n}, opts), b = at::randn({n, n}, opts);
    auto fn = [&] { (void)at::mm(a, b); };
    int reps = repsFor(fn, o.quick ? 0.02 : 0.1);
    double s = timePerCall(fn, reps, o.quick ? 3 : 5);
    double flops = 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n);
    log(std::string(c10::toString(dt)) + " mm " + std::to_string(n) + ": " + fmt(flops / s / 1e9) +
        " GFLOP/s");
    return {{"n", n}, {"seconds", s}, {"tflops", flops / s / 1e12}};
  }

  json memory() const {
    // Floats per operand: 4 MiB / 32 MiB on CPU; 256 MiB on a GPU, whose L2 holds 50-60 MB.
    int64_t n = o.quick ? (1 << 20) : device.is_cuda() ? (1 << 26) : (1 << 23);
    auto opts = at::TensorOptions().dtype(at::kFloat).device(device);
    at::Tensor x = at::randn({n}, opts), y = at::randn({n}, opts), z = at::empty({n}, opts);
    auto fn = [&] { at::add_out(z, x, y); };
    int reps = repsFor(fn, o.quick ? 0.02 : 0.1);
    double s = timePerCall(fn, reps, o.quick ? 3 : 5);
    double bytes = 3.0 * 4 * static_cast<double>(n);
    log("memory (add of " + std::to_string(n) + " floats): " + fmt(bytes / s / 1e9) + " GB/s");
    return {{"bytes", bytes}, {"seconds", s}, {"gbps", bytes / s / 1e9}};
  }

  static TensorMeta meta(std::vector<int64_t> shape) {
    return TensorMeta::contiguous(ScalarType::Float32, std::move(shape), Symbol::intern("cpu"));
  }
  static Node* placeholder(Graph& g, const std::string& name, TensorMeta t) {
    Node* n = g.create(OpKind::Placeholder, Symbol::intern(name), {}, {}, name);
    n->setInputInfo(InputKind::UserInput, "");
    n->val() = ValueMeta::ofTensor(std::move(t));
    return n;
  }
  static Node* call(Graph& g, const std::string& target, std::vector<Arg> args, TensorMeta t) {
    Node* n = g.createCall(target, std::move(args), {}, nullptr, "");
    n->val() = ValueMeta::ofTensor(std::move(t));
    return n;
  }
  static void output(Graph& g, Node* v) {
    g.create(OpKind::Output, Symbol::intern("output"), {Arg::ofList({Arg::ofNode(v)})}, {},
             "output");
  }

  // Seconds per node of a chain of `k` nodes made by `link`, run by the Executor as exec runs
  // graphs (meta checks on).
  // With `roofline`, also the mean seconds per node that the cost model's roofline charges for
  // the chain's work (its kernel_overhead left at 0), so the overhead is what remains.
  double chainPerNode(const std::function<Node*(Graph&, Node*, int)>& link, int k,
                      std::vector<int64_t> shape,
                      const std::function<double(const Graph&)>& roofline = nullptr,
                      double* work = nullptr) const {
    Graph g;
    Node* x = placeholder(g, "x", meta(shape));
    Node* cur = x;
    for (int i = 0; i < k; ++i)
      cur = link(g, cur, i);
    output(g, cur);
    if (roofline && work) *work = roofline(g) / k;
    ExecutorOptions eo;
    eo.device = device;
    eo.check_groups = false;
    Executor ex(g, eo);
    at::Tensor xv = at::zeros(shape, at::TensorOptions().device(device));
    auto fn = [&] { (void)ex.run({xv}); };
    int reps = repsFor(fn, o.quick ? 0.02 : 0.1);
    return timePerCall(fn, reps, o.quick ? 3 : 7) / k;
  }

  // Seconds per Executor::run of a localized workload graph, on inputs made from its placeholders'
  // meta: floating point small and random, integers (token ids, labels) zero.
  double workloadStep(const Graph& g) const {
    std::vector<c10::IValue> inputs;
    for (const Node* p : g.placeholders()) {
      if (p->val().kind != ValueMeta::Kind::Tensor)
        throw JfxError({}, "workload input " + quoteForMessage(p->name()) + " is not a tensor");
      const TensorMeta& m = p->val().tensor;
      auto opts = at::TensorOptions().dtype(atenDtype(m.dtype)).device(device);
      at::Tensor t = at::empty_strided(atenSizes(m.shape), atenSizes(m.stride), opts);
      if (dtypeIsFloatingPoint(m.dtype))
        t.copy_(at::randn(atenSizes(m.shape), opts.dtype(at::kFloat)).mul_(0.02));
      else
        t.zero_();
      inputs.emplace_back(std::move(t));
    }
    ExecutorOptions eo;
    eo.device = device;
    Executor ex(g, eo);
    auto fn = [&] { (void)ex.run(inputs); };
    int reps = repsFor(fn, o.quick ? 0.05 : 0.3);
    return timePerCall(fn, reps, o.quick ? 3 : 5);
  }

  // A graph of `k` independent collective + wait pairs on `group` (of `size` ranks),
  // `per_rank` floats per rank, each waited for at once as the traced graphs do; batch() times
  // `reps` runs of it and records seconds per pair.
  struct CollectiveBench {
    std::unique_ptr<Executor> ex;
    at::Tensor x;
    int k = 1, reps = 1;
    std::vector<double> per_pair;
  };
  std::unique_ptr<CollectiveBench> collective(const std::string& kind, const std::string& group,
                                              int size, int64_t per_rank, int k, int reps) const {
    Graph g;
    ProcessGroupInfo pg;
    pg.name = group;
    pg.size = size;
    for (int r = 0; r < size; ++r)
      pg.ranks.push_back(size == 1 ? rank : r);
    g.processGroups().push_back(pg);
    bool ag = kind == "all_gather";
    int64_t full = per_rank * size;
    Node* x = placeholder(g, "x", meta({ag ? per_rank : full}));
    Node* last = nullptr;
    for (int i = 0; i < k; ++i) {
      Node* c = ag ? call(g, "_c10d_functional.all_gather_into_tensor.default",
                          {Arg::ofNode(x), Arg::ofInt(size), Arg::ofStr(group)}, meta({full}))
                   : call(g, "_c10d_functional.reduce_scatter_tensor.default",
                          {Arg::ofNode(x), Arg::ofStr("sum"), Arg::ofInt(size), Arg::ofStr(group)},
                          meta({per_rank}));
      last = call(g, "_c10d_functional.wait_tensor.default", {Arg::ofNode(c)},
                  meta({ag ? full : per_rank}));
    }
    output(g, last);
    ExecutorOptions eo;
    eo.device = device;
    auto b = std::make_unique<CollectiveBench>();
    b->ex = std::make_unique<Executor>(g, eo);
    b->x = at::ones({ag ? per_rank : full}, at::TensorOptions().device(device));
    b->k = k;
    b->reps = reps;
    (void)b->ex->run({b->x});  // warm-up (first use of the group's connections)
    sync();
    return b;
  }
  void batch(CollectiveBench& b) const {
    auto t0 = Clock::now();
    for (int i = 0; i < b.reps; ++i)
      (void)b.ex->run({b.x});
    sync();
    b.per_pair.push_back(std::chrono::duration<double>(Clock::now() - t0).count() / b.reps / b.k);
  }
};

// The device this rank measures on (cuda: the one of its local rank).
c10::Device rankDevice(const CalibrateOptions& o, const DistEnv& env) {
  if (o.device != "cuda") return c10::Device(c10::kCPU);
#if JFX_WITH_CUDA
  c10::cuda::set_device(static_cast<c10::DeviceIndex>(env.local_rank));
#endif
  return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(env.local_rank));
}

// Intra-op threads: as asked, else the host's cores shared among the ranks.
int rankThreads(const CalibrateOptions& o, const DistEnv& env) {
  if (o.threads > 0) return o.threads;
  int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::max(1, cores / std::max(1, env.world_size));
}

// One world group, plus a group of each rank alone (world-1 collectives, as fsdp_w1 runs).
std::vector<ProcessGroupInfo> calibrationGroups(int world_size) {
  std::vector<ProcessGroupInfo> groups;
  ProcessGroupInfo world;
  world.name = kGroup;
  world.size = world_size;
  for (int r = 0; r < world_size; ++r)
    world.ranks.push_back(r);
  groups.push_back(world);
  for (int r = 0; r < world_size; ++r) {
    ProcessGroupInfo self;
    self.name = "self" + std::to_string(r);
    self.size = 1;
    self.ranks = {r};
    groups.push_back(self);
  }
  return groups;
}

// The roofline time of `g`'s work at the rates measured so far (out["matmul"], out["memory"]).
double rooflineSeconds(const CalibrateModel& model, const json& out, const Graph& g) {
  const double peak_flops = out["matmul"]["float32"]["tflops"].get<double>() * 1e12;
  const double memory_bandwidth = out["memory"]["gbps"].get<double>() * 1e9;
  return model.work_seconds(g, peak_flops, memory_bandwidth);
}

// Matmul rates, memory bandwidth and what a node costs the executor, into `out`.
void measureCompute(const Rank& R, const CalibrateModel& model, json& out) {
  json mm;
  // A GPU needs far larger products than a CPU core to reach its rate: at n = 512 an H200's
  // bf16 mm is launch-bound, at a small fraction of its peak (bench/README.md, "Figures behind
  // the code").
  const bool gpu = R.device.is_cuda();
  const bool quick = R.o.quick;
  mm["float32"] = R.matmul(at::kFloat, quick ? 256 : gpu ? 4096 : 1024);
  mm["bfloat16"] = R.matmul(at::kBFloat16, quick ? 128 : gpu ? 8192 : 512);
  out["matmul"] = mm;
  out["memory"] = R.memory();
  int k = 256;
  // Kernels: a chain cycling through mm, add and mul on float32[32, 32] (the traced graphs are
  // mostly small matmuls and pointwise ops), less the roofline time of their work at the rates
  // just measured: what a kernel node costs the executor beyond its work.
  auto roofline = [&](const Graph& g) { return rooflineSeconds(model, out, g); };
  double work = 0;
  double mix = R.chainPerNode(
      [](Graph& g, Node* x, int i) {
        const char* ops[] = {"aten.mm.default", "aten.add.Tensor", "aten.mul.Tensor"};
        return Rank::call(g, ops[i % 3], {Arg::ofNode(x), Arg::ofNode(x)}, Rank::meta({32, 32}));
      },
      k, {32, 32}, roofline, &work);
  double view = R.chainPerNode(
      [](Graph& g, Node* x, int) {
        return Rank::call(g, "aten.view.default", {Arg::ofNode(x), Arg::ofInts({16})},
                          Rank::meta({16}));
      },
      k, {16});
  // A kernel costs the executor at least a view's dispatch; under load the roofline's memory
  // time (at a bandwidth measured on 32 MiB operands) can exceed the small chain's whole time.
  double add = std::max(view, mix - work);
  out["kernel_node_s"] = add;
  out["kernel_chain_node_s"] = mix;
  out["kernel_chain_work_s"] = work;
  out["view_node_s"] = view;
  R.log("per node: mm/add/mul " + fmt(mix * 1e6) + " us (roofline work " + fmt(work * 1e6) +
        " us), view " + fmt(view * 1e6) + " us");
}

// A real graph's compute, every rank at once: what a node costs amid a model's op mix and live
// tensors, against what the chains of measureCompute say.
void measureWorkload(const Rank& R, const CalibrateModel& model, json& out) {
  const std::string& path = R.o.workload;
  std::unique_ptr<Graph> wg = loadGraph(path);
  if (std::string p = deviceKernelProblem(*wg, R.device.type()); !p.empty())
    throw JfxError({}, "workload " + path + ": " + p);
  localizeCollectives(*wg);
  auto [kernels, hosts] = model.overhead_nodes(*wg);
  double seconds = R.workloadStep(*wg);
  out["workload"] = json{{"seconds", seconds},
                         {"work_s", rooflineSeconds(model, out, *wg)},
                         {"kernel_nodes", kernels},
                         {"host_nodes", hosts}};
  R.log("workload " + path + ": " + fmt(seconds * 1e3) + " ms a step (" + std::to_string(kernels) +
        " kernel and " + std::to_string(hosts) + " host nodes)");
}

// Collectives: a small message (latency) and a large one (bandwidth), on the world group and on
// this rank alone. The batches of all eight go round-robin, so that a burst of load from
// elsewhere on the host hits every one alike; the same counts on every rank.
json measureCollectives(const Rank& R, ProcessGroups& pgs, const DistEnv& env) {
  const bool quick = R.o.quick;
  int64_t small = 256, large = quick ? (1 << 16) : (1 << 20);  // floats per rank
  std::string self = "self" + std::to_string(env.rank);
  const char* kinds[] = {"all_gather", "reduce_scatter"};
  std::vector<std::unique_ptr<Rank::CollectiveBench>> world_b, local_b;
  for (const char* kind : kinds)
    for (int64_t n : {small, large}) {
      bool big = n == large;
      int kk = big ? 2 : 16;
      int reps = quick ? (big ? 2 : 4) : (big ? 3 : 10);
      if (env.world_size > 1)
        world_b.push_back(R.collective(kind, kGroup, env.world_size, n, kk, reps));
      local_b.push_back(R.collective(kind, self, 1, n, kk, reps));
    }
  int batches = quick ? 3 : 11;
  for (int b = 0; b < batches; ++b) {
    for (size_t i = 0; i < world_b.size(); ++i) {
      // Line the ranks up, so that no batch times a peer still busy with the one before.
      pgs.worldBarrier("batch" + std::to_string(b) + "." + std::to_string(i));
      R.batch(*world_b[i]);
    }
    for (auto& l : local_b)
      R.batch(*l);
  }
  json coll = json::object();
  for (size_t ki = 0; ki < 2; ++ki) {
    json rows = json::array();
    for (size_t si = 0; si < 2; ++si) {
      int64_t n = si == 0 ? small : large;
      size_t i = ki * 2 + si;
      json row = {{"per_rank_floats", n}, {"bytes", 4.0 * static_cast<double>(n) * env.world_size}};
      if (env.world_size > 1) {
        double s = median(world_b[i]->per_pair);
        row["seconds"] = s;
        R.log(std::string(kinds[ki]) + " " + fmt(row["bytes"].get<double>()) + " B at world " +
              std::to_string(env.world_size) + ": " + fmt(s * 1e6) + " us");
      }
      row["local_seconds"] = median(local_b[i]->per_pair);
      row["local_bytes"] = 4.0 * static_cast<double>(n);
      rows.push_back(row);
    }
    coll[kinds[ki]] = rows;
  }
  return coll;
}

json measureRank(const CalibrateOptions& o, const CalibrateModel& model, const DistEnv& env) {
  c10::Device device = rankDevice(o, env);
  int threads = rankThreads(o, env);
  at::set_num_threads(threads);
  at::manual_seed(0);
  ProcessGroups pgs(calibrationGroups(env.world_size), env,
                    o.device == "cuda" ? CommBackend::Nccl : CommBackend::Gloo,
                    std::chrono::seconds(o.timeout_s),
                    GlooOptions{o.gloo_threads, o.gloo_share_groups});
  Rank R{o, device, env.rank, env.world_size};
  json out;
  out["threads"] = threads;
  // Compute, every rank at once (exec's ranks share the host the same way).
  pgs.worldBarrier("compute");
  measureCompute(R, model, out);
  if (!o.workload.empty()) measureWorkload(R, model, out);
  pgs.worldBarrier("collectives");
  out["collectives"] = measureCollectives(R, pgs, env);
  pgs.worldBarrier("done");
  return out;
}

// ------------------------------------------------------------------------------ the profile

double meanOver(const std::vector<json>& ranks, const std::function<double(const json&)>& get) {
  double s = 0;
  for (const json& r : ranks)
    s += get(r);
  return s / static_cast<double>(ranks.size());
}

// Collectives: t = latency + S / algBw from the small and the large message.
struct CollectiveFit {
  double latency, alg_bw, t1, t2, s1, s2;
};

// The hardware profile from every rank's figures, on top of `base` (kept where not measured),
// one section at a time; every figure gets a line in "sources" saying how it was measured.
struct ProfileBuilder {
  const CalibrateOptions& o;
  const std::vector<json>& ranks;
  std::string by;     // "measured by jointfx calibrate on <host>, <when>"
  std::string setup;  // ranks, threads, device
  json p, sources;
  double view = 0;  // the host overhead of a node, in seconds, after scaling

  ProfileBuilder(const CalibrateOptions& options, const std::vector<json>& figures)
      : o(options), ranks(figures) {}

  double mean(const std::function<double(const json&)>& get) const { return meanOver(ranks, get); }

  void header(const json& base) {
    const std::string host = hostName();
    const std::string when = utcNow();
    const int G = o.world;
    by = "measured by jointfx calibrate on " + host + ", " + when;
    setup = std::to_string(G) + " rank" + (G > 1 ? "s" : "") + ", " +
            std::to_string(ranks[0]["threads"].get<int>()) + " intra-op thread(s) each, device " +
            o.device + (o.quick ? ", --quick" : "");
    p = base.is_object() ? base : json::object();
    p.erase("sources");
    sources = base.is_object() && base.contains("sources") ? base["sources"] : json::object();
    p["name"] = o.name.empty() ? "calibrated-" + host : o.name;
    p["description"] = "Measured on " + host + " (" + (o.device == "cpu" ? cpuModel() : "CUDA") +
                       ") by jointfx calibrate, " + when + ": " + setup + ".";
  }

  void rates() {
    double f32 = mean([](const json& r) { return r["matmul"]["float32"]["tflops"].get<double>(); });
    double bf16 =
        mean([](const json& r) { return r["matmul"]["bfloat16"]["tflops"].get<double>(); });
    json peaks = p.contains("peak_tflops") ? p["peak_tflops"] : json::object();
    peaks["float32"] = f32;
    peaks["bfloat16"] = bf16;
    if (!peaks.contains("default")) peaks["default"] = f32;
    p["peak_tflops"] = peaks;
    p["compute_efficiency"] = 1.0;
    sources["peak_tflops"] =
        by + ": at::mm of square matrices per rank (float32 n=" +
        std::to_string(ranks[0]["matmul"]["float32"]["n"].get<int64_t>()) +
        ", bfloat16 n=" + std::to_string(ranks[0]["matmul"]["bfloat16"]["n"].get<int64_t>()) +
        "), every rank at once, mean over ranks; " + setup +
        ". compute_efficiency 1: the measured rate is already sustained";
    double gbps = mean([](const json& r) { return r["memory"]["gbps"].get<double>(); });
    p["memory_bandwidth_gbps"] = gbps;
    p["memory_efficiency"] = 1.0;
    sources["memory_bandwidth_gbps"] =
        by + ": at::add out-of-place on " +
        fmt(ranks[0]["memory"]["bytes"].get<double>() / 3 / 1e6) +
        " MB float32 operands (2 reads + 1 write), every rank at once, mean over ranks; "
        "memory_efficiency 1";
  }

  // The chains run hot: three ops, one live tensor. Amid a model's op mix, its live activations
  // and its larger ops, a node costs more; the workload's step says how much. One factor for
  // both overheads, fitted to the step: seconds = work + s (kernels x kernel overhead + hosts x
  // host overhead). Sets `scale`; returns the sources' text for it.
  std::string workloadScale(double& scale) const {
    scale = mean([](const json& r) {
      const json& w = r["workload"];
      double overhead = w["kernel_nodes"].get<double>() * r["kernel_node_s"].get<double>() +
                        w["host_nodes"].get<double>() * r["view_node_s"].get<double>();
      double left = w["seconds"].get<double>() - w["work_s"].get<double>();
      return overhead > 0 && left > 0 ? left / overhead : 1.0;
    });
    const json& w = ranks[0]["workload"];
    return ", times " + fmt(scale) + ": the factor that makes the overheads explain the step of " +
           o.workload_label + " with its collectives made local (" +
           fmt(w["seconds"].get<double>() * 1e3) + " ms on rank 0 for " +
           std::to_string(w["kernel_nodes"].get<int64_t>()) + " kernel and " +
           std::to_string(w["host_nodes"].get<int64_t>()) + " host nodes, " +
           fmt(w["work_s"].get<double>() * 1e3) + " ms of it roofline work), every rank at once";
  }

  void overheads() {
    double add = mean([](const json& r) { return r["kernel_node_s"].get<double>(); });
    view = mean([](const json& r) { return r["view_node_s"].get<double>(); });
    std::string chains =
        ": Executor::run of a chain of 256 nodes cycling through aten.mm.default, "
        "aten.add.Tensor and aten.mul.Tensor on float32[32, 32], per node, less the roofline "
        "time of their work at the measured rates (dispatch, allocation, meta check, value "
        "table), at least host_overhead_us";
    std::string views =
        ": Executor::run of a chain of 256 aten.view.default nodes, per node: what a node "
        "that launches no kernel (view, getitem, wait, collective issue) costs the executor";
    std::string scaled;
    if (ranks[0].contains("workload")) {
      double s = 1;
      scaled = workloadScale(s);
      add *= s;
      view *= s;
    }
    p["kernel_overhead_us"] = add * 1e6;
    p["host_overhead_us"] = view * 1e6;
    sources["kernel_overhead_us"] = by + chains + scaled + "; mean over ranks";
    sources["host_overhead_us"] = by + views + scaled + "; mean over ranks";
  }

  CollectiveFit fit(const char* kind, const char* seconds_key, const char* bytes_key) const {
    auto t = [&](int i) {
      return mean(
          [&](const json& r) { return r["collectives"][kind][i][seconds_key].get<double>(); });
    };
    double s1 = ranks[0]["collectives"][kind][0][bytes_key].get<double>();
    double s2 = ranks[0]["collectives"][kind][1][bytes_key].get<double>();
    double t1 = t(0), t2 = t(1);
    double alg = t2 > t1 ? (s2 - s1) / (t2 - t1) : s2 / t2;
    double lat = std::max(0.0, t1 - s1 / alg);
    return {lat, alg, t1, t2, s1, s2};
  }

  // Local (one-rank group) collectives: fixed cost over the local copy the model charges.
  void localCollectives() {
    CollectiveFit ag = fit("all_gather", "local_seconds", "local_bytes");
    CollectiveFit rs = fit("reduce_scatter", "local_seconds", "local_bytes");
    double local = std::max(0.0, (ag.latency + rs.latency) / 2 - 2 * view);
    p["local_collective_us"] = local * 1e6;
    sources["local_collective_us"] =
        by +
        ": all_gather_into_tensor / reduce_scatter_tensor + wait_tensor on a process group "
        "of one rank (" +
        o.device + "), the fixed part of the time (" + fmt(ag.t1 * 1e6) + " / " + fmt(rs.t1 * 1e6) +
        " us at " + fmt(ag.s1) + " B), less the two nodes' host overhead";
    // How exec maps groups to streams: its gloo backend runs groups over the same ranks on one
    // worker thread unless told otherwise; NCCL gives every group its own communicator.
    bool shared = o.device == "cpu" && o.gloo_share_groups;
    p["collective_streams"] = shared ? "per_rank_set" : "per_group";
    sources["collective_streams"] =
        by + ": " +
        (shared ? "jointfx exec runs gloo groups over the same ranks on one backend"
                : "one backend per group");
  }

  // The ring of this host's ranks: bus bandwidth and hop latency (measured at world > 1).
  void intraNode() {
    json intra = p.contains("intra_node") ? p["intra_node"] : json::object();
    const int G = o.world;
    if (G > 1) {
      CollectiveFit ag = fit("all_gather", "seconds", "bytes");
      CollectiveFit rs = fit("reduce_scatter", "seconds", "bytes");
      double g = G;
      double bus_ag = ag.alg_bw * (g - 1) / g, bus_rs = rs.alg_bw * (g - 1) / g;
      double lat = std::max(0.0, (ag.latency + rs.latency) / 2 - 2 * view);
      double bus = 2 / (1 / bus_ag + 1 / bus_rs);  // harmonic: the mean time per byte
      p["base_latency_us"] = 0.0;
      intra["bus_bandwidth_gbps"] = bus / 1e9;
      intra["hop_latency_us"] = lat / (g - 1) * 1e6;
      sources["intra_node"] =
          by +
          ": all_gather_into_tensor / reduce_scatter_tensor + wait_tensor through the executor "
          "on " +
          std::to_string(G) + " ranks of this host (" + (o.device == "cpu" ? "gloo" : "NCCL") +
          "), at " + fmt(ag.s1) + " and " + fmt(ag.s2) + " B: all-gather " + fmt(ag.t1 * 1e6) +
          " / " + fmt(ag.t2 * 1e6) + " us (busBw " + fmt(bus_ag / 1e9) + " GB/s), reduce-scatter " +
          fmt(rs.t1 * 1e6) + " / " + fmt(rs.t2 * 1e6) + " us (busBw " + fmt(bus_rs / 1e9) +
          " GB/s); fixed part less two nodes' host overhead, " + fmt(lat * 1e6) +
          " us, spread over the G - 1 ring steps as hop latency (base 0); busBw the harmonic "
          "mean";
    } else {
      double gbps = p["memory_bandwidth_gbps"].get<double>();
      if (!intra.contains("bus_bandwidth_gbps")) intra["bus_bandwidth_gbps"] = gbps / 2;
      if (!intra.contains("hop_latency_us")) intra["hop_latency_us"] = 0.0;
      if (!p.contains("base_latency_us")) p["base_latency_us"] = 0.0;
      if (!sources.contains("intra_node"))
        sources["intra_node"] =
            "not measured (calibrated at world 1; run jointfx calibrate --world N): half the "
            "measured memory bandwidth, no latency";
    }
    p["intra_node"] = intra;
  }

  json finish() {
    // Every rank of a calibration is on this host: the ring never crosses a network.
    p["gpus_per_node"] = std::max<int64_t>(p.value("gpus_per_node", int64_t{0}), 4096);
    if (!p.contains("inter_node")) {
      p["inter_node"] = p["intra_node"];
      sources["inter_node"] =
          "not measured (one host): the intra-node figures; gpus_per_node is set so that every "
          "group fits on one node";
    }
    if (!p.contains("memory_capacity_gib")) p["memory_capacity_gib"] = 0;
    sources["calibration"] = by + ": " + setup + "; jointfx exec runs graphs the same way";
    p["sources"] = sources;
    return p;
  }
};

json buildProfile(const CalibrateOptions& o, const std::vector<json>& ranks, const json& base) {
  ProfileBuilder b(o, ranks);
  b.header(base);
  b.rates();
  b.overheads();
  b.localCollectives();
  b.intraNode();
  return b.finish();
}

int launchOrRun(const CalibrateOptions& o, const CalibrateModel& model) {
  if (inWorker()) {
    DistEnv env = DistEnv::fromEnvironment();
    json figures = measureRank(o, model, env);
    writeFileAtomic(o.rank_dir + "/rank" + std::to_string(env.rank) + ".json",
                    figures.dump(1) + "\n");
    return kExitOk;
  }
  namespace fs = std::filesystem;
  std::string dir = (fs::temp_directory_path() / ("jfx-calibrate-XXXXXX")).string();
  if (!mkdtemp(dir.data())) throw JfxError({}, "cannot create a temporary directory");
  struct Cleanup {
    std::string d;
    ~Cleanup() {
      std::error_code ec;
      fs::remove_all(d, ec);
    }
  } cleanup{dir};
  // What the ranks run: the workload a path, the default one written into the run directory.
  CalibrateOptions ro = o;
  ro.workload_label = o.workload;
  if (o.workload == kNoWorkload) {
    ro.workload.clear();
  } else if (o.workload.empty() && model.default_workload) {
    ro.workload = dir + "/workload.json";
    saveGraph(*model.default_workload(), ro.workload, GraphFormat::Json);
    ro.workload_label = model.default_workload_label;
  }
  std::vector<json> ranks;
  if (o.world == 1) {
    ranks.push_back(measureRank(ro, model, DistEnv{}));
  } else {
    LaunchSpec spec;
    spec.exe = selfExecutable();
    spec.args = {"calibrate",
                 "--world",
                 std::to_string(o.world),
                 "--device",
                 o.device,
                 "--threads",
                 std::to_string(o.threads),
                 "--gloo-threads",
                 std::to_string(o.gloo_threads),
                 "--timeout-s",
                 std::to_string(o.timeout_s),
                 "--rank-dir",
                 dir};
    if (o.quick) spec.args.push_back("--quick");
    if (!o.gloo_share_groups) spec.args.push_back("--gloo-separate-groups");
    if (!ro.workload.empty()) {
      spec.args.push_back("--workload");
      spec.args.push_back(ro.workload);
    }
    if (o.verbose) spec.args.push_back("--verbose");
    spec.nproc = o.world;
    LaunchResult r = launchRanks(spec);
    if (r.exit_code != 0) {
      printError(r.message.empty() ? "a rank failed" : r.message);
      return r.exit_code == kExitInput ? kExitInput : kExitRank;
    }
    for (int i = 0; i < o.world; ++i)
      ranks.push_back(json::parse(
          readInputFile(dir + "/rank" + std::to_string(i) + ".json", "calibration figures")));
  }
  json base;
  if (!o.base.empty()) base = readJsonDocument(readInputFile(o.base, "hardware profile"), o.base);
  json profile = buildProfile(ro, ranks, base);
  std::string text = profile.dump(2) + "\n";
  model.check_profile(text, o.output);  // what we write must load
  writeFileAtomic(o.output, text);
  return kExitOk;
}

}  // namespace

int runCalibrate(const CalibrateOptions& o, const CalibrateModel& model) {
  try {
    if (o.world < 1) {
      printError("--world: expected at least 1");
      return kExitInput;
    }
    if (std::string e = deviceProblem(o.device); !e.empty()) {
      printError(e);
      return kExitInput;
    }
    if (!o.base.empty())  // a bad base fails before measuring
      model.check_profile(readInputFile(o.base, "hardware profile"), o.base);
    if (!o.workload.empty() && o.workload != kNoWorkload &&
        !inWorker()) {                                   // so does a workload that cannot run alone
      std::unique_ptr<Graph> g = loadGraph(o.workload);  // its errors name the file
      try {
        localizeCollectives(*g);
      } catch (const JfxError& e) {
        printError("--workload " + o.workload + ": " + e.what());
        return kExitInput;
      }
    }
    return launchOrRun(o, model);
  } catch (const JfxError& e) {
    printError(e.what());
    return kExitInput;
  } catch (const std::exception& e) {
    printError(humanLibraryMessage(e.what()));
  }
  return kExitRank;
}

}  // namespace jfx::rt
