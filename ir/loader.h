// The graph-construction layer every frontend builds through (docs/architecture.md, "Loading a
// graph"): the JSON reader (ir/json/reader.cc), the text reader (ir/text_format.cc) and the
// torch.fx bridge (python/bindings/fx_export.cc). A frontend parses its syntax; GraphLoader owns
// what they share:
//
// - the node rules: a non-empty name used once; an output node's target is "output", a
//   call_function's is not empty; placeholders and get_attrs take no arguments; and what a
//   reference to a node that is not defined (yet) is (a cycle, a forward reference, a dangling
//   one). Each error names the place of the part it concerns, which the frontend knows
//   (NodeSite), and spells nodes as the frontend's format does (%x in the text format, 'x' else).
// - name resolution and its speed: the name index sized up front, its slots fetched ahead
//   (announce, expectOperand), a cache of recently defined and resolved names in front of it, and
//   names claimed a few nodes late (Note [Late name claims]). None of this shows through Graph:
//   findNode sees every node once claimPending() or finish() has run.
// - the symbol caches that keep interning targets, devices and module paths cheap.
// - each node's source place (Graph::location).
#pragma once

#include <array>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ir/graph.h"
#include "ir/name_index.h"
#include "ir/symbol.h"

namespace jfx {

// The parts of a node the shared rules point at.
enum class NodePart : uint8_t { Whole, Name, Target, Args, Kwargs };

// Where the parts of a node are, for the errors the loader reports about it. `pos` is the place
// the frontend gave define() (a line, an element of "nodes"); the node being read is the one
// defined last, or the one about to be.
class NodeSite {
 public:
  virtual SourceLocation at(uint32_t pos, NodePart part) const = 0;

 protected:
  ~NodeSite() = default;
};

class GraphLoader {
 public:
  // `kind` and `file`: what the nodes come from. `into`: a graph whose nodes are built already;
  // the loader's nodes follow them, and their places are recorded only when `into` has none of
  // its own. `fqn_slots`: the size of the module-path cache (a large model has thousands).
  GraphLoader(SourceKind kind, std::string file, const NodeSite& site,
              std::unique_ptr<Graph> into = nullptr, size_t fqn_slots = 8192);
  GraphLoader(const GraphLoader&) = delete;
  GraphLoader& operator=(const GraphLoader&) = delete;

  // The graph being built. Its name index misses the names claimed late until claimPending():
  // find nodes through resolve() meanwhile.
  Graph& graph() { return *g_; }

  // About `n` nodes are coming: sizes the name index once.
  void expectNodes(size_t n) { g_->reserve(n); }

  // ---- names
  // A node named `name` is about to be defined: its name-index slot starts loading now, so the
  // miss of claiming the name overlaps with reading the rest of the node.
  void announce(std::string_view name) {
    announced_ = name;
    announced_hash_ = Graph::nameHash(name);
    g_->prefetchNameHash(announced_hash_);
  }
  // An operand naming `name` will be resolved soon: its slot starts loading now, unless the name
  // was defined or resolved recently.
  void expectOperand(std::string_view name) {
    recent_.prefetch(name, [&](std::string_view s) { g_->prefetchName(s); });
  }
  // The node named `name`, or nullptr when none is defined (yet). Sees the names not claimed yet.
  Node* resolve(std::string_view name) {
    return recent_.find(name, [&](std::string_view s) {
      Node* found = g_->findNode(s);
      return found ? found : pendingNamed(s);
    });
  }

  // ---- the node rules
  // Whether a node passes them (for a frontend's fast path, which leaves a node that does not to
  // its checked path).
  static bool followsRules(OpKind op, std::string_view target, bool has_args, bool has_kwargs) {
    if (op == OpKind::Output && target != "output") return false;
    if (op == OpKind::CallFunction && target.empty()) return false;
    return !((op == OpKind::Placeholder || op == OpKind::GetAttr) && (has_args || has_kwargs));
  }
  // Each throws the rule's error at the part of the node at `pos` it concerns.
  void checkName(std::string_view name, uint32_t pos) const;
  void checkTarget(OpKind op, std::string_view target, uint32_t pos) const;
  void checkNoArguments(OpKind op, bool has_args, bool has_kwargs, uint32_t pos) const;

