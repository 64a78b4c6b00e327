// The jointfx IR: a Graph owns Nodes in program order.
//
// Note [Topological invariant]
// Node order is program order and is the schedule. Every operand of a node is defined earlier in
// the order; the verifier checks it, and passes that move nodes must keep it. isBefore() is O(1):
// each node carries a gapped 64-bit position; when a gap runs out, the smallest window of nodes
// around it that has room is respaced (amortized O(log N) per insert).
//
// Note [Use lists]
// Every node reference inside a node's args/kwargs is an operand. Operands are numbered in
// depth-first order over args then kwargs; node->inputs()[k] is operand k. Each node owns an array
// of operand slots (Operand), carved from its Graph's slot arena: slot k holds the producer, the
// user, k, and a pointer to the reference inside the Arg tree, so setting operand k is O(1). Each
// slot is also threaded into its producer's doubly linked use list (head, tail, count on the
// producer): node->uses() walks it and yields Use{user, k}. A new use is appended at the tail and
// a removed one is unlinked in O(1), so use order is the order uses were made, and removals keep
// the others' relative order. Every Graph edit keeps both sides in step; never change an Arg
// tree behind the Graph's back (use setArgs / replaceInput).
//
// Note [Undo]
// beginUndo() makes the Graph record, for every primitive edit (a use appended or unlinked, an
// operand reference set, a node linked or unlinked, created, named, renamed or buried, a node's
// slot array replaced), what undoes it. rollback() replays those inverses newest first, so the
// node list and every use list come back in their exact order, the nodes created meanwhile leave
// the store's end (ids as before), and names, name-suffix counters and the header (copied at
// beginUndo) are as they were: the graph is indistinguishable from before, as an exact copy taken
// with copy() would be, at a cost in proportion to the edits instead of the graph. Positions are
// reassigned where nodes are linked again (they encode order, which is restored). Not recorded:
// val and meta of nodes that existed at beginUndo (a rewrite that changes those cannot be undone
// this way; new nodes' are free), and takeContents (refused while recording).
//
// Note [Ids and deletion]
// Node ids are dense, stable and never reused, so side tables can be vectors indexed by id
// (maxId() bounds them). erase() unlinks a node and marks it dead; its storage stays until the
// Graph is destroyed, so pointers held across an erase never dangle.
#pragma once

#include <compare>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "ir/arg.h"
#include "ir/attributes.h"
#include "ir/compact_string.h"
#include "ir/error.h"
#include "ir/name_arena.h"
#include "ir/name_index.h"
#include "ir/op_info.h"
#include "ir/optional_int.h"
#include "ir/stable_vector.h"
#include "ir/symbol.h"
#include "ir/types.h"

