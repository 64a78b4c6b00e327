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

TEST_CASE("memory: the peak's bytes by class sum to the peak", "[fsdp]") {
  Graph g;
  Node* w = placeholder(g, "w", f32({4}), InputKind::Parameter);
  Node* x = placeholder(g, "x", f32({4}), InputKind::UserInput);
  Builder b{g, false};
  Node* ag = b.allGather(w, 2, "ag");                                      // 32 bytes
  Node* gw = b.wait(ag, "gw");                                             // a view of it
  Node* piece = b.call("aten.clone.default", {N(gw)}, f32({8}), "piece");  // copied out
  Node* y = b.call("aten.neg.default", {N(piece)}, f32({8}), "y");         // activation
  Node* rs = b.reduceScatter(y, 2, "rs");                                  // 16 bytes
  Node* r = b.wait(rs, "r");
  Node* out = b.call("aten.neg.default", {N(r)}, f32({4}), "out");
  b.output({out});
  MemoryProfile p = profile(g);
  int64_t sum = 0;
  for (int64_t bytes : p.peak_by_class)
    sum += bytes;
  CHECK(sum == p.peak_bytes);
  auto at = [&](PeakClass c) { return p.peak_by_class[static_cast<size_t>(c)]; };
  CHECK(at(PeakClass::Parameters) == 16);
  CHECK(at(PeakClass::OtherInputs) == 16);
  // The peak is at the copy: the all-gather's output and the piece a bucket would copy out of
  // it, both gathered parameters, beside the two inputs.
  CHECK(p.peak_node == piece);
  CHECK(p.peak_bytes == 96);
  CHECK(at(PeakClass::GatheredParameters) == 64);
  CHECK(peakClassName(PeakClass::GatheredParameters) == "gathered_parameters");
  (void)x;
  (void)y;
  (void)out;
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
  // x | drop (+32) | g0 | g1 (the tuple, mask included, dies after its last getitem) | sp | s0 |
  // r (+8, drop[0] freed) | r2 (+8, r freed) | out
  CHECK(curveOf(p) == Bytes{16, 48, 48, 48, 32, 32, 40, 32, 24});
  CHECK(p.peak_node == drop);
}

TEST_CASE("memory: a reshape copies when the strides do not allow a view", "[fsdp]") {
  // As bucket leaves a gathered bucket: rows [2, 16], a piece [2, 8] of them with stride 16,
  // reshaped to [16]: PyTorch copies (the piece's rows are not adjacent). A reshape of a
  // contiguous tensor, and contiguous() of one, are views.
  Graph g;
  Node* x = placeholder(g, "x", f32({2, 16}), InputKind::UserInput);
  Builder b{g, false};
  Node* rows = b.call("aten.neg.default", {N(x)}, f32({2, 16}), "rows");  // 128 B
  TensorMeta piece = f32({2, 8});
  piece.stride = {16, 1};
  Node* p0 = b.call("aten.slice.Tensor", {N(rows), Arg::ofInt(1), Arg::ofInt(0), Arg::ofInt(8)},
                    piece, "p0");
  Node* copy = b.call("aten.reshape.default", {N(p0), Arg::ofInts({16})}, f32({16}), "copy");
  Node* flat = b.call("aten.reshape.default", {N(x), Arg::ofInts({32})}, f32({32}), "flat");
  Node* cont = b.call("aten.contiguous.default", {N(flat)}, f32({32}), "cont");
  Node* tr = b.call("aten.contiguous.default", {N(p0)}, f32({2, 8}), "tr");  // copies
  Node* e = b.call("aten.add.Tensor", {N(copy), N(copy)}, f32({16}), "e");
  b.output({e, cont, tr});
  MemoryProfile p = profile(g);
  // x 128 | rows +128 | p0 view | copy +64 | flat, cont: views of x | tr +64, then rows is freed |
  // e +64, then copy is freed | out: x, tr, e
  CHECK(curveOf(p) == Bytes{128, 256, 256, 320, 320, 320, 384, 320, 256});
}

TEST_CASE("memory: a coalesced collective's inputs and outputs live until its last wait",
          "[fsdp]") {
  Graph g;
  Node* x = placeholder(g, "x", f32({4}), InputKind::UserInput);
  Builder b{g, false};
  Node* a = b.call("aten.neg.default", {N(x)}, f32({4}), "a");  // 16 B
  Node* c = b.call("aten.exp.default", {N(x)}, f32({2}), "c");  // 8 B
  Node* ag =
      g.createCall("_c10d_functional.all_gather_into_tensor_coalesced.default",
                   {Arg::ofList({N(a), N(c)}), Arg::ofInt(2), Arg::ofStr("0")}, {}, nullptr, "ag");
  ag->val() = ValueMeta::ofList({ValueMeta::ofTensor(f32({8})), ValueMeta::ofTensor(f32({4}))});
  Node* g0 = b.call("operator.getitem", {N(ag), Arg::ofInt(0)}, f32({8}), "g0");
  Node* g1 = b.call("operator.getitem", {N(ag), Arg::ofInt(1)}, f32({4}), "g1");
  Node* w0 = b.wait(g0, "w0");
  Node* s0 = b.call("aten.sum.default", {N(w0)}, f32({}), "s0");
  Node* w1 = b.wait(g1, "w1");
  b.output({s0, w1});
  MemoryProfile p = profile(g);
  // x 16 | a +16 | c +8 | ag +48 | g0 | g1 | w0 | s0 +4 (ag[0] stays: the collective's tuple, a
  // and c live until w1, its last wait) | w1, then a, c and ag[0] are freed | out: x, s0, ag[1]
  CHECK(curveOf(p) == Bytes{16, 32, 40, 88, 88, 88, 88, 92, 92, 36});

  // With gloo's buffers: the all-gather of 2 tensors stages 2 copies of the first (32 B) during
  // its call.
  MemoryOptions gloo;
  gloo.backend = CommBackend::Gloo;
  MemoryProfile pg = analyzeMemory(g, computePhases(g), gloo);
  CHECK(curveOf(pg) == Bytes{16, 32, 40, 120, 88, 88, 88, 92, 92, 36});
  CHECK(pg.peak_node == ag);
}

TEST_CASE("memory: gloo's reduce-scatter buffer lives until the wait", "[fsdp]") {
  Graph g;
  Node* x = placeholder(g, "x", f32({8}), InputKind::UserInput);  // 32 B
  Builder b{g, false};
  Node* gr = b.call("aten.neg.default", {N(x)}, f32({8}), "gr");  // 32 B
  Node* rs = b.reduceScatter(gr, 2, "rs");                        // 16 B
  Node* z = b.call("aten.exp.default", {N(x)}, f32({8}), "z");    // 32 B
  Node* w = b.wait(rs, "w");
  Node* s = b.call("aten.add.Tensor", {N(w), N(w)}, f32({4}), "s");
  b.output({s, z});
  MemoryProfile nccl = profile(g);
  CHECK(curveOf(nccl) == Bytes{32, 64, 80, 112, 112, 96, 80});
  MemoryOptions o;
  o.backend = CommBackend::Gloo;
  MemoryProfile gloo = analyzeMemory(g, computePhases(g), o);
  // + gr's 32 B staged from rs to w
  CHECK(curveOf(gloo) == Bytes{32, 64, 112, 144, 144, 96, 80});
  CHECK(gloo.peak_bytes == 144);
  bool staged = false;
  for (const LiveTensor& t : gloo.largest_at_peak)
    staged |= t.owner == rs && t.element == StorageLife::kStaging && t.bytes == 32;
  CHECK(staged);
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
