// OpBuilder: insertion point, meta and value inference for the ops passes create.
#include <catch2/catch.hpp>
#include <functional>

#include "ir/builder.h"
#include "ir/verifier.h"
#include "tests/unit/test_util.h"

using namespace jfx;
using jfx::test::errorOf;

namespace {

TensorMeta tensor(std::vector<int64_t> shape, ScalarType dtype = ScalarType::BFloat16) {
  return TensorMeta::contiguous(dtype, std::move(shape), Symbol::intern("cuda:0"));
}

Node* input(Graph& g, const std::string& name, TensorMeta t) {
  Node* n = g.create(OpKind::Placeholder, Symbol::intern(name), {}, {}, name);
  n->val() = ValueMeta::ofTensor(std::move(t));
  return n;
}

}  // namespace

TEST_CASE("builder: a gather bucket's nodes get their meta inferred", "[builder]") {
  Graph g;
  g.processGroups().push_back({"0", 4, {0, 1, 2, 3}});
  Node* a = input(g, "a", tensor({2, 3}));
  TensorMeta bt = tensor({5, 2});
  bt.stride = {1, 5};  // transposed: not contiguous
  Node* b = input(g, "b", bt);
  Node* out = g.create(OpKind::Output, Symbol::intern("output"), {Arg::ofList({})}, {}, "output");

  OpBuilder bl(g);
  std::vector<Node*> made;
  bl.onCreate([&](Node* n) { made.push_back(n); });
  bl.setInsertionPoint(out);
  NodeMeta meta;
  meta.phase = Phase::Forward;
  bl.setMeta(meta);

  Node* fa = bl.view(a, {-1}, "a_flat");
  Node* fb = bl.reshape(b, {-1}, "b_flat");
  CHECK(fa->val().tensor.shape == std::vector<int64_t>{6});
  CHECK(fb->target().str() == "aten.reshape.default");
  CHECK(fb->val().tensor.stride == std::vector<int64_t>{1});
  Node* cat = bl.cat({fa, fb}, 0, "cat");
  CHECK(cat->numArgs() == 1);  // dim 0 is FX's default and is not written
  CHECK(cat->val().tensor.shape == std::vector<int64_t>{16});
  Symbol ag_target = Symbol::intern("_c10d_functional.all_gather_into_tensor.default");
  Symbol wait_target = Symbol::intern("_c10d_functional.wait_tensor.default");
  Node* ag = bl.allGather(ag_target, cat, 4, "0", "ag");
  CHECK(ag->val().tensor.shape == std::vector<int64_t>{64});
  Node* w = bl.wait(wait_target, ag, "ag_wait");
  Node* rows = bl.view(w, {4, -1}, "rows");
  CHECK(rows->val().tensor.shape == std::vector<int64_t>{4, 16});
  Node* split = bl.splitWithSizes(rows, {6, 10}, 1, "split");
  REQUIRE(split->val().items.size() == 2);
  // Pieces are views with the rows' strides.
  CHECK(split->val().items[1].tensor.shape == std::vector<int64_t>{4, 10});
  CHECK(split->val().items[1].tensor.stride == std::vector<int64_t>{16, 1});
  Node* piece = bl.getitem(split, 1, "piece");
  CHECK(piece->val() == split->val().items[1]);
  Node* full = bl.reshape(piece, {20, 2}, "full");
  CHECK(full->val().tensor == tensor({20, 2}));

  // Every node: at the insertion point, in creation order, with the meta and the dtype/device.
  CHECK(made.size() == 9);
  for (Node* n : made) {
    CHECK(n->isBefore(out));
    CHECK(n->meta().phase == Phase::Forward);
  }
  CHECK(out->prev() == full);
  CHECK(cat->val().tensor.device.str() == "cuda:0");
  CHECK(cat->val().tensor.dtype == ScalarType::BFloat16);
  g.setArgs(out, {Arg::ofList({Arg::ofNode(full)})});
  CHECK(verifyGraph(g).empty());
}

TEST_CASE("builder: reduce-scatter, all-reduce and padding", "[builder]") {
  Graph g;
  Node* x = input(g, "x", tensor({4, 3}, ScalarType::Float32));
  OpBuilder bl(g);
  Node* pad = bl.constantPadNd(x, {0, 2}, 0.0, "pad");
  CHECK(pad->val().tensor.shape == std::vector<int64_t>{4, 5});
  Node* flat = bl.view(pad, {-1});
  Node* rs = bl.reduceScatter(Symbol::intern("_c10d_functional.reduce_scatter_tensor.default"),
                              flat, "sum", 4, "0", "rs");
  CHECK(rs->val().tensor.shape == std::vector<int64_t>{5});
  CHECK(rs->numArgs() == 4);
  Node* ar = bl.allReduce(Symbol::intern("_c10d_functional.all_reduce.default"), rs, "avg", "1");
  CHECK(ar->val().tensor.shape == std::vector<int64_t>{5});
  CHECK(ar->val().tensor.dtype == ScalarType::Float32);
  // Appended at the end when no insertion point is set.
  CHECK(g.last() == ar);
}

TEST_CASE("builder: shapes that do not fit are internal errors naming the op", "[builder]") {
  Graph g;
  Node* x = input(g, "x", tensor({4, 3}));
  Node* y = input(g, "y", tensor({4, 2}, ScalarType::Float32));
  Node* none = g.create(OpKind::Placeholder, Symbol::intern("n"), {}, {}, "n");
  OpBuilder bl(g);
  CHECK_THAT(errorOf([&] {
               bl.view(x, {5, -1});
             }),
             Catch::Contains("building aten.view.default: cannot infer -1 in [5, -1]"));
  CHECK_THAT(errorOf([&] { bl.view(x, {-1, -1}); }), Catch::Contains("two -1"));
  CHECK_THAT(errorOf([&] { bl.reshape(x, {5}); }),
             Catch::Contains("[5] does not hold the 12 elements of [4, 3]"));
  CHECK_THAT(errorOf([&] { bl.cat({x, y}, 1); }), Catch::Contains("does not stack"));
  CHECK_THAT(errorOf([&] { bl.splitWithSizes(x, {1, 1}, 0); }), Catch::Contains("do not add up"));
  CHECK_THAT(errorOf([&] { bl.getitem(x, 0); }), Catch::Contains("no item 0"));
  CHECK_THAT(errorOf([&] { bl.view(none, {-1}); }), Catch::Contains("has no tensor meta"));
  CHECK_THAT(errorOf([&] {
               bl.reduceScatter(Symbol::intern("_c10d_functional.reduce_scatter_tensor.default"), x,
                                "sum", 3, "0");
             }),
             Catch::Contains("dim 0 of [4, 3] is not a multiple of 3"));
  CHECK_THAT(errorOf([&] { bl.cat({x}, 2); }), Catch::Contains("dim 2 out of range for rank 2"));
}
