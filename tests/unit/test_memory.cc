// Memory analysis (passes/analysis/memory.h): storages, aliasing, liveness and the peak.
#include <catch2/catch.hpp>
#include <map>

#include "passes/analysis/memory.h"
#include "passes/analysis/phase.h"
#include "passes/fsdp/remat.h"
#include "passes/fsdp/tag_fsdp.h"
#include "test_fsdp_graphs.h"

using namespace jfx;
using namespace jfx::testing;

namespace {

std::vector<int64_t> curveOf(const MemoryProfile& p) {
  return p.curve;
}

MemoryProfile profile(const Graph& g) {
  return analyzeMemory(g, computePhases(g));
}

using Bytes = std::vector<int64_t>;

}  // namespace

TEST_CASE("memory: views share storage, dead values free at once, outputs stay", "[fsdp]") {
  Graph g;
  Node* x = placeholder(g, "x", f32({4}), InputKind::UserInput);
  Builder b{g, false};
  Node* a = b.call("aten.neg.default", {N(x)}, f32({4}), "a");
  Node* v = b.call("aten.view.default", {N(a), Arg::ofInts({2, 2})}, f32({2, 2}), "v");
  Node* e = b.call("aten.exp.default", {N(v)}, f32({2, 2}), "e");
  b.call("aten.neg.default", {N(e)}, f32({2, 2}), "dead");
  b.output({e});
  MemoryProfile p = profile(g);
  // x | a (+16) | v (alias) | e (+16, then a's storage is freed) | dead (+16, freed at once) | out
  CHECK(curveOf(p) == Bytes{16, 32, 32, 48, 48, 32});
  CHECK(p.peak_bytes == 48);
  CHECK(p.peak_node == e);
  CHECK(p.input_bytes == 16);
  REQUIRE(p.largest_at_peak.size() == 3);
  CHECK(p.largest_at_peak[0].owner == x);  // ties by position
  CHECK(p.largest_at_peak[0].is_input);
  CHECK(p.largest_at_peak[1].owner == a);
  CHECK(p.largest_at_peak[2].owner == e);
}

TEST_CASE("memory: a collective's input lives until its wait", "[fsdp]") {
  Graph g;
  Node* x = placeholder(g, "x", f32({4}), InputKind::UserInput);
  Builder b{g, false};
  Node* a = b.call("aten.neg.default", {N(x)}, f32({4}), "a");
  Node* ag = b.allGather(a, 2, "ag");  // 32 bytes
  Node* z = b.call("aten.neg.default", {N(x)}, f32({4}), "z");
  Node* w = b.wait(ag, "w");
  Node* out = b.call("aten.neg.default", {N(w)}, f32({8}), "out");
  b.output({out});
  MemoryProfile p = profile(g);
  // a stays live across z because the all-gather reads it until the wait.
  CHECK(curveOf(p) == Bytes{16, 32, 64, 80, 64, 80, 48});
  CHECK(p.peak_node == z);
  CHECK(p.peak_bytes == 80);
}

TEST_CASE("memory: multi-output nodes and getitems of views", "[fsdp]") {
  Graph g;
  Node* x = placeholder(g, "x", f32({4}), InputKind::UserInput);
  Builder b{g, false};
  TensorMeta t = f32({4});
  Node* drop = g.createCall("aten.native_dropout.default",
                            {N(x), Arg::ofFloat(0.5), Arg::ofBool(true)}, {}, nullptr, "drop");
  drop->val() = ValueMeta::ofList({ValueMeta::ofTensor(t), ValueMeta::ofTensor(t)});
  Node* g0 = b.call("operator.getitem", {N(drop), Arg::ofInt(0)}, t, "g0");
  b.call("operator.getitem", {N(drop), Arg::ofInt(1)}, t, "g1");  // unused mask: freed at once
  Node* sp = g.createCall("aten.split.Tensor", {N(g0), Arg::ofInt(2)}, {}, nullptr, "sp");
  sp->val() = ValueMeta::ofList({ValueMeta::ofTensor(f32({2})), ValueMeta::ofTensor(f32({2}))});
  Node* s0 = b.call("operator.getitem", {N(sp), Arg::ofInt(0)}, f32({2}), "s0");
  Node* r = b.call("aten.neg.default", {N(s0)}, f32({2}), "r");  // last reader of drop[0]
  Node* r2 = b.call("aten.exp.default", {N(r)}, f32({2}), "r2");
  b.output({r2});
  MemoryProfile p = profile(g);
  // x | drop (+32, mask freed) | g0 | g1 | sp | s0 | r (+8, drop[0] freed) | r2 (+8, r freed) | out
  CHECK(curveOf(p) == Bytes{16, 48, 32, 32, 32, 32, 40, 32, 24});
  CHECK(p.peak_node == drop);
}

TEST_CASE("memory: phase peaks on the worked example", "[fsdp]") {
  Graph g;
  buildWorkedExample(g);
  MemoryProfile p = profile(g);
  CHECK(p.peakOf(Phase::Forward).node != nullptr);
  CHECK(p.peakOf(Phase::Backward).node != nullptr);
  CHECK(p.peakOf(Phase::Loss).node == g.findNode("loss"));
  CHECK(p.peak_bytes >= p.peakOf(Phase::Backward).bytes);
  CHECK(p.input_bytes == (32 + 32 + 16) * 4);
  CHECK(p.curve.size() == g.size());
}

TEST_CASE("memory: reshard after forward saves about (L-2) unsharded layers", "[fsdp]") {
  // World 8 keeps the sharded inputs and gradient outputs small next to unsharded weights. Layer
  // 0's weight has no backward user, so reshard=never holds L-1 weights at the boundary and
  // reshard=always about one; the always peak then sits late in backward where gradient shards
  // have piled up, so the saving lands a little under (L-2) layers.
  const int layers = 8;
  const int64_t d = 64, batch = 2, world = 8;
  const int64_t layer_bytes = d * d * 4;
  auto peak = [&](TagFsdpPass::Reshard r) {
    Graph g;
    buildLinearStack(g, layers, d, batch, world);
    PassContext ctx;
    TagFsdpPass(r, 1).run(g, ctx);
    RematPass().run(g, ctx);
    return profile(g);
  };
  MemoryProfile never = peak(TagFsdpPass::Reshard::Never);
  MemoryProfile always = peak(TagFsdpPass::Reshard::Always);
  const int64_t saving = never.peak_bytes - always.peak_bytes;
  INFO("never " << never.peak_bytes << " always " << always.peak_bytes << " saving " << saving);
  CHECK(saving >= (layers - 3) * layer_bytes);
  CHECK(saving <= layers * layer_bytes);
  // With reshard=never the peak holds every unsharded weight at the forward/backward boundary.
  CHECK(never.largest_at_peak.front().bytes == layer_bytes);
}
