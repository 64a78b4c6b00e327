#include "ir/mutation.h"

#include <string_view>

namespace jfx {
namespace {

// Targets that write arguments other than operand 0: the running statistics (positions 3 and 4)
// of the batch-norm family, when `training` (position 5) is not False. _native_batch_norm_legit's
// schema says so (`Tensor(a!) running_mean`); native_batch_norm's does not (`Tensor?
// running_mean`, no alias annotation), yet its kernel writes them in training mode, and that is
// the op make_fx records for nn.BatchNorm in the pinned torch. So these rows are hand-written.
struct ArgWrites {
  std::string_view target;
  int8_t args[2];
};
constexpr ArgWrites kArgWrites[] = {
    {"aten.native_batch_norm.default", {3, 4}},
    {"aten._native_batch_norm_legit.default", {3, 4}},
    {"aten._batch_norm_with_update.default", {3, 4}},
    {"aten.cudnn_batch_norm.default", {3, 4}},
    {"aten.miopen_batch_norm.default", {3, 4}},
};
constexpr size_t kTrainingArg = 5;

void addNodes(const Arg& a, std::vector<Node*>& out) {
  if (a.isNode()) {
    out.push_back(a.node());
  } else if (a.isSequence()) {
    for (const Arg& item : a.items())
      addNodes(item, out);
  }
}

}  // namespace

std::vector<Node*> mutatedOperands(const Node& n) {
  std::vector<Node*> out;
  if (n.op() != OpKind::CallFunction) return out;
  if (n.info().alias == AliasKind::InPlace && n.numArgs() > 0 && n.arg(0).isNode())
    out.push_back(n.arg(0).node());
  if (const Arg* o = n.kwarg("out")) addNodes(*o, out);
  std::string_view t = n.target().str();
  for (const ArgWrites& w : kArgWrites) {
    if (t != w.target) continue;
    // _batch_norm_with_update always updates; the others only in training mode.
    if (t != "aten._batch_norm_with_update.default" && n.numArgs() > kTrainingArg &&
        n.arg(kTrainingArg).kind() == Arg::Kind::Bool && !n.arg(kTrainingArg).toBool())
      continue;
    for (int8_t i : w.args)
      if (static_cast<size_t>(i) < n.numArgs() && n.arg(static_cast<size_t>(i)).isNode())
        out.push_back(n.arg(static_cast<size_t>(i)).node());
  }
  return out;
}

const Node* storageRoot(const Node* n) {
  // Views only step backwards in program order, so this ends; the cap guards broken graphs.
  for (size_t hops = 0; n && hops < 1'000'000; ++hops) {
    if (n->op() != OpKind::CallFunction || n->info().alias != AliasKind::View) return n;
    const Node* in = n->input(0);
    if (!in || !in->isBefore(n)) return n;
    n = in;
  }
  return n;
}

bool BufferMutations::readsWrittenBuffer(const Node* n) const {
  for (const Node* in : n->inputs())
    if (in->id() < written_alias.size() && written_alias[in->id()]) return true;
  return false;
}

BufferMutations analyzeBufferMutations(const Graph& g) {
  BufferMutations m;
  m.writer_of.assign(g.maxId(), nullptr);
  m.written_alias.assign(g.maxId(), 0);
  for (Node* n = g.first(); n; n = n->next()) {
    for (Node* target : mutatedOperands(*n)) {
      const Node* root = storageRoot(target);
      if (root->op() != OpKind::Placeholder || root->inputKind() != InputKind::Buffer) continue;
      if (!m.writer_of[n->id()]) m.writers.push_back(n);
      m.writer_of[n->id()] = root;
      m.written_alias[root->id()] = 1;
    }
  }
  if (m.writers.empty()) return m;
  // Views of written buffers, in program order (a view comes after what it views).
  for (Node* n = g.first(); n; n = n->next())
    if (n->op() == OpKind::CallFunction && n->info().alias == AliasKind::View && n->input(0) &&
        m.written_alias[n->input(0)->id()])
      m.written_alias[n->id()] = 1;
  return m;
}

}  // namespace jfx
