#include "tools/synth/synth.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <unordered_map>
#include <utility>

#include "ir/error.h"

namespace jfx {
namespace {

// Shapes are built and edited as vectors; a meta interns them as Dims (ir/dims.h).
using Shape = std::vector<int64_t>;

int64_t ceilDiv(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// Broadcast of two shapes, numpy rules (the inputs are already known to be compatible).
Shape broadcastShape(const Shape& a, const Shape& b) {
  Shape out(std::max(a.size(), b.size()), 1);
  for (size_t i = 0; i < out.size(); ++i) {
    int64_t da = i < out.size() - a.size() ? 1 : a[i - (out.size() - a.size())];
    int64_t db = i < out.size() - b.size() ? 1 : b[i - (out.size() - b.size())];
    out[i] = da == 1 ? db : da;
  }
  return out;
}

std::string normalizeDevice(const std::string& d) {
  return d == "cuda" ? "cuda:0" : d;
}

bool isCuda(const std::string& d) {
  return d.rfind("cuda", 0) == 0;
}

SynthAttention resolveAttention(const SynthConfig& c) {
  if (c.attention != SynthAttention::Auto) return c.attention;
  if (!isCuda(c.device)) return SynthAttention::CpuFlash;
  bool half = c.param_dtype == ScalarType::BFloat16 || c.param_dtype == ScalarType::Float16;
  return half ? SynthAttention::Flash : SynthAttention::Efficient;
}

struct Param {
  std::string fqn;
  std::string module;  // the module whose forward reads it (its all-gather chain's module_fqn)
  Shape full;
  Node* placeholder = nullptr;
};

// What backward reads of one linear layer's forward.
struct LinearSave {
  Param* param;
  Node* gather_ag;  // this use's all-gather (tied weights are gathered per use)
  Node* weight_t;   // t(W): [in, out]
  Node* input_2d;   // view(x, [N, in])
  Node* mm;
  Node* out_3d;  // _unsafe_view(mm, [B, S, out])
  int64_t in, out;
};

struct NormSave {
  Param* param;
  Node* gather_ag;
  Node* input;      // x
  Node* input_f32;  // x.float() (x itself when the compute dtype is float32)
  Node* pow;
  Node* mean;
  Node* rsqrt;
  Node* rsqrt_alias;
  Node* normed;     // x32 * rsqrt
  Node* normed_cd;  // normed.type_as(x)
  Node* weight;     // the gathered weight
  Node* out;        // normed_cd * weight
};

// Rotates interleaved pairs (x0, x1) to (x0 cos - x1 sin, x0 sin + x1 cos).
struct RopeSave {
  Node* x32;          // x.float() or x
  Node* pairs;        // view(x32, [B, S, nh, hd/2, 2])
  Node *x0, *x1;      // select(pairs, 4, 0 / 1)
  Node *cos4, *sin4;  // cos/sin unsqueezed to [1, S, 1, hd/2]
  Node *x0_cos, *x1_sin, *rot0, *x0_sin, *x1_cos;
  Node* stack;
  Node* flat;      // view(stack, [B, S, nh, hd])
  Node* out_cast;  // the value handed on (flat cast back, or flat)
  int64_t heads;
};

struct AttentionSave {
  Node* op;
  Node *q_t, *k_t, *v_t;  // transposed inputs [B, nh, S, hd]
  Node* out;              // getitem 0
  Node* out_alias;
  std::vector<Node*> extra;        // getitems the backward reads besides out (lse, rng state...)
  Node* out_t;                     // transpose(out, 1, 2)
  Node* out_3d;                    // view(out_t, [B, S, H*hd])
  Node *q_view, *k_view, *v_view;  // view(proj, [B, S, nh, hd])
  RopeSave q_rope, k_rope;
};

struct LayerSave {
  NormSave attn_norm, ffn_norm;
  LinearSave wq, wk, wv, wo, w1, w2, w3;
  AttentionSave attn;
  Node* attn_residual;  // h + attention(...)
  Node* silu;
  Node* gate_mul;  // silu(w1 x) * w3 x
  Node* ffn_residual;
};

class Builder {
 public:
  explicit Builder(const SynthConfig& cfg)
      : c_(cfg),
        g_(std::make_unique<Graph>()),
        device_(Symbol::intern(normalizeDevice(cfg.device))),
        cd_(cfg.param_dtype),
        attention_(resolveAttention(cfg)),
        head_dim_(cfg.dim / cfg.heads),
        tokens_(cfg.batch * cfg.seq) {}

  std::unique_ptr<Graph> build();

 private:
  // ---- node creation with the current phase / module / seq_nr.
  //
  // seq_nr follows autograd's sequence numbers as the tracer records them: a forward op that
  // creates an autograd node takes the next number; one that does not (its inputs need no grad:
  // buffers, labels) repeats the last; every op of a custom autograd.Function's forward (the
  // unshard) shares the Function's number. A backward op carries the number of the autograd
  // node it runs for, and the gradient accumulations the engine does between nodes carry the
  // root's (the loss).
  void forward(std::string_view module, bool needs_grad = true) {
    phase_ = Phase::Forward;
    module_ = Symbol::intern(module);
    pinned_seq_.reset();
    no_grad_ = !needs_grad;
  }
  // Backward ops share the seq_nr and module of the forward op they differentiate.
  void backwardOf(const Node* fwd) {
    phase_ = Phase::Backward;
    module_ = fwd->meta().module_fqn;
    pinned_seq_ = fwd->meta().seq_nr;
  }
  // a + b where the autograd engine sums two gradients flowing into one tensor.
  Node* accumulate(Node* a, Node* b) {
    Symbol module = module_;
    std::optional<int64_t> seq = pinned_seq_;
    backwardOf(root_);
    Node* sum = add(a, b);
    module_ = module;
    pinned_seq_ = seq;
    return sum;
  }

  // FX's node naming: the op name, then op_1, op_2...; names that would shadow a Python builtin
  // start at _1.
  std::string nextName(std::string_view target) {
    size_t first = target.find('.');
    size_t second = first == std::string_view::npos ? first : target.find('.', first + 1);
    std::string base(first == std::string_view::npos
                         ? target
                         : target.substr(first + 1, second == std::string_view::npos
                                                        ? std::string_view::npos
                                                        : second - first - 1));
    int64_t& count = name_counts_[base];
    if (count == 0 && isPythonBuiltin(base)) count = 1;
    std::string name = count == 0 ? base : base + "_" + std::to_string(count);
    ++count;
    return name;
  }
  static bool isPythonBuiltin(std::string_view s) {
    for (std::string_view b : {"abs", "all", "any", "max", "min", "pow", "round", "slice", "sum"})
      if (s == b) return true;
    return false;
  }

  Node* emit(std::string_view target, std::vector<Arg> args, Kwargs kwargs, ValueMeta val) {
    // Keyword arguments in key order, the order a JSON object (and so any graph read back from
    // JSON) has them.
    std::sort(kwargs.begin(), kwargs.end(),
              [](const auto& x, const auto& y) { return x.first.str() < y.first.str(); });
    Node* n = g_->createCall(target, std::move(args), std::move(kwargs), nullptr, nextName(target));
    n->val() = std::move(val);
    NodeMeta& m = n->meta();
    m.phase = phase_;
    m.module_fqn = module_;
    if (pinned_seq_)
      m.seq_nr = pinned_seq_;
    else if (no_grad_)
      m.seq_nr = last_seq_;
    else
      m.seq_nr = last_seq_ = next_seq_++;
    return n;
  }
  Node* emit(std::string_view target, std::vector<Arg> args, Kwargs kwargs, TensorMeta t) {
    return emit(target, std::move(args), std::move(kwargs), ValueMeta::ofTensor(std::move(t)));
  }
  Node* emit(std::string_view target, std::vector<Arg> args, TensorMeta t) {
    return emit(target, std::move(args), {}, std::move(t));
  }

  TensorMeta fresh(ScalarType dt, Shape shape) const {
    TensorMeta m;
    m.dtype = dt;
    m.stride = TensorMeta::contiguousStride(shape);
    m.shape = std::move(shape);
    m.device = device_;
    return m;
  }
  static const TensorMeta& meta(const Node* n) { return n->val().tensor; }
  static ScalarType dtypeOf(const Node* n) { return meta(n).dtype; }

  static Arg node(Node* n) { return Arg::ofNode(n); }
  static Arg i(int64_t v) { return Arg::ofInt(v); }
  static Arg f(double v) { return Arg::ofFloat(v); }
  static Arg ints(const Shape& v) { return Arg::ofInts(v); }
  static std::pair<Symbol, Arg> kw(std::string_view k, Arg v) {
    return {Symbol::intern(k), std::move(v)};
  }

  // ---- ops (each mirrors one aten op as make_fx records it)
  // .to(dtype) / .float(): dtype only. type_as() and autograd's _to_copy backward also pass layout
  // and device.
  Node* toCopy(Node* x, ScalarType dt, bool layout_device = false) {
    TensorMeta m = meta(x);
    m.dtype = dt;
    if (!isDense(m)) m.stride = TensorMeta::contiguousStride(m.shape);
    Kwargs kwargs{kw("dtype", Arg::ofDtype(dt))};
    if (layout_device) {
      kwargs.push_back(kw("layout", Arg::ofLayout("torch.strided")));
      kwargs.push_back(kw("device", Arg::ofDevice(device_.str())));
    }
    return emit("aten._to_copy.default", {node(x)}, std::move(kwargs), std::move(m));
  }
  // Casts only when the dtype differs: .float() / type_as() on a tensor already of that dtype
  // returns it without an op.
  Node* castIfNeeded(Node* x, ScalarType dt, bool layout_device = false) {
    return dtypeOf(x) == dt ? x : toCopy(x, dt, layout_device);
  }
  static bool isDense(const TensorMeta& m) {
    for (int64_t s : m.stride)
      if (s == 0) return false;
    return true;
  }
  // `m` with dimensions a and b swapped (a transpose view).
  static TensorMeta swapDims(TensorMeta m, int64_t a, int64_t b) {
    Shape shape = m.shape, stride = m.stride;
    std::swap(shape[static_cast<size_t>(a)], shape[static_cast<size_t>(b)]);
    std::swap(stride[static_cast<size_t>(a)], stride[static_cast<size_t>(b)]);
    m.shape = shape;
    m.stride = stride;
    return m;
  }
  // view / _unsafe_view of a contiguous tensor. `spelled` is the size argument as the model wrote
  // it (may hold -1), `shape` the concrete result.
  Node* view(Node* x, const Shape& spelled, const Shape& shape,
             std::string_view target = "aten.view.default") {
    return emit(target, {node(x), ints(spelled)}, fresh(dtypeOf(x), shape));
  }
  Node* view(Node* x, const Shape& shape) { return view(x, shape, shape); }
  Node* unsafeView(Node* x, const Shape& shape) {
    return view(x, shape, shape, "aten._unsafe_view.default");
  }
  Node* t(Node* x) { return emit("aten.t.default", {node(x)}, swapDims(meta(x), 0, 1)); }
  Node* transpose(Node* x, int64_t a, int64_t b) {
    return emit("aten.transpose.int", {node(x), i(a), i(b)}, swapDims(meta(x), a, b));
  }
  Node* unsqueeze(Node* x, int64_t d) {
    TensorMeta m = meta(x);
    size_t du = static_cast<size_t>(d);
    int64_t st = du >= m.shape.size() ? 1 : m.shape[du] * m.stride[du];
    Shape shape = m.shape, stride = m.stride;
    shape.insert(shape.begin() + d, 1);
    stride.insert(stride.begin() + d, st);
    m.shape = shape;
    m.stride = stride;
    return emit("aten.unsqueeze.default", {node(x), i(d)}, std::move(m));
  }
  // select.int; `spelled_dim` may be negative (as written), the result drops dimension `dim`.
  Node* select(Node* x, int64_t spelled_dim, int64_t index) {
    TensorMeta m = meta(x);
    int64_t dim =
        spelled_dim < 0 ? spelled_dim + static_cast<int64_t>(m.shape.size()) : spelled_dim;
    Shape shape = m.shape, stride = m.stride;
    shape.erase(shape.begin() + dim);
    stride.erase(stride.begin() + dim);
    m.shape = shape;
    m.stride = stride;
    return emit("aten.select.int", {node(x), i(spelled_dim), i(index)}, std::move(m));
  }
  Node* slice0(Node* x, int64_t end) {
    TensorMeta m = meta(x);
    m.shape = m.shape.with(0, end);
    return emit("aten.slice.Tensor", {node(x), i(0), i(0), i(end)}, std::move(m));
  }
  Node* expand(Node* x, const Shape& shape) {
    TensorMeta m = meta(x);
    Shape stride = m.stride;
    for (size_t k = 0; k < shape.size(); ++k)
      if (m.shape[k] == 1 && shape[k] != 1) stride[k] = 0;
    m.stride = stride;
    m.shape = shape;
    return emit("aten.expand.default", {node(x), ints(shape)}, std::move(m));
  }
  Node* alias(Node* x) { return emit("aten.alias.default", {node(x)}, meta(x)); }
  Node* binary(std::string_view target, Node* a, Node* b) {
    return emit(target, {node(a), node(b)},
                fresh(dtypeOf(a), broadcastShape(meta(a).shape, meta(b).shape)));
  }
  Node* mul(Node* a, Node* b) { return binary("aten.mul.Tensor", a, b); }
  Node* add(Node* a, Node* b) { return binary("aten.add.Tensor", a, b); }
  Node* sub(Node* a, Node* b) { return binary("aten.sub.Tensor", a, b); }
  Node* withScalar(std::string_view target, Node* x, Arg scalar) {
    return emit(target, {node(x), std::move(scalar)}, fresh(dtypeOf(x), meta(x).shape));
  }
  Node* unary(std::string_view target, Node* x) {
    return emit(target, {node(x)}, fresh(dtypeOf(x), meta(x).shape));
  }
  Node* sumDims(Node* x, const Shape& dims) {
    Shape shape = meta(x).shape;
    for (int64_t d : dims)
      shape[static_cast<size_t>(d)] = 1;
    return emit("aten.sum.dim_IntList", {node(x), ints(dims), Arg::ofBool(true)},
                fresh(dtypeOf(x), shape));
  }
  Node* mm(Node* a, Node* b) {
    return emit("aten.mm.default", {node(a), node(b)},
                fresh(dtypeOf(a), {meta(a).shape[0], meta(b).shape[1]}));
  }
  Node* getitem(Node* multi, int64_t index) {
    // A getitem is part of its producer: same seq_nr, phase and module.
    Node* n = g_->createCall("operator.getitem", {node(multi), i(index)}, {}, nullptr,
                             nextName("operator.getitem"));
    n->val() = multi->val().items[static_cast<size_t>(index)];
    n->meta() = multi->meta();
    return n;
  }

  // ---- FSDP
  struct Unsharded {
    Node* gather;  // the all-gather
    Node* value;   // the full weight as compute reads it
  };
  Unsharded unshard(Param& p, const std::string& module);
  Node* reduceGrad(Param& p, Node* gather_ag, Node* grad);

  // ---- model pieces
  LinearSave linear(Node* x, Param& p, const std::string& module);
  Node* linearBackward(Node* grad, const LinearSave& s, Node* accumulate_into);
  NormSave rmsNorm(Node* x, Param& p, const std::string& module);
  Node* rmsNormBackward(Node* grad, const NormSave& s, Node* residual_grad);
  RopeSave rope(Node* x, int64_t heads);
  Node* ropeBackward(Node* grad, const RopeSave& s);
  void attentionCore(AttentionSave& s);
  std::vector<Node*> attentionBackward(Node* grad_t, const AttentionSave& s);
  LayerSave layer(int64_t index, Node*& h);
  Node* layerBackward(const LayerSave& s, Node* grad);

  // ---- the step, in trace order
  struct ForwardSave {
    Unsharded emb;
    Node* embedding = nullptr;
    std::vector<LayerSave> layers;
    NormSave final_norm;
    LinearSave output;
  };
  struct LossSave {
    Node *logits2, *logits32, *labels1, *log_probs, *log_probs_alias, *nll, *loss, *total_weight;
  };
  ForwardSave buildForward();
  LossSave buildLoss(const LinearSave& output);
  void buildBackward(const ForwardSave& f, const LossSave& l);
  void buildOutputs(Node* loss);
  std::string graphMeta() const;

  void makeInputs();
  Node* placeholder(const std::string& name, TensorMeta m, InputKind kind, std::string fqn);

  const SynthConfig& c_;
  std::unique_ptr<Graph> g_;
  Symbol device_;
  ScalarType cd_;  // compute dtype
  SynthAttention attention_;
  int64_t head_dim_;
  int64_t tokens_;  // batch * seq

  Phase phase_ = Phase::Forward;
  Symbol module_;
  int64_t next_seq_ = 0;
  int64_t last_seq_ = -1;
  bool no_grad_ = false;
  std::optional<int64_t> pinned_seq_;
  Node* root_ = nullptr;  // nll_loss_forward: whose meta the engine's accumulations carry
  std::unordered_map<std::string, int64_t> name_counts_;

  std::vector<Param> params_;  // registration order; never resized after makeInputs
  std::vector<std::pair<Param*, Node*>> param_grads_;  // (parameter, reduced gradient), in order
  Param* emb_ = nullptr;
  Param* norm_ = nullptr;
  Param* out_ = nullptr;  // == emb_ when tied
  Node* rope_cos_ = nullptr;
  Node* rope_sin_ = nullptr;
  Node* tokens_in_ = nullptr;
  Node* labels_in_ = nullptr;
  Node* cos_ = nullptr;  // rope_cos[:seq]
  Node* sin_ = nullptr;
};

Node* Builder::placeholder(const std::string& name, TensorMeta m, InputKind kind, std::string fqn) {
  Node* n = g_->create(OpKind::Placeholder, Symbol::intern(name), {}, {}, name);
  n->val() = ValueMeta::ofTensor(std::move(m));
  n->meta().seq_nr = -1;  // recorded before the traced step creates any autograd node
  n->setInputInfo(kind, std::move(fqn));
  return n;
}

void Builder::makeInputs() {
  const int64_t D = c_.dim, H = c_.heads, KV = c_.kv_heads, hd = head_dim_, F = c_.ffn_dim;
  auto add = [&](std::string fqn, std::string module, Shape full) {
    params_.push_back(Param{std::move(fqn), std::move(module), std::move(full)});
  };
  // Registration order of torchtitan's Llama (and python/jointfx/model.py).
  add("tok_embeddings.weight", "tok_embeddings", {c_.vocab, D});
  for (int64_t l = 0; l < c_.layers; ++l) {
    std::string pre = "layers." + std::to_string(l) + ".";
    add(pre + "attention.wq.weight", pre + "attention.wq", {H * hd, D});
    add(pre + "attention.wk.weight", pre + "attention.wk", {KV * hd, D});
    add(pre + "attention.wv.weight", pre + "attention.wv", {KV * hd, D});
    add(pre + "attention.wo.weight", pre + "attention.wo", {D, H * hd});
    add(pre + "feed_forward.w1.weight", pre + "feed_forward.w1", {F, D});
    add(pre + "feed_forward.w2.weight", pre + "feed_forward.w2", {D, F});
    add(pre + "feed_forward.w3.weight", pre + "feed_forward.w3", {F, D});
    add(pre + "attention_norm.weight", pre + "attention_norm", {D});
    add(pre + "ffn_norm.weight", pre + "ffn_norm", {D});
  }
  add("norm.weight", "norm", {D});
  if (!c_.tied_embeddings) add("output.weight", "output", {c_.vocab, D});
  emb_ = &params_.front();
  out_ = c_.tied_embeddings ? emb_ : &params_.back();
  norm_ = &params_[params_.size() - (c_.tied_embeddings ? 1 : 2)];

  // Placeholders are named after their FQN with '.' -> '_', as the tracer names them.
  auto ident = [](std::string fqn) {
    for (char& ch : fqn)
      if (ch == '.') ch = '_';
    return fqn;
  };
  for (Param& p : params_) {
    Shape shard = p.full;
    shard[0] = ceilDiv(p.full[0], c_.world_size);
    p.placeholder =
        placeholder(ident(p.fqn), fresh(c_.master_dtype, shard), InputKind::Parameter, p.fqn);
  }
  // Buffers are replicated, never sharded: [max_seq_len, head_dim / 2] float32 tables.
  rope_cos_ = placeholder("rope_cos", fresh(ScalarType::Float32, {c_.seq, hd / 2}),
                          InputKind::Buffer, "rope_cos");
  rope_sin_ = placeholder("rope_sin", fresh(ScalarType::Float32, {c_.seq, hd / 2}),
                          InputKind::Buffer, "rope_sin");
  tokens_in_ =
      placeholder("tokens", fresh(ScalarType::Int64, {c_.batch, c_.seq}), InputKind::UserInput, "");
  labels_in_ =
      placeholder("labels", fresh(ScalarType::Int64, {c_.batch, c_.seq}), InputKind::UserInput, "");
}

// Shard -> full parameter: cast to the compute dtype, all-gather, wait, and drop the padding rows
// when dim0 does not divide by W (every shard is padded to ceil(dim0 / W) rows, so the graph is
// the same on every rank).
Builder::Unsharded Builder::unshard(Param& p, const std::string& module) {
  forward(module);
  pinned_seq_ = last_seq_ = next_seq_++;  // one autograd.Function
  Node* x = castIfNeeded(p.placeholder, cd_);
  TensorMeta m = meta(x);
  m.shape = m.shape.with(0, m.shape[0] * c_.world_size);
  m.stride = TensorMeta::contiguousStride(m.shape);
  Node* ag = emit("_c10d_functional.all_gather_into_tensor.default",
                  {node(x), i(c_.world_size), Arg::ofStr(c_.group_name)}, m);
  Node* w = emit("_c10d_functional.wait_tensor.default", {node(ag)}, std::move(m));
  if (meta(w).shape[0] != p.full[0]) w = slice0(w, p.full[0]);
  return {ag, w};
}

// The unshard's backward: zero-pad dim 0 back to W shards (when uneven), cast to reduce_dtype,
// reduce-scatter, wait, cast back to the master dtype.
Node* Builder::reduceGrad(Param& p, Node* gather_ag, Node* grad) {
  backwardOf(gather_ag);
  Node* x = grad;
  const int64_t shard0 = ceilDiv(p.full[0], c_.world_size);
  if (p.full[0] % c_.world_size != 0) {
    Shape pad(2 * meta(x).shape.size(), 0);  // F.pad order: last dim first, dim 0 last
    pad.back() = shard0 * c_.world_size - p.full[0];
    Shape shape = meta(x).shape;
    shape[0] = shard0 * c_.world_size;
    x = emit("aten.constant_pad_nd.default", {node(x), ints(pad), f(0.0)},
             fresh(dtypeOf(x), shape));
  }
  x = castIfNeeded(x, c_.reduce_dtype);
  Shape out_shape = meta(x).shape;
  out_shape[0] = shard0;
  Node* rs = emit("_c10d_functional.reduce_scatter_tensor.default",
                  {node(x), Arg::ofStr("sum"), i(c_.world_size), Arg::ofStr(c_.group_name)},
                  fresh(dtypeOf(x), out_shape));
  Node* w = emit("_c10d_functional.wait_tensor.default", {node(rs)}, meta(rs));
  return castIfNeeded(w, c_.master_dtype);
}

// F.linear(x, W) on [B, S, in]: t(W), view(x, [N, in]), mm, _unsafe_view.
LinearSave Builder::linear(Node* x, Param& p, const std::string& module) {
  LinearSave s{};
  s.param = &p;
  auto [ag, w] = unshard(p, module);
  s.gather_ag = ag;
  forward(module);
  s.in = meta(w).shape[1];
  s.out = meta(w).shape[0];
  s.weight_t = t(w);
  s.input_2d = view(x, {tokens_, s.in});
  s.mm = mm(s.input_2d, s.weight_t);
  s.out_3d = unsafeView(s.mm, {c_.batch, c_.seq, s.out});
  return s;
}

// Autograd's mm backward for out = x2d @ t(W): dW = t(t(g) @ x2d), dx = g @ t(t(W)). The weight
// gradient leaves through t(dW^T) and the reduce chain; `accumulate_into` (when given) is the
// gradient already flowing into x from another user, summed the way autograd's input buffer does.
Node* Builder::linearBackward(Node* grad, const LinearSave& s, Node* accumulate_into) {
  backwardOf(s.out_3d);
  Node* g2 = view(grad, {tokens_, s.out});
  backwardOf(s.mm);
  Node* gw_t = mm(t(g2), s.input_2d);  // [out, in]
  Node* gw = t(gw_t);                  // [in, out]
  Node* gx = mm(g2, t(s.weight_t));    // [N, in]
  backwardOf(s.input_2d);
  Node* gx3 = view(gx, {c_.batch, c_.seq, s.in});
  if (accumulate_into) gx3 = accumulate(accumulate_into, gx3);
  backwardOf(s.weight_t);
  Node* gweight = t(gw);  // [out, in]: the unsharded weight's gradient
  Node* reduced = reduceGrad(*s.param, s.gather_ag, gweight);
  param_grads_.push_back({s.param, reduced});
  return gx3;
}

NormSave Builder::rmsNorm(Node* x, Param& p, const std::string& module) {
  NormSave s{};
  s.param = &p;
  // The module's forward pre-hook gathers its parameters before the body runs.
  Unsharded u = unshard(p, module);
  s.gather_ag = u.gather;
  s.weight = u.value;
  forward(module);
  s.input = x;
  s.input_f32 = castIfNeeded(x, ScalarType::Float32);
  s.pow = withScalar("aten.pow.Tensor_Scalar", s.input_f32, i(2));
  Shape kept = meta(s.input_f32).shape;
  kept.back() = 1;
  s.mean = emit("aten.mean.dim", {node(s.pow), ints({-1}), Arg::ofBool(true)},
                fresh(ScalarType::Float32, kept));
  Node* eps = withScalar("aten.add.Tensor", s.mean, f(c_.norm_eps));
  s.rsqrt = unary("aten.rsqrt.default", eps);
  s.rsqrt_alias = alias(s.rsqrt);  // saved for backward
  s.normed = mul(s.input_f32, s.rsqrt);
  s.normed_cd = castIfNeeded(s.normed, dtypeOf(x), /*layout_device=*/true);
  s.out = mul(s.normed_cd, s.weight);
  return s;
}

// Backward of x32 * rsqrt(mean(x32^2) + eps), cast, times weight, as autograd records it.
Node* Builder::rmsNormBackward(Node* grad, const NormSave& s, Node* residual_grad) {
  const int64_t D = c_.dim;
  backwardOf(s.out);
  Node* gw_full = mul(grad, s.normed_cd);
  Node* g_normed = mul(grad, s.weight);
  Node* gw_sum = sumDims(gw_full, {0, 1});
  Node* gweight = view(gw_sum, {D});
  backwardOf(s.normed_cd);
  Node* g32 = castIfNeeded(g_normed, ScalarType::Float32, /*layout_device=*/true);
  backwardOf(s.normed);
  Node* g_x_direct = mul(g32, s.input_f32);
  Node* g_x_scaled = mul(g32, s.rsqrt);
  Node* g_r = sumDims(g_x_direct, {2});
  // Gradients into one tensor are summed as they arrive. Without a cast, x itself feeds the norm,
  // so the residual's gradient is already waiting; with one, x32 collects its two terms first.
  const bool cast = s.input_f32 != s.input;
  Node* g_x = g_x_scaled;
  if (!cast && residual_grad) g_x = accumulate(residual_grad, g_x);
  backwardOf(s.rsqrt);
  Node* saved = alias(s.rsqrt_alias);
  Node* cube = withScalar("aten.pow.Tensor_Scalar", saved, i(3));
  Node* half = withScalar("aten.mul.Scalar", g_r, f(-0.5));
  Node* g_mean = mul(half, cube);
  backwardOf(s.mean);
  Node* g_pow = withScalar("aten.div.Scalar", expand(g_mean, meta(s.input_f32).shape), i(D));
  backwardOf(s.pow);
  Node* two_x = withScalar("aten.mul.Scalar",
                           withScalar("aten.pow.Tensor_Scalar", s.input_f32, f(1.0)), f(2.0));
  g_x = accumulate(g_x, mul(g_pow, two_x));
  Node* g_in = g_x;
  if (cast) {
    backwardOf(s.input_f32);
    g_in = castIfNeeded(g_x, cd_, /*layout_device=*/true);
    if (residual_grad) g_in = accumulate(residual_grad, g_in);
  }
  param_grads_.push_back({s.param, reduceGrad(*s.param, s.gather_ag, gweight)});
  return g_in;
}

// Real-valued RoPE on interleaved pairs (python/jointfx/model.py apply_rope).
RopeSave Builder::rope(Node* x, int64_t heads) {
  RopeSave s{};
  s.heads = heads;
  const int64_t B = c_.batch, S = c_.seq, hd = head_dim_;
  s.x32 = castIfNeeded(x, ScalarType::Float32);
  s.pairs = view(s.x32, {B, S, heads, hd / 2, 2});
  s.x0 = select(s.pairs, 4, 0);
  s.x1 = select(s.pairs, 4, 1);
  no_grad_ = true;  // the tables are buffers
  s.cos4 = unsqueeze(unsqueeze(cos_, 0), 2);
  s.sin4 = unsqueeze(unsqueeze(sin_, 0), 2);
  no_grad_ = false;
  // One statement per op: argument evaluation order is unspecified, node order must not be.
  s.x0_cos = mul(s.x0, s.cos4);
  s.x1_sin = mul(s.x1, s.sin4);
  s.rot0 = sub(s.x0_cos, s.x1_sin);
  s.x0_sin = mul(s.x0, s.sin4);
  s.x1_cos = mul(s.x1, s.cos4);
  Node* rot1 = add(s.x0_sin, s.x1_cos);
  s.stack = emit("aten.stack.default", {Arg::ofList({node(s.rot0), node(rot1)}), i(-1)},
                 fresh(ScalarType::Float32, {B, S, heads, hd / 2, 2}));
  s.flat = view(s.stack, {B, S, heads, hd});
  s.out_cast = castIfNeeded(s.flat, dtypeOf(x), /*layout_device=*/true);
  return s;
}

// The engine runs the autograd nodes in decreasing seq_nr: dx1 = g1 cos - g0 sin and
// dx0 = g1 sin + g0 cos come out interleaved in that order.
Node* Builder::ropeBackward(Node* grad, const RopeSave& s) {
  const int64_t B = c_.batch, S = c_.seq, hd = head_dim_;
  const Shape pair_shape{B, S, s.heads, hd / 2, 2};
  backwardOf(s.out_cast);
  Node* g32 = castIfNeeded(grad, ScalarType::Float32, /*layout_device=*/true);
  backwardOf(s.flat);
  Node* gpairs = view(g32, pair_shape);
  backwardOf(s.stack);
  Node* g0 = select(gpairs, -1, 0);
  Node* g1 = select(gpairs, -1, 1);
  backwardOf(s.x1_cos);
  Node* g1_cos = mul(g1, s.cos4);
  backwardOf(s.x0_sin);
  Node* g1_sin = mul(g1, s.sin4);
  backwardOf(s.rot0);
  Node* neg_g0 = unary("aten.neg.default", g0);
  backwardOf(s.x1_sin);
  Node* dx1 = accumulate(g1_cos, mul(neg_g0, s.sin4));
  backwardOf(s.x0_cos);
  Node* dx0 = accumulate(g1_sin, mul(g0, s.cos4));
  backwardOf(s.x1);
  Node* b1 = emit("aten.select_backward.default", {node(dx1), ints(pair_shape), i(4), i(1)},
                  fresh(ScalarType::Float32, pair_shape));
  backwardOf(s.x0);
  Node* b0 = emit("aten.select_backward.default", {node(dx0), ints(pair_shape), i(4), i(0)},
                  fresh(ScalarType::Float32, pair_shape));
  Node* gsum = accumulate(b1, b0);
  backwardOf(s.pairs);
  Node* gx = view(gsum, {B, S, s.heads, hd});
  backwardOf(s.x32);
  return castIfNeeded(gx, cd_, /*layout_device=*/true);
}

// SDPA output and gradients are laid out [B, S, H, D] in memory and returned as [B, H, S, D].
TensorMeta bshdAsBhsd(ScalarType dt, int64_t B, int64_t H, int64_t S, int64_t D, Symbol device) {
  TensorMeta m;
  m.dtype = dt;
  m.shape = {B, H, S, D};
  m.stride = {S * H * D, D, H * D, 1};
  m.device = device;
  return m;
}

void Builder::attentionCore(AttentionSave& s) {
  const int64_t B = c_.batch, S = c_.seq, H = c_.heads, hd = head_dim_;
  ValueMeta out = ValueMeta::ofTensor(bshdAsBhsd(cd_, B, H, S, hd, device_));
  std::vector<Arg> qkv{node(s.q_t), node(s.k_t), node(s.v_t)};
  std::vector<int64_t> saved_items;
  switch (attention_) {
    case SynthAttention::Auto:
    case SynthAttention::CpuFlash: {
      TensorMeta lse;  // [B, H, S] over [B, S, H] memory
      lse.dtype = ScalarType::Float32;
      lse.shape = {B, H, S};
      lse.stride = {S * H, 1, H};
      lse.device = device_;
      qkv.push_back(f(0.0));
      qkv.push_back(Arg::ofBool(true));
      s.op = emit("aten._scaled_dot_product_flash_attention_for_cpu.default", std::move(qkv), {},
                  ValueMeta::ofList({out, ValueMeta::ofTensor(lse)}));
      saved_items = {1};
      break;
    }
    case SynthAttention::Flash: {
      ValueMeta none;
      none.kind = ValueMeta::Kind::None;
      ValueMeta seq_len;
      seq_len.kind = ValueMeta::Kind::Int;
      seq_len.i = S;
      qkv.push_back(f(0.0));
      qkv.push_back(Arg::ofBool(true));
      s.op = emit("aten._scaled_dot_product_flash_attention.default", std::move(qkv),
                  {kw("scale", f(1.0 / std::sqrt(static_cast<double>(hd))))},
                  ValueMeta::ofList(
                      {out, ValueMeta::ofTensor(fresh(ScalarType::Float32, {B, H, S})), none, none,
                       seq_len, seq_len, ValueMeta::ofTensor(fresh(ScalarType::UInt64, {2})),
                       ValueMeta::ofTensor(fresh(ScalarType::UInt64, {0})),
                       ValueMeta::ofTensor(fresh(cd_, {0}))}));
      saved_items = {1, 6, 7};
      break;
    }
    case SynthAttention::Efficient: {
      qkv.push_back(Arg::none());
      qkv.push_back(Arg::ofBool(true));
      qkv.push_back(f(0.0));
      qkv.push_back(Arg::ofBool(true));
      s.op = emit(
          "aten._scaled_dot_product_efficient_attention.default", std::move(qkv), {},
          ValueMeta::ofList(
              {out, ValueMeta::ofTensor(fresh(ScalarType::Float32, {B, H, ceilDiv(S, 32) * 32})),
               ValueMeta::ofTensor(fresh(ScalarType::Int64, {})),
               ValueMeta::ofTensor(fresh(ScalarType::Int64, {}))}));
      saved_items = {1, 2, 3};
      break;
    }
  }
  s.out = getitem(s.op, 0);
  for (int64_t k : saved_items)
    s.extra.push_back(getitem(s.op, k));
  s.out_alias = alias(s.out);
}

std::vector<Node*> Builder::attentionBackward(Node* grad_t, const AttentionSave& s) {
  const int64_t B = c_.batch, S = c_.seq, H = c_.heads, KV = c_.kv_heads, hd = head_dim_;
  backwardOf(s.op);
  Node* out = alias(s.out_alias);
  std::vector<ValueMeta> grads{ValueMeta::ofTensor(bshdAsBhsd(cd_, B, H, S, hd, device_)),
                               ValueMeta::ofTensor(bshdAsBhsd(cd_, B, KV, S, hd, device_)),
                               ValueMeta::ofTensor(bshdAsBhsd(cd_, B, KV, S, hd, device_))};
  std::vector<Arg> args{node(grad_t), node(s.q_t), node(s.k_t), node(s.v_t)};
  Node* op = nullptr;
  switch (attention_) {
    case SynthAttention::Auto:
    case SynthAttention::CpuFlash:
      args.insert(args.end(), {node(out), node(s.extra[0]), f(0.0), Arg::ofBool(true)});
      op =
          emit("aten._scaled_dot_product_flash_attention_for_cpu_backward.default", std::move(args),
               {kw("attn_mask", Arg::none())}, ValueMeta::ofList(std::move(grads)));
      break;
    case SynthAttention::Flash:
      args.insert(args.end(), {node(out), node(s.extra[0]), Arg::none(), Arg::none(), i(S), i(S),
                               f(0.0), Arg::ofBool(true), node(s.extra[1]), node(s.extra[2])});
      op = emit("aten._scaled_dot_product_flash_attention_backward.default", std::move(args),
                {kw("scale", f(1.0 / std::sqrt(static_cast<double>(hd))))},
                ValueMeta::ofList(std::move(grads)));
      break;
    case SynthAttention::Efficient: {
      ValueMeta none;
      none.kind = ValueMeta::Kind::None;
      grads.push_back(none);  // no attn_bias gradient
      args.insert(args.end(), {Arg::none(), node(out), node(s.extra[0]), node(s.extra[1]),
                               node(s.extra[2]), f(0.0),
                               Arg::ofList({Arg::ofBool(true), Arg::ofBool(true), Arg::ofBool(true),
                                            Arg::ofBool(false)}),
                               Arg::ofBool(true)});
      op = emit("aten._scaled_dot_product_efficient_attention_backward.default", std::move(args),
                {}, ValueMeta::ofList(std::move(grads)));
      break;
    }
  }
  return {getitem(op, 0), getitem(op, 1), getitem(op, 2)};
}

LayerSave Builder::layer(int64_t index, Node*& h) {
  LayerSave s{};
  const int64_t B = c_.batch, S = c_.seq, H = c_.heads, KV = c_.kv_heads, hd = head_dim_;
  const std::string pre = "layers." + std::to_string(index);
  const std::string attn = pre + ".attention", ffn = pre + ".feed_forward";
  // Parameters of this layer, in registration order (see makeInputs).
  Param* p = &params_[static_cast<size_t>(1 + 9 * index)];

  s.attn_norm = rmsNorm(h, p[7], pre + ".attention_norm");
  Node* x = s.attn_norm.out;
  AttentionSave& a = s.attn;
  s.wq = linear(x, p[0], attn + ".wq");
  forward(attn);
  a.q_view = view(s.wq.out_3d, {B, S, H, hd});
  s.wk = linear(x, p[1], attn + ".wk");
  forward(attn);
  a.k_view = view(s.wk.out_3d, {B, S, KV, hd});
  s.wv = linear(x, p[2], attn + ".wv");
  forward(attn);
  a.v_view = view(s.wv.out_3d, {B, S, KV, hd});
  a.q_rope = rope(a.q_view, H);
  a.k_rope = rope(a.k_view, KV);
  a.q_t = transpose(a.q_rope.out_cast, 1, 2);
  a.k_t = transpose(a.k_rope.out_cast, 1, 2);
  a.v_t = transpose(a.v_view, 1, 2);
  attentionCore(a);
  a.out_t = transpose(a.out, 1, 2);
  a.out_3d = view(a.out_t, {B, S, H * hd});
  s.wo = linear(a.out_3d, p[3], attn + ".wo");
  forward(pre);
  s.attn_residual = add(h, s.wo.out_3d);

  s.ffn_norm = rmsNorm(s.attn_residual, p[8], pre + ".ffn_norm");
  Node* x2 = s.ffn_norm.out;
  s.w1 = linear(x2, p[4], ffn + ".w1");
  forward(ffn);
  s.silu = unary("aten.silu.default", s.w1.out_3d);
  s.w3 = linear(x2, p[6], ffn + ".w3");
  forward(ffn);
  s.gate_mul = mul(s.silu, s.w3.out_3d);
  s.w2 = linear(s.gate_mul, p[5], ffn + ".w2");
  forward(pre);
  s.ffn_residual = add(s.attn_residual, s.w2.out_3d);
  h = s.ffn_residual;
  return s;
}

Node* Builder::layerBackward(const LayerSave& s, Node* grad) {
  const int64_t B = c_.batch, S = c_.seq, H = c_.heads, KV = c_.kv_heads, hd = head_dim_;
  // h2 = h1 + w2(silu(w1 x) * w3 x), x = ffn_norm(h1)
  Node* g_gate = linearBackward(grad, s.w2, nullptr);
  backwardOf(s.gate_mul);
  Node* g_w3_out = mul(g_gate, s.silu);
  Node* g_silu = mul(g_gate, s.w3.out_3d);
  Node* gx = linearBackward(g_w3_out, s.w3, nullptr);
  backwardOf(s.silu);
  Node* g_w1_out = emit("aten.silu_backward.default", {node(g_silu), node(s.w1.out_3d)},
                        fresh(cd_, meta(s.w1.out_3d).shape));
  gx = linearBackward(g_w1_out, s.w1, gx);
  Node* g_h1 = rmsNormBackward(gx, s.ffn_norm, grad);

  // h1 = h + wo(attention(attention_norm(h)))
  const AttentionSave& a = s.attn;
  Node* g_o = linearBackward(g_h1, s.wo, nullptr);
  backwardOf(a.out_3d);
  Node* g_o4 = view(g_o, {B, S, H, hd});
  backwardOf(a.out_t);
  Node* g_ot = transpose(g_o4, 1, 2);
  std::vector<Node*> g_qkv = attentionBackward(g_ot, a);
  backwardOf(a.v_t);
  Node* g_v = transpose(g_qkv[2], 1, 2);
  backwardOf(a.k_t);
  Node* g_k = transpose(g_qkv[1], 1, 2);
  backwardOf(a.q_t);
  Node* g_q = transpose(g_qkv[0], 1, 2);
  g_k = ropeBackward(g_k, a.k_rope);
  g_q = ropeBackward(g_q, a.q_rope);
  backwardOf(a.v_view);
  gx = linearBackward(view(g_v, {B, S, KV * hd}), s.wv, nullptr);
  backwardOf(a.k_view);
  gx = linearBackward(view(g_k, {B, S, KV * hd}), s.wk, gx);
  backwardOf(a.q_view);
  gx = linearBackward(view(g_q, {B, S, H * hd}), s.wq, gx);
  return rmsNormBackward(gx, s.attn_norm, g_h1);
}

std::unique_ptr<Graph> Builder::build() {
  makeInputs();
  std::vector<int64_t> ranks(static_cast<size_t>(c_.world_size));
  for (int64_t r = 0; r < c_.world_size; ++r)
    ranks[static_cast<size_t>(r)] = r;
  g_->processGroups().push_back({c_.group_name, c_.world_size, std::move(ranks)});
  const ForwardSave f = buildForward();
  const LossSave l = buildLoss(f.output);
  buildBackward(f, l);
  buildOutputs(l.loss);
  g_->extraJson() = graphMeta();
  return std::move(g_);
}

Builder::ForwardSave Builder::buildForward() {
  ForwardSave f;
  forward("", /*needs_grad=*/false);  // the root module carries no module_fqn
  cos_ = slice0(rope_cos_, c_.seq);
  sin_ = slice0(rope_sin_, c_.seq);
  f.emb = unshard(*emb_, emb_->module);
  forward("tok_embeddings");
  Node* h = emit("aten.embedding.default", {node(f.emb.value), node(tokens_in_)},
                 fresh(cd_, {c_.batch, c_.seq, c_.dim}));
  f.embedding = h;
  f.layers.reserve(static_cast<size_t>(c_.layers));
  for (int64_t l = 0; l < c_.layers; ++l)
    f.layers.push_back(layer(l, h));
  f.final_norm = rmsNorm(h, *norm_, "norm");
  f.output = linear(f.final_norm.out, *out_, "output");
  return f;
}

// F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(0, 1))
Builder::LossSave Builder::buildLoss(const LinearSave& output) {
  const int64_t N = tokens_, V = c_.vocab;
  LossSave l;
  forward("loss");
  phase_ = Phase::Loss;
  l.logits2 = view(output.out_3d, {N, V});
  l.logits32 = castIfNeeded(l.logits2, ScalarType::Float32);
  no_grad_ = true;
  l.labels1 = view(labels_in_, {N});
  no_grad_ = false;
  l.log_probs = emit("aten._log_softmax.default", {node(l.logits32), i(1), Arg::ofBool(false)},
                     fresh(ScalarType::Float32, {N, V}));
  l.log_probs_alias = alias(l.log_probs);
  TensorMeta scalar = fresh(ScalarType::Float32, {});
  l.nll = emit("aten.nll_loss_forward.default",
               {node(l.log_probs), node(l.labels1), Arg::none(), i(1), i(-100)}, {},
               ValueMeta::ofList({ValueMeta::ofTensor(scalar), ValueMeta::ofTensor(scalar)}));
  l.loss = getitem(l.nll, 0);
  l.total_weight = getitem(l.nll, 1);
  return l;
}

void Builder::buildBackward(const ForwardSave& f, const LossSave& l) {
  const int64_t N = tokens_, V = c_.vocab;
  root_ = l.nll;
  backwardOf(l.nll);
  Node* ones = emit("aten.ones_like.default", {node(l.loss)},
                    {kw("pin_memory", Arg::ofBool(false)),
                     kw("memory_format", Arg::ofMemoryFormat("torch.preserve_format"))},
                    fresh(ScalarType::Float32, {}));
  Node* g = emit("aten.nll_loss_backward.default",
                 {node(ones), node(l.log_probs), node(l.labels1), Arg::none(), i(1), i(-100),
                  node(l.total_weight)},
                 fresh(ScalarType::Float32, {N, V}));
  backwardOf(l.log_probs);
  g = emit("aten._log_softmax_backward_data.default",
           {node(g), node(alias(l.log_probs_alias)), i(1), Arg::ofDtype(ScalarType::Float32)},
           fresh(ScalarType::Float32, {N, V}));
  backwardOf(l.logits32);
  g = castIfNeeded(g, cd_, /*layout_device=*/true);
  backwardOf(l.logits2);
  g = view(g, {c_.batch, c_.seq, V});
  g = linearBackward(g, f.output, nullptr);
  g = rmsNormBackward(g, f.final_norm, nullptr);
  for (auto it = f.layers.rbegin(); it != f.layers.rend(); ++it)
    g = layerBackward(*it, g);
  backwardOf(f.embedding);
  Node* g_emb =
      emit("aten.embedding_dense_backward.default",
           {node(g), node(tokens_in_), i(V), i(-1), Arg::ofBool(false)}, fresh(cd_, {V, c_.dim}));
  param_grads_.push_back({emb_, reduceGrad(*emb_, f.emb.gather, g_emb)});
}

// Loss, then one gradient per parameter in registration order. A tied weight has two reduced
// gradients; autograd sums them into the leaf's gradient.
void Builder::buildOutputs(Node* loss) {
  Graph& graph = *g_;
  std::vector<Arg> outs{node(loss)};
  graph.outputSpecs().push_back({OutputKind::Loss, ""});
  for (Param& p : params_) {
    Node* grad = nullptr;
    for (const auto& [param, reduced] : param_grads_) {
      if (param != &p) continue;
      grad = grad ? accumulate(grad, reduced) : reduced;
    }
    outs.push_back(node(grad));
    graph.outputSpecs().push_back({OutputKind::Gradient, p.fqn});
  }
  Node* out = graph.create(OpKind::Output, Symbol::intern("output"), {Arg::ofList(std::move(outs))},
                           {}, "output");
  out->meta().seq_nr = root_->meta().seq_nr;  // the meta current when the trace ends
}

// World size and mesh as the tracer records them (the runtime reads the mesh), plus the config.
std::string Builder::graphMeta() const {
  nlohmann::json info = {{"attention", std::string(synthAttentionName(attention_))},
                         {"batch", c_.batch},
                         {"device", device_.str()},
                         {"dim", c_.dim},
                         {"ffn_dim", c_.ffn_dim},
                         {"heads", c_.heads},
                         {"kv_heads", c_.kv_heads},
                         {"layers", c_.layers},
                         {"master_dtype", std::string(dtypeName(c_.master_dtype))},
                         {"param_dtype", std::string(dtypeName(c_.param_dtype))},
                         {"reduce_dtype", std::string(dtypeName(c_.reduce_dtype))},
                         {"seq", c_.seq},
                         {"tied_embeddings", c_.tied_embeddings},
                         {"vocab", c_.vocab},
                         {"world_size", c_.world_size}};
  nlohmann::json meta;
  meta["mesh"] = {{"dim_names", {"fsdp"}}, {"shape", {c_.world_size}}};
  meta["synth"] = std::move(info);
  meta["world_size"] = c_.world_size;
  return meta.dump();
}

}  // namespace

std::string_view synthAttentionName(SynthAttention a) {
  switch (a) {
    case SynthAttention::Auto:
      return "auto";
    case SynthAttention::CpuFlash:
      return "cpu-flash";
    case SynthAttention::Flash:
      return "flash";
    case SynthAttention::Efficient:
      return "efficient";
  }
  return "auto";
}

std::optional<SynthAttention> synthAttentionFromName(std::string_view s) {
  for (SynthAttention a : {SynthAttention::Auto, SynthAttention::CpuFlash, SynthAttention::Flash,
                           SynthAttention::Efficient})
    if (synthAttentionName(a) == s) return a;
  return std::nullopt;
}

void validateSynthConfig(const SynthConfig& c) {
  auto fail = [](const std::string& msg) {
    SourceLocation where;
    where.file = "<synth config>";
    throw JfxError(where, msg);
  };
  // Bounds keep every shape product (and the node count) far from int64 overflow.
  constexpr int64_t kMaxDim = int64_t{1} << 24;
  auto positive = [&](const char* name, int64_t v, int64_t max) {
    if (v < 1 || v > max)
      fail(std::string(name) + " must be in [1, " + std::to_string(max) + "], got " +
           std::to_string(v));
  };
  positive("layers", c.layers, 1'000'000);
  positive("dim", c.dim, kMaxDim);
  positive("heads", c.heads, kMaxDim);
  positive("kv_heads", c.kv_heads, kMaxDim);
  positive("ffn_dim", c.ffn_dim, kMaxDim);
  positive("vocab", c.vocab, kMaxDim);
  positive("seq", c.seq, kMaxDim);
  positive("batch", c.batch, kMaxDim);
  positive("world_size", c.world_size, 1 << 20);
  if (c.dim % c.heads != 0)
    fail("heads (" + std::to_string(c.heads) + ") must divide dim (" + std::to_string(c.dim) + ")");
  if (c.heads % c.kv_heads != 0)
    fail("kv_heads (" + std::to_string(c.kv_heads) + ") must divide heads (" +
         std::to_string(c.heads) + ")");
  if ((c.dim / c.heads) % 2 != 0)
    fail("RoPE needs an even head dim, got " + std::to_string(c.dim / c.heads));
  for (auto [name, dt] :
       {std::pair{"master_dtype", c.master_dtype}, std::pair{"param_dtype", c.param_dtype},
        std::pair{"reduce_dtype", c.reduce_dtype}})
    if (!dtypeIsFloatingPoint(dt) || dt == ScalarType::Undefined)
      fail(std::string(name) + " must be a floating-point dtype, got " +
           std::string(dtypeName(dt)));
  std::string dev = normalizeDevice(c.device);
  bool cuda = dev.rfind("cuda:", 0) == 0 && dev.size() > 5 &&
              dev.find_first_not_of("0123456789", 5) == std::string::npos;
  if (dev != "cpu" && !cuda)
    fail("device must be cpu or cuda[:N], got " + quoteForMessage(c.device));
  if (c.attention == SynthAttention::CpuFlash && cuda) fail("attention cpu-flash needs device cpu");
  if ((c.attention == SynthAttention::Flash || c.attention == SynthAttention::Efficient) && !cuda)
    fail("attention " + std::string(synthAttentionName(c.attention)) + " needs a cuda device");
  if (!(c.norm_eps > 0) || !std::isfinite(c.norm_eps)) fail("norm_eps must be positive");
  if (c.group_name.empty()) fail("group_name must not be empty");
}

std::optional<SynthConfig> synthPreset(std::string_view name) {
  SynthConfig c;
  if (name == "tiny") return c;
  // Meta's Llama 3 shapes, bf16 compute with fp32 gradient reduction (torchtitan's defaults),
  // torchtitan's training sequence length, one sequence per rank.
  c.param_dtype = ScalarType::BFloat16;
  c.reduce_dtype = ScalarType::Float32;
  c.vocab = 128256;
  c.seq = 8192;
  c.batch = 1;
  c.kv_heads = 8;
  if (name == "llama3-8b") {
    c.layers = 32;
    c.dim = 4096;
    c.ffn_dim = 14336;
    c.heads = 32;
    c.world_size = 8;
    return c;
  }
  if (name == "llama3-70b") {
    c.layers = 80;
    c.dim = 8192;
    c.ffn_dim = 28672;
    c.heads = 64;
    c.world_size = 64;  // 8 nodes x 8 GPUs, torchtitan's 70B recipe
    return c;
  }
  return std::nullopt;
}

std::vector<std::string> synthPresetNames() {
  return {"tiny", "llama3-8b", "llama3-70b"};
}

std::unique_ptr<Graph> synthLlamaJoint(const SynthConfig& cfg) {
  validateSynthConfig(cfg);
  return Builder(cfg).build();
}

std::vector<std::string> synthParamFqns(const SynthConfig& cfg) {
  std::vector<std::string> out{"tok_embeddings.weight"};
  for (int64_t l = 0; l < cfg.layers; ++l) {
    std::string pre = "layers." + std::to_string(l) + ".";
    for (const char* leaf :
         {"attention.wq.weight", "attention.wk.weight", "attention.wv.weight",
          "attention.wo.weight", "feed_forward.w1.weight", "feed_forward.w2.weight",
          "feed_forward.w3.weight", "attention_norm.weight", "ffn_norm.weight"})
      out.push_back(pre + leaf);
  }
  out.push_back("norm.weight");
  if (!cfg.tied_embeddings) out.push_back("output.weight");
  return out;
}

SynthSize synthSize(const SynthConfig& cfg) {
  SynthConfig one = cfg, two = cfg;
  one.layers = 1;
  two.layers = 2;
  auto n1 = static_cast<int64_t>(synthLlamaJoint(one)->size());
  auto n2 = static_cast<int64_t>(synthLlamaJoint(two)->size());
  return {n1 - (n2 - n1), n2 - n1};
}

int64_t synthLayersForNodes(const SynthConfig& cfg, int64_t target_nodes) {
  SynthSize s = synthSize(cfg);
  double layers =
      std::round(static_cast<double>(target_nodes - s.fixed) / static_cast<double>(s.per_layer));
  return std::max<int64_t>(1, static_cast<int64_t>(layers));
}

}  // namespace jfx
