#include "ir/graph.h"

#include <sys/mman.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <limits>
#include <new>
#include <stdexcept>
#include <type_traits>
#include <unordered_set>

#include "ir/error.h"

namespace jfx {
namespace {

constexpr uint64_t kMaxGap = uint64_t{1} << 32;

const OpInfo kPlaceholderInfo{"placeholder",
                              OpCategory::Placeholder,
                              AliasKind::None,
                              CollectiveKind::None,
                              false,
                              false,
                              true,
                              false,
                              FlopFormula::Zero,
                              0,
                              -1,
                              -1,
                              -1,
                              -1};
const OpInfo kOutputInfo{"output",
                         OpCategory::Output,
                         AliasKind::None,
                         CollectiveKind::None,
                         false,
                         false,
                         true,
                         false,
                         FlopFormula::Zero,
                         1,
                         1,
                         -1,
                         -1,
                         -1};
const OpInfo kGetAttrInfo{"get_attr",
                          OpCategory::GetAttr,
                          AliasKind::None,
                          CollectiveKind::None,
                          false,
                          false,
                          false,
                          false,
                          FlopFormula::Zero,
                          0,
                          -1,
                          -1,
                          -1,
                          -1};

// "aten.mm.default" -> "mm"; "operator.getitem" -> "getitem";
// "_c10d_functional.wait_tensor.default"
// -> "wait_tensor". FX names nodes the same way.
std::string nameFromTarget(std::string_view target) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  for (size_t i = 0; i <= target.size(); ++i) {
    if (i == target.size() || target[i] == '.') {
      parts.push_back(target.substr(start, i - start));
      start = i + 1;
    }
  }
  std::string_view base = target;
  if (parts.size() >= 3)
    base = parts[1];
  else if (parts.size() == 2)
    base = parts[1];
  std::string s(base);
  if (s.empty()) s = "node";
  for (char& c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) c = '_';
  return s;
}

// Slots are carved from blocks of this many; a node with more than a quarter of one gets a
// block of its own.
constexpr size_t kSlotBlock = 4096;

}  // namespace

const OpInfo* infoFor(OpKind op, Symbol target) {
  switch (op) {
    case OpKind::Placeholder:
      return &kPlaceholderInfo;
    case OpKind::Output:
      return &kOutputInfo;
    case OpKind::GetAttr:
      return &kGetAttrInfo;
    case OpKind::CallFunction:
      return &opInfo(target);
  }
  return &opInfo(target);
}

std::string_view opKindName(OpKind k) {
  switch (k) {
    case OpKind::Placeholder:
      return "placeholder";
    case OpKind::CallFunction:
      return "call_function";
    case OpKind::GetAttr:
      return "get_attr";
    case OpKind::Output:
      return "output";
  }
  return "call_function";
}
std::optional<OpKind> opKindFromName(std::string_view s) {
  if (s == "placeholder") return OpKind::Placeholder;
  if (s == "call_function") return OpKind::CallFunction;
  if (s == "get_attr") return OpKind::GetAttr;
  if (s == "output") return OpKind::Output;
  return std::nullopt;
}
std::string_view phaseName(Phase p) {
  switch (p) {
    case Phase::Unknown:
      return "unknown";
    case Phase::Forward:
      return "forward";
    case Phase::Loss:
      return "loss";
    case Phase::Backward:
      return "backward";
  }
  return "unknown";
}
std::optional<Phase> phaseFromName(std::string_view s) {
  if (s == "forward") return Phase::Forward;
  if (s == "loss") return Phase::Loss;
  if (s == "backward") return Phase::Backward;
  if (s == "unknown") return Phase::Unknown;
  return std::nullopt;
}
std::string_view recomputeName(Recompute r) {
  switch (r) {
    case Recompute::Unset:
      return "";
    case Recompute::MustSave:
      return "MUST_SAVE";
    case Recompute::PreferSave:
      return "PREFER_SAVE";
    case Recompute::MustRecompute:
      return "MUST_RECOMPUTE";
    case Recompute::PreferRecompute:
      return "PREFER_RECOMPUTE";
    case Recompute::MustCpuOffload:
      return "MUST_CPU_OFFLOAD";
    case Recompute::PreferCpuOffload:
      return "PREFER_CPU_OFFLOAD";
  }
  return "";
}
std::optional<Recompute> recomputeFromName(std::string_view s) {
  if (s == "MUST_SAVE") return Recompute::MustSave;
  if (s == "PREFER_SAVE") return Recompute::PreferSave;
  if (s == "MUST_RECOMPUTE") return Recompute::MustRecompute;
  if (s == "PREFER_RECOMPUTE") return Recompute::PreferRecompute;
  if (s == "MUST_CPU_OFFLOAD") return Recompute::MustCpuOffload;
  if (s == "PREFER_CPU_OFFLOAD") return Recompute::PreferCpuOffload;
  return std::nullopt;
}
std::string_view inputKindName(InputKind k) {
  switch (k) {
    case InputKind::None:
      return "none";
    case InputKind::Parameter:
      return "parameter";
    case InputKind::Buffer:
      return "buffer";
    case InputKind::UserInput:
      return "user_input";
    case InputKind::Mesh:
      return "mesh";
    case InputKind::Opaque:
      return "opaque";
  }
  return "none";
}
std::optional<InputKind> inputKindFromName(std::string_view s) {
  if (s == "parameter") return InputKind::Parameter;
  if (s == "buffer") return InputKind::Buffer;
  if (s == "user_input") return InputKind::UserInput;
  if (s == "none") return InputKind::None;
  if (s == "mesh") return InputKind::Mesh;
  if (s == "opaque") return InputKind::Opaque;
  return std::nullopt;
}
std::string_view outputKindName(OutputKind k) {
  switch (k) {
    case OutputKind::Other:
      return "other";
    case OutputKind::Loss:
      return "loss";
    case OutputKind::Gradient:
      return "gradient";
    case OutputKind::BufferMutation:
      return "buffer_mutation";
    case OutputKind::Mesh:
      return "mesh";
    case OutputKind::Opaque:
      return "opaque";
  }
  return "other";
}
std::optional<OutputKind> outputKindFromName(std::string_view s) {
  if (s == "other") return OutputKind::Other;
  if (s == "loss") return OutputKind::Loss;
  if (s == "gradient") return OutputKind::Gradient;
  if (s == "buffer_mutation") return OutputKind::BufferMutation;
  if (s == "mesh") return OutputKind::Mesh;
  if (s == "opaque") return OutputKind::Opaque;
  return std::nullopt;
}

