// The JSON writer: canonical JSON v1 (docs/graph-format.md), and the canonical spellings
// ir/json_format.h declares.
#include "ir/json/tokenizer.h"
#include "ir/walk.h"

namespace jfx {

namespace json_detail {
namespace {

// The std::string writers (ir/json_format.h), beside this file's JsonOut ones.
using ::jfx::appendFloat;
using ::jfx::appendHex;
using ::jfx::appendJsonString;

// The graph writer's output: a byte buffer whose appends are inline. std::string's appends are
// calls (push_back, append, and a strlen for a C string), which were a large part of writing a
// graph: a node is some forty small pieces (bench/README.md, "Figures behind the code").
class JsonOut {
 public:
  explicit JsonOut(size_t capacity) { grow(capacity); }
  JsonOut(const JsonOut&) = delete;
  JsonOut& operator=(const JsonOut&) = delete;

  JsonOut& operator+=(char c) {
    if (p_ == cap_) grow(1);
    *p_++ = c;
    return *this;
  }
  JsonOut& operator+=(std::string_view s) {
    char* d = grab(s.size());
    std::memcpy(d, s.data(), s.size());
    p_ = d + s.size();
    return *this;
  }
  // A literal's length is known here: no strlen.
  template <size_t N>
  JsonOut& operator+=(const char (&s)[N]) {
    return *this += std::string_view(s, N - 1);
  }
  // Room for `n` more bytes, written from the returned pointer; commit() sets the new end.
  char* grab(size_t n) {
    if (static_cast<size_t>(cap_ - p_) < n) grow(n);
    return p_;
  }
  void commit(char* end) { p_ = end; }

  size_t size() const { return static_cast<size_t>(p_ - buf_.get()); }
  std::string_view view() const { return {buf_.get(), size()}; }
  void clear() { p_ = buf_.get(); }

 private:
  void grow(size_t n) {
    const size_t used = size(), old = static_cast<size_t>(cap_ - buf_.get());
    const size_t cap = std::max(old * 2, used + n);
    std::unique_ptr<char[]> next(new char[cap]);  // uninitialized: every byte is written first
    if (used) std::memcpy(next.get(), buf_.get(), used);
    buf_ = std::move(next);
    p_ = buf_.get() + used;
    cap_ = buf_.get() + cap;
  }

