// Phase and FSDP-chain analyses (passes/analysis/phase.h, fsdp.h).
#include <catch2/catch.hpp>

#include "passes/analysis/fsdp.h"
#include "passes/analysis/phase.h"
#include "test_fsdp_graphs.h"

using namespace jfx;
using namespace jfx::testing;

namespace {

Node* at(const Graph& g, const char* name) {
  Node* n = g.findNode(name);
  REQUIRE(n != nullptr);
  return n;
}

std::vector<std::string> names(const std::vector<Node*>& v) {
  std::vector<std::string> out;
  for (const Node* n : v)
    out.push_back(std::string(n->name()));
  return out;
}

using Names = std::vector<std::string>;

}  // namespace

TEST_CASE("phase: structure gives forward, loss and backward without meta", "[fsdp]") {
  Graph g;
  buildWorkedExample(g, /*with_phase=*/false);
  PhaseInfo p = computePhases(g);
  CHECK(p.lossNode() == at(g, "loss"));
  for (const char* n : {"ag1", "W1", "t1", "h", "ag2", "W2", "t2", "y"})
    CHECK(p.of(at(g, n)) == Phase::Forward);
  CHECK(p.of(at(g, "loss")) == Phase::Loss);
  // t_t2 reads only forward values but feeds a gradient: backward. So does t_x.
  for (const char* n : {"ones", "gy", "t_h", "gw2", "t_t2", "gh", "t_x", "rs1", "g1", "rs2", "g2"})
    CHECK(p.of(at(g, n)) == Phase::Backward);
  CHECK(p.of(at(g, "w1")) == Phase::Unknown);
  CHECK(p.of(at(g, "output")) == Phase::Unknown);
  CHECK(p.fromMeta() == 0);
  CHECK(p.fromStructure() > 0);
}

TEST_CASE("phase: meta wins, then the autograd_backward flag", "[fsdp]") {
  Graph g;
  buildWorkedExample(g, false);
  at(g, "t1")->meta().phase = Phase::Backward;  // whatever the exporter says
  at(g, "h")->meta().attrs.set(attr::autogradBackward(), AttrValue{true});
  at(g, "y")->meta().attrs.set(attr::autogradBackward(), AttrValue{false});
  // The flag is a typed attribute: the same key in hand-built extra JSON is not read.
  at(g, "t2")->meta().extra_json = R"({"autograd_backward":true})";
  PhaseInfo p = computePhases(g);
  CHECK(p.of(at(g, "t1")) == Phase::Backward);
  CHECK(p.of(at(g, "h")) == Phase::Backward);
  CHECK(p.of(at(g, "y")) == Phase::Forward);
  CHECK(p.of(at(g, "t2")) == Phase::Forward);
  CHECK(p.fromMeta() == 1);
  CHECK(p.fromAutogradFlag() == 1);
}

TEST_CASE("phase: loss module FQN, getitems of forward ops, and no output specs", "[fsdp]") {
  Graph g;
  Node* x = placeholder(g, "x", f32({4}), InputKind::UserInput);
  Builder b{g, false};
  TensorMeta t = f32({4});
  Node* drop = g.createCall("aten.native_dropout.default",
                            {N(x), Arg::ofFloat(0.5), Arg::ofBool(true)}, {}, nullptr, "drop");
  drop->val() = ValueMeta::ofList({ValueMeta::ofTensor(t), ValueMeta::ofTensor(t)});
  Node* out0 = b.call("operator.getitem", {N(drop), Arg::ofInt(0)}, t, "out0");
  Node* mask = b.call("operator.getitem", {N(drop), Arg::ofInt(1)}, t, "mask");
  Node* sq = b.call("aten.mul.Tensor", {N(out0), N(out0)}, t, "sq");
  sq->meta().module_fqn = Symbol::intern("loss");
  Node* loss = b.call("aten.sum.default", {N(sq)}, f32({}), "loss");
  Node* gx = b.call("aten.mul.Tensor", {N(mask), N(out0)}, t, "gx");
  Node* aux = b.call("aten.neg.default", {N(x)}, t, "aux");  // neither loss nor gradient
  (void)aux;
  b.output({loss, gx});  // no specs: [loss, *grads] by convention
  PhaseInfo p = computePhases(g);
  CHECK(p.of(drop) == Phase::Forward);
  CHECK(p.of(out0) == Phase::Forward);
  CHECK(p.of(mask) == Phase::Forward);  // a projection of a forward op, read only by backward
  CHECK(p.of(sq) == Phase::Loss);
  CHECK(p.of(loss) == Phase::Loss);
  CHECK(p.of(gx) == Phase::Backward);
  CHECK(p.of(at(g, "aux")) == Phase::Forward);
}