const Arg* Node::kwarg(std::string_view key) const {
  for (const auto& kv : kwargs_)
    if (kv.first.str() == key) return &kv.second;
  return nullptr;
}

bool Node::isRandom() const {
  if (op_ != OpKind::CallFunction) return false;
  const OpInfo& info = opInfo(target_);
  if (!info.random) return false;
  if (info.dropout_p_arg < 0) return true;
  const size_t i = static_cast<size_t>(info.dropout_p_arg);
  const Arg* p = i < args_.size() ? &args_[i] : kwarg("dropout_p");
  if (p == nullptr) return false;  // the schema's default, 0
  switch (p->kind()) {
    case Arg::Kind::Float:
      return p->toFloat() != 0.0;
    case Arg::Kind::Int:
      return p->toInt() != 0;
    case Arg::Kind::Bool:
      return p->toBool();
    default:
      return true;  // a computed or unreadable probability: assume it draws
  }
}

bool Node::isPure() const {
  if (op_ != OpKind::CallFunction) return false;
  const OpInfo& i = opInfo(target_);
  return i.category != OpCategory::Unknown && !i.side_effect && !i.mutates && !isRandom() &&
         i.alias != AliasKind::InPlace && i.alias != AliasKind::Out;
}

std::vector<Node*> Node::users() const {
  std::vector<Node*> out;
  if (num_uses_ <= 16) {  // the common case: a short list, searched without a set
    for (const Operand* s = use_head_; s; s = s->next_use)
      if (std::find(out.begin(), out.end(), s->user) == out.end()) out.push_back(s->user);
    return out;
  }
  std::unordered_set<const Node*> seen;
  seen.reserve(num_uses_);
  for (const Operand* s = use_head_; s; s = s->next_use)
    if (seen.insert(s->user).second) out.push_back(s->user);
  return out;
}

const ConstantInfo* Graph::findConstant(std::string_view name) const {
  for (const auto& c : constants_)
    if (c.name == name) return &c;
  return nullptr;
}

const ProcessGroupInfo* Graph::findProcessGroup(std::string_view name) const {
  for (const auto& pg : process_groups_)
    if (pg.name == name) return &pg;
  return nullptr;
}

std::string Graph::uniqueName(std::string_view hint) const {
  if (!by_name_.contains(hint)) return std::string(hint);
  auto it = next_suffix_.find(hint);
  if (it == next_suffix_.end()) it = next_suffix_.emplace(std::string(hint), 0).first;
  uint64_t& k = it->second;
  std::string candidate;
  candidate.reserve(hint.size() + 24);
  for (;;) {
    char digits[24];
    const auto r = std::to_chars(digits, digits + sizeof digits, ++k);
    candidate.assign(hint);
    candidate += '_';
    candidate.append(digits, static_cast<size_t>(r.ptr - digits));
    if (!by_name_.contains(candidate)) return candidate;
  }
}

Operand* Graph::allocSlots(uint32_t count) {
  if (count == 0) return nullptr;
  if (count > kSlotBlock / 4) {  // big: a block of its own, so the shared block is not wasted
    slot_blocks_.push_back(std::make_unique<Operand[]>(count));
    return slot_blocks_.back().get();
  }
  if (count > slot_left_) {
    slot_blocks_.push_back(std::make_unique<Operand[]>(kSlotBlock));
    slot_next_ = slot_blocks_.back().get();
    slot_left_ = kSlotBlock;
  }
  Operand* out = slot_next_;
  slot_next_ += count;
  slot_left_ -= count;
  return out;
}

