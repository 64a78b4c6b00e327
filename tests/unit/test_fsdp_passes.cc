// tag-fsdp, remat and dedup-fsdp-unshard (passes/fsdp/).
#include <catch2/catch.hpp>
#include <map>

#include "ir/error.h"
#include "ir/hash.h"
#include "ir/io.h"
#include "ir/json_format.h"
#include "ir/verifier.h"
#include "passes/analysis/memory.h"
#include "passes/analysis/phase.h"
#include "passes/fsdp/dedup_fsdp_unshard.h"
#include "passes/fsdp/remat.h"
#include "passes/fsdp/tag_fsdp.h"
#include "test_fsdp_graphs.h"

using namespace jfx;
using namespace jfx::testing;

namespace {

Node* at(const Graph& g, const std::string& name) {
  Node* n = g.findNode(name);
  INFO("node " << name);
  REQUIRE(n != nullptr);
  return n;
}

bool runTag(Graph& g, const std::string& reshard, int64_t keep_last = 1,
            Statistics* stats = nullptr) {
  TagFsdpPass pass;
  std::map<std::string, std::string> opts{{"reshard", reshard},
                                          {"keep-last", std::to_string(keep_last)}};
  PassOptions po("tag-fsdp", opts);
  pass.configure(po);
  PassContext ctx;
  bool changed = pass.run(g, ctx);
  if (stats) *stats = ctx.stats;
  return changed;
}

bool runRemat(Graph& g, Statistics* stats = nullptr) {
  RematPass pass;
  PassContext ctx;
  bool changed = pass.run(g, ctx);
  if (stats) *stats = ctx.stats;
  return changed;
}

bool runDedup(Graph& g, Statistics* stats = nullptr) {
  DedupFsdpUnshardPass pass;
  PassContext ctx;
  bool changed = pass.run(g, ctx);
  if (stats) *stats = ctx.stats;
  return changed;
}

std::vector<std::string> tagged(const Graph& g, Recompute r) {
  std::vector<std::string> out;
  g.forEach([&](const Node* n) {
    if (n->meta().recompute == r) out.push_back(std::string(n->name()));
  });
  return out;
}

// All-gathers per phase, as meta records it.
std::map<Phase, int> gathersPerPhase(const Graph& g) {
  std::map<Phase, int> out;
  g.forEach([&](const Node* n) {
    if (n->isCollective() && n->info().collective == CollectiveKind::AllGather)
      ++out[n->meta().phase];
  });
  return out;
}

std::vector<VerifyIssue> verifyOneGather(const Graph& g) {
  VerifyOptions o;
  o.one_gather_per_param_per_phase = true;
  return verifyGraph(g, o);
}

std::string issuesText(const std::vector<VerifyIssue>& issues) {
  std::string s;
  for (const auto& i : issues)
    s += i.str() + "\n";
  return s;
}

using Names = std::vector<std::string>;

}  // namespace

// ---- tag-fsdp

TEST_CASE("tag-fsdp: always tags gather, wait and views, never saves the wait", "[fsdp]") {
  Graph g;
  buildWorkedExample(g);
  CHECK(runTag(g, "always"));
  CHECK(tagged(g, Recompute::MustRecompute) == Names{"ag1", "W1", "t1", "ag2", "W2", "t2"});
  CHECK(tagged(g, Recompute::MustSave).empty());
  CHECK_FALSE(runTag(g, "always"));  // idempotent

  Graph h;
  buildWorkedExample(h);
  CHECK(runTag(h, "never"));
  CHECK(tagged(h, Recompute::MustSave) == Names{"W1", "W2"});
  CHECK(tagged(h, Recompute::MustRecompute).empty());
}

