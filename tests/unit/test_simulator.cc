// Timeline simulator on graphs small enough to time by hand. The profile makes a [*, K] x [K, N]
// f32 matmul cost 2 * M * K * N / 1e12 s and a 2-rank all-gather of S output bytes S / 2 / 1e9 s,
// with no latency and no kernel overhead.
#include <catch2/catch.hpp>

#include <limits>
#include <nlohmann/json.hpp>
#include <string>

#include "ir/error.h"
#include "passes/analysis/memory.h"
#include "passes/analysis/phase.h"
#include "passes/analysis/simulator.h"

using namespace jfx;

namespace {

const char* kProfile = R"({
  "name": "unit",
  "gpus_per_node": 8,
  "peak_tflops": {"default": 1},
  "memory_bandwidth_gbps": 1e6,
  "intra_node": {"bus_bandwidth_gbps": 1},
  "inter_node": {"bus_bandwidth_gbps": 1}
})";

constexpr double kMs = 1e-3;

TensorMeta f32(std::vector<int64_t> shape) {
  return TensorMeta::contiguous(ScalarType::Float32, std::move(shape));
}

struct Sim {
  Graph g;
  CostModel cm{parseHardwareProfile(kProfile, "unit.json")};
  Sim() {
    g.processGroups().push_back({"0", 2, {0, 1}});
    g.processGroups().push_back({"1", 2, {0, 1}});
  }
  Node* input(const std::string& name, TensorMeta t, InputKind kind = InputKind::UserInput) {
    Node* n = g.create(OpKind::Placeholder, Symbol::intern(name), {}, {}, name);
    n->setInputInfo(kind, kind == InputKind::Parameter ? name : "");
    n->val() = ValueMeta::ofTensor(std::move(t));
    return n;
  }
  Node* call(const std::string& target, std::vector<Arg> args, TensorMeta t,
             const std::string& name = "") {
    Node* n = g.createCall(target, std::move(args), {}, nullptr, name);
    n->val() = ValueMeta::ofTensor(std::move(t));
    return n;
  }
  // A [250, 1000] f32 shard gathered over 2 ranks: 2 MB out, 1 ms.
  Node* gather(Node* shard, const char* group = "0") {
    return call("_c10d_functional.all_gather_into_tensor.default",
                {Arg::ofNode(shard), Arg::ofInt(2), Arg::ofStr(group)}, f32({500, 1000}));
  }
  Node* wait(Node* c) {
    return call("_c10d_functional.wait_tensor.default", {Arg::ofNode(c)}, c->val().tensor);
  }
  Node* mm(Node* a, Node* b) {
    return call("aten.mm.default", {Arg::ofNode(a), Arg::ofNode(b)},
                f32({a->val().tensor.shape[0], b->val().tensor.shape[1]}));
  }
  void output(std::vector<Node*> vals) {
    std::vector<Arg> items;
    for (Node* v : vals)
      items.push_back(Arg::ofNode(v));
    g.create(OpKind::Output, Symbol::intern("output"), {Arg::ofList(items)}, {}, "output");
  }
  SimResult run(bool trace = false) {
    SimOptions o;
    o.record_trace = trace;
    return simulate(g, cm, o);
  }
};

}  // namespace

TEST_CASE("simulator: a wait right after its collective is fully exposed", "[sched]") {
  Sim s;
  Node* w = s.input("w", f32({250, 1000}), InputKind::Parameter);
  Node* x = s.input("x", f32({1000, 500}));
  Node* y = s.mm(x, s.wait(s.gather(w)));  // 2 * 1000 * 500 * 1000 = 1e9 FLOPs: 1 ms
  s.output({y});
  SimResult r = s.run();
  CHECK(r.step == Approx(2 * kMs));
  CHECK(r.compute == Approx(1 * kMs));
  CHECK(r.comm == Approx(1 * kMs));
  CHECK(r.exposed_comm == Approx(1 * kMs));
  CHECK(r.exposedShare() == Approx(0.5));
  CHECK(r.num_collectives == 1);
  CHECK(r.collective_bytes == 2000000);
  REQUIRE(r.streams.size() == 2);
  CHECK(r.streams[0].name == "compute");
  CHECK(r.streams[1].name == "0");
}