// What undoes one primitive edit (Note [Undo]). Payloads that do not fit the entry (old names,
// old argument trees, old slot arrays) live in the log's side vectors, at `payload`.
struct Graph::UndoLog {
  enum class Kind : uint8_t {
    UseAppended,   // slot appended to its value's use list: unlink it
    UseUnlinked,   // slot unlinked from `node`'s use list between prev and next: put it back
    RefSet,        // *ref was `node`: set it back
    OpsDropped,    // `node` had `count` operands before dropUses
    NodeLinked,    // unlink `node`
    NodeUnlinked,  // link `node` again before `before`
    NodeMoved,     // `node` was unlinked from before `before` and linked elsewhere: move it back
    NodeCreated,   // `node` is the store's last, linked, named and using its operands: unlink
                   // it and its uses, drop its name and remove it (one entry for what a creation
                   // does, not one per step: bucket creates and moves a large part of a graph's
                   // nodes)
    Renamed,       // `node` was called names[payload]
    Erased,        // `node` was erased (Note [Undo of an erase]): its `count` operands and its
                   // place before `before` (its trees stay in it until the log ends)
    ArgsReplaced,  // `node`'s args and kwargs were trees[payload]
    SlotsReplaced  // `node`'s slot array was slot_arrays[payload]
  };
  // 32 bytes: a long rewrite records several entries per node it touches.
  struct Entry {
    Kind kind = Kind::NodeLinked;
    uint32_t n = 0;  // OpsDropped, Erased: the operand count; Renamed, *Replaced: payload index
    union {
      Node* node = nullptr;  // every kind but the use entries
      Operand* slot;         // UseAppended, UseUnlinked
    };
    union {
      Node* before = nullptr;  // NodeUnlinked, NodeMoved
      Operand* prev;           // UseUnlinked
      Node** ref;              // RefSet (the old value is `node`)
    };
    Operand* next = nullptr;  // UseUnlinked
  };
  static_assert(sizeof(Entry) == 32);
  struct SlotArray {
    Operand* ops;
    uint32_t cap;
    std::vector<Operand> contents;
  };
  // Entries in chunks of 2 MiB mapped from the system and given back when the log ends (64 KiB
  // chunks from the heap stayed resident and raised bucket's peak). A vector grown by doubling
  // copied the log at each growth and held the old and the new buffer at once: one and a half times
  // the log at its last growth, and twice its pages in faults (bench/README.md, "Figures behind the
  // code").
  class Entries {
   public:
    Entries() = default;
    Entries(const Entries&) = delete;
    Entries& operator=(const Entries&) = delete;
    ~Entries() {
      for (Entry* c : chunks_)
        ::munmap(c, kChunkBytes);
    }
    bool empty() const { return chunks_.empty(); }
    Entry& emplace_back() {
      if (used_ == kPerChunk || chunks_.empty()) {
        void* p = ::mmap(nullptr, kChunkBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                         -1, 0);
        if (p == MAP_FAILED) throw std::bad_alloc();
        chunks_.push_back(static_cast<Entry*>(p));
        used_ = 0;
      }
      return *new (chunks_.back() + used_++) Entry();
    }
    Entry& back() { return chunks_.back()[used_ - 1]; }
    template <typename F>
    void forEach(F&& f) {
      for (size_t c = 0; c < chunks_.size(); ++c)
        for (size_t i = 0, n = c + 1 == chunks_.size() ? used_ : kPerChunk; i < n; ++i)
          f(chunks_[c][i]);
    }
    void pop_back() {
      if (--used_ == 0) {
        ::munmap(chunks_.back(), kChunkBytes);
        chunks_.pop_back();
        used_ = chunks_.empty() ? 0 : kPerChunk;
      }
    }

   private:
    static constexpr size_t kChunkBytes = size_t{2} << 20;
    static constexpr size_t kPerChunk = kChunkBytes / sizeof(Entry);
    std::vector<Entry*> chunks_;
    size_t used_ = 0;  // entries in the last chunk
  };
  static_assert(std::is_trivially_destructible_v<Entry>);
  Entries entries;
  std::vector<const char*> names;  // in the graph's NameArena
  std::vector<std::pair<std::vector<Arg>, Kwargs>> trees;
  std::vector<SlotArray> slot_arrays;
  // Copied at beginUndo: small, and edited in place by uniqueName and passes.
  SuffixMap next_suffix;
  std::vector<ProcessGroupInfo> process_groups;
  std::vector<OutputSpec> output_specs;
  std::vector<ConstantInfo> constants;
  std::string extra_json;
  uint64_t revision = 0;
  // The slot allocator's place: every slot array allocated after it belongs to a node created
  // meanwhile or replaces one that rollback restores, so rollback gives them back.
  size_t slot_blocks = 0;
  Operand* slot_next = nullptr;
  size_t slot_left = 0;

  Entry& add(Kind kind, Node* node, uint32_t n = 0) {
    Entry& e = entries.emplace_back();
    e.kind = kind;
    e.node = node;
    e.n = n;
    return e;
  }
  void addUse(Kind kind, Operand* slot, Operand* prev = nullptr, Operand* next = nullptr) {
    Entry& e = entries.emplace_back();
    e.kind = kind;
    e.slot = slot;
    e.prev = prev;
    e.next = next;
  }

  // The inverses of UseUnlinked, NodeCreated and Erased, too long to read inline in
  // Graph::undoOne. As members of a class nested in Graph they reach its private members, and its
  // nodes' (Node befriends Graph).
  static void relinkUse(Graph& g, const Entry& e);
  static void uncreate(Graph& g, Node* n);
  void unerase(Graph& g, const Entry& e);
};

Graph::Graph() = default;
Graph::~Graph() = default;

void Graph::beginUndo() {
  if (undo_) throw std::logic_error("Graph::beginUndo: already recording");
  undo_ = std::make_unique<UndoLog>();
  undo_->next_suffix = next_suffix_;
  undo_->process_groups = process_groups_;
  undo_->output_specs = output_specs_;
  undo_->constants = constants_;
  undo_->extra_json = extra_json_;
  undo_->revision = revision_;
  undo_->slot_blocks = slot_blocks_.size();
  undo_->slot_next = slot_next_;
  undo_->slot_left = slot_left_;
}

void Graph::commitUndo() {
  // The erases stand: their nodes' trees, kept for a rollback (Note [Undo of an erase]), go now.
  undo_->entries.forEach([](const UndoLog::Entry& e) {
    if (e.kind == UndoLog::Kind::Erased) dropTrees(e.node);
  });
  undo_.reset();
}

void Graph::rollback() {
  if (!undo_) throw std::logic_error("Graph::rollback: not recording");
  std::unique_ptr<UndoLog> log = std::move(undo_);  // replaying records nothing
  while (!log->entries.empty()) {
    undoOne(*log);
    log->entries.pop_back();
  }
  next_suffix_ = std::move(log->next_suffix);
  process_groups_ = std::move(log->process_groups);
  output_specs_ = std::move(log->output_specs);
  constants_ = std::move(log->constants);
  extra_json_ = std::move(log->extra_json);
  revision_ = log->revision;
  slot_blocks_.resize(log->slot_blocks);
  slot_next_ = log->slot_next;
  slot_left_ = log->slot_left;
}

