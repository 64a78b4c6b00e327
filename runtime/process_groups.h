// Ranks and c10d process groups for the executor.
//
// Every process group in the graph header that contains this rank becomes a c10d ProcessGroup
// (gloo on CPU, NCCL on CUDA) over a TCPStore rendezvous, registered with c10d under the graph's
// group name, so the graph's _c10d_functional nodes resolve it by name and run unchanged. The
// c10d registry holds weak references; ProcessGroups owns the groups and unregisters them when it
// dies. Each group's keys live under their own store prefix, so sub-groups and extra groups over
// the same ranks (split-comm-groups) rendezvous independently.
#pragma once

#include <c10/util/intrusive_ptr.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ir/error.h"
#include "ir/graph.h"

namespace jfx::rt {

// Where this process sits, as torchrun describes it (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
// MASTER_PORT). Our own launcher adds JFX_MASTER_LISTEN_FD: a socket it already bound to
// MASTER_PORT and hands to rank 0, so no other process can take the port in between.
struct DistEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;        // 0: no rendezvous (a single process)
  int master_listen_fd = -1;  // rank 0 only, from our launcher
  // TORCHELASTIC_USE_AGENT_STORE=True: torchrun's agent already serves the store at
  // MASTER_ADDR:MASTER_PORT, so rank 0 connects as a client like everyone else.
  bool agent_store = false;
  bool from_environment = false;

  // Reads the variables above; none set means one process. Throws JfxError when they are
  // inconsistent (RANK without WORLD_SIZE, RANK >= WORLD_SIZE, a bad port...).
  static DistEnv fromEnvironment();
};

enum class CommBackend { Gloo, Nccl };

// A rendezvous or group creation that failed at run time (a peer never came, a timeout), as
// opposed to a header that cannot fit the world (plain JfxError).
class CommError : public JfxError {
 public:
  explicit CommError(const std::string& message) : JfxError({}, message) {}
};

// The header lists each group's ranks as the tracing rank (0) saw them. On a device mesh (graph
// meta "mesh": {"shape": [...], "dim_names": [...]}, ranks laid out row-major as
// init_device_mesh does), a group whose ranks are rank 0's group along some mesh dims is that
// mesh group, and this rank's own group along those dims replaces it ("fsdp" is {0, 2} on rank 0
// and {1, 3} on rank 1 of a 2 x 2 mesh). Other groups, and graphs without a mesh, keep their
// ranks. `extra_json` is the graph's meta (Graph::extraJson()), its mesh read by
// parseDeviceMesh (ir/device_mesh.h): a malformed mesh throws JfxError naming meta.mesh.
std::vector<ProcessGroupInfo> localizeGroups(const std::vector<ProcessGroupInfo>& groups,
                                             const std::string& extra_json, int rank,
                                             int world_size);

// The world size the graph was traced for: its device mesh's rank count (graph meta "mesh"),
// else the graph meta's "world_size", else the ranks its process groups span; 0 when the graph
// has none of these (any world fits). `extra_json` is the graph's meta; a malformed mesh throws
// JfxError naming meta.mesh.
int64_t tracedWorldSize(const std::vector<ProcessGroupInfo>& groups, const std::string& extra_json);

// Empty when a world of `world_size` ranks can run the graph; else an error that names the ranks
// the graph expects (a larger world leaves ranks outside every group, a smaller one cannot fill
// them), e.g. "the graph was traced for 2 ranks (process group '0' has ranks [0, 1]), not 3:
// run with --nproc 2". A malformed mesh in `extra_json` throws JfxError naming meta.mesh.
std::string worldSizeProblem(const std::vector<ProcessGroupInfo>& groups,
                             const std::string& extra_json, int world_size);

// Whether c10d's registry (what the functional collectives resolve `group_name` through) has a
// group of this name.
bool groupRegistered(const std::string& name);

struct GlooOptions {
  int threads = 1;  // worker threads of each gloo backend (see process_groups.cc for why 1)
  // Groups over the same ranks (split-comm-groups' `0` and `0_rs`) run on one gloo backend:
  // one worker thread and one set of connections per rank set. On a host whose cores the ranks
  // fill, a second backend's threads make every collective slower (docs/executor.md, Process
  // groups) and buy no overlap. Safe because every rank issues collectives in the same program
  // order, so the shared queue is in the same order on every member.
  bool share_rank_sets = true;
};

class ProcessGroups {
 public:
  // Rendezvous and group creation; blocks until every member of every group this rank belongs to
  // has arrived, or `timeout` passes (then throws). `timeout` also bounds every collective.
  // Throws JfxError when the header does not fit the world (a group needing more ranks than there
  // are, duplicate ranks, size != ranks) or NCCL was asked for in a build without it.
  ProcessGroups(const std::vector<ProcessGroupInfo>& groups, const DistEnv& env,
                CommBackend backend, std::chrono::milliseconds timeout, GlooOptions gloo = {});
  ~ProcessGroups();
  ProcessGroups(const ProcessGroups&) = delete;
  ProcessGroups& operator=(const ProcessGroups&) = delete;

  // This process's rank inside the named group and the group's size; nullopt when the group is
  // unknown or this rank is not a member.
  std::optional<int> rankIn(std::string_view name) const;
  std::optional<int> sizeOf(std::string_view name) const;
  // The global ranks of a group, in group-rank order.
  const std::vector<int64_t>* ranksOf(std::string_view name) const;

  // A barrier over the whole world through the store (the graph may have no world-wide group).
  void worldBarrier(std::string_view tag);

  const DistEnv& env() const { return env_; }

 private:
  struct Group;
  DistEnv env_;
  std::chrono::milliseconds timeout_;
  c10::intrusive_ptr<c10d::Store> store_;
  std::vector<std::unique_ptr<Group>> groups_;
};

}  // namespace jfx::rt