TEST_CASE("simulator: independent compute hides a collective", "[sched]") {
  Sim s;
  Node* w = s.input("w", f32({250, 1000}), InputKind::Parameter);
  Node* x = s.input("x", f32({1000, 500}));
  Node* a = s.input("a", f32({1000, 1000}));
  Node* ag = s.gather(w);
  Node* busy = s.mm(a, a);  // 2 ms, overlaps the 1 ms gather
  Node* y = s.mm(x, s.wait(ag));
  s.output({y, busy});
  SimResult r = s.run();
  CHECK(r.step == Approx(3 * kMs));
  CHECK(r.exposed_comm == Approx(0).margin(1e-12));

  // Half-hidden: 0.5 ms of compute in front of a 1 ms gather exposes 0.5 ms.
  Sim h;
  Node* w2 = h.input("w", f32({250, 1000}), InputKind::Parameter);
  Node* x2 = h.input("x", f32({1000, 500}));
  Node* b = h.input("b", f32({500, 500}));
  Node* ag2 = h.gather(w2);
  Node* half = h.mm(b, h.input("c", f32({500, 1000})));  // 2 * 500 * 500 * 1000 = 0.5 ms
  Node* y2 = h.mm(x2, h.wait(ag2));
  h.output({y2, half});
  SimResult r2 = h.run();
  CHECK(r2.step == Approx(2 * kMs));
  CHECK(r2.exposed_comm == Approx(0.5 * kMs));
}

TEST_CASE("simulator: one group runs its collectives one at a time, groups overlap", "[sched]") {
  SECTION("same group: the second gather queues behind the first") {
    Sim s;
    Node* w1 = s.input("w1", f32({250, 1000}), InputKind::Parameter);
    Node* w2 = s.input("w2", f32({250, 1000}), InputKind::Parameter);
    Node* a1 = s.gather(w1, "0");
    Node* a2 = s.gather(w2, "0");
    Node* x2 = s.wait(a2);
    Node* x1 = s.wait(a1);
    s.output({x1, x2});
    SimResult r = s.run();
    CHECK(r.step == Approx(2 * kMs));
    CHECK(r.exposed_comm == Approx(2 * kMs));
    CHECK(r.streams[1].busy == Approx(2 * kMs));
  }
  SECTION("two groups: the gathers run side by side") {
    Sim s;
    Node* w1 = s.input("w1", f32({250, 1000}), InputKind::Parameter);
    Node* w2 = s.input("w2", f32({250, 1000}), InputKind::Parameter);
    Node* a1 = s.gather(w1, "0");
    Node* a2 = s.gather(w2, "1");
    Node* x2 = s.wait(a2);
    Node* x1 = s.wait(a1);
    s.output({x1, x2});
    SimResult r = s.run();
    CHECK(r.step == Approx(1 * kMs));
    CHECK(r.exposed_comm == Approx(1 * kMs));
    CHECK(r.comm == Approx(2 * kMs));
    REQUIRE(r.streams.size() == 3);
    CHECK(r.streams[2].name == "1");
  }
  SECTION("collective_streams per_rank_set: groups over the same ranks share one stream") {
    // jointfx exec's gloo backend runs `0` and `1` (both ranks {0, 1}) on one worker thread.
    std::string shared = kProfile;
    shared.replace(shared.find("\"gpus_per_node\""), 0,
                   "\"collective_streams\": \"per_rank_set\", ");
    CostModel cm(parseHardwareProfile(shared, "gloo.json"));
    CHECK(cm.hardware().stream_per_rank_set);
    CHECK_FALSE(Sim().cm.hardware().stream_per_rank_set);  // the default: one per group
    Sim s;
    s.g.processGroups().push_back({"other", 2, {0, 2}});
    Node* w1 = s.input("w1", f32({250, 1000}), InputKind::Parameter);
    Node* w2 = s.input("w2", f32({250, 1000}), InputKind::Parameter);
    Node* w3 = s.input("w3", f32({250, 1000}), InputKind::Parameter);
    Node* a1 = s.gather(w1, "0");
    Node* a2 = s.gather(w2, "1");
    Node* a3 = s.gather(w3, "other");
    s.output({s.wait(a2), s.wait(a1), s.wait(a3)});
    SimResult r = simulate(s.g, cm);
    CHECK(r.step == Approx(2 * kMs));  // `1` queues behind `0`; `other` runs beside them
    REQUIRE(r.streams.size() == 3);
    CHECK(r.streams[1].name == "0");
    CHECK(r.streams[1].ops == 2);
    CHECK(r.streams[2].name == "other");
    CHECK(simulate(s.g, s.cm).step == Approx(1 * kMs));
    shared.replace(shared.find("per_rank_set"), 12, "per_rankset");
    CHECK_THROWS_WITH(parseHardwareProfile(shared, "bad.json"),
                      Catch::Contains("bad.json") && Catch::Contains("/collective_streams") &&
                          Catch::Contains("per_rank_set"));
  }
}

