#include "runtime/graph_queries.h"

#include <algorithm>
#include <vector>

#include "ir/collectives.h"

namespace jfx::rt {
namespace {

bool isDataFlow(const Node* n) {
  auto c = n->info().category;
  return c == OpCategory::View || c == OpCategory::Copy;
}

}  // namespace

std::string groupNameOf(const Node* collective) {
  if (std::string_view name = collectiveGroupName(*collective); !name.empty())
    return std::string(name);
  if (const Arg* a = collective->kwarg("group_name"); a && a->isStr()) return std::string(a->str());
  return {};
}

int64_t inferIntBound(const Node* ph, bool embeddings_only) {
  int64_t bound = 0;
  auto take = [&](int64_t b) {
    if (b > 0) bound = bound ? std::min(bound, b) : b;
  };
  std::vector<const Node*> frontier{ph};
  for (int depth = 0; depth < 6 && !frontier.empty(); ++depth) {
    std::vector<const Node*> next;
    for (const Node* n : frontier)
      for (const Node* u : n->users()) {
        auto metaOf = [](const Node* x) -> const TensorMeta* {
          return x && x->val().isTensor() ? &x->val().tensor : nullptr;
        };
        if (u->is("aten.embedding.default") && u->numArgs() >= 2 && u->arg(1).node() == n) {
          if (const TensorMeta* w = metaOf(u->arg(0).node()); w && !w->shape.empty())
            take(w->shape[0]);
        } else if (!embeddings_only &&
                   (u->is("aten.nll_loss_forward.default") || u->is("aten.nll_loss.default") ||
                    u->is("aten.nll_loss2d_forward.default") ||
                    u->is("aten.cross_entropy_loss.default")) &&
                   u->numArgs() >= 2 && u->arg(1).node() == n) {
          if (const TensorMeta* x = metaOf(u->arg(0).node()); x && !x->shape.empty())
            take(x->shape.size() >= 2 ? x->shape[1] : x->shape[0]);
        } else if (isDataFlow(u) && u->input(0) == n) {
          next.push_back(u);
        }
      }
    frontier = std::move(next);
  }
  return bound;
}

}  // namespace jfx::rt
