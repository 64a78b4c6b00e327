// Small FSDP joint graphs built through the Graph API, for the FSDP analysis, pass and memory
// tests: the worked example of docs/architecture.md and an L-layer stack of linear layers.
#pragma once

#include <string>
#include <vector>

#include "ir/graph.h"

namespace jfx::testing {

inline TensorMeta f32(std::vector<int64_t> shape) {
  TensorMeta t;
  t.dtype = ScalarType::Float32;
  t.stride = TensorMeta::contiguousStride(shape);
  t.shape = std::move(shape);
  t.device = Symbol::intern("cpu");
  return t;
}

// Sets the output meta and, when `phase` is known, the phase; returns the node for chaining.
inline Node* typed(Node* n, TensorMeta t, Phase phase = Phase::Unknown) {
  n->val() = ValueMeta::ofTensor(std::move(t));
  n->meta().phase = phase;
  return n;
}

inline Node* placeholder(Graph& g, const std::string& name, TensorMeta t, InputKind kind,
                         const std::string& fqn = "") {
  Node* n = g.create(OpKind::Placeholder, Symbol::intern(name), {}, {}, name);
  n->setInputInfo(kind, fqn);
  return typed(n, std::move(t));
}

inline Arg N(Node* n) {
  return Arg::ofNode(n);
}

// A graph builder that stamps every node it makes with the current phase (when `with_phase`).
struct Builder {
  Graph& g;
  bool with_phase = true;
  Phase phase = Phase::Forward;

