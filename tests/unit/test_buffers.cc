// Buffer updates (ir/mutation.h, Note [Buffer updates]): the traced conv + BatchNorm graphs
// (tests/data/buffers/convbn_w1.json, tests/data/traced/convbn_w2.json; five BatchNorm layers), the
// buffer_mutation output kind in both formats and the verifier, and what dce / remat / schedule do
// with them.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>

#include "ir/hash.h"
#include "ir/io.h"
#include "ir/json_format.h"
#include "ir/mutation.h"
#include "ir/text_format.h"
#include "ir/verifier.h"
#include "passes/bucket/schedule.h"
#include "passes/fsdp/remat.h"
#include "passes/pass_manager.h"
#include "passes/transforms/dce.h"

using namespace jfx;

namespace {

std::unique_ptr<Graph> convbn(int world) {
  return loadGraph(std::string(JFX_SOURCE_DIR) +
                   (world == 1 ? "/tests/data/buffers" : "/tests/data/traced") + "/convbn_w" +
                   std::to_string(world) + ".json");
}

std::vector<std::string> issuesOf(const Graph& g, std::string_view rule) {
  std::vector<std::string> out;
  for (const VerifyIssue& i : verifyGraph(g))
    if (i.rule == rule) out.push_back(i.message);
  return out;
}

size_t countTarget(const Graph& g, std::string_view target) {
  size_t n = 0;
  g.forEach([&](const Node* x) { n += x->is(target); });
  return n;
}

// A functional graph, as torch.export writes a BatchNorm update: the new running mean is an
// output of kind buffer_mutation.
constexpr const char* kFunctional = R"(jointfx.graph 1
outputs [loss, gradient "w", buffer_mutation "bn.running_mean"]
default_device "cpu"

%w : f32[4] = placeholder {input=parameter, fqn="w"}
%rm : f32[4] = placeholder {input=buffer, fqn="bn.running_mean"}
%x : f32[2, 4] = placeholder {input=user_input}
%mul : f32[2, 4] = aten.mul.Tensor(%x, %w) {phase=forward}
%mean : f32[4] = aten.mean.dim(%x, [0]) {phase=forward}
%upd : f32[4] = aten.lerp.Scalar(%rm, %mean, 0.1) {phase=forward}
%loss : f32[] = aten.sum.default(%mul) {phase=loss}
%g : f32[4] = aten.sum.dim_IntList(%x, [0]) {phase=backward}
%output = output([%loss, %g, %upd])
)";

}  // namespace

TEST_CASE("buffers: the traced conv+BN graph writes every BatchNorm buffer in place", "[buffers]") {
  for (int world : {1, 2}) {
    auto g = convbn(world);
    BufferMutations m = analyzeBufferMutations(*g);
    // Five BatchNorms: native_batch_norm (running_mean, running_var) and add_
    // (num_batches_tracked) each.
    REQUIRE(m.writers.size() == 10);
    std::vector<std::string> written, buffers;
    for (const Node* n : g->placeholders()) {
      if (n->inputKind() == InputKind::Buffer) buffers.emplace_back(n->inputFqn());
      if (m.written_alias[n->id()]) written.emplace_back(n->inputFqn());
    }
    CHECK(buffers.size() == 15);
    CHECK(written == buffers);
    const Node* bn = g->findNode("native_batch_norm");
    REQUIRE(bn);
    CHECK(mutatedOperands(*bn).size() == 2);
    CHECK(m.writesBuffer(bn));
    // The backward reads the running statistics after the forward wrote them.
    const Node* bwd = g->findNode("native_batch_norm_backward");
    REQUIRE(bwd);
    CHECK(m.readsWrittenBuffer(bwd));
    CHECK_FALSE(m.writesBuffer(bwd));
    CHECK(verifyGraph(*g).empty());
  }
}

TEST_CASE("buffers: batch norm in eval mode writes nothing", "[buffers]") {
  auto g = convbn(1);
  Node* bn = g->findNode("native_batch_norm");
  std::vector<Arg> args = bn->args();
  args[5] = Arg::ofBool(false);
  g->setArgs(bn, args);
  CHECK(mutatedOperands(*bn).empty());
  CHECK(analyzeBufferMutations(*g).writers.size() == 9);
}