void Graph::undoOne(UndoLog& log) {
  using Kind = UndoLog::Kind;
  const UndoLog::Entry& e = log.entries.back();
  Node* n = e.node;
  switch (e.kind) {
    case Kind::UseAppended:
      touch(e.slot->value);
      unlinkUse(e.slot);
      break;
    case Kind::UseUnlinked:
      UndoLog::relinkUse(*this, e);
      break;
    case Kind::RefSet:
      *e.ref = n;
      break;
    case Kind::OpsDropped:
      n->num_ops_ = e.n;
      break;
    case Kind::NodeLinked:
      unlink(n);
      break;
    case Kind::NodeUnlinked:
      link(n, e.before);
      break;
    case Kind::NodeMoved:
      unlink(n);
      link(n, e.before);
      break;
    case Kind::NodeCreated:
      UndoLog::uncreate(*this, n);
      break;
    case Kind::Renamed:
      by_name_.erase(n->name());
      n->name_ = log.names[e.n];
      by_name_.insert(n);
      touch(n);
      break;
    case Kind::Erased:
      log.unerase(*this, e);
      break;
    case Kind::ArgsReplaced:
      // Moved, not copied: the old slots point into these trees' buffers.
      n->args_ = std::move(log.trees[e.n].first);
      n->kwargs_ = std::move(log.trees[e.n].second);
      break;
    case Kind::SlotsReplaced: {
      UndoLog::SlotArray& a = log.slot_arrays[e.n];
      n->ops_ = a.ops;
      n->ops_cap_ = a.cap;
      std::copy(a.contents.begin(), a.contents.end(), a.ops);
      break;
    }
  }
}

void Graph::UndoLog::relinkUse(Graph& g, const Entry& e) {
  // Everything recorded after the unlink is undone, so prev and next are neighbours again,
  // and the slot's reference names its old value again (a RefSet after the unlink is undone;
  // an erased node's or a replaced argument tree is back, in the same buffer).
  Operand* s = e.slot;
  Node* n = *s->ref;
  s->value = n;
  s->prev_use = e.prev;
  s->next_use = e.next;
  (e.prev ? e.prev->next_use : n->use_head_) = s;
  (e.next ? e.next->prev_use : n->use_tail_) = s;
  ++n->num_uses_;
  g.touch(n);
}

void Graph::UndoLog::uncreate(Graph& g, Node* n) {
  // Everything recorded after the creation is undone, so the node is as it was made: linked
  // where it was put, under the name it was given.
  if (n->id_ + 1 != g.nodes_.size())
    throw std::logic_error("Graph::rollback: a created node is not the store's last");
  for (uint32_t k = n->num_ops_; k-- > 0;) {
    g.touch(n->ops_[k].value);
    unlinkUse(&n->ops_[k]);
  }
  g.unlink(n);
  g.by_name_.erase(n->name());
  --g.live_;
  g.nodes_.pop_back();
}

void Graph::UndoLog::unerase(Graph& g, const Entry& e) {
  // Note [Undo of an erase]: everything recorded after it is undone, so the node's list
  // neighbour and each slot's use-list neighbours are where they were.
  Node* n = e.node;
  g.by_name_.insert(n);
  n->dead_ = false;
  ++g.live_;
  g.link(n, e.before);
  n->num_ops_ = e.n;
  for (uint32_t k = 0; k < e.n; ++k) {
    Operand* s = &n->ops_[k];
    Node* p = s->value;
    (s->prev_use ? s->prev_use->next_use : p->use_head_) = s;
    (s->next_use ? s->next_use->prev_use : p->use_tail_) = s;
    ++p->num_uses_;
    g.touch(p);
  }
}

void Graph::addUse(Node* producer, Operand* s) {
  appendUse(producer, s);
  if (undo_) undo_->addUse(UndoLog::Kind::UseAppended, s);
}

void Graph::removeUse(Operand* s) {
  if (undo_) undo_->addUse(UndoLog::Kind::UseUnlinked, s, s->prev_use, s->next_use);
  unlinkUse(s);
}

void Graph::setRef(Operand& s, Node* value) {
  if (undo_) undo_->add(UndoLog::Kind::RefSet, *s.ref).ref = s.ref;
  *s.ref = value;
}

void Graph::appendUse(Node* producer, Operand* s) {
  s->value = producer;
  s->prev_use = producer->use_tail_;
  s->next_use = nullptr;
  if (producer->use_tail_)
    producer->use_tail_->next_use = s;
  else
    producer->use_head_ = s;
  producer->use_tail_ = s;
  ++producer->num_uses_;
}

void Graph::unlinkUse(Operand* s, bool keep_links) {
  Node* p = s->value;
  if (s->prev_use)
    s->prev_use->next_use = s->next_use;
  else
    p->use_head_ = s->next_use;
  if (s->next_use)
    s->next_use->prev_use = s->prev_use;
  else
    p->use_tail_ = s->prev_use;
  if (!keep_links) s->prev_use = s->next_use = nullptr;
  --p->num_uses_;
}

void Graph::collectRefs(Node* n) {
  slot_refs_.clear();
  auto collect = [&](Node*& ref) { slot_refs_.push_back(&ref); };
  for (auto& a : n->args_)
    a.forEachNode(collect);
  for (auto& kv : n->kwargs_)
    kv.second.forEachNode(collect);
  for (size_t k = 0; k < slot_refs_.size(); ++k) {
    Node* p = *slot_refs_[k];
    if (p == nullptr || p->graph_ != this)
      throw JfxError(SourceLocation::atNode(std::string(n->name())),
                     "operand " + std::to_string(k) + " is not a node of this graph");
  }
}