  std::unique_ptr<char[]> buf_;
  char* p_ = nullptr;
  char* cap_ = nullptr;
};

void appendInt(JsonOut& out, int64_t v) {
  char* d = out.grab(20);
  out.commit(std::to_chars(d, d + 20, v).ptr);
}

// As appendJsonString(std::string&, ...), into room for the worst case (every byte \u00XX).
// Whether eight bytes hold a quote, a backslash or a control byte (bytes of 0x80 and above are
// written as they are).
bool needsEscape(uint64_t w) {
  constexpr uint64_t kOnes = 0x0101010101010101ull, kHigh = 0x8080808080808080ull;
  const uint64_t quote = w ^ (kOnes * '"'), backslash = w ^ (kOnes * '\\');
  const uint64_t control = (w - kOnes * 0x20) & ~w;
  return (((quote - kOnes) & ~quote) | ((backslash - kOnes) & ~backslash) | control) & kHigh;
}

// `s` as a JSON string (json.dumps(ensure_ascii=False) escapes: quote, backslash, \b \f \n \r \t,
// other control bytes as \u00XX; bytes of 0x80 and above as they are) at `d`, which has room for
// the worst case, 6 * s.size() + 2 bytes. Returns the end. Names, targets and FQNs need no escape:
// checked a word at a time (the last word overlapping the one before it, or padded with spaces
// when the string is shorter), then copied at once.
// Inlined into its two callers, which call it for every string the writer writes
// (bench/README.md, "Figures behind the code").
[[gnu::always_inline]] inline char* writeJsonString(char* d, std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  const char* p = s.data();
  const char* end = s.data() + s.size();
  *d++ = '"';
  {
    bool clean = true;
    const char* q = p;
    for (; end - q >= 8; q += 8) {
      uint64_t w;
      std::memcpy(&w, q, 8);
      clean = clean && !needsEscape(w);
    }
    if (q != end) {
      uint64_t w = 0x2020202020202020ull;
      if (s.size() >= 8)
        std::memcpy(&w, end - 8, 8);
      else
        std::memcpy(&w, q, static_cast<size_t>(end - q));
      clean = clean && !needsEscape(w);
    }
    if (clean) {
      if (!s.empty()) std::memcpy(d, p, s.size());
      d += s.size();
      *d++ = '"';
      return d;
    }
  }
  while (p != end) {
    if (end - p >= 8) {
      uint64_t w;
      std::memcpy(&w, p, 8);
      if (!needsEscape(w)) {
        std::memcpy(d, p, 8);
        d += 8;
        p += 8;
        continue;
      }
    }
    const auto c = static_cast<unsigned char>(*p++);
    if (c >= 0x20 && c != '"' && c != '\\') {
      *d++ = static_cast<char>(c);
      continue;
    }
    *d++ = '\\';
    switch (c) {
      case '"':
      case '\\':
        *d++ = static_cast<char>(c);
        break;
      case '\b':
        *d++ = 'b';
        break;
      case '\f':
        *d++ = 'f';
        break;
      case '\n':
        *d++ = 'n';
        break;
      case '\r':
        *d++ = 'r';
        break;
      case '\t':
        *d++ = 't';
        break;
      default:
        *d++ = 'u';
        *d++ = '0';
        *d++ = '0';
        *d++ = kHex[c >> 4];
        *d++ = kHex[c & 15];
    }
  }
  *d++ = '"';
  return d;
}

void appendJsonString(JsonOut& out, std::string_view s) {
  out.commit(writeJsonString(out.grab(s.size() * 6 + 2), s));
}

// The rare pieces (floats, constants' bytes) go through the std::string writers.
void appendFloat(JsonOut& out, double v) {
  std::string s;
  appendFloat(s, v);
  out += s;
}
void appendHex(JsonOut& out, std::string_view bytes) {
  std::string s;
  appendHex(s, bytes);
  out += s;
}

// ------------------------------------------------------------------------------------ writer

// Typed node-meta keys in sorted order: the writer merges them with the extra keys by name.
constexpr std::string_view kTypedMetaKeys[] = {"ac_graph_id", "custom",      "phase", "recompute",
                                               "seq_nr",      "stack_trace", "val"};

bool isTypedMetaKey(std::string_view k) {
  return std::find(std::begin(kTypedMetaKeys), std::end(kTypedMetaKeys), k) !=
         std::end(kTypedMetaKeys);
}

// An extra seq_nr or ac_graph_id the typed field could not hold (the readers put it there), on a
// node that does not have the typed one.
bool isWideTypedInteger(const NodeMeta& m, JView member) {
  if (!member.isWideInteger()) return false;
  if (member.key() == "seq_nr") return !m.seq_nr;
  if (member.key() == "ac_graph_id") return !m.ac_graph_id;
  return false;
}

class JsonWriter {
 public:
  explicit JsonWriter(JsonOut& out) : out_(out) {}
  // With `flush`, called between nodes and constants once out holds kSinkChunkBytes or more: it
  // takes what out holds so far (and empties it).
  JsonWriter(JsonOut& out, std::function<void()> flush) : out_(out), flush_(std::move(flush)) {}

  void graph(const Graph& g) {
    tensor_text_.resize(1024);
    out_ += "{\n\"format\":";
    appendJsonString(out_, kFormatName);
    out_ += ",\n\"version\":";
    appendInt(out_, kFormatVersion);
    processGroups(g);
    inputs(g);
    if (!g.outputSpecs().empty()) outputs(g);
    if (!g.constants().empty()) constants(g);
    if (!g.extraJson().empty()) {
      JView meta = parseExtra(g.extraJson(), "");
      if (!meta.empty()) {
        out_ += ",\n\"meta\":";
        canonical(meta, "");
      }
    }
    nodes(g);
  }

  void processGroups(const Graph& g) {
    out_ += ",\n\"process_groups\":[";
    bool first = true;
    for (const auto& pg : g.processGroups()) {
      out_ += first ? "\n"sv : ",\n"sv;
      first = false;
      out_ += "{\"name\":";
      appendJsonString(out_, pg.name);
      out_ += ",\"ranks\":[";
      for (size_t i = 0; i < pg.ranks.size(); ++i) {
        if (i) out_ += ',';
        appendInt(out_, pg.ranks[i]);
      }
      out_ += "],\"size\":";
      appendInt(out_, pg.size);
      out_ += '}';
    }
    out_ += first ? "]"sv : "\n]"sv;
  }