TEST_CASE("tag-fsdp: default keeps the last K layer blocks and what follows them", "[fsdp]") {
  auto build = [](Graph& g) {
    buildLinearStack(g, 5, 8, 2, 2);
    // First and last parameters play embeddings and output projection.
    at(g, "w0")->setInputInfo(InputKind::Parameter, "tok_embeddings.weight");
    at(g, "w4")->setInputInfo(InputKind::Parameter, "output.weight");
  };
  {
    Graph g;
    build(g);
    Statistics s;
    runTag(g, "default", 1, &s);
    // layers.1..3 exist; layers.3 and output are kept, tok_embeddings and layers.1, 2 reshard.
    CHECK(tagged(g, Recompute::MustSave) == Names{"W3", "W4"});
    CHECK(at(g, "ag0")->meta().recompute == Recompute::MustRecompute);
    CHECK(at(g, "ag1")->meta().recompute == Recompute::MustRecompute);
    CHECK(at(g, "ag2")->meta().recompute == Recompute::MustRecompute);
    CHECK(s["chains-kept"] == 2);
    CHECK(s["chains-resharded"] == 3);
  }
  {
    Graph g;
    build(g);
    runTag(g, "default", 2);
    CHECK(tagged(g, Recompute::MustSave) == Names{"W2", "W3", "W4"});
  }
  {
    Graph g;
    build(g);
    runTag(g, "default", 0);  // same as always
    CHECK(tagged(g, Recompute::MustSave).empty());
    CHECK(tagged(g, Recompute::MustRecompute).size() == 15);
  }
  {
    Graph g;
    build(g);
    runTag(g, "default", 100);  // same as never
    CHECK(tagged(g, Recompute::MustSave) == Names{"W0", "W1", "W2", "W3", "W4"});
  }
}

TEST_CASE("tag-fsdp: default without layers.N uses top-level modules", "[fsdp]") {
  Graph g;
  buildWorkedExample(g);
  runTag(g, "default", 1);
  CHECK(tagged(g, Recompute::MustSave) == Names{"W2"});
  CHECK(tagged(g, Recompute::MustRecompute) == Names{"ag1", "W1", "t1"});
}

TEST_CASE("tag-fsdp: user MUST_* tags win, PREFER_* tags yield", "[fsdp]") {
  Graph g;
  buildWorkedExample(g);
  at(g, "W2")->meta().recompute = Recompute::MustSave;
  at(g, "t1")->meta().recompute = Recompute::PreferSave;
  Statistics s;
  runTag(g, "always", 1, &s);
  CHECK(at(g, "W2")->meta().recompute == Recompute::MustSave);
  CHECK(at(g, "ag2")->meta().recompute == Recompute::MustRecompute);
  CHECK(at(g, "t1")->meta().recompute == Recompute::MustRecompute);
  CHECK(s["user-tags-kept"] == 1);
  CHECK(s["prefer-tags-overridden"] == 1);

  Graph h;
  buildWorkedExample(h);
  at(h, "W1")->meta().recompute = Recompute::PreferRecompute;  // e.g. from a SAC region
  at(h, "W2")->meta().recompute = Recompute::MustRecompute;    // the user's explicit choice
  runTag(h, "never");
  CHECK(at(h, "W1")->meta().recompute == Recompute::MustSave);
  CHECK(at(h, "W2")->meta().recompute == Recompute::MustRecompute);
}

TEST_CASE("tag-fsdp: bad options are errors", "[fsdp]") {
  TagFsdpPass pass;
  PassOptions bad("tag-fsdp", {{"reshard", "sometimes"}});
  CHECK_THROWS_WITH(pass.configure(bad), Catch::Contains("one of always, never, default"));
  PassOptions neg("tag-fsdp", {{"keep-last", "-1"}});
  CHECK_THROWS_WITH(pass.configure(neg), Catch::Contains("keep-last=-1"));
}

// ---- remat

TEST_CASE("remat: the worked example re-gathers W2 before its first backward use", "[fsdp]") {
  Graph g;
  buildWorkedExample(g);
  runTag(g, "always");
  Statistics s;
  CHECK(runRemat(g, &s));
  Node* ag = at(g, "ag2_recomputed");
  Node* w = at(g, "W2_recomputed");
  Node* t = at(g, "t2_recomputed");
  // Right before the earliest backward consumer of t2, t_t2, in chain order.
  CHECK(t->next() == at(g, "t_t2"));
  CHECK(w->next() == t);
  CHECK(ag->next() == w);
  CHECK(ag->input(0) == at(g, "w2"));
  CHECK(at(g, "t_t2")->input(0) == t);
  CHECK(at(g, "y")->input(1) == at(g, "t2"));  // the forward user keeps the original
  for (Node* n : {ag, w, t})
    CHECK(n->meta().phase == Phase::Backward);
  CHECK(g.findNode("ag1_recomputed") == nullptr);  // t1 has no backward user
  CHECK(s["nodes-cloned"] == 3);
  CHECK(s["uses-rewired"] == 1);
  CHECK(gathersPerPhase(g) == std::map<Phase, int>{{Phase::Forward, 2}, {Phase::Backward, 1}});
  auto issues = verifyOneGather(g);
  INFO(issuesText(issues));
  CHECK(issues.empty());
  CHECK_FALSE(runRemat(g));  // clones are backward: nothing left to do
}