  // ---- nodes
  enum class Claim : uint8_t {
    Now,   // the name is claimed at once: a taken name is an error at once
    Late,  // claimed kClaimLag nodes later (Note [Late name claims])
  };
  // Makes the node at the end of the graph under `name` and records its place `pos`: the line
  // (text format), the element of "nodes" (JSON). The rules are the frontend's to check first.
  Node* define(OpKind op, Symbol target, std::vector<Arg> args, Kwargs kwargs,
               std::string_view name, uint32_t pos, Claim claim = Claim::Now);
  // Claims every name defined with Claim::Late so far; a taken one is an error at its node. A
  // frontend calls it before it reports an error of its own, so that a duplicate name defined
  // earlier is reported first.
  void claimPending() {
    while (pending_count_ > 0)
      claimOldest();
  }
  // Claims every name and hands the graph over.
  std::unique_ptr<Graph> finish();
  // For a frontend that hands the graph to another reader for a while (the FX bridge reads the
  // nodes it cannot build itself as JSON): lend() claims every name and hands the graph over;
  // takeBack() takes it back with the nodes the other reader appended, which are at `pos`.
  std::unique_ptr<Graph> lend() { return finish(); }
  void takeBack(std::unique_ptr<Graph> g, uint32_t pos);

  // The error for a reference to `name`, which resolve() did not find, at `at`: a cycle when
  // `self` (the node refers to itself), else a forward reference when `later` (the place of a
  // later definition, as define's `pos`) is set, else a dangling reference.
  [[noreturn]] void unresolved(std::string_view name, const SourceLocation& at,
                               std::optional<uint32_t> later, bool self) const;

  // ---- symbol caches
  // Targets, devices, strings, kwarg keys: a file repeats a few dozen.
  Symbol symbol(std::string_view s) { return symbols_.intern(s); }
  // Module paths: thousands in a large model, so a cache of their own, which would otherwise
  // evict the targets every node has.
  Symbol moduleFqn(std::string_view s) { return fqn_symbols_.intern(s); }

 private:
  // Note [Late name claims]. Claiming a name is one probe of the graph's name index, which at a
  // million nodes is tens of MiB read at random: a cache miss the probe waits for. A reader that
  // defines its nodes with Claim::Late claims each name kClaimLag nodes after making the node, so
  // the slot, fetched when the name was announced, has arrived by then. Meanwhile the node is
  // found through recent_ or the list of pending claims; a duplicate is reported at its own node
  // when its claim fails.
  static constexpr size_t kClaimLag = 8;
  struct PendingClaim {
    Node* node = nullptr;
    uint64_t hash = 0;
    uint32_t pos = 0;
  };
  void claimOldest();
  [[noreturn]] void duplicateName(const Node* n, uint32_t pos) const;
  Node* pendingNamed(std::string_view name) const {
    for (size_t i = pending_count_; i-- > 0;)  // newest first, as a taken name's lookup was
      if (Node* n = pending_[(pending_first_ + i) % kClaimLag].node; n->name() == name) return n;
    return nullptr;
  }
  void record(const Node* n, uint32_t pos);
  std::string spell(std::string_view name) const;  // %x (text) or 'x'
  std::string place(uint32_t pos) const;           // "line 4" or "/nodes/1"

  SourceKind kind_;
  const NodeSite& site_;
  std::unique_ptr<Graph> g_;
  bool record_places_ = true;  // false: `into` has places of another source
  std::array<PendingClaim, kClaimLag> pending_{};
  size_t pending_first_ = 0, pending_count_ = 0;
  uint64_t announced_hash_ = 0;  // the hash of the name announced last
  std::string_view announced_;   // and the name (compared by address and size)
  RecentNames<Node> recent_;
  SymbolCache symbols_;
  SymbolCache fqn_symbols_;
};

}  // namespace jfx
