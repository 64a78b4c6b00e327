// OpBuilder: makes the call_function nodes passes create (views, reshapes, cat, split, getitem,
// padding, collectives and their waits) at an insertion point, with their value meta inferred
// from the operands the way PyTorch's meta functions compute it, so no pass computes shapes or
// strides by hand.
//
// Every created node gets the builder's current NodeMeta (set it per group of nodes: phase,
// module, the node a piece derives from) and is reported to the creation hook, which a pass that
// places nodes itself (bucket stages new nodes and places them in one batch) uses to record
// them. An operand without tensor meta, or a shape that does not fit the op, is an internal
// error naming the op and the operand.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "ir/graph.h"

namespace jfx {

class OpBuilder {
 public:
  explicit OpBuilder(Graph& g) : g_(g) {}

  // New nodes go before `before`; nullptr (the default) appends them at the end of the graph.
  void setInsertionPoint(Node* before) { before_ = before; }
  Node* insertionPoint() const { return before_; }
  // The meta every node made from now on gets.
  void setMeta(NodeMeta meta) { meta_ = std::move(meta); }
  const NodeMeta& meta() const { return meta_; }
  // Called with every node made, after its value and meta are set.
  void onCreate(std::function<void(Node*)> hook) { on_create_ = std::move(hook); }

  // aten.view / aten.reshape: `shape` may hold one -1, inferred from the element count. The
  // result is contiguous (reshape copies when the input is not).
  Node* view(Node* x, Dims shape, std::string_view name = "");
  Node* reshape(Node* x, Dims shape, std::string_view name = "");
  // aten.cat along `dim` (written only when not 0, as FX records the default).
  Node* cat(const std::vector<Node*>& xs, int64_t dim, std::string_view name = "");
  // aten.split_with_sizes along `dim` (written only when not 0): views sharing the input's
  // strides; take the pieces with getitem.
  Node* splitWithSizes(Node* x, std::vector<int64_t> sizes, int64_t dim,
                       std::string_view name = "");
  Node* getitem(Node* x, int64_t index, std::string_view name = "");
  // aten.clone: a contiguous copy with storage of its own.
  Node* clone(Node* x, std::string_view name = "");
  // aten.constant_pad_nd: `pad` as PyTorch orders it (last dim first: left, right, ...).
  Node* constantPadNd(Node* x, std::vector<int64_t> pad, double value, std::string_view name = "");

  // Functional collectives (`target` names the op the graph already uses, e.g.
  // _c10d_functional.all_gather_into_tensor.default) and their wait.
  Node* allGather(Symbol target, Node* x, int64_t group_size, const std::string& group,
                  std::string_view name = "");
  Node* reduceScatter(Symbol target, Node* x, const std::string& reduce_op, int64_t group_size,
                      const std::string& group, std::string_view name = "");
  Node* allReduce(Symbol target, Node* x, const std::string& reduce_op, const std::string& group,
                  std::string_view name = "");
  Node* wait(Symbol target, Node* x, std::string_view name = "");

 private:
  Node* make(Symbol target, std::vector<Arg> args, ValueMeta val, std::string_view name);
  Node* viewLike(Symbol target, Node* x, Dims shape, std::string_view name);
  const TensorMeta& tensorOf(const Node* x, std::string_view op) const;

  Graph& g_;
  Node* before_ = nullptr;
  NodeMeta meta_;
  std::function<void(Node*)> on_create_;
};

// A contiguous tensor of `shape` with `like`'s dtype and device.
TensorMeta contiguousLike(const TensorMeta& like, Dims shape);

}  // namespace jfx
