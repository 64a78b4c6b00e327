// The executor against LibTorch eager: hand-written graphs, bitwise.
#include <ATen/ops/empty.h>
#include <ATen/ops/index.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/split_with_sizes.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/sum.h>

#include <torch/csrc/distributed/c10d/GroupRegistry.hpp>

#include <atomic>
#include <catch2/catch.hpp>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "ir/error.h"
#include "runtime/executor.h"
#include "runtime/process_groups.h"

namespace jfx {
namespace {

TensorMeta meta(ScalarType dt, std::vector<int64_t> shape) {
  return TensorMeta::contiguous(dt, std::move(shape), Symbol::intern("cpu"));
}
TensorMeta f32(std::vector<int64_t> shape) {
  return meta(ScalarType::Float32, std::move(shape));
}

Node* placeholder(Graph& g, const std::string& name, TensorMeta t, InputKind kind,
                  const std::string& fqn = "") {
  Node* n = g.create(OpKind::Placeholder, Symbol::intern(name), {}, {}, name);
  n->setInputInfo(kind, fqn);
  n->val() = ValueMeta::ofTensor(std::move(t));
  return n;
}

Node* call(Graph& g, const std::string& target, std::vector<Arg> args, TensorMeta t,
           Kwargs kwargs = {}, const std::string& name = "") {
  Node* n = g.createCall(target, std::move(args), std::move(kwargs), nullptr, name);
  if (t.dtype != ScalarType::Undefined) n->val() = ValueMeta::ofTensor(std::move(t));
  return n;
}

Arg N(Node* n) {
  return Arg::ofNode(n);
}

void output(Graph& g, std::vector<Node*> values) {
  std::vector<Arg> items;
  for (Node* v : values)
    items.push_back(N(v));
  g.create(OpKind::Output, Symbol::intern("output"), {Arg::ofList(std::move(items))}, {}, "output");
}

Kwargs kw(const std::string& k, Arg v) {
  return {{Symbol::intern(k), std::move(v)}};
}

// A world of one process with the graph's groups registered, as a rank would have them.
struct World1 {
  explicit World1(const Graph& g)
      : groups(g.processGroups(), rt::DistEnv{}, rt::CommBackend::Gloo, std::chrono::seconds(30)) {}
  rt::ProcessGroups groups;
};

void addGroup(Graph& g, const std::string& name) {
  ProcessGroupInfo pg;
  pg.name = name;
  pg.size = 1;
  pg.ranks = {0};
  g.processGroups().push_back(pg);
}

bool bitwiseEqual(const at::Tensor& a, const at::Tensor& b) {
  if (a.scalar_type() != b.scalar_type() || a.sizes() != b.sizes()) return false;
  at::Tensor ca = a.contiguous(), cb = b.contiguous();
  return std::memcmp(ca.const_data_ptr(), cb.const_data_ptr(), static_cast<size_t>(ca.nbytes())) ==
         0;
}

}  // namespace

TEST_CASE("executor: mm + sum + world-1 all_gather/wait/reduce_scatter/wait match eager bitwise",
          "[runtime]") {
  Graph g;
  addGroup(g, "0");
  Node* x = placeholder(g, "x", f32({4, 8}), InputKind::UserInput);
  Node* w = placeholder(g, "w", f32({8, 8}), InputKind::Parameter, "w");
  Node* ag = call(g, "_c10d_functional.all_gather_into_tensor.default",
                  {N(w), Arg::ofInt(1), Arg::ofStr("0")}, f32({8, 8}));
  Node* W = call(g, "_c10d_functional.wait_tensor.default", {N(ag)}, f32({8, 8}));
  TensorMeta tm = f32({8, 8});
  tm.stride = {1, 8};
  Node* t = call(g, "aten.t.default", {N(W)}, tm);
  Node* y = call(g, "aten.mm.default", {N(x), N(t)}, f32({4, 8}));
  Node* loss = call(g, "aten.sum.default", {N(y)}, f32({}));
  Node* rs = call(g, "_c10d_functional.reduce_scatter_tensor.default",
                  {N(y), Arg::ofStr("sum"), Arg::ofInt(1), Arg::ofStr("0")}, f32({4, 8}));
  Node* gy = call(g, "_c10d_functional.wait_tensor.default", {N(rs)}, f32({4, 8}));
  output(g, {loss, gy});

  World1 world(g);
  rt::Executor ex(g);
  REQUIRE(ex.inputs().size() == 2);
  CHECK(ex.inputs()[1].kind == InputKind::Parameter);
  CHECK(ex.numOutputs() == 2);

  at::Tensor xv = at::randn({4, 8});
  at::Tensor wv = at::randn({8, 8});
  for (int run = 0; run < 2; ++run) {  // a plan runs any number of times
    auto outs = ex.run({xv, wv});
    REQUIRE(outs.size() == 2);
    at::Tensor ref_y = at::mm(xv, wv.t());
    CHECK(bitwiseEqual(outs[0].toTensor(), at::sum(ref_y)));
    CHECK(bitwiseEqual(outs[1].toTensor(), ref_y));
  }
}

TEST_CASE("executor: profile sums time and calls per target over runs, only when asked",
          "[runtime]") {
  Graph g;
  Node* x = placeholder(g, "x", f32({64, 64}), InputKind::UserInput);
  Node* a = call(g, "aten.mm.default", {N(x), N(x)}, f32({64, 64}));
  Node* b = call(g, "aten.mm.default", {N(a), N(x)}, f32({64, 64}));
  Node* s = call(g, "aten.sum.default", {N(b)}, f32({}));
  output(g, {s});
  at::Tensor xv = at::randn({64, 64});

  rt::Executor plain(g);
  plain.run({xv});
  CHECK(plain.profile().empty());

  rt::ExecutorOptions opts;
  opts.profile = true;
  rt::Executor ex(g, opts);
  for (int run = 0; run < 3; ++run)
    ex.run({xv});
  std::vector<rt::OpProfile> prof = ex.profile();
  REQUIRE(prof.size() == 2);
  for (size_t k = 1; k < prof.size(); ++k)
    CHECK(prof[k - 1].seconds >= prof[k].seconds);
  std::map<std::string, rt::OpProfile> by;
  for (const rt::OpProfile& p : prof)
    by[p.target] = p;
  CHECK(by["aten.mm.default"].calls == 6);  // two nodes, three runs
  CHECK(by["aten.sum.default"].calls == 3);
  CHECK(by["aten.mm.default"].seconds > 0);
}

TEST_CASE("executor: reports nodes finished and the node running, for the watchdog", "[runtime]") {
  Graph g;
  Node* x = placeholder(g, "x", f32({384, 384}), InputKind::UserInput);
  Node* prev = x;
  for (int i = 0; i < 24; ++i)  // long enough (tens of ms) for another thread to look in
    prev = call(g, "aten.mm.default", {N(prev), N(x)}, f32({384, 384}));
  Node* s = call(g, "aten.sum.default", {N(prev)}, f32({}));
  output(g, {s});
  at::Tensor xv = at::randn({384, 384}).mul_(0.05);

  rt::Executor ex(g);
  CHECK(ex.nodesFinished() == 0);
  CHECK(ex.runningNode().empty());
  std::atomic<bool> done{false};
  std::string seen;
  std::thread observer([&] {
    while (!done.load() && seen.empty())
      seen = ex.runningNode();
  });
  ex.run({xv});
  done = true;
  observer.join();
  CHECK(ex.nodesFinished() == 25);
  CHECK(ex.runningNode().empty());  // not inside run() any more
  CHECK_THAT(seen, Catch::Matches("'[a-z0-9_]+' \\(aten\\.(mm|sum)\\.default\\)"));
  ex.run({xv});
  CHECK(ex.nodesFinished() == 50);
}

TEST_CASE("executor: multi-output + getitem, in-place, out=, kwargs, defaults, lists, prims",
          "[runtime]") {
  Graph g;
  Node* x = placeholder(g, "x", f32({4, 6}), InputKind::UserInput);
  Node* idx = placeholder(g, "idx", meta(ScalarType::Int64, {3}), InputKind::UserInput);
  // split_with_sizes -> Tensor[]; getitem picks the pieces.
  Node* split = g.createCall("aten.split_with_sizes.default", {N(x), Arg::ofInts({1, 3})}, {},
                             nullptr, "split");
  split->val() =
      ValueMeta::ofList({ValueMeta::ofTensor(f32({1, 6})), ValueMeta::ofTensor(f32({3, 6}))});
  Node* a = call(g, "operator.getitem", {N(split), Arg::ofInt(0)}, f32({1, 6}));
  Node* b = call(g, "operator.getitem", {N(split), Arg::ofInt(1)}, f32({3, 6}));
  // kwargs by name, a default left out (dtype=None)
  Node* s = call(g, "aten.sum.dim_IntList", {N(b), Arg::ofInts({0})}, f32({1, 6}),
                 kw("keepdim", Arg::ofBool(true)));
  // in-place on a fresh clone: add_(self, other, alpha=2)
  Node* c = call(g, "aten.clone.default", {N(a)}, f32({1, 6}));
  Node* c2 = call(g, "aten.add_.Tensor", {N(c), N(s)}, f32({1, 6}), kw("alpha", Arg::ofInt(2)));
  // out= variant writing into an empty tensor made by a factory op with a device argument
  Kwargs ek = kw("dtype", Arg::ofDtype(ScalarType::Float32));
  ek.emplace_back(Symbol::intern("device"),
                  Arg::ofDevice("cuda:0"));  // rewritten to the run device
  Node* buf = call(g, "aten.empty.memory_format", {Arg::ofInts({6, 6})}, f32({6, 6}), ek);
  TensorMeta xt = f32({6, 4});
  xt.stride = {1, 6};
  Node* xT = call(g, "aten.t.default", {N(x)}, xt);
  Node* mmo = call(g, "aten.mm.out", {N(xT), N(x)}, f32({6, 6}), kw("out", Arg::ofNode(buf)));
  // Tensor?[] with a node and a None; Tensor[] of nodes
  Node* gathered = call(g, "aten.index.Tensor", {N(x), Arg::ofList({N(idx)})}, f32({3, 6}));
  Node* st =
      call(g, "aten.stack.default", {Arg::ofList({N(c2), N(a)}), Arg::ofInt(0)}, f32({2, 1, 6}));
  // prims.convert_element_type has no C++ kernel: lowered to aten._to_copy
  Node* half =
      call(g, "prims.convert_element_type.default", {N(st), Arg::ofDtype(ScalarType::BFloat16)},
           meta(ScalarType::BFloat16, {2, 1, 6}));
  // view with a list of ints
  Node* v = call(g, "aten.view.default", {N(gathered), Arg::ofInts({18})}, f32({18}));
  output(g, {half, mmo, v});

  rt::Executor ex(g);
  at::Tensor xv = at::randn({4, 6});
  at::Tensor iv = at::empty({3}, at::kLong);
  iv.data_ptr<int64_t>()[0] = 3;
  iv.data_ptr<int64_t>()[1] = 0;
  iv.data_ptr<int64_t>()[2] = 2;
  auto outs = ex.run({xv, iv});
  REQUIRE(outs.size() == 3);

  auto pieces = at::split_with_sizes(xv, {1, 3});
  at::Tensor ref_s = at::sum(pieces[1], {0}, true);
  at::Tensor ref_c = pieces[0].clone().add_(ref_s, 2);
  at::Tensor ref_st = at::stack({ref_c, pieces[0]}, 0);
  CHECK(bitwiseEqual(outs[0].toTensor(), ref_st.to(at::kBFloat16)));
  CHECK(bitwiseEqual(outs[1].toTensor(), at::mm(xv.t(), xv)));
  std::vector<std::optional<at::Tensor>> ind{iv};
  CHECK(bitwiseEqual(outs[2].toTensor(),
                     at::index(xv, c10::List<std::optional<at::Tensor>>(ind)).view({18})));
}

TEST_CASE("executor: Python scalars where the schema wants a Tensor act as wrapped numbers",
          "[runtime]") {
  Graph g;
  Node* x = placeholder(g, "x", f32({5}), InputKind::UserInput);
  Node* i = placeholder(g, "i", meta(ScalarType::Int64, {5}), InputKind::UserInput);
  Node* a = call(g, "aten.add.Tensor", {N(x), Arg::ofFloat(1e-5)}, f32({5}));
  // int tensor * float scalar promotes to the default float dtype, as in eager.
  Node* m = call(g, "aten.mul.Tensor", {N(i), Arg::ofFloat(0.5)}, f32({5}));
  Node* d = call(g, "aten.div.Tensor", {N(a), Arg::ofInt(3)}, f32({5}));
  output(g, {d, m});
  rt::Executor ex(g);
  at::Tensor xv = at::randn({5});
  at::Tensor iv = at::empty({5}, at::kLong);
  for (int k = 0; k < 5; ++k)
    iv.data_ptr<int64_t>()[k] = k - 2;
  auto outs = ex.run({xv, iv});
  CHECK(bitwiseEqual(outs[0].toTensor(), xv.add(1e-5).div(3)));
  CHECK(bitwiseEqual(outs[1].toTensor(), iv.mul(0.5)));
}

// The joint graph of SDPA on CUDA, as make_fx records it: the efficient-attention backward's
// attn_bias is None where its schema says Tensor (the autograd formula passes an undefined one).
TEST_CASE(
    "executor: None where the schema wants a Tensor plans as an undefined tensor, ops "
    "without a kernel for the device are named",
    "[runtime]") {
  Graph g;
  TensorMeta bhsd = f32({1, 2, 32, 8});
  Node* q = placeholder(g, "q", bhsd, InputKind::UserInput);
  Node* go = placeholder(g, "go", bhsd, InputKind::UserInput);
  Node* fwd = g.createCall(
      "aten._scaled_dot_product_efficient_attention.default",
      {N(q), N(q), N(q), Arg::none(), Arg::ofBool(true), Arg::ofFloat(0.0), Arg::ofBool(true)}, {},
      nullptr, "sdpa");
  fwd->val() = ValueMeta::ofList({ValueMeta::ofTensor(bhsd), ValueMeta::ofTensor(f32({1, 2, 32})),
                                  ValueMeta::ofTensor(meta(ScalarType::Int64, {})),
                                  ValueMeta::ofTensor(meta(ScalarType::Int64, {}))});
  std::vector<Node*> items;
  for (int k = 0; k < 4; ++k)
    items.push_back(call(g, "operator.getitem", {N(fwd), Arg::ofInt(k)}, TensorMeta{}));
  Node* bwd = g.createCall(
      "aten._scaled_dot_product_efficient_attention_backward.default",
      {N(go), N(q), N(q), N(q), Arg::none(), N(items[0]), N(items[1]), N(items[2]), N(items[3]),
       Arg::ofFloat(0.0),
       Arg::ofList({Arg::ofBool(true), Arg::ofBool(true), Arg::ofBool(true), Arg::ofBool(false)}),
       Arg::ofBool(true)},
      {}, nullptr, "sdpa_backward");
  Node* gq = call(g, "operator.getitem", {N(bwd), Arg::ofInt(0)}, bhsd);
  output(g, {items[0], gq});

  // Before, planning failed: "argument 'attn_bias': cannot pass a None as Tensor".
  CHECK_NOTHROW(rt::Executor(g));
  // The two SDPA ops have CUDA kernels only: the graph cannot run on CPU, and the error says
  // which node and which ops.
  std::string problem = rt::deviceKernelProblem(g, c10::kCPU);
  CHECK(problem.find("node 'sdpa'") != std::string::npos);
  CHECK(problem.find("2 nodes call ops with no cpu kernel "
                     "(aten._scaled_dot_product_efficient_attention.default, "
                     "aten._scaled_dot_product_efficient_attention_backward.default)") !=
        std::string::npos);

  Graph plain;
  Node* x = placeholder(plain, "x", f32({2, 2}), InputKind::UserInput);
  output(plain, {call(plain, "aten.mm.default", {N(x), N(x)}, f32({2, 2}))});
  CHECK(rt::deviceKernelProblem(plain, c10::kCPU).empty());
}

TEST_CASE("executor: an unresolvable op fails at plan time naming the node and target",
          "[runtime]") {
  Graph g;
  Node* x = placeholder(g, "x", f32({2}), InputKind::UserInput);
  Node* bad = call(g, "aten.no_such_op.default", {N(x)}, f32({2}), {}, "mystery");
  output(g, {bad});
  try {
    rt::Executor ex(g);
    FAIL("planning should have failed");
  } catch (const JfxError& e) {
    std::string what = e.what();
    CHECK(what.find("mystery") != std::string::npos);
    CHECK(what.find("aten.no_such_op.default") != std::string::npos);
  }
}

TEST_CASE("executor: bad arguments fail at plan time", "[runtime]") {
  auto planError = [](const std::function<void(Graph&, Node*)>& build) {
    Graph g;
    Node* x = placeholder(g, "x", f32({2, 2}), InputKind::UserInput);
    build(g, x);
    try {
      rt::Executor ex(g);
    } catch (const JfxError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK(planError([](Graph& g, Node* x) {
          output(g, {call(g, "aten.mm.default", {N(x)}, f32({2, 2}), {}, "mm_missing")});
        }).find("missing argument 'mat2'") != std::string::npos);
  CHECK(planError([](Graph& g, Node* x) {
          output(g, {call(g, "aten.mm.default", {N(x), N(x)}, f32({2, 2}),
                          kw("bogus", Arg::ofInt(1)), "mm_kw")});
        }).find("unknown keyword argument 'bogus'") != std::string::npos);
  CHECK(planError([](Graph& g, Node* x) {
          output(g, {call(g, "aten.mm.default", {N(x), N(x), N(x)}, f32({2, 2}), {}, "mm3")});
        }).find("positional") != std::string::npos);
  CHECK(planError([](Graph& g, Node* x) {
          output(g, {call(g, "aten.view.default", {N(x), Arg::ofStr("four")}, f32({4}), {},
                          "view_str")});
        }).find("view_str") != std::string::npos);
  CHECK(planError([](Graph& g, Node* x) {
          output(g, {call(g, "_c10d_functional.all_gather_into_tensor.default",
                          {N(x), Arg::ofInt(1), Arg::ofStr("nope")}, f32({2, 2}), {}, "ag")});
        }).find("process group 'nope' is not registered") != std::string::npos);
}

TEST_CASE("executor: a wrong output shape is caught against the graph's meta", "[runtime]") {
  Graph g;
  Node* x = placeholder(g, "x", f32({2, 3}), InputKind::UserInput);
  Node* t = call(g, "aten.t.default", {N(x)}, f32({2, 3}), {}, "t_wrong");  // really [3, 2]
  output(g, {t});
  rt::Executor ex(g);
  try {
    ex.run({at::randn({2, 3})});
    FAIL("meta check should have failed");
  } catch (const JfxError& e) {
    CHECK(std::string(e.what()).find("t_wrong") != std::string::npos);
  }
}

TEST_CASE("executor: an empty meta output matches any size only among a node's outputs",
          "[runtime]") {
  // Meta kernels give a workspace as an empty tensor (mkldnn_rnn_layer's): among a
  // multi-output node's outputs, and through its getitem, any size of that dtype matches.
  Graph g;
  Node* x = placeholder(g, "x", f32({2, 3}), InputKind::UserInput);
  const TensorMeta empty_i64 = meta(ScalarType::Int64, {0});
  Node* mx = call(g, "aten.max.dim", {N(x), Arg::ofInt(1)}, TensorMeta{}, {}, "max_dim");
  mx->val() = ValueMeta::ofList({ValueMeta::ofTensor(f32({2})), ValueMeta::ofTensor(empty_i64)});
  Node* idx = call(g, "operator.getitem", {N(mx), Arg::ofInt(1)}, empty_i64, {}, "indices");
  output(g, {idx});
  rt::Executor ex(g);
  std::vector<c10::IValue> out = ex.run({at::randn({2, 3})});
  CHECK(out[0].toTensor().sizes() == at::IntArrayRef({2}));

  // A single output is checked as written: an empty meta is not a wildcard there.
  Graph h;
  Node* y = placeholder(h, "y", f32({2, 3}), InputKind::UserInput);
  output(h, {call(h, "aten.neg.default", {N(y)}, f32({0}), {}, "neg_empty")});
  rt::Executor strict(h);
  try {
    strict.run({at::randn({2, 3})});
    FAIL("meta check should have failed");
  } catch (const JfxError& e) {
    CHECK(std::string(e.what()).find("neg_empty") != std::string::npos);
  }
}

TEST_CASE("executor: values die after their last use, collective inputs live until the wait",
          "[runtime]") {
  // A chain of 20 elementwise ops: at most the input, the current value and the next are alive.
  Graph g;
  Node* x = placeholder(g, "x", f32({16}), InputKind::UserInput);
  Node* cur = x;
  for (int i = 0; i < 20; ++i)
    cur = call(g, "aten.neg.default", {N(cur)}, f32({16}));
  output(g, {cur});
  rt::Executor ex(g);
  auto outs = ex.run({at::randn({16})});
  CHECK(ex.stats().max_live_values <= 2);

  // With a collective: the all-gather's input must outlive the collective itself.
  Graph g2;
  addGroup(g2, "0");
  Node* p = placeholder(g2, "p", f32({4}), InputKind::Parameter, "p");
  Node* q = call(g2, "aten.neg.default", {N(p)}, f32({4}));
  Node* ag = call(g2, "_c10d_functional.all_gather_into_tensor.default",
                  {N(q), Arg::ofInt(1), Arg::ofStr("0")}, f32({4}));
  Node* filler = call(g2, "aten.neg.default", {N(p)}, f32({4}));
  Node* w = call(g2, "_c10d_functional.wait_tensor.default", {N(ag)}, f32({4}));
  Node* sum = call(g2, "aten.add.Tensor", {N(w), N(filler)}, f32({4}));
  output(g2, {sum});
  World1 world(g2);
  rt::Executor ex2(g2);
  at::Tensor pv = at::randn({4});
  auto o2 = ex2.run({pv});
  CHECK(bitwiseEqual(o2[0].toTensor(), pv.neg().add(pv.neg())));
  // p, q (kept for the wait), ag, filler are all alive when w runs.
  CHECK(ex2.stats().max_live_values >= 4);
}

TEST_CASE("executor: measures each run's peak of live tensor bytes, exactly", "[runtime]") {
  // Note [Measured memory]. Inputs x, w: f32[8, 8], 256 B each, held the whole run.
  //   a = mm(x, w)       +256 -> 768
  //   t = t(a)           a view
  //   b = neg(t)         +256 -> 1024, then a is freed (t was its last view) -> 768
  //   c = add(b, b)      +256 -> 1024, then b is freed -> 768
  //   sp = split(c, 4)   views of c; s0, s1 its getitems
  //   d = exp(s0)        +128 -> 896; c lives on as the output s1
  // Peak 1024 B.
  Graph g;
  Node* x = placeholder(g, "x", f32({8, 8}), InputKind::UserInput);
  Node* w = placeholder(g, "w", f32({8, 8}), InputKind::Parameter, "w");
  Node* a = call(g, "aten.mm.default", {N(x), N(w)}, f32({8, 8}), {}, "a");
  TensorMeta tm = f32({8, 8});
  tm.stride = {1, 8};
  Node* t = call(g, "aten.t.default", {N(a)}, tm, {}, "t");
  Node* b = call(g, "aten.neg.default", {N(t)}, tm, {}, "b");
  Node* c = call(g, "aten.add.Tensor", {N(b), N(b)}, tm, {}, "c");
  Node* sp = g.createCall("aten.split.Tensor", {N(c), Arg::ofInt(4)}, {}, nullptr, "sp");
  TensorMeta half = f32({4, 8});
  half.stride = {1, 8};
  sp->val() = ValueMeta::ofList({ValueMeta::ofTensor(half), ValueMeta::ofTensor(half)});
  Node* s0 = call(g, "operator.getitem", {N(sp), Arg::ofInt(0)}, half, {}, "s0");
  Node* s1 = call(g, "operator.getitem", {N(sp), Arg::ofInt(1)}, half, {}, "s1");
  Node* d = call(g, "aten.exp.default", {N(s0)}, half, {}, "d");
  output(g, {d, s1});
  rt::ExecutorOptions o;
  o.memory_curve = true;
  rt::Executor ex(g, o);
  at::Tensor xv = at::randn({8, 8}), wv = at::randn({8, 8});
  auto outs = ex.run({xv, wv});
  CHECK(bitwiseEqual(outs[0].toTensor(), at::mm(xv, wv).t().neg().mul(2).split(4)[0].exp()));
  CHECK(ex.stats().input_bytes == 512);
  CHECK(ex.stats().peak_bytes == 1024);
  CHECK(ex.stats().memory_curve == std::vector<int64_t>{768, 768, 1024, 1024, 768, 768, 768, 896});
  CHECK(ex.stepName(2) == "b");
  // The same on every run, and an input storage passed twice counts once.
  ex.run({xv, xv});
  CHECK(ex.stats().input_bytes == 256);
  CHECK(ex.stats().peak_bytes == 768);
  // Storages allocated before the run (the outputs just returned, the inputs) and freed during
  // the next one do not lower it.
  outs = ex.run({at::randn({8, 8}), at::randn({8, 8})});
  CHECK(ex.stats().peak_bytes == 1024);

  rt::ExecutorOptions off;
  off.measure_memory = false;
  rt::Executor quiet(g, off);
  quiet.run({xv, wv});
  CHECK(quiet.stats().peak_bytes == -1);
  CHECK(quiet.stats().memory_curve.empty());
}

TEST_CASE("executor: a collective's own buffers count until its wait", "[runtime]") {
  // World 1 on gloo. p: f32[16], 64 B. The all-gather's output is 64 B, and LibTorch's gloo
  // copies its input (64 B) for the call: 192 B while it runs, then 128. The filler's 64 B make
  // it 192 again, and so does the wait; s = add(w, filler) +64: 256, the peak.
  Graph g;
  addGroup(g, "0");
  Node* p = placeholder(g, "p", f32({16}), InputKind::Parameter, "p");
  Node* ag = call(g, "_c10d_functional.all_gather_into_tensor.default",
                  {N(p), Arg::ofInt(1), Arg::ofStr("0")}, f32({16}));
  Node* filler = call(g, "aten.neg.default", {N(p)}, f32({16}));
  Node* w = call(g, "_c10d_functional.wait_tensor.default", {N(ag)}, f32({16}));
  Node* s = call(g, "aten.add.Tensor", {N(w), N(filler)}, f32({16}));
  output(g, {s});
  World1 world(g);
  rt::ExecutorOptions o;
  o.memory_curve = true;
  rt::Executor ex(g, o);
  for (int i = 0; i < 3; ++i) {
    ex.run({at::randn({16})});
    CHECK(ex.stats().memory_curve == std::vector<int64_t>{192, 192, 192, 256});
    CHECK(ex.stats().peak_bytes == 256);
  }
}

TEST_CASE("process groups: gloo groups over the same ranks share one backend unless told not to",
          "[runtime]") {
  // As split-comm-groups leaves them: `0` and `0_rs` over the same ranks, plus a group of its own.
  Graph g;
  addGroup(g, "0");
  addGroup(g, "0_rs");
  auto resolve = [](const char* name) { return c10d::resolve_process_group(name).get(); };
  {
    rt::ProcessGroups shared(g.processGroups(), rt::DistEnv{}, rt::CommBackend::Gloo,
                             std::chrono::seconds(30));
    CHECK(resolve("0") == resolve("0_rs"));
    CHECK(shared.sizeOf("0_rs") == 1);
    // A collective on either name runs, and the executor's results are unchanged (the numerics
    // of the whole pipeline are compared by the parity matrix, which runs with sharing on).
    Node* x = placeholder(g, "x", f32({4}), InputKind::UserInput);
    Node* ag = call(g, "_c10d_functional.all_gather_into_tensor.default",
                    {N(x), Arg::ofInt(1), Arg::ofStr("0")}, f32({4}));
    Node* w1 = call(g, "_c10d_functional.wait_tensor.default", {N(ag)}, f32({4}));
    Node* rs = call(g, "_c10d_functional.reduce_scatter_tensor.default",
                    {N(w1), Arg::ofStr("sum"), Arg::ofInt(1), Arg::ofStr("0_rs")}, f32({4}));
    Node* w2 = call(g, "_c10d_functional.wait_tensor.default", {N(rs)}, f32({4}));
    output(g, {w2});
    rt::Executor ex(g);
    at::Tensor in = at::randn({4});
    CHECK(bitwiseEqual(ex.run({in})[0].toTensor(), in));
  }
  rt::ProcessGroups separate(g.processGroups(), rt::DistEnv{}, rt::CommBackend::Gloo,
                             std::chrono::seconds(30), rt::GlooOptions{1, false});
  CHECK(resolve("0") != resolve("0_rs"));
}

}  // namespace jfx

namespace jfx {

TEST_CASE("process groups: mesh groups are localized to each rank", "[runtime]") {
  auto pg = [](std::string name, std::vector<int64_t> ranks) {
    ProcessGroupInfo p;
    p.name = std::move(name);
    p.size = static_cast<int64_t>(ranks.size());
    p.ranks = std::move(ranks);
    return p;
  };
  std::vector<ProcessGroupInfo> header{pg("fsdp", {0, 2}), pg("tp", {0, 1}), pg("fsdp_rs", {0, 2}),
                                       pg("world", {0, 1, 2, 3}), pg("odd", {1, 2})};
  std::string meta = R"({"mesh":{"dim_names":["fsdp","tp"],"shape":[2,2]},"world_size":4})";
  auto r3 = rt::localizeGroups(header, meta, 3, 4);
  CHECK(r3[0].ranks == std::vector<int64_t>{1, 3});
  CHECK(r3[1].ranks == std::vector<int64_t>{2, 3});
  CHECK(r3[2].ranks == std::vector<int64_t>{1, 3});
  CHECK(r3[3].ranks == std::vector<int64_t>{0, 1, 2, 3});
  CHECK(r3[4].ranks == std::vector<int64_t>{1, 2});  // not a mesh group: as written
  auto r1 = rt::localizeGroups(header, meta, 1, 4);
  CHECK(r1[0].ranks == std::vector<int64_t>{1, 3});
  CHECK(r1[1].ranks == std::vector<int64_t>{0, 1});
  // No mesh, or a mesh that does not cover the world: the header as it is.
  CHECK(rt::localizeGroups(header, "", 3, 4)[0].ranks == std::vector<int64_t>{0, 2});
  CHECK(rt::localizeGroups(header, R"({"mesh":{"shape":[2]}})", 3, 4)[0].ranks ==
        std::vector<int64_t>{0, 2});
  // A malformed mesh is an error naming the field (ir/device_mesh.h), not a silent fallback to
  // the header's ranks.
  CHECK_THROWS_WITH(rt::localizeGroups(header, R"({"mesh":{"shape":[2,0]}})", 3, 4),
                    Catch::Contains("meta.mesh.shape[1] is 0, not a positive integer"));
  CHECK_THROWS_WITH(rt::worldSizeProblem(header, R"({"mesh":"2x2"})", 4),
                    Catch::Contains("meta.mesh is \"2x2\", not an object"));
  CHECK(rt::worldSizeProblem(header, meta, 4).empty());
  CHECK_THAT(rt::worldSizeProblem(header, meta, 2),
             Catch::Contains("its device mesh [2, 2] has 4 ranks"));
}

}  // namespace jfx