namespace jfx {

enum class OpKind : uint8_t { Placeholder, CallFunction, GetAttr, Output };
enum class Phase : uint8_t { Unknown, Forward, Loss, Backward };
// torch.utils.checkpoint.CheckpointPolicy values; Unset when the node carries no tag.
enum class Recompute : int8_t {
  Unset = -1,
  MustSave = 0,
  PreferSave = 1,
  MustRecompute = 2,
  PreferRecompute = 3,
  // Offload to CPU memory in forward, reload in backward (GraphTrainer's sac_and_offload policy
  // and its offload pass): the value is kept, off the device. No jointfx pass realizes these.
  MustCpuOffload = 4,
  PreferCpuOffload = 5
};
// The largest CheckpointPolicy value (tests/python/test_meta_roundtrip.py: torch's own enum).
inline constexpr int kMaxRecompute = static_cast<int>(Recompute::PreferCpuOffload);
// Mesh: a DeviceMesh (non-tensor; an executor supplies it from its process groups). Opaque: any
// other non-tensor value (an int, None, an object); its val meta says what it is when known.
enum class InputKind : uint8_t { None, Parameter, Buffer, UserInput, Mesh, Opaque };
// BufferMutation: the new value of a buffer (fqn), copied into it after the step (ir/mutation.h).
// Mesh / Opaque: a non-tensor graph output (a gradient's DeviceMesh, an int, None).
enum class OutputKind : uint8_t { Other, Loss, Gradient, BufferMutation, Mesh, Opaque };

std::string_view opKindName(OpKind k);  // "placeholder", "call_function", ...
std::optional<OpKind> opKindFromName(std::string_view s);
std::string_view phaseName(Phase p);  // "forward", "loss", "backward", "unknown"
std::optional<Phase> phaseFromName(std::string_view s);
std::string_view recomputeName(Recompute r);  // "MUST_SAVE", ...; "" for Unset
std::optional<Recompute> recomputeFromName(std::string_view s);
std::string_view inputKindName(InputKind k);  // "parameter", "buffer", "user_input", "none"
std::optional<InputKind> inputKindFromName(std::string_view s);
std::string_view outputKindName(OutputKind k);  // "loss", "gradient", "buffer_mutation", "other"
std::optional<OutputKind> outputKindFromName(std::string_view s);

// Node meta that passes read is typed: fields for FX's own keys, `attrs` for the facts passes
// exchange (ir/attributes.h); every other key rides along in extra_json.
struct NodeMeta {
  Phase phase = Phase::Unknown;
  Recompute recompute = Recompute::Unset;
  Symbol module_fqn;          // FX meta["custom"]["module_fqn"]; empty when absent
  OptionalInt64 ac_graph_id;  // 8 bytes each: INT64_MIN is reserved for "absent"
  OptionalInt64 seq_nr;
  CompactString stack_trace;  // empty when absent
  // Every other meta key as a canonical compact JSON object (sorted keys), or empty. "custom"
  // appears here without its "module_fqn" key, which lives in module_fqn above.
  CompactString extra_json;
  AttrMap attrs;  // declared keys (Note [Attributes and the formats])
  friend bool operator==(const NodeMeta&, const NodeMeta&) = default;
};

class Graph;
class Node;

// The op facts of a node of kind `op` calling `target` (placeholders, outputs and get_attrs have
// their own rows).
const OpInfo* infoFor(OpKind op, Symbol target);

struct Use {
  Node* user;
  uint32_t index;  // operand number within user->inputs()
  friend bool operator==(const Use&, const Use&) = default;
};

// An operand slot of `user` (Note [Use lists]). Only the Graph writes slots. 40 bytes: a slot's
// operand number is its place in its user's slot array, so it is computed, not stored (8 bytes in
// every slot of the graph; bench/README.md, "Figures behind the code").
struct Operand {
  Node* value = nullptr;  // the producer
  Node* user = nullptr;
  Node** ref = nullptr;  // the node reference inside the Arg that holds it, in user's args/kwargs
  Operand* prev_use = nullptr;  // neighbours in value's use list
  Operand* next_use = nullptr;
  // Operand number within user->inputs(); kNotASlot for a slot outside user's slot array (only a
  // corrupted use list has one: the verifier says so).
  uint32_t index() const;
  static constexpr uint32_t kNotASlot = UINT32_MAX;
};

// A node's operands as Node*, by value: a view over its slot array. Random access, O(1) size.
class InputRange {
 public:
  class iterator {
   public:
    using iterator_category = std::random_access_iterator_tag;
    using iterator_concept = std::random_access_iterator_tag;
    using value_type = Node*;
    using difference_type = std::ptrdiff_t;
    using reference = Node*;
    using pointer = void;
    iterator() = default;
    explicit iterator(const Operand* p) : p_(p) {}
    Node* operator*() const { return p_->value; }
    Node* operator[](difference_type k) const { return p_[k].value; }
    iterator& operator++() { return ++p_, *this; }
    iterator operator++(int) { return iterator(p_++); }
    iterator& operator--() { return --p_, *this; }
    iterator operator--(int) { return iterator(p_--); }
    iterator& operator+=(difference_type k) { return p_ += k, *this; }
    iterator& operator-=(difference_type k) { return p_ -= k, *this; }
    friend iterator operator+(iterator a, difference_type k) { return a += k; }
    friend iterator operator+(difference_type k, iterator a) { return a += k; }
    friend iterator operator-(iterator a, difference_type k) { return a -= k; }
    friend difference_type operator-(iterator a, iterator b) { return a.p_ - b.p_; }
    friend bool operator==(iterator a, iterator b) { return a.p_ == b.p_; }
    friend auto operator<=>(iterator a, iterator b) { return a.p_ <=> b.p_; }

