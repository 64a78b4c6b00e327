#include "passes/analysis/simulator.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <unordered_map>

#include "ir/checked.h"
#include "ir/collectives.h"
#include "ir/error.h"
#include "passes/analysis/memory.h"
#include "passes/analysis/phase.h"

namespace jfx {
namespace {

std::string fmtMs(double seconds) {
  char buf[64];
  const double ms = seconds * 1e3;
  // Beyond 10^15 ms (31,700 years) a fixed-point figure is a wall of digits; say it in powers.
  std::snprintf(buf, sizeof buf, std::fabs(ms) < 1e15 ? "%.3f ms" : "%.3e ms", ms);
  return buf;
}

// A node's time must be a finite, non-negative number of seconds: a profile loaded from a file
// cannot give another (parseHardwareProfile's ranges), one built in memory can.
void checkDuration(const Node& n, double seconds, const CostModel& cost) {
  if (std::isfinite(seconds) && seconds >= 0) return;
  char buf[64];
  std::snprintf(buf, sizeof buf, "%g", seconds);
  throw JfxError(SourceLocation::atNode(std::string(n.name())),
                 "simulation: the node takes " + std::string(buf) + " s on hardware " +
                     quoteForMessage(cost.hardware().name) +
                     " (its rates must be positive and its latencies finite: docs/passes.md, "
                     "\"Cost model and hardware profiles\")");
}

// One simulated step: the compute stream runs the nodes in program order, each collective runs
// on its group's stream when its operands are ready, and a wait (or a node reading an unwaited
// collective's result) stalls the compute stream until the collective ends.
class Simulation {
 public:
  Simulation(const Graph& g, const CostModel& cost, const SimOptions& opts)
      : g_(g), cost_(cost), opts_(opts), ready_(g.maxId(), 0.0), chain_(g.maxId(), 0.0) {
    r.streams.push_back({"compute", 0, 0});
    // The stream key is the group name, or with a per-rank-set profile the first header group
    // over the same ranks (split-comm-groups' `0_rs` then shares `0`'s stream).
    if (cost.hardware().stream_per_rank_set) {
      std::map<std::vector<int64_t>, std::string> first;
      for (const ProcessGroupInfo& pg : g.processGroups()) {
        std::vector<int64_t> ranks = pg.ranks;
        if (ranks.empty()) ranks.push_back(-pg.size);  // all ranks of a world of that size
        key_of_.emplace(pg.name, first.emplace(std::move(ranks), pg.name).first->second);
      }
    }
    if (opts.record_trace) start_of_.assign(g.maxId(), 0.0);
  }

  void visit(const Node* n) {
    if (opts_.record_trace) start_of_[n->id()] = now_;
    if (n->op() != OpKind::CallFunction) {
      ready_[n->id()] = n->op() == OpKind::Output ? now_ : 0;
      return;
    }
    // Host dispatch of a node that launches no kernel (0 unless the profile sets it).
    const double host = cost_.hostSeconds(*n);
    checkDuration(*n, host, cost_);
    if (n->isCollective()) {
      hostTime(n, host);  // issuing it
      issue(n);
    } else if (n->isWait()) {
      // The compute stream waits for the collective (and anything else the wait reads).
      stall(n, operandsReady(n));
      hostTime(n, host);
      chainEnd(n, host);
      ready_[n->id()] = now_;
    } else {
      compute(n, host);
    }
  }

  SimResult finish() {
    double end = now_;
    for (double t : stream_free_)
      end = std::max(end, t);
    r.exposed_comm += end - now_;  // collectives nobody waited for still hold up the step
    r.step = end;
    r.lower_bound = r.critical_path;
    for (const SimStream& s : r.streams)
      r.lower_bound = std::max(r.lower_bound, s.busy);
    // Finite node times can still add up past the largest double (each below 10^308 s).
    for (double v : {r.step, r.compute, r.comm, r.exposed_comm, r.lower_bound})
      if (!std::isfinite(v))
        throw JfxError({},
                       "simulation: the step's times add up past the largest double on hardware " +
                           quoteForMessage(cost_.hardware().name));
    if (opts_.memory) memory();
    return std::move(r);
  }

