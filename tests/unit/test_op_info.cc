// The op-info table (ir/op_info.*): schema facts from ir/ops_generated.def merged with the hand
// rows of ir/ops.def; the passes' use of its mutation and randomness facts on traced graphs.
#include <catch2/catch.hpp>
#include <fstream>
#include <map>
#include <set>
#include <string>

#include "ir/error.h"
#include "ir/hash.h"
#include "ir/io.h"
#include "ir/mutation.h"
#include "ir/op_info.h"
#include "passes/analysis/mutation.h"
#include "passes/fsdp/remat.h"
#include "passes/transforms/dce.h"

using namespace jfx;

namespace {

std::unique_ptr<Graph> traced(const std::string& name) {
  return loadGraph(std::string(JFX_SOURCE_DIR) + "/tests/data/traced/" + name);
}

Arg N(Node* n) {
  return Arg::ofNode(n);
}

}  // namespace

TEST_CASE("op table: every overload of the registry namespaces is known", "[op_info]") {
  size_t count = 0;
  const OpInfo* rows = opInfoTable(&count);
  std::map<std::string, size_t> per_ns;
  for (size_t i = 0; i < count; ++i) {
    if (i > 0) CHECK(rows[i - 1].target < rows[i].target);  // sorted, no duplicates
    if (rows[i].in_registry) {
      std::string_view t = rows[i].target;
      ++per_ns[std::string(t.substr(0, t.find('.')))];
    }
  }
  // The pinned torch registers thousands of aten overloads; a build that lost the generated
  // table would be back to the hand rows' ~250.
  CHECK(per_ns["aten"] > 3000);
  CHECK(per_ns["prims"] > 100);
  CHECK(per_ns["_c10d_functional"] >= 15);
  CHECK(opTableTorchVersion().substr(0, 2) == "2.");
}

TEST_CASE("op table: every hand row names a registry overload", "[op_info]") {
  // An OP / ALIAS / MUTATES row whose target torch does not register refines nothing: a typo or
  // an op renamed in a newer torch. Read ir/ops.def as text to see every row.
  std::ifstream in(std::string(JFX_SOURCE_DIR) + "/ir/ops.def");
  REQUIRE(in);
  std::string line;
  int rows = 0;
  while (std::getline(in, line)) {
    for (const char* macro : {"OP(\"", "ALIAS(\"", "MUTATES(\""}) {
      if (line.rfind(macro, 0) != 0) continue;
      size_t b = line.find('"') + 1;
      std::string target = line.substr(b, line.find('"', b) - b);
      INFO(target);
      CHECK(isKnownOp(Symbol::intern(target)));
      CHECK(opInfo(target).in_registry);
      ++rows;
    }
  }
  CHECK(rows > 200);
}