TEST_CASE("simulator: a collective starts when issued, not before", "[sched]") {
  // 2 ms of compute, then the gather is issued: it cannot have run during that compute.
  Sim s;
  Node* w = s.input("w", f32({250, 1000}), InputKind::Parameter);
  Node* a = s.input("a", f32({1000, 1000}));
  Node* busy = s.mm(a, a);
  Node* x = s.wait(s.gather(w));
  s.output({busy, x});
  SimResult r = s.run(true);
  CHECK(r.step == Approx(3 * kMs));
  CHECK(r.exposed_comm == Approx(1 * kMs));
  // Trace: the mm on the compute track, the gather on group 0's track starting at 2 ms, and the
  // wait's stall on the compute track.
  nlohmann::json trace = nlohmann::json::parse(chromeTrace(r));
  int slices = 0, stalls = 0;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] != "X") continue;
    ++slices;
    if (e.contains("cat") && e["cat"] == "exposed") ++stalls;
    if (e["tid"] == 1) CHECK(e["ts"].get<double>() == Approx(2000));
  }
  CHECK(slices == 3);
  CHECK(stalls == 1);
}

TEST_CASE("simulator: collectives nobody waits for count as an exposed tail", "[sched]") {
  Sim s;
  Node* g = s.input("g", f32({500, 1000}));
  Node* rs =
      s.call("_c10d_functional.reduce_scatter_tensor.default",
             {Arg::ofNode(g), Arg::ofStr("sum"), Arg::ofInt(2), Arg::ofStr("0")}, f32({250, 1000}));
  s.output({rs});
  SimResult r = s.run();
  CHECK(r.compute == 0);
  CHECK(r.step == Approx(1 * kMs));
  CHECK(r.exposed_comm == Approx(1 * kMs));
}

TEST_CASE("simulator: peak memory is the memory analysis of the same order", "[sched]") {
  Sim s;
  Node* w = s.input("w", f32({250, 1000}), InputKind::Parameter);
  Node* x = s.input("x", f32({1000, 500}));
  Node* y = s.mm(x, s.wait(s.gather(w)));
  s.output({y});
  SimResult r = s.run();
  MemoryProfile mem = analyzeMemory(s.g, computePhases(s.g));
  CHECK(r.peak_memory_bytes == mem.peak_bytes);
  CHECK(r.peak_memory_bytes > 0);
  nlohmann::json j = simulationJson(r, s.cm.hardware());
  CHECK(j["peak_memory_bytes"] == mem.peak_bytes);
  CHECK(j["exposed_comm_share"].get<double>() == Approx(0.5));
  std::string table = simulationTable(r, s.cm.hardware());
  CHECK(table.find("exposed communication") != std::string::npos);
  CHECK(table.find("50.0% of step") != std::string::npos);
}