TEST_CASE("remat: reshard=never changes nothing", "[fsdp]") {
  Graph g;
  buildWorkedExample(g);
  runTag(g, "never");
  CHECK_FALSE(runRemat(g));
  CHECK(gathersPerPhase(g) == std::map<Phase, int>{{Phase::Forward, 2}});
}

TEST_CASE("remat: a stack of layers gets one backward gather per parameter", "[fsdp]") {
  Graph g;
  buildLinearStack(g, 6, 8, 2, 2);
  runTag(g, "always");
  runRemat(g);
  // Layer 0's transposed weight has no backward user (no gradient for x).
  CHECK(gathersPerPhase(g) == std::map<Phase, int>{{Phase::Forward, 6}, {Phase::Backward, 5}});
  auto issues = verifyOneGather(g);
  INFO(issuesText(issues));
  CHECK(issues.empty());
  auto all = verifyGraph(g);
  INFO(issuesText(all));
  CHECK(all.empty());
}

TEST_CASE("remat: chains are cloned once, and originals only backward read are erased", "[fsdp]") {
  Graph g;
  Node* x = placeholder(g, "x", f32({4}), InputKind::UserInput);
  Builder b{g};
  Node* a = b.call("aten.relu.default", {N(x)}, f32({4}), "a");
  Node* c = b.call("aten.sin.default", {N(a)}, f32({4}), "c");  // forward value only backward reads
  a->meta().recompute = Recompute::PreferRecompute;
  c->meta().recompute = Recompute::MustRecompute;
  b.phase = Phase::Loss;
  Node* loss = b.call("aten.sum.default", {N(a)}, f32({}), "loss");
  b.phase = Phase::Backward;
  Node* g1 = b.call("aten.mul.Tensor", {N(c), N(loss)}, f32({4}), "g1");
  Node* g2 = b.call("aten.mul.Tensor", {N(g1), N(c)}, f32({4}), "g2");
  b.output({loss, g2});
  Statistics s;
  CHECK(runRemat(g, &s));
  CHECK(g.findNode("c") == nullptr);  // erased: its only readers were backward
  CHECK(at(g, "a")->hasUses());       // still read by the loss
  Node* cr = at(g, "c_recomputed");
  Node* ar = at(g, "a_recomputed");
  CHECK(cr->input(0) == ar);
  CHECK(ar->input(0) == x);
  CHECK(cr->next() == g1);
  CHECK(g1->input(0) == cr);
  CHECK(g2->input(1) == cr);
  CHECK(s["nodes-cloned"] == 2);
  CHECK(s["originals-erased"] == 1);
}

TEST_CASE("remat: a later SAC region's input is saved", "[fsdp]") {
  Graph g;
  Node* x = placeholder(g, "x", f32({4}), InputKind::UserInput);
  Builder b{g};
  Node* a = b.call("aten.relu.default", {N(x)}, f32({4}), "a");  // region 1 output
  Node* c = b.call("aten.sin.default", {N(a)}, f32({4}), "c");   // region 2
  for (Node* n : {a, c})
    n->meta().recompute = Recompute::PreferRecompute;
  a->meta().ac_graph_id = 1;
  c->meta().ac_graph_id = 2;
  b.phase = Phase::Loss;
  Node* loss = b.call("aten.sum.default", {N(c)}, f32({}), "loss");
  b.phase = Phase::Backward;
  Node* g1 = b.call("aten.mul.Tensor", {N(c), N(a)}, f32({4}), "g1");
  b.output({loss, g1});
  Statistics s;
  runRemat(g, &s);
  CHECK(g.findNode("a_recomputed") == nullptr);  // region boundary: saved
  CHECK(at(g, "c_recomputed")->input(0) == a);
  CHECK(g1->input(1) == a);
  CHECK(s["sac-boundary-saved"] == 1);
}