TEST_CASE("op table: the ops real models trace to, with their schema facts", "[op_info]") {
  // In-place dropout: random (Tag.nondeterministic_seeded), writes its input, elementwise.
  const OpInfo& bern = opInfo("aten.bernoulli_.float");
  CHECK(bern.random);
  CHECK(bern.mutates);
  CHECK(bern.alias == AliasKind::InPlace);
  CHECK(bern.category == OpCategory::Elementwise);
  // In-place arithmetic takes the functional op's hand row.
  for (const char* t : {"aten.div_.Scalar", "aten.add_.Scalar", "aten.mul_.Tensor"}) {
    INFO(t);
    const OpInfo& i = opInfo(t);
    CHECK(i.alias == AliasKind::InPlace);
    CHECK(i.mutates);
    CHECK(!i.random);
    CHECK(i.category == OpCategory::Elementwise);
    CHECK(i.flops == FlopFormula::OutNumel);
  }
  CHECK(opInfo("aten.topk.default").category == OpCategory::Reduction);
  CHECK(opInfo("aten.convolution.default").category == OpCategory::Conv);
  CHECK(opInfo("aten.convolution.default").flops == FlopFormula::Conv);
  CHECK(opInfo("aten.convolution_backward.default").flops == FlopFormula::ConvBwd);
  CHECK(opInfo("aten.max_pool2d_with_indices.default").category == OpCategory::Pool);
  CHECK(opInfo("aten.max_pool2d_with_indices_backward.default").category == OpCategory::Pool);
  // Random out of place and as a factory.
  CHECK(opInfo("aten.native_dropout.default").random);
  CHECK(opInfo("aten.rand_like.default").random);
  CHECK(!opInfo("aten.rand_like.default").mutates);
  // Out= overloads write their out argument; views do not write.
  CHECK(opInfo("aten.add.out").alias == AliasKind::Out);
  CHECK(opInfo("aten.add.out").mutates);
  CHECK(opInfo("aten.split.Tensor").alias == AliasKind::View);
  CHECK(!opInfo("aten.split.Tensor").mutates);
  // Writes an argument it does not return: foreach ops, and BatchNorm's running stats (a hand
  // MUTATES row: native_batch_norm's schema does not annotate them, _native_batch_norm_legit's
  // does).
  CHECK(opInfo("aten._foreach_add_.Scalar").mutates);
  CHECK(opInfo("aten.native_batch_norm.default").mutates);
  CHECK(opInfo("aten._native_batch_norm_legit.default").mutates);
  CHECK(opInfo("aten.native_batch_norm_backward.default").mutates == false);
  // Hand ALIAS row: _unsafe_view shares storage although its schema says fresh.
  CHECK(opInfo("aten._unsafe_view.default").alias == AliasKind::View);
  // Nothing returned: a side effect.
  CHECK(opInfo("aten._assert_async.msg").side_effect);
  CHECK(opInfo("aten._assert_scalar.default").side_effect);
}

TEST_CASE("op table: collectives and waits come from the _c10d_functional schemas", "[op_info]") {
  struct Want {
    const char* target;
    CollectiveKind kind;
    bool coalesced;
    AliasKind alias;
    int reduce_op, group_size, group_name;
  };
  for (const Want& w : {
           Want{"_c10d_functional.all_gather_into_tensor.default", CollectiveKind::AllGather, false,
                AliasKind::None, -1, 1, 2},
           Want{"_c10d_functional.all_gather_into_tensor_out.default", CollectiveKind::AllGather,
                false, AliasKind::Out, -1, 1, 2},
           Want{"_c10d_functional.all_gather_into_tensor_coalesced.default",
                CollectiveKind::AllGather, true, AliasKind::None, -1, 1, 2},
           Want{"_c10d_functional.reduce_scatter_tensor.default", CollectiveKind::ReduceScatter,
                false, AliasKind::None, 1, 2, 3},
           Want{"_c10d_functional.reduce_scatter_tensor_coalesced.default",
                CollectiveKind::ReduceScatter, true, AliasKind::None, 1, 2, 3},
           Want{"_c10d_functional.all_reduce.default", CollectiveKind::AllReduce, false,
                AliasKind::None, 1, -1, 2},
           Want{"_c10d_functional.all_reduce_.default", CollectiveKind::AllReduce, false,
                AliasKind::InPlace, 1, -1, 2},
           Want{"_c10d_functional.all_to_all_single.default", CollectiveKind::AllToAll, false,
                AliasKind::None, -1, -1, 3},
           Want{"_c10d_functional_autograd.reduce_scatter_tensor.default",
                CollectiveKind::ReduceScatter, false, AliasKind::None, 1, 2, 3},
       }) {
    INFO(w.target);
    const OpInfo& i = opInfo(w.target);
    CHECK(i.category == OpCategory::Collective);
    CHECK(i.collective == w.kind);
    CHECK(i.coalesced == w.coalesced);
    CHECK(i.alias == w.alias);
    CHECK(i.side_effect);
    CHECK(i.reduce_op_arg == w.reduce_op);
    CHECK(i.group_size_arg == w.group_size);
    CHECK(i.group_name_arg == w.group_name);
  }
  CHECK(opInfo("_c10d_functional.wait_tensor.default").category == OpCategory::Wait);
  CHECK(opInfo("c10d_functional.wait_tensor.default").category == OpCategory::Wait);  // hand
  // Point-to-point ops have no collective kind, but they communicate: never dead.
  CHECK(opInfo("_c10d_functional.isend.default").side_effect);
}