TEST_CASE("simulator: lower bound is the busiest stream or the critical path", "[sched]") {
  SECTION("exposed gather: the chain gather -> mm is the bound, and the step meets it") {
    Sim s;
    Node* w = s.input("w", f32({250, 1000}), InputKind::Parameter);
    Node* x = s.input("x", f32({1000, 500}));
    s.output({s.mm(x, s.wait(s.gather(w)))});
    SimResult r = s.run();
    CHECK(r.critical_path == Approx(2 * kMs));
    CHECK(r.lower_bound == Approx(2 * kMs));
    CHECK(r.boundRatio() == Approx(1.0));
  }
  SECTION("a badly placed gather: the bound says 2 ms is possible, the order takes 3") {
    Sim s;
    Node* w = s.input("w", f32({250, 1000}), InputKind::Parameter);
    Node* x = s.input("x", f32({1000, 500}));
    Node* a = s.input("a", f32({1000, 1000}));
    Node* busy = s.mm(a, a);  // 2 ms of compute issued before the 1 ms gather it could hide
    Node* y = s.mm(x, s.wait(s.gather(w)));
    s.output({y, busy});
    SimResult r = s.run();
    CHECK(r.step == Approx(4 * kMs));
    CHECK(r.streams[0].busy == Approx(3 * kMs));
    CHECK(r.critical_path == Approx(2 * kMs));
    CHECK(r.lower_bound == Approx(3 * kMs));  // compute stream busy time
    CHECK(r.boundRatio() == Approx(4.0 / 3.0));
  }
  SECTION("one group's collectives serialize: their sum bounds the step") {
    Sim s;
    Node* w1 = s.input("w1", f32({250, 1000}), InputKind::Parameter);
    Node* w2 = s.input("w2", f32({250, 1000}), InputKind::Parameter);
    Node* a1 = s.gather(w1, "0");
    Node* a2 = s.gather(w2, "0");
    s.output({s.wait(a1), s.wait(a2)});
    SimResult r = s.run();
    CHECK(r.critical_path == Approx(1 * kMs));
    CHECK(r.lower_bound == Approx(2 * kMs));
    nlohmann::json j = simulationJson(r, s.cm.hardware());
    CHECK(j["lower_bound_s"].get<double>() == Approx(2 * kMs));
    CHECK(j["step_over_bound"].get<double>() == Approx(1.0));
    CHECK(simulationTable(r, s.cm.hardware()).find("step / bound: 1.000") != std::string::npos);
  }
}

TEST_CASE("simulator: host overhead and local collectives (host_overhead_us, local_collective_us)",
          "[sched]") {
  // The same graph on the unit profile and on one with a CPU executor's terms: every node that
  // launches no kernel (collective issue, wait, view) costs 10 us on the compute stream, and a
  // collective on a group of one rank a fixed 25 us on top of its local copy.
  std::string cpu = kProfile;
  cpu.replace(cpu.find("\"gpus_per_node\""), 0,
              "\"host_overhead_us\": 10, \"local_collective_us\": 25, ");
  CostModel host(parseHardwareProfile(cpu, "cpu.json"));
  CHECK(host.hardware().host_overhead == Approx(10e-6));
  CHECK(host.hardware().local_collective == Approx(25e-6));

  Sim s;
  Node* w = s.input("w", f32({250, 1000}), InputKind::Parameter);
  Node* x = s.input("x", f32({1000, 500}));
  Node* ag = s.gather(w);
  Node* full = s.wait(ag);
  Node* v =
      s.call("aten.view.default", {Arg::ofNode(full), Arg::ofInts({500, 1000})}, f32({500, 1000}));
  Node* y = s.mm(x, v);
  s.output({y});
  CHECK(host.hostSeconds(*v) == Approx(10e-6));
  CHECK(host.hostSeconds(*ag) == Approx(10e-6));
  CHECK(host.hostSeconds(*full) == Approx(10e-6));
  CHECK(host.hostSeconds(*y) == 0);  // kernels carry kernel_overhead instead
  CHECK(host.hostSeconds(*x) == 0);  // placeholders run nothing
  CHECK(s.cm.hostSeconds(*v) == 0);  // absent from the profile: off
  CHECK(host.computeSeconds(*y) == Approx(s.cm.computeSeconds(*y)));

  SimResult base = s.run();
  SimResult r = simulate(s.g, host, SimOptions{});
  CHECK(base.step == Approx(2 * kMs));
  // issue 10 us, the 1 ms gather, then the wait and the view 10 us each, then the 1 ms mm.
  CHECK(r.step == Approx(2 * kMs + 30e-6));
  CHECK(r.compute == Approx(1 * kMs + 30e-6));
  CHECK(r.exposed_comm == Approx(1 * kMs));

  // A group of one rank: the local copy (2 S / memory bandwidth) plus the fixed part.
  double bytes = 2e6;
  double copy = 2 * bytes / 1e15;
  CHECK(s.cm.collectiveCost(CollectiveKind::AllGather, bytes, 1).seconds == Approx(copy));
  CollectiveCost local = host.collectiveCost(CollectiveKind::AllGather, bytes, 1);
  CHECK(local.seconds == Approx(copy + 25e-6));
  CHECK(local.latency == Approx(25e-6));
  // Groups of two are not affected.
  CHECK(host.collectiveCost(CollectiveKind::AllGather, bytes, 2).seconds ==
        Approx(s.cm.collectiveCost(CollectiveKind::AllGather, bytes, 2).seconds));
}