   private:
    const Operand* p_ = nullptr;
  };
  InputRange(const Operand* first, uint32_t n) : first_(first), n_(n) {}
  iterator begin() const { return iterator(first_); }
  iterator end() const { return iterator(first_ + n_); }
  size_t size() const { return n_; }
  bool empty() const { return n_ == 0; }
  Node* operator[](size_t k) const { return first_[k].value; }
  Node* front() const { return first_[0].value; }
  Node* back() const { return first_[n_ - 1].value; }

 private:
  const Operand* first_;
  uint32_t n_;
};

// A node's uses in use-list order, as Use by value. Forward only; O(1) size and front(). Editing
// the graph while walking it is not allowed (copy it first: std::vector<Use>(r.begin(), r.end())).
class UseRange {
 public:
  class iterator {
   public:
    using iterator_category = std::forward_iterator_tag;
    using iterator_concept = std::forward_iterator_tag;
    using value_type = Use;
    using difference_type = std::ptrdiff_t;
    using reference = Use;
    using pointer = void;
    iterator() = default;
    explicit iterator(const Operand* p) : p_(p) {}
    Use operator*() const { return Use{p_->user, p_->index()}; }
    iterator& operator++() { return p_ = p_->next_use, *this; }
    iterator operator++(int) {
      iterator old = *this;
      p_ = p_->next_use;
      return old;
    }
    friend bool operator==(iterator a, iterator b) { return a.p_ == b.p_; }

   private:
    const Operand* p_ = nullptr;
  };
  UseRange(const Operand* head, uint32_t n) : head_(head), n_(n) {}
  iterator begin() const { return iterator(head_); }
  iterator end() const { return iterator(nullptr); }
  size_t size() const { return n_; }
  bool empty() const { return n_ == 0; }
  Use front() const { return Use{head_->user, head_->index()}; }

 private:
  const Operand* head_;
  uint32_t n_;
};

class Node {
  // Only a Graph makes nodes; the token keeps the constructor usable by its node store.
  struct Token {
   private:
    friend class Graph;
    Token() = default;
  };

 public:
  explicit Node(Token) {}
  uint32_t id() const { return id_; }
  OpKind op() const { return op_; }
  Symbol target() const { return target_; }
  std::string_view name() const { return NameArena::view(name_); }  // Note [Name arena]
  // Derived from op and target (the op table by symbol id), not stored: 8 bytes a node.
  const OpInfo& info() const { return *infoFor(op_, target_); }
  Graph* graph() const { return graph_; }

  const std::vector<Arg>& args() const { return args_; }
  const Kwargs& kwargs() const { return kwargs_.get(); }
  const Arg* kwarg(std::string_view key) const;
  const Arg& arg(size_t i) const { return args_[i]; }
  size_t numArgs() const { return args_.size(); }
  // Node operand k (args then kwargs, depth first). input(0) is usually the data input.
  InputRange inputs() const { return InputRange(ops_, num_ops_); }
  size_t numInputs() const { return num_ops_; }
  Node* input(size_t k) const { return k < num_ops_ ? ops_[k].value : nullptr; }
  // Operand slot k and its links in its producer's use list: what the verifier reads to check a
  // slot is listed in O(1) instead of walking a producer's whole use list.
  const Operand& operandSlot(size_t k) const { return ops_[k]; }
  bool isFirstUse(const Operand* s) const { return use_head_ == s; }
  bool isLastUse(const Operand* s) const { return use_tail_ == s; }
  UseRange uses() const { return UseRange(use_head_, num_uses_); }
  size_t numUses() const { return num_uses_; }
  bool hasUses() const { return num_uses_ != 0; }
  // Distinct users in use-list order.
  std::vector<Node*> users() const;

  ValueMeta& val() { return val_; }
  const ValueMeta& val() const { return val_; }
  NodeMeta& meta() { return meta_; }
  const NodeMeta& meta() const { return meta_; }

  // Placeholders only: what the graph input is (parameter, buffer, user input) and its FQN.
  InputKind inputKind() const { return input_kind_; }
  std::string_view inputFqn() const;
  void setInputInfo(InputKind k, std::string_view fqn);

