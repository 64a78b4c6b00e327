#include "passes/analysis/phase.h"

namespace jfx {
namespace {

bool isLossFqn(Symbol fqn) {
  std::string_view s = fqn.str();
  return s == "loss" || s.starts_with("loss.");
}

// The output list's node items with their kinds. Specs are used only when they line up with the
// list and name a loss; otherwise the make_fx convention [loss, *grads] applies.
void classifyOutputs(const Graph& g, Node*& loss, std::vector<Node*>& grads) {
  Node* out = g.outputNode();
  if (!out || out->numArgs() == 0) return;
  std::vector<const Arg*> items;
  const Arg& a = out->arg(0);
  if (a.isSequence()) {
    for (const Arg& item : a.items())
      items.push_back(&item);
  } else {
    items.push_back(&a);
  }
  const auto& specs = g.outputSpecs();
  bool use_specs = specs.size() == items.size();
  if (use_specs) {
    use_specs = false;
    for (const auto& s : specs)
      use_specs |= s.kind == OutputKind::Loss;
  }
  for (size_t i = 0; i < items.size(); ++i) {
    Node* n = items[i]->node();
    if (!n) continue;
    OutputKind kind =
        use_specs ? specs[i].kind : (i == 0 ? OutputKind::Loss : OutputKind::Gradient);
    if (kind == OutputKind::Loss && !loss) loss = n;
    if (kind == OutputKind::Gradient) grads.push_back(n);
  }
}

}  // namespace

bool hasAutogradBackwardFlag(const Node& n) {
  return n.meta().attrs.getBool(attr::autogradBackward()).value_or(false);
}

PhaseInfo computePhases(const Graph& g) {
  PhaseInfo info;
  const size_t n_ids = g.maxId();
  info.phases_.assign(n_ids, Phase::Unknown);

  Node* loss = nullptr;
  std::vector<Node*> grads;
  classifyOutputs(g, loss, grads);
  info.loss_ = loss;

  // The structural rule needs the ancestors of the loss and of the gradients and the descendants
  // of the loss. Graphs whose nodes all carry meta.phase (the exporter's and synth's) never ask,
  // so the sweeps run only when the first node without one is reached: a planner that analyses
  // many candidate copies of a graph pays one walk per analysis instead of four.
  std::vector<uint8_t> reaches_loss, feeds_grad, after_loss;
  bool swept = false;
  auto sweep = [&] {
    swept = true;
    reaches_loss.assign(n_ids, 0);
    feeds_grad.assign(n_ids, 0);
    after_loss.assign(n_ids, 0);
    // Ancestors: one reverse sweep each marks operands of marked nodes, which visits every edge
    // once because operands precede their users.
    if (loss) reaches_loss[loss->id()] = 1;
    for (Node* gr : grads)
      feeds_grad[gr->id()] = 1;
    for (Node* n = g.last(); n; n = n->prev()) {
      if (n->op() == OpKind::Output) continue;
      bool rl = reaches_loss[n->id()], fg = feeds_grad[n->id()];
      if (!rl && !fg) continue;
      for (Node* p : n->inputs()) {
        if (rl) reaches_loss[p->id()] = 1;
        if (fg) feeds_grad[p->id()] = 1;
      }
    }
    // Descendants of the loss: one forward sweep.
    if (loss) {
      for (Node* n = loss->next(); n; n = n->next()) {
        for (Node* p : n->inputs()) {
          if (p == loss || after_loss[p->id()]) {
            after_loss[n->id()] = 1;
            break;
          }
        }
      }
    }
  };

  for (Node* n = g.first(); n; n = n->next()) {
    if (n->op() != OpKind::CallFunction) continue;
    Phase p = n->meta().phase;
    if (p != Phase::Unknown) {
      ++info.from_meta_;
    } else if (hasAutogradBackwardFlag(*n)) {
      p = Phase::Backward;
      ++info.from_flag_;
    } else {
      ++info.from_structure_;
      if (!swept) sweep();
      Node* producer = n->info().category == OpCategory::Getitem ? n->input(0) : nullptr;
      if (producer && info.phases_[producer->id()] != Phase::Unknown) {
        p = info.phases_[producer->id()];
      } else if (reaches_loss[n->id()]) {
        p = (n == loss || isLossFqn(n->meta().module_fqn)) ? Phase::Loss : Phase::Forward;
      } else if (after_loss[n->id()] || feeds_grad[n->id()]) {
        p = Phase::Backward;
      } else {
        p = Phase::Forward;
      }
    }
    info.phases_[n->id()] = p;
  }
  return info;
}

// What the analysis answers for the live nodes, in program order: a result handed on by a pass
// that erased nodes (their stale entries) or made some (answered from their meta) agrees with a
// fresh one exactly when every question gets the same answer.
std::string AnalysisTraits<PhaseInfo>::fingerprint(const Graph& g, const PhaseInfo& p) {
  std::string s;
  s.reserve(g.size() + 16);
  for (const Node* n = g.first(); n; n = n->next())
    s += static_cast<char>('0' + static_cast<int>(p.of(n)));
  s += " loss=";
  s += p.lossNode() ? p.lossNode()->name() : std::string("-");
  return s;
}

}  // namespace jfx
