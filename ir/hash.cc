#include "ir/hash.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <span>
#include <string_view>

namespace jfx {
namespace {

// FNV-1a over 64-bit words (with a shift to spread high bits down), fed in a fixed order with
// a tag before each variant: the same graph hashes the same on every machine and every run.
// Node references hash by name, never by address.
class Hasher {
 public:
  uint64_t value() const { return h_; }

  void word(uint64_t w) {
    h_ ^= w;
    h_ *= 0x100000001b3ULL;
    h_ ^= h_ >> 29;
  }
  void tag(uint8_t t) { word(0xA5A5000000000000ULL | t); }
  void integer(int64_t v) { word(static_cast<uint64_t>(v)); }
  void floating(double f) {
    if (std::isnan(f)) f = std::numeric_limits<double>::quiet_NaN();  // prints as one "nan"
    uint64_t bits;
    std::memcpy(&bits, &f, sizeof bits);
    word(bits);
  }
  void str(std::string_view s) {
    word(s.size());
    size_t i = 0;
    for (; i + 8 <= s.size(); i += 8)
      word(load(s.data() + i, 8));
    if (i < s.size()) word(load(s.data() + i, s.size() - i));
  }
  // Where each node stands in program order, assigned as the walk reaches it: an operand, which
  // comes earlier, hashes as its ordinal instead of its name (the same information for a graph
  // whose names are unique, without reading the producer's name).
  void startGraph(const Graph& g) {
    graph_ = &g;
    ordinal_.assign(g.maxId(), kNoOrdinal);
    next_ordinal_ = 0;
  }
  void ints(std::span<const int64_t> v) {
    word(v.size());
    for (int64_t x : v)
      integer(x);
  }

  void arg(const Arg& a) {
    tag(static_cast<uint8_t>(a.kind()));
    switch (a.kind()) {
      case Arg::Kind::None:
        return;
      case Arg::Kind::Bool:
        word(a.toBool());
        return;
      case Arg::Kind::Int:
        integer(a.toInt());
        return;
      case Arg::Kind::Float:
        floating(a.toFloat());
        return;
      case Arg::Kind::Node: {
        const Node* p = a.node();
        // A producer not yet reached (a broken order) or of another graph hashes by name.
        if (p->graph() == graph_ && p->id() < ordinal_.size() && ordinal_[p->id()] != kNoOrdinal) {
          word(ordinal_[p->id()]);
        } else {
          tag(0xFF);
          str(p->name());
        }
        return;
      }
      case Arg::Kind::Dtype:
        word(static_cast<uint64_t>(a.dtype()));
        return;
      case Arg::Kind::Str:
      case Arg::Kind::Device:
      case Arg::Kind::Layout:
      case Arg::Kind::MemoryFormat:
        str(a.str());
        return;
      case Arg::Kind::Opaque:
        str(a.str());
        str(a.opaqueRepr());
        return;
      case Arg::Kind::List:
      case Arg::Kind::Tuple:
        word(a.items().size());
        for (const Arg& item : a.items())
          arg(item);
        return;
    }
  }

  void val(const ValueMeta& v) {
    tag(static_cast<uint8_t>(v.kind));
    switch (v.kind) {
      case ValueMeta::Kind::Absent:
      case ValueMeta::Kind::None:
        return;
      case ValueMeta::Kind::Tensor:
        word(static_cast<uint64_t>(v.tensor.dtype));
        ints(v.tensor.shape);
        ints(v.tensor.stride);
        str(v.tensor.device.str());
        return;
      case ValueMeta::Kind::List:
        word(v.items.size());
        for (const auto& item : v.items)
          val(item);
        return;
      case ValueMeta::Kind::Int:
      case ValueMeta::Kind::Bool:
        integer(v.i);
        return;
      case ValueMeta::Kind::Float:
        floating(v.f);
        return;
    }
  }

  void node(const Node& n) {
    str(n.name());
    word(static_cast<uint64_t>(n.op()));
    str(n.target().str());
    word(n.args().size());
    for (const Arg& a : n.args())
      arg(a);
    // In the order the printers write them (sorted by key), whatever order the IR holds.
    word(n.kwargs().size());
    // Insertion sort, stable and without std::stable_sort's buffer: nodes have a few kwargs.
    sorted_kwargs_.clear();
    for (const auto& kv : n.kwargs()) {
      sorted_kwargs_.push_back(&kv);
      const std::string_view key = kv.first.str();
      for (size_t j = sorted_kwargs_.size() - 1; j > 0 && key < sorted_kwargs_[j - 1]->first.str();
           --j)
        std::swap(sorted_kwargs_[j], sorted_kwargs_[j - 1]);
    }
    for (const auto* kv : sorted_kwargs_) {
      str(kv->first.str());
      arg(kv->second);
    }
    val(n.val());
    const NodeMeta& m = n.meta();
    word(static_cast<uint64_t>(m.phase));
    integer(static_cast<int64_t>(m.recompute));
    word(m.ac_graph_id.has_value());
    integer(m.ac_graph_id.value_or(0));
    word(m.seq_nr.has_value());
    integer(m.seq_nr.value_or(0));
    str(m.module_fqn.str());
    str(m.stack_trace);
    // Attributes hash as the formats write them: the same graph hashes the same either way.
    if (m.attrs.empty())
      str(m.extra_json);
    else
      str(mergeAttrs(m.extra_json, m.attrs));
    if (n.op() == OpKind::Placeholder) {  // the formats carry input info on placeholders only
      word(static_cast<uint64_t>(n.inputKind()));
      str(n.inputFqn());
    }
    if (n.graph() == graph_ && n.id() < ordinal_.size()) ordinal_[n.id()] = next_ordinal_++;
  }

 private:
  // Little-endian bytes p[0..n) as a word, n <= 8 (the same value on every host).
  static uint64_t load(const char* p, size_t n) {
    unsigned char b[8] = {};
    std::memcpy(b, p, n);
    uint64_t w = 0;
    for (int i = 7; i >= 0; --i)
      w = (w << 8) | b[i];
    return w;
  }

  static constexpr uint32_t kNoOrdinal = UINT32_MAX;
  uint64_t h_ = 0xcbf29ce484222325ULL;
  std::vector<const std::pair<Symbol, Arg>*> sorted_kwargs_;
  const Graph* graph_ = nullptr;
  std::vector<uint32_t> ordinal_;  // by node id
  uint32_t next_ordinal_ = 0;
};

}  // namespace

uint64_t structuralHash(const Graph& g) {
  Hasher h;
  h.startGraph(g);
  h.word(g.processGroups().size());
  for (const auto& pg : g.processGroups()) {
    h.str(pg.name);
    h.integer(pg.size);
    h.ints(pg.ranks);
  }
  h.word(g.outputSpecs().size());
  for (const auto& spec : g.outputSpecs()) {
    h.word(static_cast<uint64_t>(spec.kind));
    h.str(spec.fqn);
  }
  // Only graphs with constants hash them, so every other graph keeps the hash it had.
  if (!g.constants().empty()) {
    h.word(g.constants().size());
    for (const auto& c : g.constants()) {
      h.str(c.name);
      h.word(static_cast<uint64_t>(c.meta.dtype));
      h.ints(c.meta.shape);
      h.str(c.meta.device.str());
      h.str(c.data);
    }
  }
  h.str(g.extraJson());
  h.word(g.size());
  for (Node* n = g.first(); n; n = n->next())
    h.node(*n);
  return h.value();
}

}  // namespace jfx