void Graph::buildSlots(Node* n, bool record_uses) {
  touch(n);
  const auto count = static_cast<uint32_t>(slot_refs_.size());
  if (undo_ && n->ops_cap_ > 0) {  // the old slots, for their user, index and reference
    undo_->add(UndoLog::Kind::SlotsReplaced, n, static_cast<uint32_t>(undo_->slot_arrays.size()));
    undo_->slot_arrays.push_back({n->ops_, n->ops_cap_, {n->ops_, n->ops_ + n->ops_cap_}});
  }
  if (count > n->ops_cap_) {  // the old array (if any) stays in the arena until the Graph dies
    n->ops_ = allocSlots(count);
    n->ops_cap_ = count;
  }
  n->num_ops_ = count;
  for (uint32_t k = 0; k < count; ++k) {
    Operand& s = n->ops_[k];
    s.user = n;
    s.ref = slot_refs_[k];
    if (record_uses)
      addUse(*s.ref, &s);
    else
      appendUse(*s.ref, &s);
    touch(s.value);
  }
}

void Graph::dropUses(Node* n) {
  for (uint32_t k = 0; k < n->num_ops_; ++k) {
    Operand& s = n->ops_[k];
    touch(s.value);
    removeUse(&s);
  }
  if (undo_) undo_->add(UndoLog::Kind::OpsDropped, n, n->num_ops_);
  n->num_ops_ = 0;
}

Node& Graph::makeNode(OpKind op, Symbol target, std::vector<Arg>&& args, Kwargs&& kwargs,
                      std::string_view name) {
  Node& n = nodes_.emplace_back(Node::Token{});
  n.graph_ = this;
  n.id_ = static_cast<uint32_t>(nodes_.size() - 1);
  n.op_ = op;
  n.target_ = target;
  n.name_ = names_.add(name);
  n.args_ = std::move(args);
  n.kwargs_ = std::move(kwargs);
  try {
    collectRefs(&n);
  } catch (...) {
    nodes_.pop_back();  // a bad operand leaves the graph as it was
    throw;
  }
  return n;
}

void Graph::addNode(Node& n, Node* before) {
  if (undo_) undo_->add(UndoLog::Kind::NodeCreated, &n);  // its name, uses and link too
  buildSlots(&n, /*record_uses=*/false);
  link(&n, before, /*record=*/false);
  ++live_;
  if (n.isCollective()) collective_ids_.push_back(n.id_);
  if (n.op_ == OpKind::Placeholder) placeholder_ids_.push_back(n.id_);
}

Node* Graph::create(OpKind op, Symbol target, std::vector<Arg> args, Kwargs kwargs,
                    std::string_view name, Node* before) {
  // The name's index slot is fetched first: the probe that claims the name comes after the
  // node is built, and on a large graph the slot is a cache miss (a pass's new nodes are not
  // prefetched the way a reader's are).
  std::string derived;
  if (name.empty()) name = derived = nameFromTarget(target.str());
  const uint64_t name_hash = nameHash(name);
  by_name_.prefetchHash(name_hash);
  Node& n = makeNode(op, target, std::move(args), std::move(kwargs), name);
  // The name is claimed with one probe of the index; a taken one gets a suffix (uniqueName).
  if (by_name_.insertOrFind(&n, name_hash)) {
    n.name_ = names_.add(uniqueName(n.name()));
    by_name_.insert(&n);
  }
  addNode(n, before);
  return &n;
}

Node* Graph::createUnclaimed(OpKind op, Symbol target, std::vector<Arg> args, Kwargs kwargs,
                             std::string_view name) {
  if (undo_) throw std::logic_error("Graph::createUnclaimed while recording undo");
  Node& n = makeNode(op, target, std::move(args), std::move(kwargs), name);
  addNode(n, nullptr);
  return &n;
}

Node* Graph::cloneBefore(const Node* src, Node* before, const std::function<Node*(Node*)>& remap,
                         std::string_view name) {
  std::vector<Arg> args = src->args_;
  Kwargs kwargs = src->kwargs_;
  auto map = [&](Node*& ref) {
    if (Node* m = remap(ref)) ref = m;
  };
  for (auto& a : args)
    a.forEachNode(map);
  for (auto& kv : kwargs)
    kv.second.forEachNode(map);
  Node* n = create(src->op_, src->target_, std::move(args), std::move(kwargs),
                   name.empty() ? src->name() : name, before);
  n->val_ = src->val_;
  n->meta_ = src->meta_;
  n->setInputInfo(src->input_kind_, src->inputFqn());  // src may be another graph's
  n->origin_ = src->id_;
  return n;
}

