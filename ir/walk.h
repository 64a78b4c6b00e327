// Walks over a graph's nodes, with the cache management they need kept here, in the IR's
// iteration, rather than in the passes that walk.
//
// Sweeps. On a graph larger than the cache each walk of the node list costs about a cache miss
// per node, whatever it reads: an analysis that walks the list several times pays that
// each time. A sweep walks the list once and hands each node to several visitors in turn, so
// facts gathered by small visitors cost one walk, as a hand-fused loop does (docs/decisions.md,
// "Walk the node list once"). Operands precede users, so a visitor knows the facts of a node's
// operands when it reaches the node.
//
//   struct CountViews {
//     int64_t n = 0;
//     void visit(Node* node, uint32_t step) { n += node->info().category == OpCategory::View; }
//   };
//   CountViews views;
//   Positions pos(g);
//   sweep(g, pos, views);
//
// Side tables. NodeMap<T> is a table by node id: one T for every node the graph had when the
// table was made (ids are dense and never reused, ir/stable_vector.h), and the default for a
// node made later.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "ir/graph.h"

namespace jfx {

// A side table by node id, sized for the nodes `g` has now.
template <class T>
class NodeMap {
 public:
  NodeMap() = default;
  explicit NodeMap(const Graph& g, T init = T{}) : v_(g.maxId(), init), init_(init) {}

  T& operator[](const Node* n) { return v_[n->id()]; }
  const T& operator[](const Node* n) const { return v_[n->id()]; }
  T& operator[](uint32_t id) { return v_[id]; }
  const T& operator[](uint32_t id) const { return v_[id]; }
  // For any node, the default for one newer than the table.
  T get(const Node* n) const { return n->id() < v_.size() ? v_[n->id()] : init_; }
  bool covers(const Node* n) const { return n->id() < v_.size(); }
  size_t size() const { return v_.size(); }
  // Frees the table (a pass's tables can be a large share of its peak).
  void release() { std::vector<T>().swap(v_); }
  std::vector<T>& raw() { return v_; }
  const std::vector<T>& raw() const { return v_; }

 private:
  std::vector<T> v_;
  T init_{};
};

// One walk of the node list in program order; each visitor's visit(Node*, step) is called for
// every node, in the order the visitors are given. `step` is the node's index in the walk.
template <class... Visitors>
void sweep(const Graph& g, Visitors&&... visitors) {
  uint32_t step = 0;
  for (Node* n = g.first(); n; n = n->next(), ++step)
    (visitors.visit(n, step), ...);
}

// The same in reverse program order (users before their operands); `step` counts from the end.
template <class... Visitors>
void sweepBackward(const Graph& g, Visitors&&... visitors) {
  uint32_t step = 0;
  for (Node* n = g.last(); n; n = n->prev(), ++step)
    (visitors.visit(n, step), ...);
}

// A visitor made of a function f(Node*, step), for a sweep's one-off part.
template <class F>
struct FunctionVisitor {
  F f;
  void visit(Node* n, uint32_t step) { f(n, step); }
};
template <class F>
FunctionVisitor<F> visitor(F f) {
  return {std::move(f)};
}

// Each node's index in program order: the visitor most sweeps start with.
class Positions {
 public:
  explicit Positions(const Graph& g) : pos_(g) {}
  void visit(Node* n, uint32_t step) { pos_[n] = step; }
  uint32_t operator[](const Node* n) const { return pos_[n]; }
  void release() { pos_.release(); }

 private:
  NodeMap<uint32_t> pos_;
};

// The walks' way to Node's prefetch hints, which are private to Node: only a walk that knows how
// it will read the nodes asks for them.
struct WalkPrefetch {
  static void head(const Node* n) { n->prefetchHead(); }
  static void neighbourHeads(const Node* n) { n->prefetchNeighbourHeads(); }
  static void inputNameFields(const Node* n) { n->prefetchInputNameFields(); }
  static void inputNames(const Node* n) { n->prefetchInputNames(); }
};

// f(node) for each node in program order, for a walk that reads every operand's name (the
// writers): at random for a backward node that reads an activation from far back, a cache miss
// for the operand's node and one for its name. Each step fetches the name fields of the operands
// of the node 8 on, and the names of those of the node 4 on (bench/README.md, "Figures behind the
// code").
template <class F>
void forEachReadingInputNames(const Graph& g, F&& f) {
  auto ahead = [&](int steps) {
    const Node* n = g.first();
    for (; n && steps > 0; --steps)
      n = n->next();
    return n;
  };
  const Node* fields = ahead(8);
  const Node* names = ahead(4);
  for (Node* n = g.first(); n; n = n->next()) {
    if (fields) {
      WalkPrefetch::inputNameFields(fields);
      fields = fields->next();
    }
    if (names) {
      WalkPrefetch::inputNames(names);
      names = names->next();
    }
    f(n);
  }
}

// f(node, i) for each node of a list of scattered nodes (Graph::collectives(), a pass's
// worklist), fetching the nodes a few places ahead and their neighbours' heads (Note [Walk
// prefetch] in ir/graph.h): such a list is a cache miss per node, and per operand and user read.
template <class F>
void forEachPrefetched(const std::vector<Node*>& nodes, F&& f) {
  constexpr size_t kAhead = 8;  // the node's own head
  constexpr size_t kNear = 4;   // its operands' and users' heads, once its own has arrived
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (i + kAhead < nodes.size()) WalkPrefetch::head(nodes[i + kAhead]);
    if (i + kNear < nodes.size()) WalkPrefetch::neighbourHeads(nodes[i + kNear]);
    f(nodes[i], i);
  }
}

}  // namespace jfx