TEST_CASE("op table: targets outside the registry stay unknown and pass through", "[op_info]") {
  CHECK(!isKnownOp(Symbol::intern("mylib.custom_op.default")));
  CHECK(opInfo("mylib.custom_op.default").category == OpCategory::Unknown);
  CHECK(!isKnownOp(Symbol::intern("aten.not_an_op_in_any_torch.default")));
  CHECK(opInfo("operator.getitem").category == OpCategory::Getitem);  // hand EXTERN row
}

TEST_CASE("op table: attention draws random numbers only with a non-zero dropout_p", "[op_info]") {
  Graph g;
  Node* q = g.create(OpKind::Placeholder, Symbol::intern("q"), {}, {}, "q");
  const char* sdpa = "aten._scaled_dot_product_flash_attention_for_cpu.default";
  REQUIRE(opInfo(sdpa).random);  // Tag.nondeterministic_seeded
  REQUIRE(opInfo(sdpa).dropout_p_arg == 3);
  Node* none = g.createCall(sdpa, {N(q), N(q), N(q)});
  Node* zero = g.createCall(sdpa, {N(q), N(q), N(q), Arg::ofFloat(0.0), Arg::ofBool(true)});
  Node* drop = g.createCall(sdpa, {N(q), N(q), N(q), Arg::ofFloat(0.1)});
  Node* kw =
      g.createCall(sdpa, {N(q), N(q), N(q)}, {{Symbol::intern("dropout_p"), Arg::ofFloat(0.2)}});
  CHECK(!none->isRandom());
  CHECK(!zero->isRandom());
  CHECK(drop->isRandom());
  CHECK(kw->isRandom());
  CHECK(zero->isPure());
  CHECK(!drop->isPure());
  Node* bern = g.createCall("aten.bernoulli_.float", {N(q), Arg::ofFloat(0.9)});
  CHECK(bern->isRandom());
  CHECK(!bern->isPure());
}

// ---- passes on traced graphs

namespace {

// Tags MUST_RECOMPUTE on forward call_function nodes whose module FQN starts with `prefix` (as an
// activation-checkpointing policy over that module would).
size_t tagRecompute(Graph& g, std::string_view prefix, std::string_view only_target = {},
                    std::string_view except_prefix = {}) {
  size_t k = 0;
  for (Node* n = g.first(); n; n = n->next()) {
    if (n->op() != OpKind::CallFunction || n->meta().phase != Phase::Forward) continue;
    if (n->meta().module_fqn.str().rfind(prefix, 0) != 0) continue;
    if (!except_prefix.empty() && n->meta().module_fqn.str().rfind(except_prefix, 0) == 0) continue;
    if (!only_target.empty() && n->target().str() != only_target) continue;
    if (n->isCollective() || n->isWait()) continue;
    n->meta().recompute = Recompute::MustRecompute;
    ++k;
  }
  return k;
}

}  // namespace