TEST_CASE("remat: recomputing a random op is an error naming it, graph untouched", "[fsdp]") {
  Graph g;
  Node* x = placeholder(g, "x", f32({4}), InputKind::UserInput);
  Builder b{g};
  TensorMeta t = f32({4});
  Node* drop = g.createCall("aten.native_dropout.default",
                            {N(x), Arg::ofFloat(0.5), Arg::ofBool(true)}, {}, nullptr, "drop");
  drop->val() = ValueMeta::ofList({ValueMeta::ofTensor(t), ValueMeta::ofTensor(t)});
  drop->meta().phase = Phase::Forward;
  drop->meta().recompute = Recompute::PreferRecompute;
  Node* out0 = b.call("operator.getitem", {N(drop), Arg::ofInt(0)}, t, "out0");
  Node* mask = b.call("operator.getitem", {N(drop), Arg::ofInt(1)}, t, "mask");
  b.phase = Phase::Loss;
  Node* loss = b.call("aten.sum.default", {N(out0)}, f32({}), "loss");
  b.phase = Phase::Backward;
  Node* gx = b.call("aten.mul.Tensor", {N(mask), N(loss)}, t, "gx");
  b.output({loss, gx});
  const size_t before = g.size();
  try {
    runRemat(g);
    FAIL("expected an error");
  } catch (const JfxError& e) {
    CHECK(e.location().node == "drop");
    CHECK_THAT(e.what(), Catch::Contains("aten.native_dropout.default") &&
                             Catch::Contains("random") && Catch::Contains("'gx'"));
  }
  CHECK(g.size() == before);
  CHECK(gx->input(0) == mask);
}

TEST_CASE("remat: storage written in place is not recomputed (dropout under SAC)", "[fsdp]") {
  // What make_fx records for a dropout inside an SAC region: the mask is an empty_like filled by
  // bernoulli_ and scaled by div_, both in place, and backward reads it through an alias of the
  // empty_like taken before either write. Every node carries SAC's PREFER_RECOMPUTE. A backward
  // copy of the alias would read a fresh, never written empty_like; it stays saved, and so does
  // the empty_like, while the pure relu beside them is still recomputed.
  Graph g;
  Node* x = placeholder(g, "x", f32({4}), InputKind::UserInput);
  Builder b{g};
  TensorMeta t = f32({4});
  Node* buf = b.call("aten.empty_like.default", {N(x)}, t, "empty_like");
  Node* alias = b.call("aten.alias.default", {N(buf)}, t, "alias");
  Node* drawn = b.call("aten.bernoulli_.float", {N(buf), Arg::ofFloat(0.9)}, t, "bernoulli_");
  Node* scaled = b.call("aten.div_.Scalar", {N(drawn), Arg::ofFloat(0.9)}, t, "div_");
  Node* y = b.call("aten.mul.Tensor", {N(x), N(scaled)}, t, "y");
  Node* r = b.call("aten.relu.default", {N(x)}, t, "r");
  for (Node* n : {buf, alias, drawn, scaled, y, r}) {
    n->meta().recompute = Recompute::PreferRecompute;
    n->meta().ac_graph_id = 1;
  }
  b.phase = Phase::Loss;
  Node* loss = b.call("aten.sum.default", {N(y)}, f32({}), "loss");
  b.phase = Phase::Backward;
  Node* gx = b.call("aten.mul.Tensor", {N(alias), N(r)}, t, "gx");
  b.output({loss, gx});
  Statistics s;
  runRemat(g, &s);
  CHECK(g.findNode("alias_recomputed") == nullptr);
  CHECK(g.findNode("empty_like_recomputed") == nullptr);
  CHECK(gx->input(0) == alias);
  CHECK(at(g, "r_recomputed")->input(0) == x);
  CHECK(gx->input(1) == at(g, "r_recomputed"));
  CHECK(s["written-storage-saved"] == 3);  // empty_like, alias and the mul reading the mask
}

// ---- dedup-fsdp-unshard