TEST_CASE("buffers: buffer_mutation outputs round-trip text <-> JSON losslessly", "[buffers]") {
  auto g = parseTextGraph(kFunctional, "f.jfx");
  REQUIRE(g->outputSpecs().size() == 3);
  CHECK(g->outputSpecs()[2].kind == OutputKind::BufferMutation);
  CHECK(g->outputSpecs()[2].fqn == "bn.running_mean");
  CHECK(verifyGraph(*g).empty());
  std::string json = writeJsonGraph(*g);
  CHECK(json.find(R"({"fqn":"bn.running_mean","kind":"buffer_mutation"})") != std::string::npos);
  auto back = readJsonGraph(json, "f.json");
  CHECK(writeJsonGraph(*back) == json);
  CHECK(printTextGraph(*back) == printTextGraph(*g));
  CHECK(back->outputSpecs() == g->outputSpecs());

  // The traced in-place graphs too.
  auto t = convbn(2);
  std::string tj = writeJsonGraph(*t);
  CHECK(writeJsonGraph(*parseTextGraph(printTextGraph(*t), "t.jfx")) == tj);
}

TEST_CASE("buffers: readers name an unknown output kind", "[buffers]") {
  std::string text = kFunctional;
  text.replace(text.find("buffer_mutation"), 15, "buffer_update");
  try {
    parseTextGraph(text, "f.jfx");
    FAIL("accepted");
  } catch (const JfxError& e) {
    std::string what = e.what();
    CHECK(what.find("f.jfx:2:") != std::string::npos);
    CHECK(what.find("buffer_mutation") != std::string::npos);
  }
  std::string json = writeJsonGraph(*parseTextGraph(kFunctional, "f.jfx"));
  json.replace(json.find("buffer_mutation"), 15, "buffer_update");
  try {
    readJsonGraph(json, "f.json");
    FAIL("accepted");
  } catch (const JfxError& e) {
    std::string what = e.what();
    CHECK(what.find("/outputs/2/kind") != std::string::npos);
    CHECK(what.find("buffer_update") != std::string::npos);
  }
}

TEST_CASE("buffers: the verifier checks buffer_mutation outputs", "[buffers]") {
  auto with = [](std::string from, std::string to) {
    std::string text = kFunctional;
    text.replace(text.find(from), from.size(), to);
    return parseTextGraph(text, "f.jfx");
  };
  auto msgs = issuesOf(*with("buffer_mutation \"bn.running_mean\"", "buffer_mutation \"w\""),
                       "buffer-mutation");
  REQUIRE(msgs.size() == 1);
  CHECK(msgs[0] == "output 2 (buffer_mutation \"w\") names no buffer input");
  msgs =
      issuesOf(*with("buffer_mutation \"bn.running_mean\"", "buffer_mutation"), "buffer-mutation");
  REQUIRE(msgs.size() == 1);
  CHECK(msgs[0].find("no fqn") != std::string::npos);
  msgs = issuesOf(*with("%upd : f32[4] = aten.lerp.Scalar(%rm, %mean, 0.1)",
                        "%upd : f32[2, 4] = aten.mul.Tensor(%x, %w)"),
                  "buffer-mutation");
  REQUIRE(msgs.size() == 1);
  CHECK(msgs[0].find("does not match the buffer's dtype and shape") != std::string::npos);
  msgs = issuesOf(*with("[loss, gradient \"w\", buffer_mutation \"bn.running_mean\"]",
                        "[loss, buffer_mutation \"bn.running_mean\", "
                        "buffer_mutation \"bn.running_mean\"]"),
                  "buffer-mutation");
  REQUIRE(msgs.size() == 1);
  CHECK(msgs[0].find("updated by an earlier output") != std::string::npos);
  // Updated by an output and written in place as well: which one wins is not defined.
  msgs = issuesOf(*with("%loss : f32[]", "%inc : f32[4] = aten.add_.Tensor(%rm, 1)\n%loss : f32[]"),
                  "buffer-mutation");
  REQUIRE(msgs.size() == 1);
  CHECK(msgs[0].find("also written in place") != std::string::npos);
}