TEST_CASE("simulator: a node time that is not a finite number is an error naming the node",
          "[sched]") {
  // A profile built in memory skips parseHardwareProfile's ranges: a zero FLOP rate makes the
  // matmul infinite, a zero bandwidth 0/0 (NaN) for a kernel with no FLOPs; neither may reach
  // the step time, where "inf ms" and "-nan%" used to be printed.
  Sim s;
  Node* w = s.input("w", f32({250, 1000}), InputKind::Parameter);
  Node* x = s.input("x", f32({1000, 500}));
  Node* full = s.wait(s.gather(w));
  s.call("aten.mm.default", {Arg::ofNode(x), Arg::ofNode(full)}, f32({1000, 1000}), "the_mm");
  s.output({});
  HardwareProfile zero_rate = s.cm.hardware();
  zero_rate.default_peak_flops = 0;
  try {
    simulate(s.g, CostModel(zero_rate));
    FAIL("expected an error");
  } catch (const JfxError& e) {
    INFO(e.what());
    CHECK(e.location().node == "the_mm");
    CHECK(std::string(e.what()).find("takes inf s on hardware 'unit'") != std::string::npos);
  }
  // A link of zero bandwidth: the gather before it is the node named.
  HardwareProfile no_link = s.cm.hardware();
  no_link.intra_node_bus_bw = 0;
  try {
    simulate(s.g, CostModel(no_link));
    FAIL("expected an error");
  } catch (const JfxError& e) {
    INFO(e.what());
    CHECK(e.location().node.starts_with("all_gather_into_tensor"));
  }
}

TEST_CASE("simulator: simulated steps print and convert without overflow", "[sched]") {
  CHECK(formatMicros(273.94e-6) == "273.9 us");
  CHECK(formatMicros(1e20) == "1.000e+26 us");  // not 27 digits
  CHECK(microsecondsStat(273.94e-6, "x") == 274);
  CHECK(microsecondsStat(0, "x") == 0);
  CHECK(microsecondsStat(9.2e12, "x") == 9200000000000000000);
  // Past 2^63 us, infinite, NaN or negative: an error that says why, never a wrapped count
  // (the planners used to report simulated-step-us = -9223372036854775808).
  for (double bad : {9.3e12, 1e300, std::numeric_limits<double>::infinity(),
                     std::numeric_limits<double>::quiet_NaN(), -1.0}) {
    try {
      microsecondsStat(bad, "pass 'schedule': prefetch=auto");
      FAIL("expected an error for " << bad);
    } catch (const JfxError& e) {
      CHECK(std::string(e.what()).find("pass 'schedule': prefetch=auto: the simulated step") !=
            std::string::npos);
      CHECK(std::string(e.what()).find("does not fit a 64-bit count of microseconds") !=
            std::string::npos);
    }
  }
}
