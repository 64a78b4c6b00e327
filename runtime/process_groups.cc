#include "runtime/process_groups.h"

#include <torch/version.h>
#include <torch/csrc/distributed/c10d/GroupRegistry.hpp>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#if JFX_WITH_CUDA
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <set>

#include <nlohmann/json.hpp>

#include "ir/device_mesh.h"
#include "ir/error.h"

namespace jfx::rt {
namespace {

[[noreturn]] void fail(const std::string& message) {
  throw JfxError({}, message);
}

std::optional<std::string> env(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return std::nullopt;
  return std::string(v);
}

int envInt(const char* name, const std::string& value, int lo, int hi) {
  int out = 0;
  auto [p, ec] = std::from_chars(value.data(), value.data() + value.size(), out);
  if (ec != std::errc() || p != value.data() + value.size() || out < lo || out > hi)
    fail(std::string(name) + "=" + quoteForMessage(value) + " is not an integer in [" +
         std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return out;
}

}  // namespace

DistEnv DistEnv::fromEnvironment() {
  DistEnv e;
  auto rank = env("RANK");
  auto world = env("WORLD_SIZE");
  if (!rank && !world) return e;
  if (!rank || !world) fail("RANK and WORLD_SIZE must be set together");
  e.from_environment = true;
  e.world_size = envInt("WORLD_SIZE", *world, 1, 1 << 16);
  e.rank = envInt("RANK", *rank, 0, e.world_size - 1);
  if (auto lr = env("LOCAL_RANK")) e.local_rank = envInt("LOCAL_RANK", *lr, 0, 1 << 16);
  if (auto a = env("MASTER_ADDR")) e.master_addr = *a;
  auto port = env("MASTER_PORT");
  if (e.world_size > 1 && !port) fail("MASTER_PORT must be set when WORLD_SIZE > 1");
  if (port) e.master_port = envInt("MASTER_PORT", *port, 1, 65535);
  if (auto agent = env("TORCHELASTIC_USE_AGENT_STORE")) e.agent_store = *agent == "True";
  if (auto fd = env("JFX_MASTER_LISTEN_FD"); fd && e.rank == 0)
    e.master_listen_fd = envInt("JFX_MASTER_LISTEN_FD", *fd, 0, 1 << 20);
  return e;
}

std::vector<ProcessGroupInfo> localizeGroups(const std::vector<ProcessGroupInfo>& groups,
                                             const std::string& extra_json, int rank,
                                             int world_size) {
  const std::optional<DeviceMesh> mesh = parseDeviceMesh(extra_json);
  if (!mesh || mesh->size != world_size) return groups;
  const std::vector<int64_t>& shape = mesh->shape;
  const size_t dims = shape.size();
  std::vector<int64_t> stride(dims, 1);
  for (size_t d = dims - 1; d-- > 0;)
    stride[d] = stride[d + 1] * shape[d + 1];
  // All ranks whose coordinates equal `base`'s outside the dims in `mask`, in row-major order.
  auto meshGroup = [&](int64_t base, uint32_t mask) {
    std::vector<int64_t> out{base};
    for (size_t d = 0; d < dims; ++d) {
      if (!(mask & (1u << d))) continue;
      std::vector<int64_t> next;
      for (int64_t r : out)
        for (int64_t k = 0; k < shape[d]; ++k)
          next.push_back(r + k * stride[d]);
      out = std::move(next);
    }
    std::sort(out.begin(), out.end());
    return out;
  };
  std::vector<ProcessGroupInfo> out = groups;
  if (dims > 16) return out;
  for (ProcessGroupInfo& pg : out) {
    std::vector<int64_t> sorted = pg.ranks;
    std::sort(sorted.begin(), sorted.end());
    for (uint32_t mask = 1; mask < (1u << dims); ++mask) {
      if (meshGroup(0, mask) != sorted) continue;
      int64_t base = rank;  // this rank with the coordinates along `mask` zeroed
      for (size_t d = 0; d < dims; ++d)
        if (mask & (1u << d)) base -= ((rank / stride[d]) % shape[d]) * stride[d];
      pg.ranks = meshGroup(base, mask);
      break;
    }
  }
  return out;
}

namespace {

// The mesh's rank count from graph meta {"mesh": {"shape": [...]}}, or 0 when there is none.
// Throws JfxError naming meta.mesh when the mesh is malformed.
int64_t meshRanks(const std::string& extra_json, std::string* shape_text) {
  const std::optional<DeviceMesh> mesh = parseDeviceMesh(extra_json);
  if (!mesh) return 0;
  if (shape_text) *shape_text = meshShapeText(*mesh);
  return mesh->size;
}

// The graph meta's "world_size" (what our tracers and torchtitan exports record), or 0.
int64_t metaWorldSize(const std::string& extra_json) {
  if (extra_json.empty()) return 0;
  auto meta = nlohmann::json::parse(extra_json, nullptr, /*allow_exceptions=*/false);
  if (meta.is_discarded() || !meta.is_object()) return 0;
  auto w = meta.find("world_size");
  if (w == meta.end() || !w->is_number_integer() || w->get<int64_t>() < 1) return 0;
  return w->get<int64_t>();
}

std::string ranksText(const std::vector<int64_t>& ranks) {
  std::string s = "[";
  for (size_t i = 0; i < ranks.size(); ++i)
    s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s + "]";
}

}  // namespace

int64_t tracedWorldSize(const std::vector<ProcessGroupInfo>& groups,
                        const std::string& extra_json) {
  if (int64_t mesh = meshRanks(extra_json, nullptr); mesh > 0) return mesh;
  if (int64_t world = metaWorldSize(extra_json); world > 0) return world;
  // The groups give a lower bound only: HSDP's groups each span part of the world.
  int64_t world = 0;
  for (const ProcessGroupInfo& pg : groups) {
    world = std::max(world, pg.size);
    for (int64_t r : pg.ranks)
      world = std::max(world, r + 1);
  }
  return world;
}

std::string worldSizeProblem(const std::vector<ProcessGroupInfo>& groups,
                             const std::string& extra_json, int world_size) {
  std::string mesh_shape;
  int64_t want = meshRanks(extra_json, &mesh_shape);
  std::string why;
  if (want > 0) {
    why = "its device mesh " + mesh_shape + " has " + std::to_string(want) + " ranks";
  } else if (want = metaWorldSize(extra_json); want > 0) {
    why = "its graph meta says world_size " + std::to_string(want);
  } else {
    want = tracedWorldSize(groups, extra_json);
    if (want == 0) return {};
    // Name the group that spans the most ranks: the one that sets `want`.
    for (const ProcessGroupInfo& pg : groups) {
      int64_t span = pg.size;
      for (int64_t r : pg.ranks)
        span = std::max(span, r + 1);
      if (span != want) continue;
      why = "process group " + quoteForMessage(pg.name) + " has " +
            (pg.ranks.empty() ? "size " + std::to_string(pg.size) : "ranks " + ranksText(pg.ranks));
      break;
    }
  }
  if (want == world_size) return {};
  return "the graph was traced for " + std::to_string(want) + " rank" + (want == 1 ? "" : "s") +
         " (" + why + "), but the world has " + std::to_string(world_size) + ": run with --nproc " +
         std::to_string(want) + " (or WORLD_SIZE=" + std::to_string(want) + ")";
}

struct ProcessGroups::Group {
  std::string name;
  std::vector<int64_t> ranks;
  int my_rank = -1;
  c10::intrusive_ptr<c10d::ProcessGroup> pg;
};

namespace {

// One c10d group with its backend: gloo on a loopback (or MASTER_ADDR) device, or NCCL.
c10::intrusive_ptr<c10d::ProcessGroup> makeGroup(const std::string& name,
                                                 const c10::intrusive_ptr<c10d::Store>& store,
                                                 int my_rank, int size, const DistEnv& env,
                                                 CommBackend backend,
                                                 std::chrono::milliseconds timeout,
                                                 const GlooOptions& gloo) {
  auto pg = c10::make_intrusive<c10d::ProcessGroup>(store, my_rank, size);
  if (backend == CommBackend::Gloo) {
    auto opts = c10d::ProcessGroupGloo::Options::create(timeout);
    // One worker thread by default, not gloo's two: with two, collectives of one group run
    // concurrently and LibTorch 2.15's gloo path corrupts the heap now and then
    // (AsyncAllgatherCoalescedWork; PyTorch alone does it too): sac_w1 after the default
    // pipeline with idle-priority busy loops on every CPU crashed in 15 of 140 runs with
    // two threads, in none of 400 with one. The price: collectives in flight on one group
    // run one after another (docs/executor.md, Limits). Results are the same either way.
    opts->threads = gloo.threads;
    // Loopback or the master's address: ranks meet on this host (or where MASTER_ADDR says).
    opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(
        env.master_addr == "localhost" ? "127.0.0.1" : env.master_addr));
    auto be = c10::make_intrusive<c10d::ProcessGroupGloo>(store, my_rank, size, opts);
    pg->setBackend(c10::DeviceType::CPU, c10d::ProcessGroup::BackendType::GLOO, be);
    pg->setDefaultBackend(c10d::ProcessGroup::BackendType::GLOO);
  } else {
#if JFX_WITH_CUDA
    auto opts = c10d::ProcessGroupNCCL::Options::create();
    opts->timeout = timeout;
    auto be = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, my_rank, size, opts);
    pg->setBackend(c10::DeviceType::CUDA, c10d::ProcessGroup::BackendType::NCCL, be);
    pg->setDefaultBackend(c10d::ProcessGroup::BackendType::NCCL);
#endif
  }
  pg->setGroupName(name);
  return pg;
}

// Each group with its ranks (all of the world when the header lists none), checked against the
// world before anyone blocks in a rendezvous.
std::vector<std::pair<const ProcessGroupInfo*, std::vector<int64_t>>> planGroups(
    const std::vector<ProcessGroupInfo>& groups, const DistEnv& env) {
  std::set<std::string> names;
  std::vector<std::pair<const ProcessGroupInfo*, std::vector<int64_t>>> plan;
  for (const ProcessGroupInfo& info : groups) {
    if (!names.insert(info.name).second)
      fail("process group " + quoteForMessage(info.name) + " listed twice");
    std::vector<int64_t> ranks = info.ranks;
    if (ranks.empty() && info.size == env.world_size)
      for (int r = 0; r < env.world_size; ++r)
        ranks.push_back(r);
    if (static_cast<int64_t>(ranks.size()) != info.size)
      fail("process group " + quoteForMessage(info.name) + ": size " + std::to_string(info.size) +
           " but " + std::to_string(ranks.size()) + " ranks");
    std::set<int64_t> seen;
    for (int64_t r : ranks) {
      if (r < 0 || r >= env.world_size)
        fail("process group " + quoteForMessage(info.name) + " needs rank " + std::to_string(r) +
             " but the world has " + std::to_string(env.world_size) +
             (env.world_size == 1 ? " rank" : " ranks") + " (run with --nproc " +
             std::to_string(std::max<int64_t>(r + 1, info.size)) + ")");
      if (!seen.insert(r).second)
        fail("process group " + quoteForMessage(info.name) + " lists rank " + std::to_string(r) +
             " twice");
    }
    plan.emplace_back(&info, std::move(ranks));
  }
  return plan;
}

// The store the ranks meet at: TCP at MASTER_ADDR:MASTER_PORT (rank 0 serves it).
c10::intrusive_ptr<c10d::Store> openStore(const DistEnv& env, std::chrono::milliseconds timeout) {
  // One process and nobody to meet: an in-memory store.
  if (env.world_size == 1 && env.master_port == 0) return c10::make_intrusive<c10d::HashStore>();
  c10d::TCPStoreOptions so;
  so.port = static_cast<uint16_t>(env.master_port);
  so.isServer = env.rank == 0 && !env.agent_store;
  so.numWorkers = static_cast<size_t>(env.world_size);
  so.waitWorkers = true;  // the server returns once everyone connected, or throws at timeout
  so.timeout = timeout;
  if (env.rank == 0 && env.master_listen_fd >= 0) so.masterListenFd = env.master_listen_fd;
  try {
    return c10::make_intrusive<c10d::TCPStore>(env.master_addr, so);
  } catch (const std::exception& e) {
    throw CommError("rendezvous at " + env.master_addr + ":" + std::to_string(env.master_port) +
                    " failed (rank " + std::to_string(env.rank) + " of " +
                    std::to_string(env.world_size) + ", timeout " +
                    std::to_string(timeout.count()) + " ms): " +
                    (dynamic_cast<const c10::Error*>(&e)
                         ? static_cast<const c10::Error&>(e).what_without_backtrace()
                         : e.what()));
  }
}

}  // namespace