TEST_CASE("fsdp: plain chain, save point and gradient chains of the worked example", "[fsdp]") {
  Graph g;
  buildWorkedExample(g);
  PhaseInfo p = computePhases(g);
  FsdpAnalysis a = analyzeFsdp(g, p);
  REQUIRE(a.unshard.size() == 2);
  const FsdpUnshardChain& c2 = a.unshard[1];
  CHECK(c2.param == at(g, "w2"));
  CHECK(c2.pre.empty());
  CHECK(c2.all_gather == at(g, "ag2"));
  CHECK(c2.wait == at(g, "W2"));
  CHECK(names(c2.post) == Names{"t2"});  // t_t2 is backward: not part of the forward chain
  CHECK(names(c2.save_points) == Names{"W2"});
  CHECK(c2.phase == Phase::Forward);
  CHECK(names(c2.nodes()) == Names{"ag2", "W2", "t2"});
  CHECK(a.unshardChainOf(at(g, "t2")) == &c2);
  CHECK(a.unshardChainOf(at(g, "y")) == nullptr);
  CHECK(a.roleOf(at(g, "ag1")) == CollectiveRole::FsdpUnshard);

  REQUIRE(a.grads.size() == 2);
  CHECK(a.grads[0].reduce_scatter == at(g, "rs2"));
  CHECK(a.grads[0].wait == at(g, "g2"));
  CHECK(a.grads[0].output_index == 2);
  CHECK(a.grads[0].param_fqn == "w2");
  CHECK(a.grads[1].param_fqn == "w1");
  CHECK(a.roleOf(at(g, "rs1")) == CollectiveRole::FsdpReduceGrad);
  CHECK(a.other_collectives.empty());
}

TEST_CASE("fsdp: dtype cast before the gather and a slice after it", "[fsdp]") {
  Graph g;
  Node* w = placeholder(g, "w", f32({4, 8}), InputKind::Parameter, "layers.0.w");
  Node* x = placeholder(g, "x", f32({2, 8}), InputKind::UserInput);
  Builder b{g};
  TensorMeta bf = f32({4, 8});
  bf.dtype = ScalarType::BFloat16;
  Node* cast = b.call("prims.convert_element_type.default",
                      {N(w), Arg::ofDtype(ScalarType::BFloat16)}, bf, "cast");
  Node* ag = b.allGather(cast, 2, "ag");
  Node* wt = b.wait(ag, "wt");
  TensorMeta sl = wt->val().tensor;
  sl.shape = sl.shape.with(0, 7);
  Node* slice = b.call("aten.slice.Tensor", {N(wt), Arg::ofInt(0), Arg::ofInt(0), Arg::ofInt(7)},
                       sl, "slice");
  Node* view = b.call("aten.view.default", {N(slice), Arg::ofInts({7, 8})}, sl, "view");
  Node* y = b.mm(x, b.t(view, "tv"), "y");
  b.phase = Phase::Loss;
  Node* loss = b.call("aten.sum.default", {N(y)}, f32({}), "loss");
  b.output({loss});
  FsdpAnalysis a = analyzeFsdp(g, computePhases(g));
  REQUIRE(a.unshard.size() == 1);
  CHECK(names(a.unshard[0].pre) == Names{"cast"});
  CHECK(names(a.unshard[0].post) == Names{"slice", "view", "tv"});
  CHECK(names(a.unshard[0].save_points) == Names{"wt"});
  CHECK(singleInputRoot(ag->input(0)) == w);
}

TEST_CASE("fsdp: split -> getitems -> cat chain saves the cat", "[fsdp]") {
  Graph g;
  Node* w = placeholder(g, "w", f32({4, 4}), InputKind::Parameter, "experts.w");
  Node* x = placeholder(g, "x", f32({2, 8}), InputKind::UserInput);
  Builder b{g};
  Node* wt = b.wait(b.allGather(w, 2, "ag"), "wt");  // [8, 4]: two [4, 4] shards stacked
  Node* split = g.createCall("aten.split.Tensor", {N(wt), Arg::ofInt(4)}, {}, nullptr, "split");
  split->val() =
      ValueMeta::ofList({ValueMeta::ofTensor(f32({4, 4})), ValueMeta::ofTensor(f32({4, 4}))});
  split->meta().phase = Phase::Forward;
  Node* g0 = b.call("operator.getitem", {N(split), Arg::ofInt(0)}, f32({4, 4}), "g0");
  Node* g1 = b.call("operator.getitem", {N(split), Arg::ofInt(1)}, f32({4, 4}), "g1");
  Node* cat =
      b.call("aten.cat.default", {Arg::ofList({N(g0), N(g1)}), Arg::ofInt(1)}, f32({4, 8}), "cat");
  Node* y = b.mm(x, b.t(cat, "tc"), "y");
  b.phase = Phase::Loss;
  b.output({b.call("aten.sum.default", {N(y)}, f32({}), "loss")});
  FsdpAnalysis a = analyzeFsdp(g, computePhases(g));
  REQUIRE(a.unshard.size() == 1);
  CHECK(names(a.unshard[0].post) == Names{"split", "g0", "g1", "cat", "tc"});
  CHECK(names(a.unshard[0].save_points) == Names{"cat"});
}

