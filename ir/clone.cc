#include "ir/clone.h"

#include <vector>

namespace jfx {

std::unique_ptr<Graph> cloneGraph(const Graph& g) {
  auto out = std::make_unique<Graph>();
  out->reserve(g.size());
  out->processGroups() = g.processGroups();
  out->outputSpecs() = g.outputSpecs();
  out->constants() = g.constants();
  out->extraJson() = g.extraJson();
  // Operands come before their users (program order is topological), so every reference maps.
  std::vector<Node*> copy_of(g.maxId(), nullptr);
  auto remap = [&](Node* n) { return copy_of[n->id()]; };
  for (const Node* n = g.first(); n; n = n->next())
    copy_of[n->id()] = out->cloneBefore(n, nullptr, remap);
  return out;
}

}  // namespace jfx