TEST_CASE("remat: refuses to recompute a traced GPT-2's in-place dropout", "[op_info][fsdp]") {
  // gpt2_w2.json: traced by scripts/gen_fixtures.py; nn.Dropout in training mode traces to
  // empty_like -> bernoulli_.float -> div_.Scalar -> mul, in place.
  SECTION("the whole block 0 MLP, dropout included: the random draw is named") {
    auto g = traced("gpt2_w2.json");
    REQUIRE(tagRecompute(*g, "transformer.h.0.mlp") > 3);
    const uint64_t before = structuralHash(*g);
    try {
      RematPass pass;
      PassContext ctx;
      pass.run(*g, ctx);
      FAIL("expected an error");
    } catch (const JfxError& e) {
      CHECK(e.location().node.rfind("bernoulli_", 0) == 0);
      CHECK_THAT(e.what(), Catch::Contains("aten.bernoulli_.float") &&
                               Catch::Contains("draws random numbers") &&
                               Catch::Contains("needed by backward node"));
    }
    CHECK(structuralHash(*g) == before);  // refused before touching the graph
  }
  SECTION("only the mask's in-place scale: a second write is refused") {
    auto g = traced("gpt2_w2.json");
    REQUIRE(tagRecompute(*g, "transformer.h.0.mlp", "aten.div_.Scalar") == 1);
    const uint64_t before = structuralHash(*g);
    try {
      RematPass pass;
      PassContext ctx;
      pass.run(*g, ctx);
      FAIL("expected an error");
    } catch (const JfxError& e) {
      CHECK(e.location().node.rfind("div_", 0) == 0);
      CHECK_THAT(e.what(), Catch::Contains("aten.div_.Scalar") &&
                               Catch::Contains("writes its argument in place"));
    }
    CHECK(structuralHash(*g) == before);
  }
  SECTION("the MLP without its dropout recomputes") {
    auto g = traced("gpt2_w2.json");
    REQUIRE(tagRecompute(*g, "transformer.h.0.mlp", {}, "transformer.h.0.mlp.dropout") > 3);
    RematPass pass;
    PassContext ctx;
    CHECK(pass.run(*g, ctx));
    CHECK(ctx.stats.at("nodes-cloned") > 0);
    for (Node* n = g->first(); n; n = n->next())
      if (n->name().ends_with("_recomputed")) CHECK(!n->isRandom());
  }
}

TEST_CASE("dce: keeps every op that writes an argument, on traced graphs", "[op_info][dce]") {
  // Drop the uses of the in-place ops' results: a dce that judged them by their result alone
  // would now remove them, and with them the dropout mask's draw and BatchNorm's stat updates.
  for (const char* file : {"gpt2_w2.json", "convbn_w2.json"}) {
    INFO(file);
    auto g = traced(file);
    std::set<std::string> writers;
    for (Node* n = g->first(); n; n = n->next())
      if (n->op() == OpKind::CallFunction && n->info().mutates)
        writers.insert(std::string(n->name()));
    REQUIRE(!writers.empty());
    Dce dce;
    PassOptions options("dce", {});
    dce.configure(options);
    PassContext ctx;
    dce.run(*g, ctx);
    for (const std::string& w : writers)
      CHECK(g->findNode(w) != nullptr);
  }
}

TEST_CASE("dce: a mutating op with an unused result stays, its pure twin goes", "[op_info][dce]") {
  Graph g;
  Node* x = g.create(OpKind::Placeholder, Symbol::intern("x"), {}, {}, "x");
  Node* rm = g.create(OpKind::Placeholder, Symbol::intern("rm"), {}, {}, "rm");
  Node* rv = g.create(OpKind::Placeholder, Symbol::intern("rv"), {}, {}, "rv");
  g.createCall("aten.add_.Scalar", {N(x), Arg::ofFloat(1.0)}, {}, nullptr, "add_");
  g.createCall("aten.add.Scalar", {N(x), Arg::ofFloat(1.0)}, {}, nullptr, "add");
  g.createCall("aten.native_batch_norm.default",
               {N(x), Arg::none(), Arg::none(), N(rm), N(rv), Arg::ofBool(true), Arg::ofFloat(0.1),
                Arg::ofFloat(1e-5)},
               {}, nullptr, "bn");
  g.createCall("aten._foreach_add_.Scalar", {Arg::ofList({N(x)}), Arg::ofFloat(1.0)}, {}, nullptr,
               "foreach");
  g.createCall("aten.topk.default", {N(x), Arg::ofInt(2)}, {}, nullptr, "topk");
  g.create(OpKind::Output, Symbol::intern("output"), {Arg::ofList({})}, {}, "output");
  Dce dce;
  PassOptions options("dce", {});
  dce.configure(options);
  PassContext ctx;
  dce.run(g, ctx);
  CHECK(g.findNode("add_") != nullptr);
  CHECK(g.findNode("bn") != nullptr);
  CHECK(g.findNode("foreach") != nullptr);
  CHECK(g.findNode("add") == nullptr);
  CHECK(g.findNode("topk") == nullptr);  // known now, and pure: an unused one is dead
}