  // The node this one was copied from (Graph::cloneBefore sets it), or kNoOrigin. Bridges use it
  // to give a new node the source meta of the node it derives from.
  static constexpr uint32_t kNoOrigin = UINT32_MAX;
  uint32_t origin() const { return origin_; }
  void setOrigin(uint32_t id) { origin_ = id; }

  // Each step also prefetches the arena slot a few nodes on (Note [Walk prefetch]).
  Node* next() const {
    prefetchAt(kWalkAhead);
    return next_;
  }
  Node* prev() const {
    prefetchAt(-kWalkAhead);
    return prev_;
  }
  bool isDead() const { return dead_; }
  bool isBefore(const Node* other) const { return pos_ < other->pos_; }
  // The order key isBefore compares, for sorting on keys read once (a comparator that reads two
  // nodes' positions misses the cache twice per comparison on large graphs). Valid until the
  // next edit that moves or inserts nodes.
  uint64_t position() const { return pos_; }
  bool isAfter(const Node* other) const { return pos_ > other->pos_; }

  bool isCollective() const { return info().category == OpCategory::Collective; }
  bool isWait() const { return info().category == OpCategory::Wait; }
  // Draws random numbers: the op is seeded (OpInfo::random) and, for ops seeded only through a
  // dropout_p argument (the attention kernels), that argument is not 0.
  bool isRandom() const;
  // Moving it or dropping it unused cannot change the result: a call_function known to the op
  // table, with no side effect, no argument written and no random draw (isRandom).
  bool isPure() const;
  bool is(std::string_view target) const { return target_.str() == target; }

 private:
  friend class Graph;
  friend struct Operand;
  friend struct UseListSurgery;  // tests that corrupt use lists on purpose (verifier tests)
  friend struct WalkPrefetch;    // the walks of ir/walk.h that fetch ahead
  // For walks over a list of scattered nodes (the collectives; Note [Walk prefetch]): the first
  // starts loading this node's head (links, position, id, kind, operand and use slots), the
  // second, called some steps later, its operands' and users' heads.
  void prefetchHead() const;
  void prefetchNeighbourHeads() const;
  // For a walk that reads its operands' names (forEachReadingInputNames): called on a node some
  // steps ahead, the first starts loading its operands' name fields, and called a few steps
  // later, the second the names themselves, so both are there when the walk arrives.
  void prefetchInputNameFields() const;
  void prefetchInputNames() const;
  // Note [Walk prefetch]. A walk over the node list is a chain of dependent loads, one node at a
  // time: a cache miss a node once the graph is larger than the cache, even though the nodes lie
  // next to each other (a loaded graph's list order is the arena's for nearly all of its nodes, and
  // still for most after the default pipeline). Nothing in the chain lets the processor fetch
  // ahead, so each step asks for the node kWalkAhead slots on in the arena, where the walk will
  // most likely be by then: a fraction of the time a node (bench/README.md, "Figures behind the
  // code"). A prefetch is only a hint: an address outside the arena costs a wasted fetch, never a
  // fault, and the address is formed as an integer, so no pointer leaves its object.
  static constexpr std::ptrdiff_t kWalkAhead = 8;
  void prefetchAt(std::ptrdiff_t slots) const {
#if defined(__GNUC__)
    __builtin_prefetch(reinterpret_cast<const void*>(reinterpret_cast<std::uintptr_t>(this) +
                                                     slots * std::ptrdiff_t(sizeof(Node))));
#endif
  }

