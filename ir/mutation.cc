#include "ir/mutation.h"

#include <string_view>

namespace jfx {
namespace {

// The batch-norm family writes its running statistics only in training mode (argument 5): the
// op table (OpInfo::written_args, ir/ops.def) says which arguments it may write, not when.
// _batch_norm_with_update has no `training` argument: it always updates.
constexpr std::string_view kTrainingGated[] = {
    "aten.native_batch_norm.default",
    "aten._native_batch_norm_legit.default",
    "aten.cudnn_batch_norm.default",
    "aten.miopen_batch_norm.default",
};
constexpr size_t kTrainingArg = 5;

bool trainingOff(const Node& n) {
  std::string_view t = n.target().str();
  for (std::string_view g : kTrainingGated)
    if (t == g)
      return n.numArgs() > kTrainingArg && n.arg(kTrainingArg).kind() == Arg::Kind::Bool &&
             !n.arg(kTrainingArg).toBool();
  return false;
}

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
  const OpInfo& info = n.info();
  if (const Arg* o = n.kwarg("out")) addNodes(*o, out);
  uint32_t args = info.written_args;
  if (info.alias == AliasKind::InPlace) args |= 1u;
  if (args == 0 || trainingOff(n)) return out;
  for (size_t i = 0; i < n.numArgs() && i < 32; ++i)
    if ((args >> i) & 1u) addNodes(n.arg(i), out);
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