std::unique_ptr<Graph> Graph::copy() const {
  auto out = std::make_unique<Graph>();
  Graph& c = *out;
  c.process_groups_ = process_groups_;
  c.output_specs_ = output_specs_;
  c.constants_ = constants_;
  c.extra_json_ = extra_json_;
  c.sources_ = sources_;
  c.next_suffix_ = next_suffix_;
  c.generation_ = generation_;
  c.revision_ = revision_;
  c.live_ = live_;
  c.placeholder_ids_ = placeholder_ids_;
  c.collective_ids_ = collective_ids_;
  c.input_fqns_ = input_fqns_;
  // Same ids: node k of the copy is node k here, so every reference maps by id.
  for (const Node& n : nodes_)
    c.nodes_.push_back(n);
  auto map = [&](Node* p) -> Node* {
    if (p == nullptr) return nullptr;
    if (p->graph_ != this)
      throw JfxError(SourceLocation::atNode(std::string(p->name())),
                     "Graph::copy: node refers to a node of another graph");
    return &c.nodes_[p->id_];
  };
  auto remap = [&](Node*& p) { p = map(p); };
  for (Node& n : c.nodes_) {
    n.graph_ = &c;
    n.prev_ = map(n.prev_);
    n.next_ = map(n.next_);
    // An erase that this graph may still undo keeps the node's trees (Note [Undo of an erase]);
    // the copy cannot undo it, so its erased nodes have none, and no operands.
    if (n.dead_) dropTrees(&n);
    for (Arg& a : n.args_)
      a.forEachNode(remap);
    for (auto& kv : n.kwargs_)
      kv.second.forEachNode(remap);
    // Fresh slots in the copy's arena, pointing into the copy's Arg trees; linked below.
    c.slot_refs_.clear();
    for (Arg& a : n.args_)
      a.forEachNode([&](Node*& ref) { c.slot_refs_.push_back(&ref); });
    for (auto& kv : n.kwargs_)
      kv.second.forEachNode([&](Node*& ref) { c.slot_refs_.push_back(&ref); });
    const auto count = static_cast<uint32_t>(c.slot_refs_.size());
    n.ops_ = c.allocSlots(count);
    n.num_ops_ = n.ops_cap_ = count;
    for (uint32_t k = 0; k < count; ++k) {
      Operand& s = n.ops_[k];
      s = Operand{};
      s.value = *c.slot_refs_[k];
      s.user = &n;
      s.ref = c.slot_refs_[k];
    }
    n.use_head_ = n.use_tail_ = nullptr;
    n.num_uses_ = 0;
  }
  // Use lists in this graph's order.
  for (const Node& n : nodes_) {
    Node& cn = c.nodes_[n.id_];
    for (const Operand* s = n.use_head_; s; s = s->next_use)
      appendUse(&cn, &c.nodes_[s->user->id_].ops_[s->index()]);
  }
  c.head_ = map(head_);
  c.tail_ = map(tail_);
  c.by_name_ = by_name_.remapped<Node>([&](Node* p) { return map(p); });
  c.names_ = names_;  // the copied nodes' names: shared (Note [Name arena])
  return out;
}

void Graph::takeContents(Graph&& from) {
  if (undo_ || from.undo_) throw std::logic_error("Graph::takeContents: recording undo");
  const uint64_t generation = std::max(generation_, from.generation_) + 1;
  // The swap hands over the node chunks, so every node keeps its address.
  nodes_.swap(from.nodes_);
  std::swap(by_name_, from.by_name_);
  names_.swap(from.names_);
  std::swap(next_suffix_, from.next_suffix_);
  std::swap(head_, from.head_);
  std::swap(tail_, from.tail_);
  std::swap(live_, from.live_);
  std::swap(process_groups_, from.process_groups_);
  std::swap(output_specs_, from.output_specs_);
  std::swap(constants_, from.constants_);
  std::swap(extra_json_, from.extra_json_);
  std::swap(sources_, from.sources_);
  std::swap(placeholder_ids_, from.placeholder_ids_);
  std::swap(collective_ids_, from.collective_ids_);
  std::swap(input_fqns_, from.input_fqns_);
  // The nodes' operand slots live in the arena they came with.
  std::swap(slot_blocks_, from.slot_blocks_);
  std::swap(slot_next_, from.slot_next_);
  std::swap(slot_left_, from.slot_left_);
  for (Node& n : nodes_)
    n.graph_ = this;
  // `from` now holds what this graph held: drop it.
  from.nodes_.clear();
  from.by_name_ = {};
  from.next_suffix_.clear();
  from.head_ = from.tail_ = nullptr;
  from.live_ = 0;
  from.process_groups_.clear();
  from.output_specs_.clear();
  from.constants_.clear();
  from.extra_json_.clear();
  from.placeholder_ids_.clear();
  from.collective_ids_.clear();
  from.input_fqns_.resize(1);
  from.touched_.clear();
  from.touched_mark_.clear();
  generation_ = revision_ = generation;
  touched_.clear();
  touched_mark_.clear();
  if (tracking_)
    for (Node* n = head_; n; n = n->next())
      touch(n);
}

void Graph::setArgs(Node* n, std::vector<Arg> args, Kwargs kwargs) {
  // Check the new references before touching n, so a bad one changes nothing.
  auto swapKwargs = [&] {
    Kwargs old = n->kwargs_.take();
    n->kwargs_ = std::move(kwargs);
    kwargs = std::move(old);
  };
  std::swap(n->args_, args);
  swapKwargs();
  try {
    collectRefs(n);
  } catch (...) {
    std::swap(n->args_, args);
    swapKwargs();
    throw;
  }
  // The old trees (now in args/kwargs) still hold the old slots' references: drop those uses
  // first, then give the new references their slots.
  dropUses(n);
  buildSlots(n);
  if (undo_) {
    undo_->add(UndoLog::Kind::ArgsReplaced, n, static_cast<uint32_t>(undo_->trees.size()));
    undo_->trees.emplace_back(std::move(args), std::move(kwargs));
  }
}

void Graph::replaceInput(Node* user, uint32_t operand, Node* value) {
  if (operand >= user->num_ops_)
    throw std::out_of_range("replaceInput: node '" + std::string(user->name()) +
                            "' has no operand " + std::to_string(operand));
  Operand& s = user->ops_[operand];
  Node* old = s.value;
  if (old == value) return;
  removeUse(&s);
  setRef(s, value);
  addUse(value, &s);
  touch(user);
  touch(old);
  touch(value);
}

void Graph::replaceAllUsesWith(Node* from, Node* to) {
  replaceUsesWith(from, to, [](const Use&) { return true; });
}

void Graph::replaceUsesWith(Node* from, Node* to, const std::function<bool(const Use&)>& accept) {
  if (from == to) return;
  for (Operand* s = from->use_head_; s;) {
    Operand* next = s->next_use;
    if (accept(Use{s->user, s->index()})) {
      removeUse(s);
      setRef(*s, to);
      addUse(to, s);
      touch(s->user);
    }
    s = next;
  }
  touch(from);
  touch(to);
}