  // What a walk over the node list reads (links, position, kind, target) comes first, within
  // 64 bytes, and the operand and use links next: a node is 216 bytes, so fields spread
  // over it cost a cache miss each per node on graphs that do not fit the cache.
  Node* prev_ = nullptr;
  Node* next_ = nullptr;
  uint64_t pos_ = 0;
  uint32_t id_ = 0;
  Symbol target_;
  OpKind op_ = OpKind::CallFunction;
  bool dead_ = false;
  InputKind input_kind_ = InputKind::None;
  uint32_t origin_ = kNoOrigin;
  Graph* graph_ = nullptr;
  Operand* ops_ = nullptr;  // num_ops_ slots in use, room for ops_cap_ (Graph's slot arena)
  uint32_t num_ops_ = 0;
  uint32_t ops_cap_ = 0;
  uint32_t num_uses_ = 0;
  // Placeholders only: the FQN's entry in graph_'s table, 0 for none (a placeholder in 30 nodes
  // does not carry 8 bytes in every node).
  uint32_t input_fqn_ = 0;
  Operand* use_head_ = nullptr;
  Operand* use_tail_ = nullptr;
  const char* name_ = nullptr;  // in graph_'s NameArena
  std::vector<Arg> args_;
  BoxedVector<std::pair<Symbol, Arg>> kwargs_;  // most nodes have none
  ValueMeta val_;
  NodeMeta meta_;
};

inline uint32_t Operand::index() const {
  // As integers: a slot outside the array is no pointer arithmetic's business.
  const uintptr_t d =
      (reinterpret_cast<uintptr_t>(this) - reinterpret_cast<uintptr_t>(user->ops_)) /
      sizeof(Operand);
  return d < user->ops_cap_ ? static_cast<uint32_t>(d) : kNotASlot;
}

inline void Node::prefetchInputNameFields() const {
#if defined(__GNUC__)
  for (uint32_t k = 0; k < num_ops_; ++k)
    if (const Node* p = ops_[k].value) __builtin_prefetch(&p->name_);
#endif
}

inline void Node::prefetchInputNames() const {
#if defined(__GNUC__)
  for (uint32_t k = 0; k < num_ops_; ++k)
    if (const Node* p = ops_[k].value) __builtin_prefetch(p->name_);
#endif
}

inline void Node::prefetchHead() const {
#if defined(__GNUC__)
  __builtin_prefetch(&pos_);
  __builtin_prefetch(&use_tail_);
#endif
}

inline void Node::prefetchNeighbourHeads() const {
  for (uint32_t k = 0; k < num_ops_; ++k)
    if (const Node* p = ops_[k].value) p->prefetchHead();
  uint32_t left = 4;  // a collective has one user, its wait
  for (const Operand* u = use_head_; u && left > 0; u = u->next_use, --left)
    u->user->prefetchHead();
}

struct ProcessGroupInfo {
  std::string name;  // the group_name string the collectives carry, e.g. "0"
  int64_t size = 0;
  std::vector<int64_t> ranks;
  friend bool operator==(const ProcessGroupInfo&, const ProcessGroupInfo&) = default;
};

// A tensor constant of the graph (a get_attr target's value: a tensor constant or a
// non-persistent buffer): its meta and its bytes, contiguous, little-endian.
struct ConstantInfo {
  std::string name;  // the get_attr target, e.g. "_tensor_constant0"
  TensorMeta meta;
  std::string data;  // meta.bytes() bytes
  friend bool operator==(const ConstantInfo&, const ConstantInfo&) = default;
};

struct OutputSpec {
  OutputKind kind = OutputKind::Other;
  std::string fqn;  // gradients: the parameter's FQN; buffer mutations: the buffer's
  friend bool operator==(const OutputSpec&, const OutputSpec&) = default;
};

// What a graph's nodes were read from, for Graph::location. The loader (ir/loader.h) fills it.
enum class SourceKind : uint8_t {
  None,  // built in memory
  Text,  // `lines[id - first]` is node id's line of `file`
  Json,  // node id is element id - first + base of the document's "nodes"
  Fx,    // the torch.fx node of the same name
};
struct NodeSources {
  SourceKind kind = SourceKind::None;
  std::string file;
  uint32_t first = 0;  // the first node id read
  uint32_t count = 0;  // how many ids from `first` were read
  uint32_t base = 0;   // JSON: the element of "nodes" node `first` was
  std::vector<uint32_t> lines;
};

class Graph {
 public:
  Graph();
  ~Graph();
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  // ---- header
  std::vector<ProcessGroupInfo>& processGroups() { return process_groups_; }
  const std::vector<ProcessGroupInfo>& processGroups() const { return process_groups_; }
  const ProcessGroupInfo* findProcessGroup(std::string_view name) const;
  // Tensor constants by get_attr target, in header order.
  std::vector<ConstantInfo>& constants() { return constants_; }
  const std::vector<ConstantInfo>& constants() const { return constants_; }
  const ConstantInfo* findConstant(std::string_view name) const;
  // False when every node name is a Python identifier (NameArena::nonIdentifiers is zero);
  // true when some name ever given in this graph, or in the graph it was copied from, is not.
  bool mayHaveNonIdentifierNames() const { return names_.nonIdentifiers() != 0; }
  std::vector<OutputSpec>& outputSpecs() { return output_specs_; }
  const std::vector<OutputSpec>& outputSpecs() const { return output_specs_; }
  // Graph-level meta other than the above, as canonical compact JSON (or empty).
  std::string& extraJson() { return extra_json_; }
  const std::string& extraJson() const { return extra_json_; }