TEST_CASE("written storage: a traced GPT-2 writes only its dropout masks in place",
          "[op_info][mutation]") {
  auto g = traced("gpt2_w2.json");
  const WrittenStorage written(*g);
  REQUIRE(written.any());
  size_t touched = 0, masks = 0;
  for (Node* n = g->first(); n; n = n->next()) {
    if (!written.touches(n)) continue;
    ++touched;
    // The mask: empty_like -> bernoulli_ -> div_, and its readers (the forward mul, the
    // backward mul); nothing on a collective's path.
    const std::string_view t = n->target().str();
    if (t == "aten.empty_like.default" || t == "aten.bernoulli_.float" || t == "aten.div_.Scalar")
      ++masks;
    else
      CHECK(t == "aten.mul.Tensor");
    CHECK(!n->isCollective());
    CHECK(!n->isWait());
  }
  CHECK(masks > 0);
  CHECK(masks % 3 == 0);
  CHECK(touched > masks);
  // The all-gathers and their waits: untouched, so bucket and schedule still move them.
  for (Node* n = g->first(); n; n = n->next())
    if (n->isCollective()) CHECK(!written.touches(n));
}

TEST_CASE("written storage: views share the written root, unknown ops count as writers",
          "[op_info][mutation]") {
  Graph g;
  Node* x = g.create(OpKind::Placeholder, Symbol::intern("x"), {}, {}, "x");
  Node* y = g.create(OpKind::Placeholder, Symbol::intern("y"), {}, {}, "y");
  Node* z = g.create(OpKind::Placeholder, Symbol::intern("z"), {}, {}, "z");
  Node* v = g.createCall("aten.view.default", {N(x), Arg::ofInts({4})}, {}, nullptr, "v");
  Node* t = g.createCall("aten.t.default", {N(x)}, {}, nullptr, "t");
  g.createCall("aten.add_.Tensor", {N(v), N(y)}, {}, nullptr, "write");  // writes x via v
  Node* ry = g.createCall("aten.neg.default", {N(y)}, {}, nullptr, "ry");
  g.createCall("mylib.opaque.default", {N(z)}, {}, nullptr, "opaque");
  Node* rz = g.createCall("aten.neg.default", {N(z)}, {}, nullptr, "rz");
  const WrittenStorage written(g);
  CHECK(written.touches(t));  // another view of the written x
  CHECK(written.touches(v));
  CHECK(!written.touches(ry));  // y is only read by add_
  CHECK(written.touches(rz));   // z went to an op of unknown effect
}

TEST_CASE("written storage: an out= kwarg on any op counts as a write", "[op_info][mutation]") {
  // mutatedOperands counts an `out` kwarg as written whatever the op; remat skips the buffer
  // analysis when this analysis finds no write, so it must see that one too.
  Graph g;
  Node* x = g.create(OpKind::Placeholder, Symbol::intern("x"), {}, {}, "x");
  Node* o = g.create(OpKind::Placeholder, Symbol::intern("o"), {}, {}, "o");
  Node* neg =
      g.createCall("aten.neg.default", {N(x)}, {{Symbol::intern("out"), N(o)}}, nullptr, "neg_out");
  REQUIRE(!neg->info().mutates);
  REQUIRE(mutatedOperands(*neg) == std::vector<Node*>{o});
  const WrittenStorage written(g);
  CHECK(written.any());
  CHECK(written.touches(o));
  Graph plain;
  Node* px = plain.create(OpKind::Placeholder, Symbol::intern("x"), {}, {}, "x");
  plain.createCall("aten.neg.default", {N(px)}, {}, nullptr, "neg");
  CHECK(!WrittenStorage(plain).any());
}