void Graph::link(Node* n, Node* before, bool record) {
  Node* prev = before ? before->prev_ : tail_;
  touch(n);
  touch(prev);
  touch(before);
  uint64_t lo = prev ? prev->pos_ : 0;
  if (before == nullptr) {
    if (lo > std::numeric_limits<uint64_t>::max() - kMaxGap) {
      renumber();
      lo = prev ? prev->pos_ : 0;
    }
    n->pos_ = lo + kMaxGap;
  } else {
    if (before->pos_ - lo < 2) {
      respace(before);
      lo = prev ? prev->pos_ : 0;
    }
    n->pos_ = lo + (before->pos_ - lo) / 2;
  }
  if (undo_ && record) undo_->add(UndoLog::Kind::NodeLinked, n);
  n->prev_ = prev;
  n->next_ = before;
  if (prev)
    prev->next_ = n;
  else
    head_ = n;
  if (before)
    before->prev_ = n;
  else
    tail_ = n;
}

void Graph::unlink(Node* n, bool record) {
  if (undo_ && record) undo_->add(UndoLog::Kind::NodeUnlinked, n).before = n->next_;
  touch(n->prev_);
  touch(n->next_);
  if (n->prev_)
    n->prev_->next_ = n->next_;
  else
    head_ = n->next_;
  if (n->next_)
    n->next_->prev_ = n->prev_;
  else
    tail_ = n->prev_;
  n->prev_ = n->next_ = nullptr;
}

void Graph::respace(Node* around) {
  // Order maintenance: widen a window around `around` (doubling its node count) until its
  // nodes can be spread with gaps of at least kMinGap, then spread them evenly. Repeated inserts
  // at one spot thus cost O(log N) amortized instead of a whole-graph renumber each time.
  constexpr uint64_t kMinGap = uint64_t{1} << 20;
  constexpr uint64_t kTop = std::numeric_limits<uint64_t>::max() - kMaxGap;
  Node* lo = around;
  Node* hi = around;
  uint64_t count = 1;
  for (uint64_t want = 2;; want *= 2) {
    while (count < want && (lo->prev_ || hi->next_)) {
      if (lo->prev_) {
        lo = lo->prev_;
        ++count;
      }
      if (count < want && hi->next_) {
        hi = hi->next_;
        ++count;
      }
    }
    uint64_t lo_pos = lo->prev_ ? lo->prev_->pos_ : 0;
    uint64_t hi_pos = hi->next_ ? hi->next_->pos_ : kTop;
    bool whole = !lo->prev_ && !hi->next_;
    if (whole) {
      renumber();
      return;
    }
    if (hi_pos > lo_pos && (hi_pos - lo_pos) / (count + 1) >= kMinGap) {
      uint64_t gap = (hi_pos - lo_pos) / (count + 1);
      uint64_t pos = lo_pos;
      for (Node* n = lo;; n = n->next_) {
        pos += gap;
        n->pos_ = pos;
        if (n == hi) break;
      }
      return;
    }
  }
}

void Graph::renumber() {
  // Spread live nodes evenly over the position space; leaves room at both ends.
  uint64_t gap = std::min<uint64_t>(kMaxGap, (uint64_t{1} << 62) / (live_ + 2));
  uint64_t pos = gap;
  for (Node* n = head_; n; n = n->next(), pos += gap)
    n->pos_ = pos;
}

void Graph::moveBefore(Node* n, Node* before) {
  if (n == before) return;
  if (undo_) undo_->add(UndoLog::Kind::NodeMoved, n).before = n->next_;  // one entry, not two
  unlink(n, /*record=*/false);
  link(n, before, /*record=*/false);
}

void Graph::moveAfter(Node* n, Node* after) {
  if (n == after) return;
  moveBefore(n, after->next_ == n ? n->next_ : after->next_);
}

void Graph::placeBefore(const std::vector<Node*>& nodes, Node* anchor) {
  // Bisection order: the middle node first, then each half into its own side of it.
  auto place = [&](auto& self, size_t lo, size_t hi, Node* right) -> void {
    if (lo >= hi) return;
    size_t mid = lo + (hi - lo) / 2;
    moveBefore(nodes[mid], right);
    self(self, lo, mid, nodes[mid]);
    self(self, mid + 1, hi, right);
  };
  place(place, 0, nodes.size(), anchor);
}

void Graph::erase(Node* n) {
  if (n->dead_) return;
  if (n->num_uses_ != 0)
    throw JfxError(
        SourceLocation::atNode(std::string(n->name())),
        "cannot erase a node that still has " + std::to_string(n->num_uses_) + " use(s)");
  detachUses(n);
  retire(n);
}

// Note [Undo of an erase]
// While recording, an erase is one entry instead of one per operand plus three (uses unlinked,
// operands dropped, node unlinked, buried): bucket erases many nodes per run. The erased node's
// slots keep their use-list neighbours (detachUses leaves them), its slot array stays its own,
// and the entry keeps its operand count and list neighbour; rollback replays newest first, so
// when it reaches the entry those neighbours are in place again and the slots go back between
// them. eraseAll detaches every doomed node before it retires any, so it retires them in the
// order it detached them: a rollback then puts back the uses of two doomed nodes that read the
// same producer in the reverse order of their unlinking. Its argument trees stay in it too (its
// slots point into them), until commitUndo drops them: a side vector of moved trees was one more
// table, of an entry per erased node, at bucket's peak.
void Graph::detachUses(Node* n) {
  for (uint32_t k = 0; k < n->num_ops_; ++k) {
    Operand& s = n->ops_[k];
    touch(s.value);
    unlinkUse(&s, /*keep_links=*/undo_ != nullptr);
  }
}

