#include "passes/analysis/mutation.h"

namespace jfx {
namespace {

void collectNodes(const Arg& a, std::vector<const Node*>& out) {
  if (a.isNode()) {
    out.push_back(a.node());
  } else if (a.isSequence()) {
    for (const Arg& x : a.items())
      collectNodes(x, out);
  }
}

}  // namespace

namespace {

// Whether `n` may write an operand in place: an op the table says writes, one it does not know,
// or one given an `out` kwarg anyway (mutatedOperands counts that as written, and remat trusts
// any() == false to mean no node writes a buffer).
bool mayWrite(const Node& n, const OpInfo& info) {
  return n.op() == OpKind::CallFunction && (info.mutates || info.category == OpCategory::Unknown ||
                                            (!n.kwargs().empty() && n.kwarg("out") != nullptr));
}

}  // namespace

WrittenStorage::WrittenStorage(const Graph& g) {
  // Most graphs write nothing in place (functionalized training graphs). A first walk reads only
  // each node's op: with no writer there is nothing to mark, no storage needs a root, and the
  // answer is the same for any graph without writers, so passes that make none keep it.
  const Node* first_writer = nullptr;
  for (const Node* n = g.first(); n && !first_writer; n = n->next())
    if (mayWrite(*n, n->info())) first_writer = n;
  if (!first_writer) return;
  root_.assign(g.maxId(), 0);
  written_.assign(g.maxId(), 0);
  // One walk in program order: the roots of a node's operands, which come earlier, are known by
  // the time it is reached, both to give the node its own root and to mark what it writes.
  std::vector<const Node*> targets;
  for (const Node* n = g.first(); n; n = n->next()) {
    const OpInfo& info = n->info();
    const Node* in0 = n->input(0);
    root_[n->id()] = (info.alias == AliasKind::View || info.alias == AliasKind::InPlace) && in0 &&
                             in0->isBefore(n)
                         ? root_[in0->id()]
                         : n->id();
    if (!mayWrite(*n, info)) continue;
    targets.clear();
    // An unknown op may write anything it is given; so may one the table knows only to write
    // (an out= op writes its kwarg, collected below).
    uint32_t mask = info.written_args;
    if (info.category == OpCategory::Unknown || (mask == 0 && info.alias != AliasKind::Out))
      mask = ~uint32_t{0};
    for (size_t i = 0; i < n->numArgs(); ++i)
      if (i < 32 && (mask >> i) & 1u) collectNodes(n->arg(i), targets);
    for (const auto& kv : n->kwargs())
      collectNodes(kv.second, targets);
    for (const Node* t : targets) {
      written_[rootOf(t)] = 1;
      any_ = true;
    }
  }
  if (!any_) {  // writers of nothing: the same answer as no writer
    root_ = {};
    written_ = {};
  }
}

uint32_t WrittenStorage::rootOf(const Node* n) const {
  return n->id() < root_.size() ? root_[n->id()] : n->id();
}

bool WrittenStorage::touches(const Node* n) const {
  if (!any_) return false;
  auto marked = [&](const Node* x) {
    uint32_t r = rootOf(x);
    return r < written_.size() && written_[r];
  };
  if (marked(n)) return true;
  for (const Node* p : n->inputs())
    if (marked(p)) return true;
  return false;
}

std::string AnalysisTraits<WrittenStorage>::fingerprint(const Graph&, const WrittenStorage& w) {
  std::string s = w.any_ ? "1" : "0";
  for (size_t i = 0; i < w.root_.size(); ++i)
    s += std::to_string(w.root_[i]) + (i < w.written_.size() && w.written_[i] ? "w," : ",");
  return s;
}

}  // namespace jfx