 private:
  double operandsReady(const Node* n) const {
    double t = 0;
    for (const Node* p : n->inputs())
      t = std::max(t, ready_[p->id()]);
    return t;
  }
  void stall(const Node* n, double until) {
    if (until <= now_) return;
    r.exposed_comm += until - now_;
    if (opts_.record_trace) r.events.push_back({n, 0, now_, until - now_, true});
    now_ = until;
  }
  void chainEnd(const Node* n, double dur) {
    double t = 0;
    for (const Node* p : n->inputs())
      t = std::max(t, chain_[p->id()]);
    chain_[n->id()] = t + dur;
    r.critical_path = std::max(r.critical_path, t + dur);
  }
  void hostTime(const Node* n, double host) {
    if (host <= 0) return;
    if (opts_.record_trace) r.events.push_back({n, 0, now_, host, false});
    r.compute += host;
    r.streams[0].busy += host;
    now_ += host;
  }
  // The stream of a collective's group, made at its first use.
  uint32_t streamOf(const Node* n) {
    std::string group(collectiveGroupName(*n));
    if (auto k = key_of_.find(group); k != key_of_.end()) group = k->second;
    auto [it, fresh] = stream_of_.emplace(group, static_cast<uint32_t>(r.streams.size()));
    if (fresh) {
      r.streams.push_back({group.empty() ? "(no group)" : group, 0, 0});
      stream_free_.push_back(0);
    }
    return it->second;
  }
  void issue(const Node* n) {
    const uint32_t s = streamOf(n);
    const double start = std::max({now_, operandsReady(n), stream_free_[s]});
    const double dur = cost_.collectiveSeconds(*n, g_);
    checkDuration(*n, dur, cost_);
    chainEnd(n, dur);
    ready_[n->id()] = start + dur;
    stream_free_[s] = start + dur;
    r.streams[s].busy += dur;
    r.streams[s].ops += 1;
    r.comm += dur;
    r.num_collectives += 1;
    r.collective_bytes =
        saturatingAdd(r.collective_bytes, saturatingFromDouble(CostModel::collectiveBytes(*n)));
    if (opts_.record_trace) r.events.push_back({n, s, start, dur, false});
  }
  void compute(const Node* n, double host) {
    // A compute node reading an unwaited collective result stalls like a wait would.
    stall(n, operandsReady(n));
    const double dur = cost_.computeSeconds(*n) + host;
    checkDuration(*n, dur, cost_);
    chainEnd(n, dur);
    if (dur > 0) {
      if (opts_.record_trace) r.events.push_back({n, 0, now_, dur, false});
      r.compute += dur;
      r.streams[0].busy += dur;
      r.streams[0].ops += 1;
      now_ += dur;
    }
    ready_[n->id()] = now_;
  }
  void memory() {
    MemoryProfile mem =
        opts_.phases ? analyzeMemory(g_, *opts_.phases) : analyzeMemory(g_, computePhases(g_));
    r.peak_memory_bytes = mem.peak_bytes;
    if (!opts_.record_trace) return;
    int64_t last = -1;
    size_t step = 0;
    for (const Node* n = g_.first(); n && step < mem.curve.size(); n = n->next(), ++step) {
      if (mem.curve[step] == last) continue;
      last = mem.curve[step];
      r.memory_track.emplace_back(start_of_[n->id()], last);
    }
  }