  void inputs(const Graph& g) {
    out_ += ",\n\"inputs\":[";
    bool first = true;
    for (const Node* n : g.placeholders()) {
      out_ += first ? "\n"sv : ",\n"sv;
      first = false;
      out_ += '{';
      if (!n->inputFqn().empty()) {
        out_ += "\"fqn\":";
        appendJsonString(out_, n->inputFqn());
        out_ += ',';
      }
      out_ += "\"kind\":";
      appendJsonString(out_, inputKindName(n->inputKind()));
      out_ += ",\"name\":";
      appendJsonString(out_, n->name());
      out_ += '}';
    }
    out_ += first ? "]"sv : "\n]"sv;
  }

  // Only when there are output specs: the key is omitted otherwise.
  void outputs(const Graph& g) {
    out_ += ",\n\"outputs\":[";
    bool first = true;
    for (const auto& spec : g.outputSpecs()) {
      out_ += first ? "\n"sv : ",\n"sv;
      first = false;
      out_ += '{';
      if (!spec.fqn.empty()) {
        out_ += "\"fqn\":";
        appendJsonString(out_, spec.fqn);
        out_ += ',';
      }
      out_ += "\"kind\":";
      appendJsonString(out_, outputKindName(spec.kind));
      out_ += '}';
    }
    out_ += "\n]";
  }

  // Only when there are constants: the key is omitted otherwise.
  void constants(const Graph& g) {
    out_ += ",\n\"constants\":[";
    bool first = true;
    for (const auto& c : g.constants()) {
      out_ += first ? "\n"sv : ",\n"sv;
      first = false;
      constant(c);
      maybeFlush();
    }
    out_ += "\n]";
  }

  // The last key, and the end of the document.
  void nodes(const Graph& g) {
    out_ += ",\n\"nodes\":[";
    bool first = true;
    forEachReadingInputNames(g, [&](const Node* n) {
      out_ += first ? "\n"sv : ",\n"sv;
      first = false;
      node(*n);
      maybeFlush();
    });
    out_ += first ? "]\n}\n"sv : "\n]\n}\n"sv;
  }

  void maybeFlush() {
    if (flush_ && out_.size() >= kSinkChunkBytes) flush_();
  }

  void constant(const ConstantInfo& c) {
    out_ += "{\"data\":\"";
    appendHex(out_, c.data);
    out_ += '"';
    if (!c.meta.device.empty()) {
      out_ += ",\"device\":";
      appendJsonString(out_, c.meta.device.str());
    }
    out_ += ",\"dtype\":";
    appendJsonString(out_, dtypeName(c.meta.dtype));
    out_ += ",\"name\":";
    appendJsonString(out_, c.name);
    out_ += ",\"shape\":[";
    for (size_t i = 0; i < c.meta.shape.size(); ++i) {
      if (i) out_ += ',';
      appendInt(out_, c.meta.shape[i]);
    }
    out_ += "]}";
  }

  // One node as the graph writer writes it in "nodes".
  void nodeOnly(const Node& n) { node(n); }

 private:
  // extra_json is canonical when a reader made it; a pass may have built it by hand, so it is
  // parsed and re-canonicalized rather than spliced.
  JView parseExtra(std::string_view text, std::string_view node) {
    static const std::string kNoFile;
    try {
      extra_.parse(text, kNoFile);
    } catch (const JfxError& e) {
      throw JfxError(SourceLocation::atNode(std::string(node)),
                     "extra meta is not valid JSON: " + e.message());
    }
    if (!extra_.root().isObject())
      throw JfxError(SourceLocation::atNode(std::string(node)), "extra meta is not a JSON object");
    return extra_.root();
  }

  void canonical(JView v, std::string_view node) {
    try {
      appendCanonical(out_, v);
    } catch (const JfxError& e) {
      throw JfxError(SourceLocation::atNode(std::string(node)), "extra meta: " + e.message());
    }
  }