TEST_CASE("fsdp: TP collectives on activations and non-parameter inputs are not FSDP", "[fsdp]") {
  Graph g;
  Node* w = placeholder(g, "w", f32({4, 8}), InputKind::Parameter, "w");
  Node* x = placeholder(g, "x", f32({2, 8}), InputKind::UserInput);
  Node* buf = placeholder(g, "buf", f32({4, 8}), InputKind::Buffer, "buf");
  Builder b{g};
  Node* wt = b.wait(b.allGather(w, 2, "ag_w"), "wt");
  Node* h = b.mm(x, b.t(wt, "tw"), "h");                   // [2, 8] activation
  Node* hg = b.wait(b.allGather(h, 2, "ag_tp"), "hg");     // sequence-parallel style gather
  Node* bg = b.wait(b.allGather(buf, 2, "ag_buf"), "bg");  // a buffer, not a parameter
  Node* xv = b.call("aten.view.default", {N(x), Arg::ofInts({2, 8})}, f32({2, 8}), "xv");
  Node* xg = b.wait(b.allGather(xv, 2, "ag_x"), "xg");  // single-input chain to a user input
  Node* ar = b.wait(b.call("_c10d_functional.all_reduce.default",
                           {N(h), Arg::ofStr("sum"), Arg::ofStr("0")}, f32({2, 8}), "ar_tp"),
                    "arw");
  b.phase = Phase::Loss;
  Node* s = b.call("aten.add.Tensor", {N(hg), N(bg)}, f32({4, 8}), "s");
  Node* s2 = b.call("aten.add.Tensor", {N(xg), N(ar)}, f32({4, 8}), "s2");
  Node* loss = b.call("aten.sum.default", {N(s)}, f32({}), "loss");
  b.output({loss, s2});
  FsdpAnalysis a = analyzeFsdp(g, computePhases(g));
  REQUIRE(a.unshard.size() == 1);
  CHECK(a.unshard[0].all_gather == at(g, "ag_w"));
  CHECK(names(a.other_collectives) == Names{"ag_tp", "ag_buf", "ag_x", "ar_tp"});
  CHECK(a.roleOf(at(g, "ag_tp")) == CollectiveRole::Other);
  CHECK(a.roleOf(at(g, "h")) == CollectiveRole::None);
}

TEST_CASE("fsdp: padding with zeros and an HSDP all-reduce in the gradient chain", "[fsdp]") {
  Graph g;
  Node* w = placeholder(g, "w", f32({3, 8}), InputKind::Parameter, "w");
  Node* x = placeholder(g, "x", f32({2, 8}), InputKind::UserInput);
  Builder b{g};
  Node* z = b.call("aten.zeros.default", {Arg::ofInts({1, 8})}, f32({1, 8}), "z");
  Node* pad = b.call("aten.cat.default", {Arg::ofList({N(w), N(z)})}, f32({4, 8}), "pad");
  Node* wt = b.wait(b.allGather(pad, 2, "ag"), "wt");
  Node* y = b.mm(x, b.t(wt, "tw"), "y");
  b.phase = Phase::Loss;
  Node* loss = b.call("aten.sum.default", {N(y)}, f32({}), "loss");
  b.phase = Phase::Backward;
  Node* gw = b.call("aten.ones_like.default", {N(wt)}, f32({8, 8}), "gw");
  Node* cast = b.call("aten._to_copy.default", {N(gw)}, f32({8, 8}), "cast");
  Node* rs = b.wait(b.reduceScatter(cast, 2, "rs"), "rsw");
  Node* ar = b.wait(b.call("_c10d_functional.all_reduce.default",
                           {N(rs), Arg::ofStr("sum"), Arg::ofStr("1")}, f32({4, 8}), "ar"),
                    "arw");
  Node* div = b.call("aten.div.Scalar", {N(ar), Arg::ofInt(2)}, f32({4, 8}), "div");
  b.output({loss, div});
  g.outputSpecs() = {{OutputKind::Loss, ""}, {OutputKind::Gradient, "w"}};
  FsdpAnalysis a = analyzeFsdp(g, computePhases(g));
  REQUIRE(a.unshard.size() == 1);
  CHECK(names(a.unshard[0].pre) == Names{"pad"});
  REQUIRE(a.grads.size() == 1);
  CHECK(names(a.grads[0].pre) == Names{"cast"});
  CHECK(names(a.grads[0].post) == Names{"ar", "arw", "div"});
  CHECK(a.grads[0].all_reduce == at(g, "ar"));
  CHECK(a.grads[0].param_fqn == "w");
  CHECK(a.roleOf(at(g, "ar")) == CollectiveRole::FsdpGradAllReduce);
  CHECK(a.other_collectives.empty());
}