ProcessGroups::ProcessGroups(const std::vector<ProcessGroupInfo>& groups, const DistEnv& env,
                             CommBackend backend, std::chrono::milliseconds timeout,
                             GlooOptions gloo)
    : env_(env), timeout_(timeout) {
#if !JFX_WITH_CUDA
  if (backend == CommBackend::Nccl)
    fail("this jointfx was built without CUDA/NCCL (configure with -DJFX_WITH_CUDA=ON)");
#endif
  // Check the header against the world before anyone blocks in a rendezvous.
  auto plan = planGroups(groups, env);
  store_ = openStore(env, timeout);

  // Same order on every rank (header order), so no two ranks wait on each other's groups.
  for (auto& [info, ranks] : plan) {
    auto it = std::find(ranks.begin(), ranks.end(), env.rank);
    if (it == ranks.end()) continue;
    auto g = std::make_unique<Group>();
    g->name = info->name;
    g->ranks = ranks;
    g->my_rank = static_cast<int>(it - ranks.begin());
    int size = static_cast<int>(ranks.size());
    // Keyed by name and ranks: on a 2-D mesh, "fsdp" is {0, 2} on rank 0 and {1, 3} on rank 1.
    std::string key = "jfx/pg/" + info->name + "/";
    for (size_t k = 0; k < ranks.size(); ++k)
      key += (k ? "," : "") + std::to_string(ranks[k]);
    auto prefixed = c10::make_intrusive<c10d::PrefixStore>(key + "/", store_);
    const Group* same = nullptr;  // an earlier group over the same ranks, to share a backend with
    if (backend == CommBackend::Gloo && gloo.share_rank_sets)
      for (const auto& o : groups_)
        if (!same && o->ranks == ranks) same = o.get();
    try {
      g->pg = same ? same->pg
                   : makeGroup(info->name, prefixed, g->my_rank, size, env, backend, timeout, gloo);
    } catch (const std::exception& e) {
      const auto* ce = dynamic_cast<const c10::Error*>(&e);
      throw CommError("creating process group " + quoteForMessage(info->name) + " (rank " +
                      std::to_string(g->my_rank) + " of " + std::to_string(size) +
                      ") failed: " + (ce ? ce->what_without_backtrace() : e.what()));
    }
    if (groupRegistered(info->name))
      fail("a process group named " + quoteForMessage(info->name) +
           " is already registered in this process");
    c10d::register_process_group(info->name, g->pg);
    groups_.push_back(std::move(g));
  }
}

