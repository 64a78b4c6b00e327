// Cost model: how long each node takes on a given machine, from a hardware profile
// (configs/hardware/*.json) and the tensor meta on the graph. Nothing is measured, so every rank
// derives the same numbers and therefore the same schedule (a rank that schedules differently
// hangs NCCL).
//
// Compute nodes: roofline. t = max(FLOPs / (peak[dtype] * compute_efficiency),
//                                  bytes / (memory_bandwidth * memory_efficiency)) +
//                                  kernel_overhead
//   FLOPs come from the op-info FlopFormula; bytes are the distinct tensor operands read plus the
//   outputs written. Views, getitems, placeholders, waits and the output node cost nothing.
// Collectives: NCCL's ring model, as nccl-tests defines its bandwidths.
//   t = latency + S / algBw, S = the full buffer (all-gather output, reduce-scatter input,
//   all-reduce buffer); algBw = busBw * G / (G - 1) for all-gather, reduce-scatter and
//   all-to-all, busBw * G / (2 (G - 1)) for all-reduce, busBw for broadcast.
//   The ring spans nNodes = ceil(G / gpus_per_node) nodes, as NCCL's ring/Simple tuning model
//   (ncclTopoTuneModel, mirrored by torch/_inductor/comm_analysis.py) counts it:
//   latency = base_latency + (steps - inter_steps) * max(intra_hop, net_overhead)
//             + inter_steps * inter_hop,
//   steps = G - 1 (2 (G - 1) for all-reduce); inter_steps = nNodes - 1 (2 (nNodes - 1) for
//   all-reduce): the ring crosses the network once per node boundary and NVLink for the rest.
//   busBw is the intra-node one when nNodes == 1; otherwise the inter-node one scaled by the
//   NIC efficiency (min + (1 - min) * min(1, (nNodes - 1) / (full_nodes - 1))) and, above two
//   nodes, by multi-rail use of large messages ((max(S, rail_bytes) / rail_bytes) ^ exponent).
//   G == 1 is a local copy: 2 * S / memory bandwidth + local_collective (0 unless the profile
//   sets local_collective_us; gloo pays tens of microseconds for it on CPU).
// Host overhead (host_overhead_us, default 0): on a CPU executor every node costs dispatch time
//   on the compute stream, also views, getitems, waits and the issue of a collective; the
//   simulator adds hostSeconds() for those (compute nodes carry it in kernel_overhead).
// Limits, documented in docs/passes.md: no link contention between concurrent collectives, no SM
// contention between NCCL kernels and compute, no protocol (LL/LL128/Simple) selection.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ir/graph.h"

namespace jfx {

// All rates in SI units (FLOP/s, bytes/s, seconds); the JSON file uses TFLOP/s, GB/s (1e9 bytes)
// and microseconds, which is how datasheets and nccl-tests print them.
struct HardwareProfile {
  std::string name;
  std::string description;
  std::vector<std::pair<ScalarType, double>> peak_flops;  // dense peak per dtype
  double default_peak_flops = 0;                          // dtypes not listed
  double compute_efficiency = 1;  // sustained / peak for large GEMMs and attention
  double memory_bandwidth = 0;
  double memory_efficiency = 1;  // sustained / peak for streaming kernels
  double memory_capacity = 0;    // bytes per device; 0 = unknown
  double kernel_overhead = 0;    // seconds added to every kernel that does work
  int64_t gpus_per_node = 1;
  double intra_node_bus_bw = 0;  // NCCL busBw when the group fits in one node
  double inter_node_bus_bw = 0;  // NCCL busBw when the group spans nodes
  double base_latency = 0;       // per collective
  double intra_node_hop_latency = 0;
  double inter_node_hop_latency = 0;
  // Multi-node rings (all optional in the file; the defaults switch each effect off):
  double net_overhead = 0;        // floor of an intra-node step's latency once the ring spans nodes
  double nic_efficiency_min = 1;  // busBw factor at 2 nodes, rising linearly to 1 at full_nodes
  int64_t nic_full_nodes = 8;     // nodes at which every NIC is in use
  double multi_rail_bytes = 50e6;  // messages above this spread over more rails (> 2 nodes)
  double multi_rail_exponent = 0;  // busBw *= (S / multi_rail_bytes) ^ exponent
  // Host-bound executors (all optional; 0, the default, switches each off, as on a GPU whose
  // host runs ahead of the device):
  double host_overhead = 0;     // compute-stream seconds of every call_function node that
                                // launches no kernel (view, getitem, wait, collective issue)
  double local_collective = 0;  // fixed seconds of a collective on a group of one rank
  // "collective_streams": "per_group" (default: one NCCL communicator, so one stream, per group
  // name) or "per_rank_set" (groups over the same ranks share one stream: jointfx exec's gloo
  // backend, which runs them on one worker thread).
  bool stream_per_rank_set = false;

  double peakFlops(ScalarType t) const;
};

// Throws JfxError naming the file and the key on a missing or bad value; unknown keys are errors
// too (a typo must not silently fall back to a default). "sources" and "notes" are free-form.
HardwareProfile parseHardwareProfile(std::string_view json_text, const std::string& filename);
// `path` may be a bare name, a shipped profile (h100; passes/data_files.h).
HardwareProfile loadHardwareProfile(const std::string& path);

struct CollectiveCost {
  double seconds = 0;
  double latency = 0;
  double bytes = 0;   // S
  double alg_bw = 0;  // bytes/s; 0 for a local copy
  bool inter_node = false;
  int64_t nodes = 1;        // ceil(G / gpus_per_node)
  int64_t inter_steps = 0;  // ring steps that cross the network
  double bus_bw = 0;        // bytes/s after the multi-node scaling; 0 for a local copy
};

class CostModel {
 public:
  explicit CostModel(HardwareProfile hw) : hw_(std::move(hw)) {}
  const HardwareProfile& hardware() const { return hw_; }

  // FLOPs of one node from its op-info formula and tensor meta; 0 when the meta is missing.
  static double flops(const Node& n);
  // Bytes a kernel moves: each distinct tensor operand once plus every output tensor. 0 for
  // nodes that launch no kernel (views, getitems, placeholders, waits, output).
  static double memoryBytes(const Node& n);
  // True when the node launches no kernel on the compute stream.
  static bool isFree(const Node& n);
  // nccl-tests' "size": the larger of the input and output buffers.
  static double collectiveBytes(const Node& n);
  // (A collective's group name and size: ir/collectives.h.)

  double computeSeconds(const Node& n) const;
  // Compute-stream seconds of a call_function node that launches no kernel (view, getitem,
  // wait, collective issue): the profile's host_overhead; 0 for every other node.
  double hostSeconds(const Node& n) const;
  CollectiveCost collectiveCost(CollectiveKind kind, double bytes, int64_t group_size) const;
  double collectiveSeconds(const Node& n, const Graph& g) const;
  // computeSeconds for compute nodes, collectiveSeconds for collectives, 0 otherwise.
  double nodeSeconds(const Node& n, const Graph& g) const;

 private:
  HardwareProfile hw_;
};

}  // namespace jfx