  void node(const Node& n) {
    out_ += "{\"args\":[";
    for (size_t i = 0; i < n.args().size(); ++i) {
      if (i) out_ += ',';
      arg(n.args()[i]);
    }
    out_ += "],\"kwargs\":{";
    // JSON objects are sorted; kwargs keep IR order elsewhere, so sort a view of them here.
    sorted_kwargs_.clear();
    for (const auto& kv : n.kwargs())
      sorted_kwargs_.push_back(&kv);
    std::stable_sort(sorted_kwargs_.begin(), sorted_kwargs_.end(),
                     [](const auto* a, const auto* b) { return a->first.str() < b->first.str(); });
    for (size_t i = 0; i < sorted_kwargs_.size(); ++i) {
      if (i) out_ += ',';
      appendJsonString(out_, sorted_kwargs_[i]->first.str());
      out_ += ':';
      arg(sorted_kwargs_[i]->second);
    }
    out_ += "},\"meta\":";
    meta(n);
    out_ += ",\"name\":";
    appendJsonString(out_, n.name());
    out_ += ",\"op\":";
    appendJsonString(out_, opKindName(n.op()));
    out_ += ",\"target\":";
    appendJsonString(out_, n.target().str());
    out_ += '}';
  }

  void floatValue(double f) {
    if (std::isnan(f))
      out_ += "{\"float\":\"nan\"}";
    else if (std::isinf(f))
      out_ += f > 0 ? "{\"float\":\"inf\"}"sv : "{\"float\":\"-inf\"}"sv;
    else
      appendFloat(out_, f);
  }

  void boxed(std::string_view key, std::string_view value) {
    out_ += "{\"";
    out_ += key;
    out_ += "\":";
    appendJsonString(out_, value);
    out_ += '}';
  }

  void arg(const Arg& a) {
    switch (a.kind()) {
      case Arg::Kind::None:
        out_ += "null";
        return;
      case Arg::Kind::Bool:
        out_ += a.toBool() ? "true"sv : "false"sv;
        return;
      case Arg::Kind::Int:
        appendInt(out_, a.toInt());
        return;
      case Arg::Kind::Float:
        floatValue(a.toFloat());
        return;
      case Arg::Kind::Str:
        appendJsonString(out_, a.str());
        return;
      case Arg::Kind::Node:
        boxed("node", a.node()->name());
        return;
      case Arg::Kind::Dtype:
        boxed("dtype", dtypeName(a.dtype()));
        return;
      case Arg::Kind::Device:
        boxed("device", a.str());
        return;
      case Arg::Kind::Layout:
        boxed("layout", a.str());
        return;
      case Arg::Kind::MemoryFormat:
        boxed("memory_format", a.str());
        return;
      case Arg::Kind::List:
      case Arg::Kind::Tuple: {
        bool tuple = a.kind() == Arg::Kind::Tuple;
        out_ += tuple ? "{\"tuple\":["sv : "["sv;
        for (size_t i = 0; i < a.items().size(); ++i) {
          if (i) out_ += ',';
          arg(a.items()[i]);
        }
        out_ += tuple ? "]}"sv : "]"sv;
        return;
      }
      case Arg::Kind::Opaque:
        out_ += "{\"opaque\":{\"repr\":";
        appendJsonString(out_, a.opaqueRepr());
        out_ += ",\"type\":";
        appendJsonString(out_, a.str());
        out_ += "}}";
        return;
    }
  }

  void ints(std::span<const int64_t> v) {
    out_ += '[';
    for (size_t i = 0; i < v.size(); ++i) {
      if (i) out_ += ',';
      appendInt(out_, v[i]);
    }
    out_ += ']';
  }