bool groupRegistered(const std::string& name) {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 15)
  return c10d::is_process_group_registered(name);
#else
  // LibTorch before 2.15 (2.11 ran bench/gpu_check.sh) has no query: resolving an unknown name
  // throws instead.
  try {
    c10d::resolve_process_group(name);
    return true;
  } catch (const c10::Error&) {
    return false;
  }
#endif
}

ProcessGroups::~ProcessGroups() {
  for (auto& g : groups_) {
    try {
      c10d::unregister_process_group(g->name);
    } catch (...) {
      // Unregistering only fails if someone else already removed it; nothing to do then.
    }
  }
  groups_.clear();
}

std::optional<int> ProcessGroups::rankIn(std::string_view name) const {
  for (const auto& g : groups_)
    if (g->name == name) return g->my_rank;
  return std::nullopt;
}

std::optional<int> ProcessGroups::sizeOf(std::string_view name) const {
  for (const auto& g : groups_)
    if (g->name == name) return static_cast<int>(g->ranks.size());
  return std::nullopt;
}

const std::vector<int64_t>* ProcessGroups::ranksOf(std::string_view name) const {
  for (const auto& g : groups_)
    if (g->name == name) return &g->ranks;
  return nullptr;
}

void ProcessGroups::worldBarrier(std::string_view tag) {
  if (env_.world_size == 1) return;
  std::string key = "jfx/barrier/" + std::string(tag);
  try {
    if (store_->add(key, 1) == env_.world_size) store_->set(key + "/done", std::vector<uint8_t>{1});
    store_->wait({key + "/done"}, timeout_);
  } catch (const c10::Error& e) {
    throw CommError("barrier " + quoteForMessage(tag) + " timed out or failed on rank " +
                    std::to_string(env_.rank) + ": " + e.what_without_backtrace());
  }
}

}  // namespace jfx::rt
