#include "ir/builder.h"

#include "ir/checked.h"
#include "ir/error.h"

namespace jfx {

namespace {

std::string shapeText(std::span<const int64_t> shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

[[noreturn]] void fail(std::string_view op, const Node* x, const std::string& why) {
  throw JfxError(SourceLocation::atNode(x ? std::string(x->name()) : ""),
                 "internal error: building " + std::string(op) + ": " + why);
}

// `dim` of a rank-`rank` tensor, negative counting from the end.
size_t normDim(int64_t dim, size_t rank, std::string_view op, const Node* x) {
  int64_t r = static_cast<int64_t>(rank);
  if (dim < -r || dim >= r)
    fail(op, x, "dim " + std::to_string(dim) + " out of range for rank " + std::to_string(rank));
  return static_cast<size_t>(dim < 0 ? dim + r : dim);
}

}  // namespace

TensorMeta contiguousLike(const TensorMeta& like, Dims shape) {
  return TensorMeta::contiguous(like.dtype, std::move(shape), like.device);
}

const TensorMeta& OpBuilder::tensorOf(const Node* x, std::string_view op) const {
  if (!x || !x->val().isTensor()) fail(op, x, "the operand has no tensor meta");
  return x->val().tensor;
}

Node* OpBuilder::make(Symbol target, std::vector<Arg> args, ValueMeta val, std::string_view name) {
  Node* n = g_.create(OpKind::CallFunction, target, std::move(args), {}, name, before_);
  n->val() = std::move(val);
  n->meta() = meta_;
  if (on_create_) on_create_(n);
  return n;
}

Node* OpBuilder::view(Node* x, Dims shape, std::string_view name) {
  static const Symbol kView = Symbol::intern("aten.view.default");
  return viewLike(kView, x, std::move(shape), name);
}

Node* OpBuilder::reshape(Node* x, Dims shape, std::string_view name) {
  static const Symbol kReshape = Symbol::intern("aten.reshape.default");
  return viewLike(kReshape, x, std::move(shape), name);
}

Node* OpBuilder::viewLike(Symbol target, Node* x, Dims shape, std::string_view name) {
  const std::string_view op = target.str();
  const TensorMeta& t = tensorOf(x, op);
  // Resolve -1 from the element count.
  int64_t known = 1;
  int inferred = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      if (inferred >= 0) fail(op, x, "two -1 in " + shapeText(shape));
      inferred = static_cast<int>(i);
    } else {
      known = saturatingMul(known, shape[i]);
    }
  }
  const int64_t numel = t.numel();
  Dims out = shape;  // interned: a copy is a pointer
  if (inferred >= 0) {
    if (known == 0 || numel % known != 0)
      fail(
          op, x,
          "cannot infer -1 in " + shapeText(shape) + " for " + std::to_string(numel) + " elements");
    out = shape.with(static_cast<size_t>(inferred), numel / known);
  } else if (known != numel) {
    fail(op, x,
         shapeText(shape) + " does not hold the " + std::to_string(numel) + " elements of " +
             shapeText(t.shape));
  }
  return make(target, {Arg::ofNode(x), Arg::ofInts(std::span<const int64_t>(shape))},
              ValueMeta::ofTensor(contiguousLike(t, std::move(out))), name);
}

Node* OpBuilder::cat(const std::vector<Node*>& xs, int64_t dim, std::string_view name) {
  static const Symbol kCat = Symbol::intern("aten.cat.default");
  if (xs.empty()) fail("aten.cat", nullptr, "no inputs");
  const TensorMeta& first = tensorOf(xs.front(), "aten.cat");
  const size_t d = normDim(dim, first.shape.size(), "aten.cat", xs.front());
  std::vector<int64_t> shape = first.shape;
  shape[d] = 0;
  std::vector<Arg> items;
  for (Node* x : xs) {
    const TensorMeta& t = tensorOf(x, "aten.cat");
    bool fits = t.shape.size() == first.shape.size() && t.dtype == first.dtype;
    for (size_t i = 0; fits && i < t.shape.size(); ++i)
      fits = i == d || t.shape[i] == first.shape[i];
    if (!fits)
      fail("aten.cat", x,
           shapeText(t.shape) + " does not stack with " + shapeText(first.shape) + " along dim " +
               std::to_string(dim));
    shape[d] = saturatingAdd(shape[d], t.shape[d]);
    items.push_back(Arg::ofNode(x));
  }
  std::vector<Arg> args{Arg::ofList(std::move(items))};
  if (dim != 0) args.push_back(Arg::ofInt(dim));
  return make(kCat, std::move(args), ValueMeta::ofTensor(contiguousLike(first, std::move(shape))),
              name);
}