TEST_CASE("fsdp: DDP gradient all-reduces are replica gradient chains, in-place sums included",
          "[fsdp]") {
  // DDP (SimpleFSDP's replicate mode): no all-gather; each gradient read is all-reduced. `w` is
  // read twice, as a chunked loss reads its output projection, and its two reductions are summed
  // in place into the first (alias, then add_). A forward all-reduce an output reads is no
  // gradient reduction.
  Graph g;
  Node* w = placeholder(g, "w", f32({8, 8}), InputKind::Parameter, "w");
  Node* v = placeholder(g, "v", f32({8, 8}), InputKind::Parameter, "v");
  Node* x = placeholder(g, "x", f32({2, 8}), InputKind::UserInput);
  Builder b{g};
  Node* h = b.mm(x, b.t(w, "tw"), "h");
  Node* fwd_ar = b.wait(b.call("_c10d_functional.all_reduce.default",
                               {N(h), Arg::ofStr("sum"), Arg::ofStr("0")}, f32({2, 8}), "ar_fwd"),
                        "arw_fwd");
  Node* y = b.mm(fwd_ar, b.t(v, "tv"), "y");
  b.phase = Phase::Loss;
  Node* loss = b.call("aten.sum.default", {N(y)}, f32({}), "loss");
  b.phase = Phase::Backward;
  auto allReduce = [&](Node* in, const std::string& name) {
    return b.wait(b.call("_c10d_functional.all_reduce.default",
                         {N(in), Arg::ofStr("sum"), Arg::ofStr("0")}, f32({8, 8}), name),
                  name + "w");
  };
  Node* gv = b.call("aten.ones_like.default", {N(v)}, f32({8, 8}), "gv");
  Node* gw1 = b.call("aten.ones_like.default", {N(w)}, f32({8, 8}), "gw1");
  Node* gw2 = b.call("aten.ones_like.default", {N(w)}, f32({8, 8}), "gw2");
  Node* arv = allReduce(gv, "ar_v");
  Node* acc = b.call("aten.alias.default", {N(allReduce(gw1, "ar_w1"))}, f32({8, 8}), "acc");
  Node* sum = b.call("aten.add_.Tensor", {N(acc), N(allReduce(gw2, "ar_w2"))}, f32({8, 8}), "sum");
  b.output({loss, arv, sum, fwd_ar});
  g.outputSpecs() = {{OutputKind::Loss, ""},
                     {OutputKind::Gradient, "v"},
                     {OutputKind::Gradient, "w"},
                     {OutputKind::Other, ""}};
  FsdpAnalysis a = analyzeFsdp(g, computePhases(g));
  CHECK(a.unshard.empty());
  CHECK(a.grads.empty());
  REQUIRE(a.replica_grads.size() == 3);
  CHECK(a.replica_grads[0].all_reduce == at(g, "ar_v"));
  CHECK(a.replica_grads[0].param_fqn == "v");
  CHECK(a.replica_grads[0].output_index == 1);
  CHECK(a.replica_grads[1].all_reduce == at(g, "ar_w1"));
  CHECK(a.replica_grads[2].all_reduce == at(g, "ar_w2"));
  CHECK(a.replica_grads[1].param_fqn == "w");
  CHECK(a.replica_grads[2].param_fqn == "w");
  CHECK(a.roleOf(at(g, "ar_w2")) == CollectiveRole::FsdpGradAllReduce);
  CHECK(names(a.other_collectives) == Names{"ar_fwd"});
}