  // ---- creating nodes. `before` == nullptr appends at the end. An empty or taken name is made
  // unique from `name` (or from the target's op name). Operands must already be in this graph.
  Node* create(OpKind op, Symbol target, std::vector<Arg> args, Kwargs kwargs = {},
               std::string_view name = "", Node* before = nullptr);
  Node* createCall(std::string_view target, std::vector<Arg> args, Kwargs kwargs = {},
                   Node* before = nullptr, std::string_view name = "") {
    return create(OpKind::CallFunction, Symbol::intern(target), std::move(args), std::move(kwargs),
                  name, before);
  }
  // Copies `src` (op, target, args with node references mapped through `remap`, kwargs, val and
  // meta) before `before`. The name is derived from `name` (default: src's name).
  Node* cloneBefore(const Node* src, Node* before, const std::function<Node*(Node*)>& remap,
                    std::string_view name = "");

  // ---- editing
  void setArgs(Node* n, std::vector<Arg> args, Kwargs kwargs);
  void setArgs(Node* n, std::vector<Arg> args) { setArgs(n, std::move(args), Kwargs(n->kwargs_)); }
  void replaceInput(Node* user, uint32_t operand, Node* value);
  // Points every use of `from` at `to`; with a filter, only the uses it accepts.
  void replaceAllUsesWith(Node* from, Node* to);
  void replaceUsesWith(Node* from, Node* to, const std::function<bool(const Use&)>& accept);
  void moveBefore(Node* n, Node* before);  // before == nullptr moves to the end
  void moveAfter(Node* n, Node* after);
  // Moves `nodes` to just before `anchor`, keeping their order. Moving k nodes one by one in
  // front of one anchor halves its gap k times, and each gap that runs out costs a respacing;
  // this bisection order halves it about log2(k) times, so passes that move dozens of nodes per
  // step (bucket, schedule) stay O(N log N) on large graphs.
  void placeBefore(const std::vector<Node*>& nodes, Node* anchor);
  // n must have no uses; its own operands lose a use. O(operands of n).
  void erase(Node* n);
  // Erases every node of `dead` at once (any order, duplicates ignored), in O(their operands).
  // Every use of a node in `dead` must come from a node in `dead`; otherwise it throws and
  // changes nothing.
  void eraseAll(const std::vector<Node*>& dead);
  void rename(Node* n, std::string_view name);  // throws if taken

  // ---- whole-graph copies
  // An exact copy: the same node ids (dead ones included), names, origins, positions, use-list
  // order, name-suffix counters and header, so a pass can try a rewrite on the graph itself and
  // go back (takeContents) with the graph indistinguishable from before, ids and all (the
  // Python bridge keys its edits by id). The copy keeps no change journal. cloneGraph
  // (ir/clone.h) is the other kind: a compacted copy with fresh ids whose origins name the
  // source nodes.
  std::unique_ptr<Graph> copy() const;
  // Replaces this graph's nodes and header by `from`'s (left empty). Pointers to this graph's
  // old nodes dangle once `from` is gone. Bumps generation() past both graphs' counts; with the
  // journal on, every live node counts as touched.
  void takeContents(Graph&& from);

  // ---- undo (Note [Undo]). One recording at a time; each ends in commitUndo or rollback.
  void beginUndo();
  void commitUndo();  // keeps the edits and stops recording
  void rollback();    // undoes every edit since beginUndo, newest first, and stops recording
  bool recordingUndo() const { return undo_ != nullptr; }