TEST_CASE("buffers: dce keeps every buffer write, even one nothing reads", "[buffers]") {
  auto g = convbn(2);
  // add_ on num_batches_tracked has no users: only its write keeps it.
  size_t adds = countTarget(*g, "aten.add_.Tensor");
  REQUIRE(adds == 5);
  Dce dce;
  PassContext ctx;
  dce.run(*g, ctx);
  CHECK(countTarget(*g, "aten.add_.Tensor") == 5);
  CHECK(countTarget(*g, "aten.native_batch_norm.default") == 5);

  Graph h;
  Node* x = h.create(OpKind::Placeholder, Symbol::intern("x"), {}, {}, "x");
  Node* rm = h.create(OpKind::Placeholder, Symbol::intern("rm"), {}, {}, "rm");
  rm->setInputInfo(InputKind::Buffer, "bn.running_mean");
  Node* rv = h.create(OpKind::Placeholder, Symbol::intern("rv"), {}, {}, "rv");
  rv->setInputInfo(InputKind::Buffer, "bn.running_var");
  // A native_batch_norm nothing reads still updates the running statistics.
  h.createCall("aten.native_batch_norm.default",
               {Arg::ofNode(x), Arg::none(), Arg::none(), Arg::ofNode(rm), Arg::ofNode(rv),
                Arg::ofBool(true), Arg::ofFloat(0.1), Arg::ofFloat(1e-5)},
               {}, nullptr, "bn");
  h.create(OpKind::Output, Symbol::intern("output"), {Arg::ofList({Arg::ofNode(x)})}, {}, "output");
  PassContext ctx2;
  dce.run(h, ctx2);
  CHECK(h.findNode("bn") != nullptr);
}

TEST_CASE("buffers: remat never recomputes a buffer write", "[buffers]") {
  auto g = convbn(2);
  // Tag the whole forward for recomputation, as a recompute-everything SAC policy would.
  size_t tagged = 0;
  g->forEach([&](Node* n) {
    if (n->op() == OpKind::CallFunction && n->meta().phase == Phase::Forward) {
      n->meta().recompute = Recompute::PreferRecompute;
      ++tagged;
    }
  });
  REQUIRE(tagged > 10);
  std::vector<ConfiguredPass> passes;
  passes.push_back({std::make_unique<RematPass>(), ""});
  PipelineResult r = runPasses(*g, passes, {});
  REQUIRE(r.passes.size() == 1);
  const Statistics& stats = r.passes[0].stats;
  CHECK(stats.at("in-place-saved") == 10);  // five native_batch_norm, five add_
  CHECK(stats.at("nodes-cloned") > 0);      // the rest of the forward is recomputed
  // Exactly one write per buffer per step: the originals, never a backward copy.
  CHECK(countTarget(*g, "aten.native_batch_norm.default") == 5);
  CHECK(countTarget(*g, "aten.add_.Tensor") == 5);
  CHECK(analyzeBufferMutations(*g).writers.size() == 10);
  g->forEach([&](const Node* n) {
    if (n->name().find("_recomputed") != std::string::npos) CHECK(mutatedOperands(*n).empty());
  });
}

TEST_CASE("buffers: the default pipeline keeps every buffer read on its side of the write",
          "[buffers]") {
  // For each buffer the graph writes: the sequence of nodes that touch it (reads, views, writes)
  // in program order, by name. Reordering passes must leave it as it was.
  auto touches = [](const Graph& g) {
    BufferMutations m = analyzeBufferMutations(g);
    std::vector<std::string> seq;
    g.forEach([&](const Node* n) {
      if (m.writesBuffer(n) || m.readsWrittenBuffer(n)) seq.push_back(std::string(n->name()));
    });
    return seq;
  };
  for (int world : {1, 2}) {
    auto g = convbn(world);
    std::vector<std::string> before = touches(*g);
    REQUIRE(before.size() == 15);  // 10 writes, 5 backward reads (native_batch_norm_backward)
    uint64_t hash_before = structuralHash(*g);
    runPipeline(
        *g, resolvePipeline(std::string(JFX_SOURCE_DIR) + "/configs/pipelines/default.json"), {});
    runPipeline(*g, resolvePipeline("bucket,schedule{prefetch=4}"), {});
    CHECK(structuralHash(*g) != hash_before);  // the pipeline did move and add nodes
    CHECK(touches(*g) == before);
    CHECK(analyzeBufferMutations(*g).writers.size() == 10);
  }
}