Node* OpBuilder::splitWithSizes(Node* x, std::vector<int64_t> sizes, int64_t dim,
                                std::string_view name) {
  static const Symbol kSplit = Symbol::intern("aten.split_with_sizes.default");
  const TensorMeta& t = tensorOf(x, "aten.split_with_sizes");
  const size_t d = normDim(dim, t.shape.size(), "aten.split_with_sizes", x);
  int64_t sum = 0;
  std::vector<ValueMeta> pieces;
  for (int64_t s : sizes) {
    TensorMeta p = t;  // a view: the input's strides
    p.shape = t.shape.with(d, s);
    pieces.push_back(ValueMeta::ofTensor(std::move(p)));
    sum = saturatingAdd(sum, s);
  }
  if (sum != t.shape[d])
    fail("aten.split_with_sizes", x,
         "sizes " + shapeText(sizes) + " do not add up to dim " + std::to_string(dim) + " of " +
             shapeText(t.shape));
  std::vector<Arg> args{Arg::ofNode(x), Arg::ofInts(std::move(sizes))};
  if (dim != 0) args.push_back(Arg::ofInt(dim));
  return make(kSplit, std::move(args), ValueMeta::ofList(std::move(pieces)), name);
}

Node* OpBuilder::getitem(Node* x, int64_t index, std::string_view name) {
  static const Symbol kGetitem = Symbol::intern("operator.getitem");
  const ValueMeta& v = x->val();
  if (v.kind != ValueMeta::Kind::List || index < 0 || static_cast<size_t>(index) >= v.items.size())
    fail("operator.getitem", x, "no item " + std::to_string(index) + " in the operand's value");
  ValueMeta item = v.items[static_cast<size_t>(index)];
  return make(kGetitem, {Arg::ofNode(x), Arg::ofInt(index)}, std::move(item), name);
}

Node* OpBuilder::clone(Node* x, std::string_view name) {
  static const Symbol kClone = Symbol::intern("aten.clone.default");
  const TensorMeta& t = tensorOf(x, "aten.clone");
  return make(kClone, {Arg::ofNode(x)}, ValueMeta::ofTensor(contiguousLike(t, t.shape)), name);
}

Node* OpBuilder::constantPadNd(Node* x, std::vector<int64_t> pad, double value,
                               std::string_view name) {
  static const Symbol kPad = Symbol::intern("aten.constant_pad_nd.default");
  const TensorMeta& t = tensorOf(x, "aten.constant_pad_nd");
  if (pad.size() % 2 != 0 || pad.size() / 2 > t.shape.size())
    fail("aten.constant_pad_nd", x, "pad " + shapeText(pad) + " for " + shapeText(t.shape));
  std::vector<int64_t> shape = t.shape;
  for (size_t i = 0; i < pad.size() / 2; ++i) {
    size_t d = shape.size() - 1 - i;
    shape[d] = saturatingAdd(shape[d], saturatingAdd(pad[2 * i], pad[2 * i + 1]));
    if (shape[d] < 0) fail("aten.constant_pad_nd", x, "pad " + shapeText(pad) + " empties a dim");
  }
  return make(kPad, {Arg::ofNode(x), Arg::ofInts(std::move(pad)), Arg::ofFloat(value)},
              ValueMeta::ofTensor(contiguousLike(t, std::move(shape))), name);
}

Node* OpBuilder::allGather(Symbol target, Node* x, int64_t group_size, const std::string& group,
                           std::string_view name) {
  const TensorMeta& t = tensorOf(x, target.str());
  if (t.shape.empty()) fail(target.str(), x, "a 0-d operand");
  const Dims shape = t.shape.with(0, saturatingMul(t.shape[0], group_size));
  return make(target, {Arg::ofNode(x), Arg::ofInt(group_size), Arg::ofStr(group)},
              ValueMeta::ofTensor(contiguousLike(t, std::move(shape))), name);
}

Node* OpBuilder::reduceScatter(Symbol target, Node* x, const std::string& reduce_op,
                               int64_t group_size, const std::string& group,
                               std::string_view name) {
  const TensorMeta& t = tensorOf(x, target.str());
  if (t.shape.empty() || group_size <= 0 || t.shape[0] % group_size != 0)
    fail(target.str(), x,
         "dim 0 of " + shapeText(t.shape) + " is not a multiple of " + std::to_string(group_size));
  const Dims shape = t.shape.with(0, t.shape[0] / group_size);
  return make(target,
              {Arg::ofNode(x), Arg::ofStr(reduce_op), Arg::ofInt(group_size), Arg::ofStr(group)},
              ValueMeta::ofTensor(contiguousLike(t, std::move(shape))), name);
}

Node* OpBuilder::allReduce(Symbol target, Node* x, const std::string& reduce_op,
                           const std::string& group, std::string_view name) {
  const TensorMeta& t = tensorOf(x, target.str());
  return make(target, {Arg::ofNode(x), Arg::ofStr(reduce_op), Arg::ofStr(group)},
              ValueMeta::ofTensor(contiguousLike(t, t.shape)), name);
}

Node* OpBuilder::wait(Symbol target, Node* x, std::string_view name) {
  const TensorMeta& t = tensorOf(x, target.str());
  return make(target, {Arg::ofNode(x)}, ValueMeta::ofTensor(contiguousLike(t, t.shape)), name);
}

}  // namespace jfx