  // ---- change journal, for verifying only what a pass touched (the pass manager turns it on).
  // While on, every node whose list links, operands, uses or name change is recorded: created,
  // moved, renamed and rewired nodes, their list neighbours, and the producers whose use lists
  // change. Not recorded: val, meta and header edits (whole-graph checks cover those).
  void trackChanges(bool on) {
    tracking_ = on;
    if (!on) takeTouched();
  }
  // The live recorded nodes in id order (arena order); clears the journal.
  std::vector<const Node*> takeTouched();
  // How many nodes the journal holds (erased ones included), and clearing it without reading
  // them: for a caller that checks the whole graph instead.
  size_t touchedCount() const { return touched_.size(); }
  void dropTouched();
  // Counts structural edits (whatever the journal would record), journal on or off: a result
  // computed from the graph (passes/analysis_manager.h) is known stale when this has moved.
  uint64_t generation() const { return generation_; }
  // Names the graph's structure: every structural edit gives it a value never seen before, and a
  // rollback gives back the value it had at beginUndo (the structure is that one again). Equal
  // revisions, same structure: what the pass manager checks a pass reporting "unchanged" by.
  // generation() never goes back, since results computed during the recording are stale.
  uint64_t revision() const { return revision_; }

  // A hint that about `n` nodes are coming (readers call it): sizes the name index once instead
  // of rehashing it as it grows.
  void reserve(size_t n) { by_name_.reserve(n); }

  // ---- queries
  Node* first() const { return head_; }
  Node* last() const { return tail_; }
  Node* outputNode() const { return tail_ && tail_->op_ == OpKind::Output ? tail_ : nullptr; }
  // Where `n` was read from (docs/architecture.md, "Errors"): its file and line (text format),
  // the JSON pointer of its element of "nodes" (JSON), the torch.fx node (the Python bridge);
  // for a node a pass copied from one that was read (cloneBefore), that node's place. Always
  // names `n`; a node built in memory has no other place.
  SourceLocation location(const Node* n) const;
  Node* findNode(std::string_view name) const;
  Node* nodeById(uint32_t id) const { return id < nodes_.size() ? &nodes_[id] : nullptr; }
  size_t size() const { return live_; }
  uint32_t maxId() const { return static_cast<uint32_t>(nodes_.size()); }
  // The live nodes in program order (a snapshot: safe to edit the graph while walking it).
  std::vector<Node*> nodes() const;
  // The live placeholders, and the live collectives, in program order. The graph lists every
  // node of the two kinds it creates, so each costs O(K log K) for the K such nodes ever made,
  // where a walk of the list reads every node: a graph's collectives are a tenth of its nodes
  // or less, its placeholders fewer.
  std::vector<Node*> placeholders() const;
  std::vector<Node*> collectives() const;
  std::string uniqueName(std::string_view hint) const;

  // Iteration without a snapshot: for (Node* n = g.first(); n; n = n->next()).
  template <typename F>
  void forEach(F&& f) const {
    for (Node* n = head_; n; n = n->next())
      f(n);
  }

