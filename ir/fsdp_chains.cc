#include "ir/fsdp_chains.h"

#include <vector>

#include "ir/collectives.h"

namespace jfx {
namespace {

// How far the walks go: an unshard chain is a cast, a view or two and a cat; a gradient chain a
// wait and a view or copy (after bucket: a wait, a split, a getitem and a view). The bound keeps
// each walk to the chain's neighbourhood.
constexpr int kMaxChainDepth = 8;

}  // namespace

bool isInputFreeFactory(const Node& n) {
  return n.op() == OpKind::CallFunction && n.info().category == OpCategory::Factory &&
         !n.isRandom() && n.inputs().empty();
}

bool isUnshardChainStep(const Node& n) {
  if (n.op() != OpKind::CallFunction || !n.isPure()) return false;
  switch (n.info().category) {
    case OpCategory::View:
    case OpCategory::Copy:
    case OpCategory::Index:
    case OpCategory::Getitem:
      return true;
    default:
      return false;
  }
}

Node* unshardChainInput(const Node& n) {
  if (!isUnshardChainStep(n)) return nullptr;
  Node* sole = nullptr;
  for (Node* p : n.inputs()) {
    if (p == sole || isInputFreeFactory(*p)) continue;
    if (sole) return nullptr;
    sole = p;
  }
  return sole;
}

const Node* shardParameterOf(const Node& n) {
  const Node* x = &n;
  while (x->op() != OpKind::Placeholder) {
    const Node* in = unshardChainInput(*x);
    if (!in || in->graph() != x->graph() || in->isDead() || !in->isBefore(x)) return nullptr;
    x = in;
  }
  return x->inputKind() == InputKind::Parameter ? x : nullptr;
}

const Node* unshardGatherOf(const Node& input) {
  std::vector<const Node*> frontier{&input};
  for (int depth = 0; depth < kMaxChainDepth && !frontier.empty(); ++depth) {
    std::vector<const Node*> next;
    const Node* best = nullptr;
    for (const Node* n : frontier)
      for (const Node* u : n->users()) {
        if (collectiveKind(*u) == CollectiveKind::AllGather) {
          if (!best || u->isBefore(best)) best = u;
        } else if (isUnshardChainStep(*u)) {
          next.push_back(u);
        }
      }
    if (best) return best;
    frontier = std::move(next);
  }
  return nullptr;
}

const Node* gradientScatterOf(const Node& value) {
  return producingCollective(value, CollectiveKind::ReduceScatter);
}

const Node* producingCollective(const Node& value, CollectiveKind kind) {
  const Node* v = &value;
  for (int depth = 0; v && depth < kMaxChainDepth; ++depth) {
    if (collectiveKind(*v) == kind) return v;
    auto c = v->info().category;
    if (v->op() != OpKind::CallFunction || v->inputs().empty() ||
        (c != OpCategory::View && c != OpCategory::Copy && c != OpCategory::Wait &&
         c != OpCategory::Getitem))
      return nullptr;
    v = v->inputs().front();
  }
  return nullptr;
}

const Node* parameterGradientScatter(const Graph& g, std::string_view fqn) {
  const auto& specs = g.outputSpecs();
  const Node* out = g.outputNode();
  if (!out || out->numArgs() == 0 || !out->arg(0).isSequence()) return nullptr;
  const auto& items = out->arg(0).items();
  for (size_t k = 0; k < specs.size() && k < items.size(); ++k)
    if (specs[k].kind == OutputKind::Gradient && specs[k].fqn == fqn) {
      const Node* v = items[k].node();
      return v ? gradientScatterOf(*v) : nullptr;
    }
  return nullptr;
}

}  // namespace jfx