  // A tensor's meta as text. The nodes of a graph repeat a few shapes, strides, dtypes and
  // devices, all interned, so a direct-mapped cache keyed by them gives most tensors' text
  // without formatting a number (writing every dimension was a large part of the writer;
  // bench/README.md, "Figures behind the code"). Only a whole graph's writer has the cache
  // (graph()): one node's (writeJsonNode, per edited node in the Python bridge) would spend more
  // making it than it saves.
  void tensor(const TensorMeta& t) {
    TensorText* e = nullptr;
    if (!tensor_text_.empty()) {
      e = &tensor_text_[(t.shape.hash() * 31 + t.stride.hash() * 7 + t.device.id() * 3 +
                         static_cast<uint64_t>(t.dtype)) %
                        tensor_text_.size()];
      if (e->filled && e->shape == t.shape && e->stride == t.stride && e->device == t.device &&
          e->dtype == t.dtype) {
        out_ += std::string_view(e->text);
        return;
      }
    }
    const size_t start = out_.size();
    out_ += '{';
    if (!t.device.empty()) {
      out_ += "\"device\":";
      appendJsonString(out_, t.device.str());
      out_ += ',';
    }
    out_ += "\"dtype\":";
    appendJsonString(out_, dtypeName(t.dtype));
    out_ += ",\"shape\":";
    ints(t.shape);
    out_ += ",\"stride\":";
    ints(t.stride);
    out_ += '}';
    if (!e) return;
    e->filled = true;
    e->shape = t.shape;
    e->stride = t.stride;
    e->device = t.device;
    e->dtype = t.dtype;
    e->text.assign(out_.view().substr(start));
  }

  void val(const ValueMeta& v) {
    switch (v.kind) {
      case ValueMeta::Kind::Absent:
      case ValueMeta::Kind::None:
        out_ += "null";
        return;
      case ValueMeta::Kind::Tensor:
        tensor(v.tensor);
        return;
      case ValueMeta::Kind::List:
        out_ += '[';
        for (size_t i = 0; i < v.items.size(); ++i) {
          if (i) out_ += ',';
          val(v.items[i]);
        }
        out_ += ']';
        return;
      case ValueMeta::Kind::Int:
        appendInt(out_, v.i);
        return;
      case ValueMeta::Kind::Float:
        floatValue(v.f);
        return;
      case ValueMeta::Kind::Bool:
        out_ += v.i ? "true"sv : "false"sv;
        return;
    }
  }

  // Writes typed key `idx` of kTypedMetaKeys if the node has it. `custom` is the extra "custom"
  // value (or empty); module_fqn is merged into it.
  void typedMember(const Node& n, size_t idx, JView custom, bool& first) {
    const NodeMeta& m = n.meta();
    auto key = [&] {
      out_ += first ? "\""sv : ",\""sv;
      first = false;
      out_ += kTypedMetaKeys[idx];
      out_ += "\":";
    };
    switch (idx) {
      case 0:
        if (!m.ac_graph_id) return;
        key();
        appendInt(out_, *m.ac_graph_id);
        return;
      case 1:
        if (m.module_fqn.empty()) {
          if (!custom) return;
          key();
          canonical(custom, n.name());
          return;
        }
        key();
        customWithModule(n, custom);
        return;
      case 2:
        if (m.phase == Phase::Unknown) return;
        key();
        appendJsonString(out_, phaseName(m.phase));
        return;
      case 3:
        if (m.recompute == Recompute::Unset) return;
        key();
        appendInt(out_, static_cast<int>(m.recompute));
        return;
      case 4:
        if (!m.seq_nr) return;
        key();
        appendInt(out_, *m.seq_nr);
        return;
      case 5:
        if (m.stack_trace.empty()) return;
        key();
        appendJsonString(out_, m.stack_trace);
        return;
      case 6:
        if (n.val().kind == ValueMeta::Kind::Absent) return;
        key();
        val(n.val());
        return;
    }
  }

  // {"module_fqn": ...} merged into the extra "custom" object at its sorted place. A non-object
  // "custom" (only a hand-built extra_json has one) cannot hold it: the typed field wins.
  void customWithModule(const Node& n, JView custom) {
    out_ += '{';
    bool first = true;
    bool placed = false;
    auto place = [&] {
      out_ += first ? "\"module_fqn\":"sv : ",\"module_fqn\":"sv;
      first = false;
      appendJsonString(out_, n.meta().module_fqn.str());
      placed = true;
    };
    if (custom && custom.isObject()) {
      std::vector<JView> members;
      if (auto dup = sortMembers(custom, members))
        throw JfxError(SourceLocation::atNode(std::string(n.name())),
                       "extra meta: duplicate key " + quoteForMessage(*dup) + " in custom");
      for (JView c : members) {
        if (c.key() == "module_fqn") continue;
        if (!placed && c.key() > "module_fqn") place();
        out_ += first ? ""sv : ","sv;
        first = false;
        appendJsonString(out_, c.key());
        out_ += ':';
        canonical(c, n.name());
      }
    }
    if (!placed) place();
    out_ += '}';
  }