 private:
  friend class Node;         // reads input_fqns_
  friend class GraphLoader;  // builds nodes with late name claims and records their places
  // The loader's create(): `name` is not claimed in the index yet, so findNode() does not see the
  // node and the name may be taken. The loader claims it with claimName() a few nodes later,
  // before anything else reads the graph; meanwhile the index slot's cache miss overlaps with
  // reading those nodes (bench/README.md, "Figures behind the code"). Not while recording undo.
  Node* createUnclaimed(OpKind op, Symbol target, std::vector<Arg> args, Kwargs kwargs,
                        std::string_view name);
  // Claims `n`'s name, hashed to `name_hash` (nameHash()): false, leaving `n` out of the index,
  // when another node has it.
  bool claimName(Node* n, uint64_t name_hash) {
    return by_name_.insertOrFind(n, name_hash) == nullptr;
  }
  static uint64_t nameHash(std::string_view name) { return NameIndex<Node>::hashOf(name); }
  // A hint that a node named `name` is about to be created (NameIndex::prefetch).
  void prefetchName(std::string_view name) const { by_name_.prefetch(name); }
  void prefetchNameHash(uint64_t name_hash) const { by_name_.prefetchHash(name_hash); }
  // `record`: add an entry to the undo log while recording (callers that record the step in an
  // entry of their own pass false).
  void link(Node* n, Node* before, bool record = true);
  void unlink(Node* n, bool record = true);
  void renumber();
  void respace(Node* around);
  // Collects the node references of n's args/kwargs into slot_refs_ and checks each is a node
  // of this graph (throws naming n otherwise, before anything changes).
  void collectRefs(Node* n);
  // Gives n one slot per reference in slot_refs_ and appends each to its producer's use list.
  void buildSlots(Node* n, bool record_uses = true);
  void dropUses(Node* n);
  Operand* allocSlots(uint32_t count);
  static void appendUse(Node* producer, Operand* s);
  static void unlinkUse(Operand* s, bool keep_links = false);
  // appendUse / unlinkUse / setting a slot's reference, recorded for undo while recording.
  void addUse(Node* producer, Operand* s);
  void removeUse(Operand* s);
  void setRef(Operand& s, Node* value);
  // erase's two steps (Note [Undo of an erase]): n's operands out of their use lists, then n
  // unlinked, out of the name index, dead, its args and kwargs dropped (kept for undo).
  void detachUses(Node* n);
  // create()'s steps before and after claiming the name.
  Node& makeNode(OpKind op, Symbol target, std::vector<Arg>&& args, Kwargs&& kwargs,
                 std::string_view name);
  void addNode(Node& n, Node* before);
  void retire(Node* n);
  static void dropTrees(Node* n);  // an erased node's args and kwargs, freed
  struct UndoLog;
  void undoOne(UndoLog& log);
  void touch(Node* n) {
    revision_ = ++generation_;
    if (!tracking_ || n == nullptr) return;
    if (touched_mark_.size() <= n->id_) touched_mark_.resize(nodes_.size(), false);
    if (touched_mark_[n->id_]) return;
    touched_mark_[n->id_] = true;
    touched_.push_back(n->id_);
  }

  bool tracking_ = false;
  uint64_t generation_ = 0;
  uint64_t revision_ = 0;
  std::unique_ptr<UndoLog> undo_;  // non-null while recording (Note [Undo])
  std::vector<uint32_t> touched_;  // ids, in first-touch order
  std::vector<bool> touched_mark_;
  mutable StableVector<Node> nodes_;  // indexed by id; nodes never move
  // Ids of every placeholder and every collective created (placeholders() and collectives()
  // read them): erased ones stay until the Graph dies, and an id a rollback freed may be listed
  // again by the node that reuses it.
  std::vector<uint32_t> placeholder_ids_, collective_ids_;
  // The placeholders' FQNs (Node::input_fqn_ indexes it; entry 0 is none). An entry is never
  // rewritten: a copied node shares its source's entry, and setting an FQN appends a new one.
  std::vector<CompactString> input_fqns_ = std::vector<CompactString>(1);
  std::vector<Node*> liveInOrder(const std::vector<uint32_t>& ids, bool (*is)(const Node&)) const;
  // Operand slot arena: slots are carved from big blocks, freed with the Graph.
  std::vector<std::unique_ptr<Operand[]>> slot_blocks_;
  Operand* slot_next_ = nullptr;
  size_t slot_left_ = 0;
  std::vector<Node**> slot_refs_;  // scratch for collectRefs
  NameIndex<Node> by_name_;
  NameArena names_;  // the nodes' names (Note [Name arena])
  // Looked up by string_view: naming a node whose name is taken builds no key string.
  struct SuffixHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>()(s); }
  };
  using SuffixMap = std::unordered_map<std::string, uint64_t, SuffixHash, std::equal_to<>>;
  mutable SuffixMap next_suffix_;
  Node* head_ = nullptr;
  Node* tail_ = nullptr;
  size_t live_ = 0;
  std::vector<ProcessGroupInfo> process_groups_;
  std::vector<OutputSpec> output_specs_;
  std::vector<ConstantInfo> constants_;
  std::string extra_json_;
  NodeSources sources_;
};

inline std::string_view Node::inputFqn() const {
  return input_fqn_ ? graph_->input_fqns_[input_fqn_].view() : std::string_view();
}

inline void Node::setInputInfo(InputKind k, std::string_view fqn) {
  input_kind_ = k;
  if (fqn.empty()) {
    input_fqn_ = 0;
    return;
  }
  input_fqn_ = static_cast<uint32_t>(graph_->input_fqns_.size());
  graph_->input_fqns_.emplace_back(fqn);
}

}  // namespace jfx