namespace {

// Tied weights: one parameter gathered twice in forward (embedding-style use and output
// projection), each gather with its own transpose.
void buildTied(Graph& g, bool cast_second = false) {
  g.processGroups().push_back({"0", 2, {0, 1}});
  Node* w = placeholder(g, "w", f32({4, 8}), InputKind::Parameter, "tok_embeddings.weight");
  Node* x = placeholder(g, "x", f32({2, 8}), InputKind::UserInput);
  Builder b{g};
  Node* ta = b.t(b.wait(b.allGather(w, 2, "ag_a"), "wait_a"), "t_a");
  Node* h = b.mm(x, ta, "h");
  Node* src = w;
  if (cast_second) {
    TensorMeta bf = w->val().tensor;
    bf.dtype = ScalarType::BFloat16;
    src = b.call("prims.convert_element_type.default", {N(w), Arg::ofDtype(ScalarType::BFloat16)},
                 bf, "cast_b");
  }
  Node* tb = b.t(b.wait(b.allGather(src, 2, "ag_b"), "wait_b"), "t_b");
  Node* y = b.mm(h, tb, "y");
  b.phase = Phase::Loss;
  Node* loss = b.call("aten.sum.default", {N(y)}, f32({}), "loss");
  b.phase = Phase::Backward;
  Node* gh =
      b.mm(b.call("aten.ones_like.default", {N(y)}, f32({2, 8}), "gy"), b.t(tb, "t_tb"), "gh");
  Node* gw = b.mm(b.t(gh, "t_gh"), x, "gw");
  Node* gr = b.wait(b.reduceScatter(gw, 2, "rs"), "gr");
  b.output({loss, gr});
  g.outputSpecs() = {{OutputKind::Loss, ""}, {OutputKind::Gradient, "tok_embeddings.weight"}};
}

}  // namespace

TEST_CASE("dedup-fsdp-unshard: tied weights share one chain", "[fsdp]") {
  Graph g;
  buildTied(g);
  CHECK_FALSE(verifyOneGather(g).empty());
  Statistics s;
  CHECK(runDedup(g, &s));
  CHECK(g.findNode("ag_b") == nullptr);
  CHECK(g.findNode("wait_b") == nullptr);
  CHECK(g.findNode("t_b") == nullptr);  // identical to t_a once both read wait_a
  CHECK(at(g, "y")->input(1) == at(g, "t_a"));
  CHECK(at(g, "t_tb")->input(0) == at(g, "t_a"));
  CHECK(s["chains-merged"] == 1);
  CHECK(s["nodes-erased"] == 3);
  CHECK(verifyOneGather(g).empty());
  CHECK(verifyGraph(g).empty());
  CHECK_FALSE(runDedup(g));

  // Then reshard-after-forward: one gather per phase.
  runTag(g, "always");
  runRemat(g);
  CHECK(gathersPerPhase(g) == std::map<Phase, int>{{Phase::Forward, 1}, {Phase::Backward, 1}});
  CHECK(verifyOneGather(g).empty());
}

TEST_CASE("dedup-fsdp-unshard: a different dtype is not a duplicate", "[fsdp]") {
  Graph g;
  buildTied(g, /*cast_second=*/true);
  Statistics s;
  CHECK_FALSE(runDedup(g, &s));
  CHECK(s["mismatched"] == 1);
  CHECK(g.findNode("ag_b") != nullptr);
}

TEST_CASE("dedup-fsdp-unshard: never merges a forward and a backward gather", "[fsdp]") {
  Graph g;
  buildWorkedExample(g);
  runTag(g, "always");
  runRemat(g);
  const size_t before = g.size();
  CHECK_FALSE(runDedup(g));
  CHECK(g.size() == before);
}

TEST_CASE("dedup-fsdp-unshard: a duplicate backward chain merges into the earlier one", "[fsdp]") {
  Graph g;
  buildWorkedExample(g);
  runTag(g, "always");
  runRemat(g);
  // A second backward gather of w2 (as a second, independent remat source would leave).
  Node* tx = at(g, "t_x");
  Node* ag = g.createCall("_c10d_functional.all_gather_into_tensor.default",
                          {N(at(g, "w2")), Arg::ofInt(2), Arg::ofStr("0")}, {}, tx, "ag2_again");
  typed(ag, f32({8, 8}), Phase::Backward);
  Node* wt =
      typed(g.createCall("_c10d_functional.wait_tensor.default", {N(ag)}, {}, tx, "W2_again"),
            f32({8, 8}), Phase::Backward);
  Node* use = typed(g.createCall("aten.neg.default", {N(wt)}, {}, tx, "use_again"), f32({8, 8}),
                    Phase::Backward);
  g.replaceInput(at(g, "gw1"), 0, use);  // something to keep it alive
  CHECK_FALSE(verifyOneGather(g).empty());
  CHECK(runDedup(g));
  CHECK(use->input(0) == at(g, "W2_recomputed"));
  CHECK(g.findNode("ag2_again") == nullptr);
  CHECK(verifyOneGather(g).empty());
}