void Graph::retire(Node* n) {
  if (undo_) {
    UndoLog::Entry& e = undo_->add(UndoLog::Kind::Erased, n, n->num_ops_);
    e.before = n->next_;
  }
  n->num_ops_ = 0;
  unlink(n, /*record=*/false);
  by_name_.erase(n->name());
  n->dead_ = true;
  if (!undo_) dropTrees(n);
  --live_;
}

void Graph::dropTrees(Node* n) {
  std::vector<Arg>().swap(n->args_);
  n->kwargs_.clear();
}

void Graph::eraseAll(const std::vector<Node*>& dead) {
  std::vector<bool> doomed(nodes_.size(), false);
  for (Node* n : dead)
    if (!n->dead_) doomed[n->id_] = true;
  for (Node* n : dead)
    for (const Operand* s = n->use_head_; s; s = s->next_use)
      if (!doomed[s->user->id_])
        throw JfxError(SourceLocation::atNode(std::string(n->name())),
                       "cannot erase a node still used by '" + std::string(s->user->name()) + "'");
  // Every use of a doomed node comes from a doomed node, so once all their operands are
  // unlinked, none has a use left.
  // Detached in list order (a node listed twice once), then retired in the same order (Note
  // [Undo of an erase]).
  for (Node* n : dead)
    if (doomed[n->id_]) {
      doomed[n->id_] = false;
      detachUses(n);
    }
  for (Node* n : dead) {
    if (n->dead_) continue;
    retire(n);
  }
}

void Graph::rename(Node* n, std::string_view name) {
  if (n->name() == name) return;
  if (by_name_.contains(name))
    throw JfxError(SourceLocation::atNode(std::string(name)),
                   "a node with this name already exists");
  by_name_.erase(n->name());
  if (undo_) {
    undo_->add(UndoLog::Kind::Renamed, n, static_cast<uint32_t>(undo_->names.size()));
    undo_->names.push_back(n->name_);  // the arena keeps it
  }
  n->name_ = names_.add(name);
  by_name_.insert(n);
  touch(n);
}

std::vector<const Node*> Graph::takeTouched() {
  // In id order, which is arena order: a check visits the nodes about as they lie in memory, and
  // no sort reads two nodes' positions per comparison (bucket touches a large part of the graph).
  // Many touched ids: one scan of the marks; few: sort the ids.
  std::vector<const Node*> live;
  live.reserve(touched_.size());
  auto take = [&](uint32_t id) {
    touched_mark_[id] = false;
    // An id past the store's end belonged to a node that a rollback removed.
    if (id < nodes_.size() && !nodes_[id].dead_) live.push_back(&nodes_[id]);
  };
  if (touched_.size() * 16 > touched_mark_.size()) {
    for (uint32_t id = 0; id < touched_mark_.size(); ++id)
      if (touched_mark_[id]) take(id);
  } else {
    std::sort(touched_.begin(), touched_.end());
    for (uint32_t id : touched_)
      take(id);
  }
  touched_.clear();
  return live;
}

void Graph::dropTouched() {
  for (uint32_t id : touched_)
    touched_mark_[id] = false;
  touched_.clear();
}

SourceLocation Graph::location(const Node* n) const {
  SourceLocation loc = SourceLocation::atNode(std::string(n->name()));
  const NodeSources& s = sources_;
  auto read = [&](uint32_t id) { return id >= s.first && id - s.first < s.count; };
  uint32_t id = n->id();
  // A copy a pass made of a node that was read is where that node was.
  if (!read(id) && n->origin() != Node::kNoOrigin && read(n->origin()) &&
      n->origin() < nodes_.size())
    id = n->origin();
  if (s.kind == SourceKind::None || !read(id)) return loc;
  loc.file = s.file;
  switch (s.kind) {
    case SourceKind::Text:
      if (id - s.first < s.lines.size()) loc.line = static_cast<int>(s.lines[id - s.first]);
      break;
    case SourceKind::Json:
      loc.json_pointer = "/nodes/" + std::to_string(id - s.first + s.base);
      break;
    case SourceKind::Fx:
    case SourceKind::None:
      break;
  }
  return loc;
}

Node* Graph::findNode(std::string_view name) const {
  return by_name_.find(name);
}

std::vector<Node*> Graph::nodes() const {
  std::vector<Node*> out;
  out.reserve(live_);
  for (Node* n = head_; n; n = n->next())
    out.push_back(n);
  return out;
}

std::vector<Node*> Graph::liveInOrder(const std::vector<uint32_t>& ids,
                                      bool (*is)(const Node&)) const {
  std::vector<std::pair<uint64_t, Node*>> keyed;
  keyed.reserve(ids.size());
  for (uint32_t id : ids) {
    if (id >= nodes_.size()) continue;  // a rollback removed it
    Node& n = nodes_[id];
    if (!n.dead_ && is(n)) keyed.emplace_back(n.pos_, &n);
  }
  std::sort(keyed.begin(), keyed.end());
  // A reused id can be listed twice: the same node, side by side once sorted.
  keyed.erase(std::unique(keyed.begin(), keyed.end()), keyed.end());
  std::vector<Node*> out;
  out.reserve(keyed.size());
  for (const auto& [pos, n] : keyed)
    out.push_back(n);
  return out;
}

std::vector<Node*> Graph::placeholders() const {
  return liveInOrder(placeholder_ids_, [](const Node& n) { return n.op_ == OpKind::Placeholder; });
}

std::vector<Node*> Graph::collectives() const {
  return liveInOrder(collective_ids_, [](const Node& n) { return n.isCollective(); });
}

}  // namespace jfx