  SimResult r;
  const Graph& g_;
  const CostModel& cost_;
  const SimOptions& opts_;
  // Stream key -> stream index. Lookups only; the stream order is first use in program order.
  std::unordered_map<std::string, uint32_t> stream_of_;
  std::unordered_map<std::string, std::string> key_of_;  // per-rank-set: group name -> key
  std::vector<double> stream_free_ = std::vector<double>(1, 0.0);
  std::vector<double> ready_;     // when each node's value is available
  std::vector<double> chain_;     // longest dependency chain ending at each node
  std::vector<double> start_of_;  // record_trace: compute-stream time at each node
  double now_ = 0;                // compute stream
};

}  // namespace

std::string formatMicros(double seconds) {
  char buf[64];
  const double us = seconds * 1e6;
  std::snprintf(buf, sizeof buf, std::fabs(us) < 1e15 ? "%.1f us" : "%.3e us", us);
  return buf;
}

int64_t microsecondsStat(double seconds, const std::string& what) {
  const double us = std::round(seconds * 1e6);
  // 2^63 itself does not fit; every double below it does.
  if (std::isfinite(us) && us >= 0 && us < 9223372036854775808.0) return static_cast<int64_t>(us);
  throw JfxError({}, what + ": the simulated step, " + formatMicros(seconds) +
                         ", does not fit a 64-bit count of microseconds (292,000 years): the "
                         "graph's sizes or the hardware profile are beyond any real machine");
}

SimResult simulate(const Graph& g, const CostModel& cost, const SimOptions& opts) {
  Simulation sim(g, cost, opts);
  for (const Node* n = g.first(); n; n = n->next())
    sim.visit(n);
  return sim.finish();
}

std::string simulationTable(const SimResult& r, const HardwareProfile& hw) {
  std::string out = "simulation (" + hw.name + "):\n";
  char buf[256];
  std::snprintf(buf, sizeof buf, "  step: %s\n  compute: %s\n", fmtMs(r.step).c_str(),
                fmtMs(r.compute).c_str());
  out += buf;
  std::snprintf(buf, sizeof buf, "  communication: %s (%lld collectives, %s)\n",
                fmtMs(r.comm).c_str(), static_cast<long long>(r.num_collectives),
                formatBytes(r.collective_bytes).c_str());
  out += buf;
  std::snprintf(buf, sizeof buf, "  exposed communication: %s (%.1f%% of step)\n",
                fmtMs(r.exposed_comm).c_str(), 100 * r.exposedShare());
  out += buf;
  std::snprintf(buf, sizeof buf, "  lower bound: %s (critical path %s); step / bound: %.3f\n",
                fmtMs(r.lower_bound).c_str(), fmtMs(r.critical_path).c_str(), r.boundRatio());
  out += buf;
  if (r.peak_memory_bytes >= 0)
    out += "  peak memory (estimated): " + formatBytes(r.peak_memory_bytes) + "\n";
  out += "  streams:\n";
  for (const SimStream& s : r.streams) {
    std::snprintf(buf, sizeof buf, "    %s: %s busy, %lld %s\n", s.name.c_str(),
                  fmtMs(s.busy).c_str(), static_cast<long long>(s.ops),
                  &s == &r.streams.front() ? "kernels" : "collectives");
    out += buf;
  }
  return out;
}

nlohmann::json simulationJson(const SimResult& r, const HardwareProfile& hw) {
  nlohmann::json j;
  j["hardware"] = hw.name;
  j["step_s"] = r.step;
  j["compute_s"] = r.compute;
  j["comm_s"] = r.comm;
  j["exposed_comm_s"] = r.exposed_comm;
  j["exposed_comm_share"] = r.exposedShare();
  j["lower_bound_s"] = r.lower_bound;
  j["critical_path_s"] = r.critical_path;
  j["step_over_bound"] = r.boundRatio();
  j["num_collectives"] = r.num_collectives;
  j["collective_bytes"] = r.collective_bytes;
  if (r.peak_memory_bytes >= 0) j["peak_memory_bytes"] = r.peak_memory_bytes;
  nlohmann::json streams = nlohmann::json::array();
  for (const SimStream& s : r.streams)
    streams.push_back({{"name", s.name}, {"busy_s", s.busy}, {"ops", s.ops}});
  j["streams"] = streams;
  return j;
}

std::string chromeTrace(const SimResult& r) {
  using nlohmann::json;
  json events = json::array();
  for (size_t s = 0; s < r.streams.size(); ++s)
    events.push_back(
        {{"name", "thread_name"},
         {"ph", "M"},
         {"pid", 0},
         {"tid", s},
         {"args", {{"name", s == 0 ? std::string("compute") : "pg " + r.streams[s].name}}}});
  for (const SimEvent& e : r.events) {
    json ev = {
        {"name", e.stall ? "wait " + std::string(e.node->name()) : std::string(e.node->name())},
        {"ph", "X"},
        {"pid", 0},
        {"tid", e.stream},
        {"ts", e.start * 1e6},
        {"dur", e.duration * 1e6},
        {"args", {{"target", std::string(e.node->target().str())}}}};
    if (e.stall) ev["cat"] = "exposed";
    events.push_back(std::move(ev));
  }
  for (const auto& [t, bytes] : r.memory_track)
    events.push_back({{"name", "memory"},
                      {"ph", "C"},
                      {"pid", 0},
                      {"ts", t * 1e6},
                      {"args", {{"MiB", static_cast<double>(bytes) / (1 << 20)}}}});
  json doc = {{"traceEvents", events}, {"displayTimeUnit", "ms"}};
  return doc.dump() + "\n";
}

}  // namespace jfx