namespace {

// The estimated peak of a traced graph after tag-fsdp with `opts` and remat.
int64_t peakAfter(const Graph& src, const std::map<std::string, std::string>& opts,
                  Statistics* stats = nullptr) {
  auto g = readJsonGraph(writeJsonGraph(src), "copy");
  TagFsdpPass pass;
  PassOptions po("tag-fsdp", opts);
  pass.configure(po);
  PassContext ctx;
  pass.run(*g, ctx);
  if (stats) *stats = ctx.stats;
  runRemat(*g);
  return analyzeMemory(*g, computePhases(*g)).peak_bytes;
}

}  // namespace

TEST_CASE("tag-fsdp: reshard=budget keeps as many blocks as the memory limit allows",
          "[fsdp][budget]") {
  for (const char* fixture : {"fsdp_w2", "gpt2_w2", "convbn_w2", "moe_w2", "encoder_w2"}) {
    INFO(fixture);
    auto g = loadGraph(std::string(JFX_SOURCE_DIR) + "/tests/data/traced/" + fixture + ".json");
    const int64_t always = peakAfter(*g, {{"reshard", "always"}});
    const int64_t never = peakAfter(*g, {{"reshard", "never"}});
    REQUIRE(always < never);  // every fixture has something to save by resharding

    // Limits spread between the two peaks: the choice never goes over the limit, and keeping one
    // more unit would (or everything is kept already).
    for (int i = 0; i <= 8; ++i) {
      const int64_t limit = always + (never - always) * i / 8;
      INFO("limit " << limit);
      Statistics st;
      const int64_t peak =
          peakAfter(*g, {{"reshard", "budget"}, {"memory-limit", std::to_string(limit)}}, &st);
      CHECK(peak <= limit);
      CHECK(peak == st.at("budget-peak-estimate"));
      const int64_t k = st.at("budget-keep-last");
      const int64_t units = st.at("budget-units");
      if (k < units) {
        CHECK(peakAfter(*g, {{"reshard", "default"}, {"keep-last", std::to_string(k + 1)}}) >
              limit);
      }
      if (i == 0) CHECK(peak == always);
      if (i == 8) {
        CHECK(k == units);  // like reshard=never
        CHECK(peak == never);
      }
    }
  }
}

TEST_CASE("tag-fsdp: reshard=budget below the reshard=always peak names the smallest limit",
          "[fsdp][budget]") {
  auto g = loadGraph(std::string(JFX_SOURCE_DIR) + "/tests/data/traced/fsdp_w2.json");
  const int64_t always = peakAfter(*g, {{"reshard", "always"}});
  const uint64_t before = structuralHash(*g);
  try {
    peakAfter(*g, {{"reshard", "budget"}, {"memory-limit", std::to_string(always - 1)}});
    FAIL("expected an error");
  } catch (const JfxError& e) {
    CHECK_THAT(e.what(),
               Catch::Contains("smallest feasible limit is " + std::to_string(always) + " bytes"));
  }
  CHECK(structuralHash(*g) == before);
  // And the option is required, and only for budget.
  TagFsdpPass pass;
  std::map<std::string, std::string> no_limit{{"reshard", "budget"}};
  PassOptions po("tag-fsdp", no_limit);
  CHECK_THROWS_WITH(pass.configure(po), Catch::Contains("needs memory-limit"));
  std::map<std::string, std::string> stray{{"reshard", "always"}, {"memory-limit", "1G"}};
  PassOptions po2("tag-fsdp", stray);
  CHECK_THROWS_WITH(pass.configure(po2), Catch::Contains("read by reshard=budget only"));
}
