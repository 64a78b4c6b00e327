#include "passes/analysis/cost_model.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "ir/collectives.h"
#include "ir/error.h"
#include "ir/io.h"
#include "ir/json_document.h"
#include "passes/data_files.h"

namespace jfx {
namespace {

using nlohmann::json;

[[noreturn]] void profileError(const std::string& file, const std::string& pointer,
                               const std::string& message) {
  SourceLocation loc;
  loc.file = file;
  loc.json_pointer = pointer;
  throw JfxError(loc, message);
}

// The physical range of a profile's number, in the file's unit. The bounds are generous (any
// machine built or planned is far inside them) and keep every figure the cost model and the
// simulator derive finite: a denormal rate, a zero bandwidth or a latency of 1e308 would give
// infinite or NaN step times (docs/passes.md, "Ranges").
struct Range {
  double lo;
  double hi;
  const char* text;                 // the range as the error message states it
  bool zero_means_unknown = false;  // 0 is accepted below lo (memory capacity)
};

constexpr Range kRateTflops{1e-6, 1e8, "1e-6 to 1e8 TFLOP/s (1 MFLOP/s to 10^20 FLOP/s)"};
constexpr Range kBandwidthGbps{1e-3, 1e6, "0.001 to 1e6 GB/s (1 MB/s to 1 PB/s)"};
constexpr Range kLatencyUs{0, 1e7, "0 to 1e7 us (10 s)"};
constexpr Range kEfficiency{1e-3, 1, "0.001 to 1 (a fraction of the peak)"};
constexpr Range kCapacityGib{1.0 / 1024, 1 << 20,
                             "1/1024 to 1048576 GiB (1 MiB to 1 PiB), or 0 for unknown", true};
constexpr Range kRailBytes{1, 1e15, "1 to 1e15 bytes (1 PB)"};
constexpr Range kExponent{0, 1, "0 to 1"};

// The shortest text that reads back as `v` (1e-320, not 9.99989e-321).
std::string shortest(double v) {
  char buf[32];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return ec == std::errc() ? std::string(buf, end) : std::string("?");
}

[[noreturn]] void outOfRange(const std::string& file, const std::string& pointer, double v,
                             const Range& r) {
  profileError(file, pointer, shortest(v) + " is outside the physical range: expected " + r.text);
}

// The number `value` (at `pointer`), within `range`.
double inRange(const json& value, const std::string& file, const std::string& pointer,
               const Range& range) {
  if (!value.is_number()) profileError(file, pointer, "expected a number");
  // + 0.0 turns -0 into 0, so no figure prints as "-0".
  double v = value.get<double>() + 0.0;
  if (range.zero_means_unknown && v == 0) return 0;
  if (!(v >= range.lo && v <= range.hi)) outOfRange(file, pointer, v, range);
  return v;
}

// The number at obj[key] (a default when the key is absent and `required` is false), within
// `range`.
double number(const json& obj, const char* key, const std::string& file, const std::string& at,
              bool required, double dflt, const Range& range) {
  auto it = obj.find(key);
  if (it == obj.end()) {
    if (required) profileError(file, at, std::string("missing key '") + key + "'");
    return dflt;
  }
  return inRange(*it, file, at + "/" + key, range);
}

// A whole number in [lo, hi] at obj[key] (a count: a fraction would truncate, and a huge double
// does not fit an int64_t).
int64_t count(const json& obj, const char* key, const std::string& file, const std::string& at,
              bool required, int64_t dflt, int64_t lo, int64_t hi) {
  auto it = obj.find(key);
  if (it == obj.end()) {
    if (required) profileError(file, at, std::string("missing key '") + key + "'");
    return dflt;
  }
  const std::string pointer = at + "/" + key;
  if (!it->is_number()) profileError(file, pointer, "expected a number");
  double v = it->get<double>();
  if (!(v >= static_cast<double>(lo) && v <= static_cast<double>(hi)) || v != std::floor(v))
    profileError(file, pointer,
                 "expected a whole number from " + std::to_string(lo) + " to " +
                     std::to_string(hi) + ", got " + shortest(v));
  return static_cast<int64_t>(v);
}

void checkKeys(const json& obj, const std::set<std::string>& allowed, const std::string& file,
               const std::string& at) {
  if (!obj.is_object()) profileError(file, at.empty() ? "/" : at, "expected an object");
  for (auto it = obj.begin(); it != obj.end(); ++it)
    if (!allowed.count(it.key()))
      profileError(file, at + "/" + it.key(), "unknown key " + quoteForMessage(it.key()));
}

const TensorMeta* firstTensor(const ValueMeta& v) {
  if (v.kind == ValueMeta::Kind::Tensor) return &v.tensor;
  if (v.kind == ValueMeta::Kind::List)
    for (const ValueMeta& item : v.items)
      if (const TensorMeta* t = firstTensor(item)) return t;
  return nullptr;
}

const TensorMeta* argTensor(const Node& n, size_t i) {
  if (i >= n.numArgs()) return nullptr;
  const Node* p = n.arg(i).node();
  return p ? firstTensor(p->val()) : nullptr;
}

double numel(const TensorMeta* t) {
  return t ? static_cast<double>(t->numel()) : 0;
}

// 2 * B * H * Sq * Sk * (D + Dv): the two batched matmuls of attention (torch's flop counter).
double sdpaForwardFlops(const TensorMeta* q, const TensorMeta* k, const TensorMeta* v) {
  if (!q || !k || q->shape.size() < 2 || k->shape.size() < 2) return 0;
  double sq = static_cast<double>(q->shape[q->shape.size() - 2]);
  double d = static_cast<double>(q->shape.back());
  double sk = static_cast<double>(k->shape[k->shape.size() - 2]);
  double dv = v && !v->shape.empty() ? static_cast<double>(v->shape.back()) : d;
  double batch = 1;
  for (size_t i = 0; i + 2 < q->shape.size(); ++i)
    batch *= static_cast<double>(q->shape[i]);
  return 2 * batch * sq * sk * (d + dv);
}

}  // namespace

double HardwareProfile::peakFlops(ScalarType t) const {
  for (const auto& [dtype, peak] : peak_flops)
    if (dtype == t) return peak;
  return default_peak_flops;
}

namespace {

// The profile's JSON document; errors located at the byte or the JSON pointer.
json parseProfileJson(std::string_view json_text, const std::string& filename) {
  return readJsonDocument(json_text, filename);
}

// The links: "intra_node" and "inter_node".
void readLinks(const json& doc, const std::string& filename, HardwareProfile& hw) {
  for (const char* which : {"intra_node", "inter_node"}) {
    std::string at = std::string("/") + which;
    if (!doc.contains(which))
      profileError(filename, at, std::string("missing key '") + which + "'");
    const json& link = doc[which];
    bool inter = std::string_view(which) == "inter_node";
    if (inter)
      checkKeys(link,
                {"bus_bandwidth_gbps", "hop_latency_us", "net_overhead_us", "nic_efficiency_min",
                 "nic_full_nodes", "multi_rail_bytes", "multi_rail_exponent", "notes"},
                filename, at);
    else
      checkKeys(link, {"bus_bandwidth_gbps", "hop_latency_us", "notes"}, filename, at);
    double bw = number(link, "bus_bandwidth_gbps", filename, at, true, 0, kBandwidthGbps) * 1e9;
    double hop = number(link, "hop_latency_us", filename, at, false, 0, kLatencyUs) * 1e-6;
    if (!inter) {
      hw.intra_node_bus_bw = bw;
      hw.intra_node_hop_latency = hop;
      continue;
    }
    hw.inter_node_bus_bw = bw;
    hw.inter_node_hop_latency = hop;
    hw.net_overhead = number(link, "net_overhead_us", filename, at, false, 0, kLatencyUs) * 1e-6;
    hw.nic_efficiency_min = number(link, "nic_efficiency_min", filename, at, false, 1, kEfficiency);
    hw.nic_full_nodes = count(link, "nic_full_nodes", filename, at, false, 8, 2, 1000000);
    hw.multi_rail_bytes = number(link, "multi_rail_bytes", filename, at, false, 50e6, kRailBytes);
    hw.multi_rail_exponent = number(link, "multi_rail_exponent", filename, at, false, 0, kExponent);
  }
}

}  // namespace

HardwareProfile parseHardwareProfile(std::string_view json_text, const std::string& filename) {
  json doc = parseProfileJson(json_text, filename);
  checkKeys(doc,
            {"name", "description", "gpus_per_node", "peak_tflops", "compute_efficiency",
             "memory_bandwidth_gbps", "memory_efficiency", "memory_capacity_gib",
             "kernel_overhead_us", "base_latency_us", "intra_node", "inter_node",
             "host_overhead_us", "local_collective_us", "collective_streams", "sources", "notes"},
            filename, "");
  HardwareProfile hw;
  if (!doc.contains("name") || !doc["name"].is_string())
    profileError(filename, "/name", "expected a string");
  hw.name = doc["name"].get<std::string>();
  if (doc.contains("description")) {
    if (!doc["description"].is_string())
      profileError(filename, "/description", "expected a string");
    hw.description = doc["description"].get<std::string>();
  }
  hw.gpus_per_node = count(doc, "gpus_per_node", filename, "", true, 1, 1, 1 << 20);
  if (!doc.contains("peak_tflops") || !doc["peak_tflops"].is_object())
    profileError(filename, "/peak_tflops", "expected an object of dtype -> TFLOP/s");
  // nlohmann's object iteration is key-sorted, so the table order is deterministic.
  for (auto it = doc["peak_tflops"].begin(); it != doc["peak_tflops"].end(); ++it) {
    std::string at = "/peak_tflops/" + it.key();
    double flops = inRange(*it, filename, at, kRateTflops) * 1e12;
    if (it.key() == "default") {
      hw.default_peak_flops = flops;
      continue;
    }
    auto dtype = dtypeFromName(it.key());
    if (!dtype) profileError(filename, at, "unknown dtype " + quoteForMessage(it.key()));
    hw.peak_flops.emplace_back(*dtype, flops);
  }
  if (hw.default_peak_flops == 0)
    profileError(filename, "/peak_tflops", "missing key 'default' (peak for unlisted dtypes)");
  hw.compute_efficiency = number(doc, "compute_efficiency", filename, "", false, 1, kEfficiency);
  hw.memory_bandwidth =
      number(doc, "memory_bandwidth_gbps", filename, "", true, 0, kBandwidthGbps) * 1e9;
  hw.memory_efficiency = number(doc, "memory_efficiency", filename, "", false, 1, kEfficiency);
  hw.memory_capacity = number(doc, "memory_capacity_gib", filename, "", false, 0, kCapacityGib) *
                       1024.0 * 1024 * 1024;
  hw.kernel_overhead = number(doc, "kernel_overhead_us", filename, "", false, 0, kLatencyUs) * 1e-6;
  hw.base_latency = number(doc, "base_latency_us", filename, "", false, 0, kLatencyUs) * 1e-6;
  hw.host_overhead = number(doc, "host_overhead_us", filename, "", false, 0, kLatencyUs) * 1e-6;
  hw.local_collective =
      number(doc, "local_collective_us", filename, "", false, 0, kLatencyUs) * 1e-6;
  if (doc.contains("collective_streams")) {
    const json& v = doc["collective_streams"];
    if (!v.is_string() || (v != "per_group" && v != "per_rank_set"))
      profileError(filename, "/collective_streams", "expected \"per_group\" or \"per_rank_set\"");
    hw.stream_per_rank_set = v == "per_rank_set";
  }
  readLinks(doc, filename, hw);
  return hw;
}

HardwareProfile loadHardwareProfile(const std::string& path) {
  const std::string file = resolveHardwareProfilePath(path);  // a bare name: a shipped profile
  return parseHardwareProfile(readInputFile(file, "hardware profile"), file);
}

bool CostModel::isFree(const Node& n) {
  if (n.op() != OpKind::CallFunction) return true;
  switch (n.info().category) {
    case OpCategory::View:
    case OpCategory::Getitem:
    case OpCategory::Wait:
    case OpCategory::Other:       // asserts, sym_size: host-side or negligible
    case OpCategory::Collective:  // runs on its group's stream, not the compute stream
      return true;
    default:
      return false;
  }
}

double CostModel::flops(const Node& n) {
  const OpInfo& info = n.info();
  switch (info.flops) {
    case FlopFormula::Zero:
      return 0;
    case FlopFormula::OutNumel:
      return numel(firstTensor(n.val()));
    case FlopFormula::InNumel:
      return numel(argTensor(n, 0));
    case FlopFormula::Mm:
    case FlopFormula::Addmm:
    case FlopFormula::Bmm: {
      // 2 * (output elements) * K, K the contraction size: the last dim of the left operand.
      // addmm and baddbmm carry the bias first, so their left operand is arg 1.
      bool has_bias = info.flops == FlopFormula::Addmm ||
                      (info.flops == FlopFormula::Bmm && n.numArgs() >= 3 && n.arg(2).isNode());
      const TensorMeta* lhs = argTensor(n, has_bias ? 1 : 0);
      const TensorMeta* out = firstTensor(n.val());
      if (!lhs || !out || lhs->shape.empty()) return 0;
      return 2 * numel(out) * static_cast<double>(lhs->shape.back());
    }
    case FlopFormula::SdpaFwd:
      return sdpaForwardFlops(argTensor(n, 0), argTensor(n, 1), argTensor(n, 2));
    case FlopFormula::SdpaBwd:
      // Backward args start with grad_out, then q, k, v; the op-info rule is 2.5x forward.
      return 2.5 * sdpaForwardFlops(argTensor(n, 1), argTensor(n, 2), argTensor(n, 3));
    case FlopFormula::Conv:
    case FlopFormula::ConvBwd: {
      // Each output element takes (in channels / groups) x kernel multiply-adds, which is the
      // weight's numel over its out channels. Backward computes grad input and grad weight, each
      // as costly as the forward, from grad_out (arg 0) and the weight (arg 2).
      const bool bwd = info.flops == FlopFormula::ConvBwd;
      const TensorMeta* out = bwd ? argTensor(n, 0) : firstTensor(n.val());
      const TensorMeta* w = argTensor(n, bwd ? 2 : 1);
      if (!out || !w || w->shape.empty() || w->shape[0] <= 0) return 0;
      double fwd = 2 * numel(out) * numel(w) / static_cast<double>(w->shape[0]);
      return bwd ? 2 * fwd : fwd;
    }
  }
  return 0;
}

double CostModel::memoryBytes(const Node& n) {
  if (isFree(n)) return 0;
  double bytes = static_cast<double>(n.val().bytes());
  // Each distinct operand is read once (mm(x, x) reads x once).
  const auto& ins = n.inputs();
  for (size_t i = 0; i < ins.size(); ++i) {
    if (std::find(ins.begin(), ins.begin() + static_cast<std::ptrdiff_t>(i), ins[i]) !=
        ins.begin() + static_cast<std::ptrdiff_t>(i))
      continue;
    bytes += static_cast<double>(ins[i]->val().bytes());
  }
  return bytes;
}

double CostModel::collectiveBytes(const Node& n) {
  double in = 0;
  for (const Node* p : n.inputs())
    in += static_cast<double>(p->val().bytes());
  return std::max(in, static_cast<double>(n.val().bytes()));
}

double CostModel::computeSeconds(const Node& n) const {
  if (isFree(n)) return 0;
  // The FLOP rate is the operands' dtype (a bf16 matmul writing fp32 still runs at bf16 rate).
  ScalarType dtype = ScalarType::Float32;
  if (const TensorMeta* t = argTensor(n, 0); t && dtypeIsFloatingPoint(t->dtype))
    dtype = t->dtype;
  else if (const TensorMeta* o = firstTensor(n.val()))
    dtype = o->dtype;
  double f = flops(n);
  double t_flops = f > 0 ? f / (hw_.peakFlops(dtype) * hw_.compute_efficiency) : 0;
  double b = memoryBytes(n);
  double t_bytes = b > 0 ? b / (hw_.memory_bandwidth * hw_.memory_efficiency) : 0;
  return std::max(t_flops, t_bytes) + hw_.kernel_overhead;
}

double CostModel::hostSeconds(const Node& n) const {
  return n.op() == OpKind::CallFunction && isFree(n) ? hw_.host_overhead : 0;
}

CollectiveCost CostModel::collectiveCost(CollectiveKind kind, double bytes,
                                         int64_t group_size) const {
  CollectiveCost c;
  c.bytes = bytes;
  double g = static_cast<double>(std::max<int64_t>(1, group_size));
  if (group_size <= 1) {
    // NCCL copies the buffer locally: read and write once.
    c.seconds = 2 * bytes / (hw_.memory_bandwidth * hw_.memory_efficiency);
    if (hw_.local_collective > 0) {
      c.latency = hw_.local_collective;
      c.seconds += hw_.local_collective;
    }
    return c;
  }
  int64_t per_node = std::max<int64_t>(1, hw_.gpus_per_node);
  c.nodes = (group_size + per_node - 1) / per_node;
  c.inter_node = c.nodes > 1;
  bool all_reduce = kind == CollectiveKind::AllReduce;
  double steps = all_reduce ? 2 * (g - 1) : g - 1;
  c.inter_steps = c.nodes == 1 ? 0 : (all_reduce ? 2 : 1) * (c.nodes - 1);
  double intra_hop = hw_.intra_node_hop_latency;
  double bus_bw = hw_.intra_node_bus_bw;
  if (c.inter_node) {
    // Every step of a ring that spans nodes also pays the network proxy's overhead.
    intra_hop = std::max(intra_hop, hw_.net_overhead);
    double nodes = static_cast<double>(c.nodes);
    double full = static_cast<double>(hw_.nic_full_nodes);
    double nic = hw_.nic_efficiency_min +
                 (1 - hw_.nic_efficiency_min) * std::min(1.0, (nodes - 1) / (full - 1));
    bus_bw = hw_.inter_node_bus_bw * nic;
    if (c.nodes > 2 && hw_.multi_rail_exponent > 0)
      bus_bw *= std::pow(std::max(bytes, hw_.multi_rail_bytes) / hw_.multi_rail_bytes,
                         hw_.multi_rail_exponent);
  }
  c.bus_bw = bus_bw;
  switch (kind) {
    case CollectiveKind::AllReduce:
      c.alg_bw = bus_bw * g / (2 * (g - 1));
      break;
    case CollectiveKind::Broadcast:
      c.alg_bw = bus_bw;
      break;
    default:  // all-gather, reduce-scatter, all-to-all
      c.alg_bw = bus_bw * g / (g - 1);
      break;
  }
  double inter_steps = static_cast<double>(c.inter_steps);
  c.latency = hw_.base_latency + (steps - inter_steps) * intra_hop +
              inter_steps * hw_.inter_node_hop_latency;
  c.seconds = c.latency + bytes / c.alg_bw;
  return c;
}

double CostModel::collectiveSeconds(const Node& n, const Graph& g) const {
  return collectiveCost(n.info().collective, collectiveBytes(n), collectiveGroupSize(n, g)).seconds;
}

double CostModel::nodeSeconds(const Node& n, const Graph& g) const {
  if (n.isCollective()) return collectiveSeconds(n, g);
  return computeSeconds(n);
}

}  // namespace jfx