  Node* call(const std::string& target, std::vector<Arg> args, TensorMeta t,
             const std::string& name = "") {
    Node* n = g.createCall(target, std::move(args), {}, nullptr, name);
    return typed(n, std::move(t), with_phase ? phase : Phase::Unknown);
  }
  Node* allGather(Node* in, int64_t world, const std::string& name = "") {
    TensorMeta t = in->val().tensor;
    t.shape = t.shape.with(0, t.shape[0] * world);
    t.stride = TensorMeta::contiguousStride(t.shape);
    return call("_c10d_functional.all_gather_into_tensor.default",
                {N(in), Arg::ofInt(world), Arg::ofStr("0")}, t, name);
  }
  Node* reduceScatter(Node* in, int64_t world, const std::string& name = "") {
    TensorMeta t = in->val().tensor;
    t.shape = t.shape.with(0, t.shape[0] / world);
    t.stride = TensorMeta::contiguousStride(t.shape);
    return call("_c10d_functional.reduce_scatter_tensor.default",
                {N(in), Arg::ofStr("sum"), Arg::ofInt(world), Arg::ofStr("0")}, t, name);
  }
  Node* wait(Node* in, const std::string& name = "") {
    return call("_c10d_functional.wait_tensor.default", {N(in)}, in->val().tensor, name);
  }
  Node* t(Node* in, const std::string& name = "") {
    TensorMeta m = in->val().tensor;
    m.shape = {m.shape[1], m.shape[0]};
    m.stride = {m.stride[1], m.stride[0]};
    return call("aten.t.default", {N(in)}, m, name);
  }
  Node* mm(Node* a, Node* b, const std::string& name = "") {
    return call("aten.mm.default", {N(a), N(b)},
                f32({a->val().tensor.shape[0], b->val().tensor.shape[1]}), name);
  }
  Node* output(std::vector<Node*> values) {
    std::vector<Arg> items;
    for (Node* v : values)
      items.push_back(N(v));
    return g.create(OpKind::Output, Symbol::intern("output"), {Arg::ofList(std::move(items))}, {},
                    "output");
  }
};

// The worked example of docs/architecture.md ("FSDP structure"): two linear layers, world 2,
// loss = sum(x @ W1^T @ W2^T).
// Node names follow its notation (ag1, W1, t1, h, ..., rs2, g2).
inline void buildWorkedExample(Graph& g, bool with_phase = true) {
  g.processGroups().push_back({"0", 2, {0, 1}});
  Node* w1 = placeholder(g, "w1", f32({4, 8}), InputKind::Parameter, "w1");
  Node* w2 = placeholder(g, "w2", f32({4, 8}), InputKind::Parameter, "w2");
  Node* x = placeholder(g, "x", f32({2, 8}), InputKind::UserInput);
  Builder b{g, with_phase};
  Node* t1 = b.t(b.wait(b.allGather(w1, 2, "ag1"), "W1"), "t1");
  Node* h = b.mm(x, t1, "h");
  Node* t2 = b.t(b.wait(b.allGather(w2, 2, "ag2"), "W2"), "t2");
  Node* y = b.mm(h, t2, "y");
  b.phase = Phase::Loss;
  Node* loss = b.call("aten.sum.default", {N(y)}, f32({}), "loss");
  b.phase = Phase::Backward;
  Node* ones = b.call("aten.ones_like.default", {N(loss)}, f32({}), "ones");
  TensorMeta gym = f32({2, 8});
  gym.stride = {0, 0};
  Node* gy = b.call("aten.expand.default", {N(ones), Arg::ofInts({2, 8})}, gym, "gy");
  Node* gw2 = b.t(b.mm(b.t(h, "t_h"), gy, "mm_gw2"), "gw2");
  Node* gh = b.mm(gy, b.t(t2, "t_t2"), "gh");
  Node* gw1 = b.t(b.mm(b.t(x, "t_x"), gh, "mm_gw1"), "gw1");
  Node* g2 = b.wait(b.reduceScatter(gw2, 2, "rs2"), "g2");
  Node* g1 = b.wait(b.reduceScatter(gw1, 2, "rs1"), "g1");
  b.output({loss, g1, g2});
  g.outputSpecs() = {
      {OutputKind::Loss, ""}, {OutputKind::Gradient, "w1"}, {OutputKind::Gradient, "w2"}};
}

// L linear layers "layers.i.w" of [d, d] sharded over `world`, batch B: the worked example's
// shape at depth. Every layer's unsharded weight is d*d*4 bytes.
inline void buildLinearStack(Graph& g, int layers, int64_t d, int64_t batch, int64_t world,
                             bool with_phase = true) {
  g.processGroups().push_back({"0", world, {}});
  for (int64_t r = 0; r < world; ++r)
    g.processGroups()[0].ranks.push_back(r);
  std::vector<Node*> w;
  for (int i = 0; i < layers; ++i) {
    std::string fqn = "layers." + std::to_string(i) + ".w";
    w.push_back(
        placeholder(g, "w" + std::to_string(i), f32({d / world, d}), InputKind::Parameter, fqn));
  }
  Node* x = placeholder(g, "x", f32({batch, d}), InputKind::UserInput);
  Builder b{g, with_phase};
  std::vector<Node*> h{x}, tw;
  for (int i = 0; i < layers; ++i) {
    std::string s = std::to_string(i);
    Node* t = b.t(b.wait(b.allGather(w[i], world, "ag" + s), "W" + s), "t" + s);
    for (Node* n : {t, t->input(0), t->input(0)->input(0)})
      n->meta().module_fqn = Symbol::intern("layers." + s);
    tw.push_back(t);
    h.push_back(b.mm(h.back(), t, "h" + std::to_string(i + 1)));
  }
  b.phase = Phase::Loss;
  Node* loss = b.call("aten.sum.default", {N(h.back())}, f32({}), "loss");
  b.phase = Phase::Backward;
  Node* ones = b.call("aten.ones_like.default", {N(loss)}, f32({}), "ones");
  TensorMeta gm = f32({batch, d});
  gm.stride = {0, 0};
  Node* grad = b.call("aten.expand.default", {N(ones), Arg::ofInts({batch, d})}, gm, "gy");
  std::vector<Node*> grads(layers);
  for (int i = layers - 1; i >= 0; --i) {
    std::string s = std::to_string(i);
    Node* gw = b.t(b.mm(b.t(h[i], "th" + s), grad, "mmw" + s), "gw" + s);
    if (i > 0) grad = b.mm(grad, b.t(tw[i], "tt" + s), "gh" + s);
    grads[i] = b.wait(b.reduceScatter(gw, world, "rs" + s), "g" + s);
  }
  std::vector<Node*> outs{loss};
  outs.insert(outs.end(), grads.begin(), grads.end());
  b.output(outs);
  g.outputSpecs().push_back({OutputKind::Loss, ""});
  for (int i = 0; i < layers; ++i)
    g.outputSpecs().push_back({OutputKind::Gradient, "layers." + std::to_string(i) + ".w"});
}

}  // namespace jfx::testing