  void meta(const Node& n) {
    constexpr size_t kNumTyped = std::size(kTypedMetaKeys);
    out_ += '{';
    bool first = true;
    size_t next_typed = 0;
    JView custom;
    const std::string_view extra_json =
        n.meta().attrs.empty()
            ? n.meta().extra_json.view()
            : std::string_view(merged_ = mergeAttrs(n.meta().extra_json, n.meta().attrs));
    if (!extra_json.empty()) {
      JView extra = parseExtra(extra_json, n.name());
      if (auto dup = sortMembers(extra, members_))
        throw JfxError(SourceLocation::atNode(std::string(n.name())),
                       "extra meta: duplicate key " + quoteForMessage(*dup));
      custom = extra.find("custom");
      // Both sequences are sorted: merge them. An extra key that shadows a typed one (only a
      // hand-built extra_json can have one) loses to the typed field.
      for (JView m : members_) {
        if (isTypedMetaKey(m.key()) && !isWideTypedInteger(n.meta(), m)) continue;
        while (next_typed < kNumTyped && kTypedMetaKeys[next_typed] < m.key())
          typedMember(n, next_typed++, custom, first);
        out_ += first ? ""sv : ","sv;
        first = false;
        appendJsonString(out_, m.key());
        out_ += ':';
        canonical(m, n.name());
      }
    }
    for (; next_typed < kNumTyped; ++next_typed)
      typedMember(n, next_typed, custom, first);
    out_ += '}';
  }

