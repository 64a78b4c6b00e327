#include <catch2/catch.hpp>

#include "passes/transforms/dce.h"

using namespace jfx;

namespace {

Arg N(Node* n) {
  return Arg::ofNode(n);
}

bool alive(const Graph& g, const char* name) {
  return g.findNode(name) != nullptr;
}

int64_t runDce(Graph& g, bool remove_random = false) {
  Dce dce;
  PassOptions options("dce", {{"remove-random", remove_random ? "true" : "false"}});
  dce.configure(options);
  PassContext ctx;
  bool changed = dce.run(g, ctx);
  int64_t removed = ctx.stats.at("nodes-removed");
  CHECK(changed == (removed > 0));
  return removed;
}

}  // namespace

TEST_CASE("dce: removes a dead chain in one walk, keeps live nodes", "[dce]") {
  Graph g;
  Node* x = g.create(OpKind::Placeholder, Symbol::intern("x"), {}, {}, "x");
  Node* unused_input = g.create(OpKind::Placeholder, Symbol::intern("u"), {}, {}, "u");
  Node* live = g.createCall("aten.neg.default", {N(x)}, {}, nullptr, "live");
  Node* d1 = g.createCall("aten.exp.default", {N(live)}, {}, nullptr, "d1");
  Node* d2 = g.createCall("aten.mul.Tensor", {N(d1), N(d1)}, {}, nullptr, "d2");
  g.createCall("aten.sum.default", {N(d2)}, {}, nullptr, "d3");
  g.create(OpKind::GetAttr, Symbol::intern("buf"), {}, {}, "attr");
  g.create(OpKind::Output, Symbol::intern("output"), {Arg::ofList({N(live)})}, {}, "output");
  CHECK(runDce(g) == 4);
  CHECK(alive(g, "x"));
  CHECK(alive(g, "u"));  // placeholders are the graph's interface
  CHECK(alive(g, "live"));
  CHECK(alive(g, "output"));
  CHECK(!alive(g, "d1"));
  CHECK(!alive(g, "attr"));
  CHECK(unused_input->uses().empty());
  CHECK(live->uses().size() == 1);
  CHECK(runDce(g) == 0);  // idempotent
}

TEST_CASE("dce: keeps collectives, waits, effects, in-place and unknown ops", "[dce]") {
  Graph g;
  Node* x = g.create(OpKind::Placeholder, Symbol::intern("x"), {}, {}, "x");
  Node* ag = g.createCall("_c10d_functional.all_gather_into_tensor.default",
                          {N(x), Arg::ofInt(2), Arg::ofStr("0")});
  g.createCall("_c10d_functional.wait_tensor.default", {N(ag)}, {}, nullptr, "wait");
  g.createCall("aten._assert_async.msg", {N(x), Arg::ofStr("bad")}, {}, nullptr, "assert");
  g.createCall("aten.add_.Tensor", {N(x), N(x)}, {}, nullptr, "inplace");
  g.createCall("mylib.log_tensor.default", {N(x)}, {}, nullptr, "custom");
  g.createCall("aten.native_dropout.default", {N(x), Arg::ofFloat(0.1), Arg::ofBool(true)}, {},
               nullptr, "dropout");
  g.createCall("aten.neg.default", {N(x)}, {{Symbol::intern("out"), N(x)}}, nullptr, "neg_out");
  g.create(OpKind::Output, Symbol::intern("output"), {Arg::ofList({})}, {}, "output");
  CHECK(runDce(g) == 0);
  for (const char* n : {"wait", "assert", "inplace", "custom", "dropout", "neg_out"})
    CHECK(alive(g, n));

  // Random ops go only when asked for.
  CHECK(runDce(g, /*remove_random=*/true) == 1);
  CHECK(!alive(g, "dropout"));
}

TEST_CASE("dce: unused getitems of a live multi-output op go, the op stays", "[dce]") {
  Graph g;
  Node* x = g.create(OpKind::Placeholder, Symbol::intern("x"), {}, {}, "x");
  Node* split = g.createCall("aten.split.Tensor", {N(x), Arg::ofInt(2)});
  Node* g0 = g.createCall("operator.getitem", {N(split), Arg::ofInt(0)});
  g.createCall("operator.getitem", {N(split), Arg::ofInt(1)});
  g.create(OpKind::Output, Symbol::intern("output"), {Arg::ofList({N(g0)})}, {}, "output");
  CHECK(runDce(g) == 1);
  CHECK(split->uses().size() == 1);
  CHECK(g.size() == 4);
}

TEST_CASE("dce: a long dead chain is removed in one run", "[dce]") {
  Graph g;
  Node* x = g.create(OpKind::Placeholder, Symbol::intern("x"), {}, {}, "x");
  Node* prev = x;
  for (int i = 0; i < 10000; ++i)
    prev = g.createCall("aten.neg.default", {N(prev)});
  g.create(OpKind::Output, Symbol::intern("output"), {Arg::ofList({N(x)})}, {}, "output");
  CHECK(runDce(g) == 10000);
  CHECK(g.size() == 2);
}

TEST_CASE("dce: many dead users of one node go in linear time", "[dce]") {
  // With a use list searched per erase() this would be quadratic.
  Graph g;
  Node* x = g.create(OpKind::Placeholder, Symbol::intern("x"), {}, {}, "x");
  Node* live = g.createCall("aten.neg.default", {N(x)}, {}, nullptr, "live");
  for (int i = 0; i < 200000; ++i)
    g.createCall("aten.neg.default", {N(x)});
  Node* live2 = g.createCall("aten.exp.default", {N(x)}, {}, nullptr, "live2");
  g.create(OpKind::Output, Symbol::intern("output"), {Arg::ofList({N(live), N(live2)})}, {},
           "output");
  CHECK(runDce(g) == 200000);
  REQUIRE(x->uses().size() == 2);
  // Survivors keep their use-list order.
  CHECK(x->users() == std::vector<Node*>{live, live2});
}

TEST_CASE("graph: eraseAll refuses a node used from outside the set, changing nothing", "[dce]") {
  Graph g;
  Node* x = g.create(OpKind::Placeholder, Symbol::intern("x"), {}, {}, "x");
  Node* a = g.createCall("aten.neg.default", {N(x)}, {}, nullptr, "a");
  Node* b = g.createCall("aten.neg.default", {N(a)}, {}, nullptr, "b");
  CHECK_THROWS_WITH(g.eraseAll({a}), Catch::Contains("still used by 'b'"));
  CHECK(g.size() == 3);
  CHECK(a->uses().size() == 1);
  g.eraseAll({a, b, b});  // any order, duplicates ignored
  CHECK(g.size() == 1);
  CHECK(x->uses().empty());
  CHECK(g.findNode("a") == nullptr);
}