  JsonOut& out_;
  std::function<void()> flush_;
  std::vector<const std::pair<Symbol, Arg>*> sorted_kwargs_;
  TreeBuilder extra_;           // reused for every node's extra meta
  std::string merged_;          // extra meta with the attributes merged in
  std::vector<JView> members_;  // its members, sorted
  struct TensorText {
    bool filled = false;
    Dims shape, stride;
    Symbol device;
    ScalarType dtype = ScalarType::Undefined;
    std::string text;
  };
  std::vector<TensorText> tensor_text_;  // tensor()'s cache: 1024 slots while writing a graph
};

}  // namespace
}  // namespace json_detail

using namespace json_detail;

void appendUtf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

void appendJsonString(std::string& out, std::string_view s) {
  // Room for the worst case, then cut back to what was written (as JsonOut does, but through
  // resize: std::string has no way to write past its size).
  const size_t at = out.size();
  out.resize(at + s.size() * 6 + 2);
  char* end = writeJsonString(out.data() + at, s);
  out.resize(static_cast<size_t>(end - out.data()));
}

void appendFloat(std::string& out, double v) {
  if (std::isnan(v)) {
    out += "nan";
    return;
  }
  if (std::isinf(v)) {
    out += v < 0 ? "-inf"sv : "inf"sv;
    return;
  }
  // Shortest round-trip digits from to_chars, laid out as Python's repr() does: fixed notation
  // when the decimal exponent is in (-4, 16], scientific otherwise.
  char buf[40];
  auto r = std::to_chars(buf, buf + sizeof buf, std::fabs(v), std::chars_format::scientific);
  std::string_view s(buf, r.ptr - buf);  // "d[.ddd]e[+-]XX"
  size_t e = s.find('e');
  char digits[24];
  int n = 0;
  for (size_t i = 0; i < e; ++i)
    if (s[i] != '.') digits[n++] = s[i];
  int exp = 0;
  std::string_view es = s.substr(e + 1);
  bool neg_exp = es[0] == '-';
  std::from_chars(es.data() + 1, es.data() + es.size(), exp);
  if (neg_exp) exp = -exp;
  if (std::signbit(v)) out += '-';
  int point = exp + 1;  // digits are 0.d1d2... x 10^point
  if (point > -4 && point <= 16) {
    if (point <= 0) {
      out += "0.";
      out.append(static_cast<size_t>(-point), '0');
      out.append(digits, n);
    } else if (point >= n) {
      out.append(digits, n);
      out.append(static_cast<size_t>(point - n), '0');
      out += ".0";
    } else {
      out.append(digits, point);
      out += '.';
      out.append(digits + point, n - point);
    }
    return;
  }
  out += digits[0];
  if (n > 1) {
    out += '.';
    out.append(digits + 1, n - 1);
  }
  out += exp < 0 ? "e-"sv : "e+"sv;
  int a = exp < 0 ? -exp : exp;
  if (a < 10) out += '0';
  appendInt(out, a);
}

std::string canonicalJsonObject(std::string_view text) {
  TreeBuilder b;
  JView root = parseObject(b, text);
  std::string out;
  if (!root.empty()) appendCanonical(out, root);
  return out;
}

std::string canonicalExtraMeta(std::string_view text, bool has_module) {
  TreeBuilder b;
  JView root = parseObject(b, text);
  // The typed fields have their own syntax; letting extra hold them too would make one node
  // spellable two ways.
  for (std::string_view k : kTypedMetaKeys) {
    if (k == "custom" || !root.find(k)) continue;
    // Except an integer the typed field cannot hold, which has no other spelling.
    if ((k == "seq_nr" || k == "ac_graph_id") && root.find(k).isWideInteger()) continue;
    throw JfxError({}, "extra must not hold the typed key " + quoteForMessage(k) +
                           " (write it as a meta key or a type)");
  }
  if (JView custom = root.find("custom")) {
    JView fqn = custom.isObject() ? custom.find("module_fqn") : JView();
    if (has_module && !custom.isObject())
      throw JfxError({}, "module= needs extra custom to be a JSON object");
    if (fqn && !fqn.isString()) throw JfxError({}, "extra custom.module_fqn must be a string");
    if (fqn && !fqn.str().empty())
      throw JfxError({}, "extra must not hold custom.module_fqn (write module=\"...\")");
    if (fqn && has_module)
      throw JfxError({}, "module= and an empty extra custom.module_fqn contradict each other");
  }
  std::string out;
  if (!root.empty()) appendCanonical(out, root);
  return out;
}

void appendHex(std::string& out, std::string_view bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  for (unsigned char b : bytes) {
    out += kHex[b >> 4];
    out += kHex[b & 15];
  }
}

bool decodeHex(std::string_view hex, std::string& out) {
  if (hex.size() % 2) return false;
  auto digit = [](char ch) -> int {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    return -1;
  };
  out.resize(hex.size() / 2);
  for (size_t i = 0; i < out.size(); ++i) {
    int hi = digit(hex[2 * i]), lo = digit(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    out[i] = static_cast<char>(hi * 16 + lo);
  }
  return true;
}

std::string constantSizeProblem(const ConstantInfo& c) {
  const uint64_t limit = c.data.size();
  uint64_t numel = 1;
  bool zero = false;
  for (int64_t d : c.meta.shape) {
    if (d < 0) return "negative dimension " + std::to_string(d);
    if (d == 0) zero = true;
    if (zero) continue;
    if (static_cast<uint64_t>(d) > limit) return "shape larger than the data";
    numel *= static_cast<uint64_t>(d);
    if (numel > limit) return "shape larger than the data";
  }
  if (zero) numel = 0;
  const uint64_t want = numel * static_cast<uint64_t>(dtypeItemSize(c.meta.dtype));
  if (want != limit)
    return "expected " + std::to_string(want) + " bytes for " +
           std::string(dtypeName(c.meta.dtype)) + " of " + std::to_string(numel) +
           " elements, got " + std::to_string(limit);
  return {};
}

std::string writeJsonGraph(const Graph& g) {
  JsonOut out(256 + g.size() * 256);
  JsonWriter(out).graph(g);
  return std::string(out.view());
}

void writeJsonGraph(const Graph& g, const ChunkSink& sink) {
  JsonOut out(kSinkChunkBytes + kSinkChunkBytes / 4);
  JsonWriter(out, [&] {
    sink(out.view());
    out.clear();
  }).graph(g);
  if (out.size()) sink(out.view());
}

std::string writeJsonNode(const Node& n) {
  JsonOut out(1024);
  JsonWriter(out).nodeOnly(n);
  return std::string(out.view());
}

}  // namespace jfx
