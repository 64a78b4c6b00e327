#include "ir/text_format.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "ir/error.h"
#include "ir/json/op_schemas.h"
#include "ir/json_format.h"
#include "ir/loader.h"
#include "ir/walk.h"

namespace jfx {
namespace {

constexpr std::string_view kMagic = "jointfx.graph";
constexpr int kMaxNesting = 200;  // deeper input is rejected, never recursed into

// Layout and memory-format spellings that print bare; any other prints as layout("...").
constexpr std::string_view kLayouts[] = {"torch.strided",    "torch.sparse_coo", "torch.sparse_csr",
                                         "torch.sparse_csc", "torch.sparse_bsr", "torch.sparse_bsc",
                                         "torch._mkldnn",    "torch.jagged"};
constexpr std::string_view kMemoryFormats[] = {"torch.contiguous_format", "torch.channels_last",
                                               "torch.channels_last_3d", "torch.preserve_format"};

template <size_t N>
bool contains(const std::string_view (&list)[N], std::string_view s) {
  return std::find(std::begin(list), std::end(list), s) != std::end(list);
}

bool isDigit(char c) {
  return c >= '0' && c <= '9';
}
bool isAlpha(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}
bool isNameChar(char c) {
  return isAlpha(c) || isDigit(c) || c == '_';
}
bool isTargetChar(char c) {
  return isNameChar(c) || c == '.';
}
bool isDeviceChar(char c) {
  return isNameChar(c) || c == ':';
}

template <typename Pred>
bool allOf(std::string_view s, Pred pred) {
  return !s.empty() && std::all_of(s.begin(), s.end(), pred);
}

bool isIdentifier(std::string_view s) {
  return allOf(s, isNameChar) && !isDigit(s[0]);
}
// Targets that would read back as another body form are quoted.
bool isBareTarget(std::string_view s) {
  return allOf(s, isTargetChar) && s != "placeholder" && s != "get_attr" && s != "output";
}

void appendInt(std::string& out, int64_t v) {
  char buf[24];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, static_cast<size_t>(r.ptr - buf));
}

// ------------------------------------------------------------------------------------ printer

class Printer {
 public:
  Printer(std::string& out, Symbol default_device) : out_(out), default_device_(default_device) {}

  void header(const Graph& g) {
    out_ += kMagic;
    out_ += " 1\n";
    for (const auto& pg : g.processGroups()) {
      out_ += "group ";
      appendJsonString(out_, pg.name);
      out_ += " size=";
      appendInt(out_, pg.size);
      out_ += " ranks=";
      ints(pg.ranks, '[', ']');
      out_ += '\n';
    }
    if (!g.outputSpecs().empty()) {
      out_ += "outputs [";
      bool first = true;
      for (const auto& spec : g.outputSpecs()) {
        if (!first) out_ += ", ";
        first = false;
        out_ += outputKindName(spec.kind);
        if (!spec.fqn.empty()) {
          out_ += ' ';
          appendJsonString(out_, spec.fqn);
        }
      }
      out_ += "]\n";
    }
    for (const auto& c : g.constants()) {
      out_ += "constant ";
      appendJsonString(out_, c.name);
      out_ += " dtype=";
      out_ += dtypeName(c.meta.dtype);
      out_ += " shape=";
      ints(c.meta.shape, '[', ']');
      if (!c.meta.device.empty()) {
        out_ += " device=";
        appendJsonString(out_, c.meta.device.str());
      }
      out_ += " data=\"";
      appendHex(out_, c.data);
      out_ += "\"\n";
    }
    if (!g.extraJson().empty()) {
      out_ += "meta ";
      out_ += g.extraJson();
      out_ += '\n';
    }
    if (!default_device_.empty()) {
      out_ += "default_device ";
      appendJsonString(out_, default_device_.str());
      out_ += '\n';
    }
    out_ += '\n';
  }

  void node(const Node& n) {
    out_ += '%';
    name(n.name());
    if (n.val().kind != ValueMeta::Kind::Absent) {
      out_ += " : ";
      type(n.val());
    }
    out_ += " = ";
    switch (n.op()) {
      case OpKind::Placeholder:
        out_ += "placeholder";
        if (n.target().str() != n.name()) {
          out_ += ' ';
          appendJsonString(out_, n.target().str());
        }
        break;
      case OpKind::GetAttr:
        out_ += "get_attr ";
        appendJsonString(out_, n.target().str());
        break;
      case OpKind::Output:
        out_ += "output";
        args(n);
        break;
      case OpKind::CallFunction:
        if (isBareTarget(n.target().str()))
          out_ += n.target().str();
        else
          appendJsonString(out_, n.target().str());
        args(n);
        break;
    }
    meta(n);
  }

 private:
  void name(std::string_view s) {
    if (allOf(s, isNameChar))
      out_ += s;
    else
      appendJsonString(out_, s);
  }

  void ints(std::span<const int64_t> v, char open, char close) {
    out_ += open;
    for (size_t i = 0; i < v.size(); ++i) {
      if (i) out_ += ", ";
      appendInt(out_, v[i]);
    }
    out_ += close;
  }

  void type(const ValueMeta& v) {
    switch (v.kind) {
      case ValueMeta::Kind::Absent:
      case ValueMeta::Kind::None:
        out_ += "none";
        return;
      case ValueMeta::Kind::Tensor: {
        const TensorMeta& t = v.tensor;
        out_ += dtypeShortName(t.dtype);
        ints(t.shape, '[', ']');
        if (!t.isContiguous()) ints(t.stride, '{', '}');
        if (t.device != default_device_) {
          out_ += '@';
          if (allOf(t.device.str(), isDeviceChar))
            out_ += t.device.str();
          else
            appendJsonString(out_, t.device.str());
        }
        return;
      }
      case ValueMeta::Kind::List:
        out_ += '(';
        for (size_t i = 0; i < v.items.size(); ++i) {
          if (i) out_ += ", ";
          type(v.items[i]);
        }
        out_ += v.items.size() == 1 ? ",)" : ")";
        return;
      case ValueMeta::Kind::Int:
        out_ += "int(";
        appendInt(out_, v.i);
        out_ += ')';
        return;
      case ValueMeta::Kind::Float:
        out_ += "float(";
        appendFloat(out_, v.f);
        out_ += ')';
        return;
      case ValueMeta::Kind::Bool:
        out_ += v.i ? "bool(true)" : "bool(false)";
        return;
    }
  }

  void args(const Node& n) {
    out_ += '(';
    bool first = true;
    for (const Arg& a : n.args()) {
      if (!first) out_ += ", ";
      first = false;
      arg(a);
    }
    // Kwargs print sorted by key, as JSON stores them, so both formats agree on one order.
    sorted_kwargs_.clear();
    for (const auto& kv : n.kwargs())
      sorted_kwargs_.push_back(&kv);
    std::stable_sort(sorted_kwargs_.begin(), sorted_kwargs_.end(),
                     [](const auto* a, const auto* b) { return a->first.str() < b->first.str(); });
    for (const auto* kv : sorted_kwargs_) {
      if (!first) out_ += ", ";
      first = false;
      if (isIdentifier(kv->first.str()))
        out_ += kv->first.str();
      else
        appendJsonString(out_, kv->first.str());
      out_ += '=';
      arg(kv->second);
    }
    out_ += ')';
  }

  void wrapped(std::string_view fn, std::string_view s) {
    out_ += fn;
    out_ += '(';
    appendJsonString(out_, s);
    out_ += ')';
  }

  void arg(const Arg& a) {
    switch (a.kind()) {
      case Arg::Kind::None:
        out_ += "None";
        return;
      case Arg::Kind::Bool:
        out_ += a.toBool() ? "True" : "False";
        return;
      case Arg::Kind::Int:
        appendInt(out_, a.toInt());
        return;
      case Arg::Kind::Float:
        appendFloat(out_, a.toFloat());
        return;
      case Arg::Kind::Str:
        appendJsonString(out_, a.str());
        return;
      case Arg::Kind::Node:
        out_ += '%';
        name(a.node()->name());
        return;
      case Arg::Kind::Dtype:
        out_ += "torch.";
        out_ += dtypeName(a.dtype());
        return;
      case Arg::Kind::Device:
        wrapped("device", a.str());
        return;
      case Arg::Kind::Layout:
        if (contains(kLayouts, a.str()))
          out_ += a.str();
        else
          wrapped("layout", a.str());
        return;
      case Arg::Kind::MemoryFormat:
        if (contains(kMemoryFormats, a.str()))
          out_ += a.str();
        else
          wrapped("memory_format", a.str());
        return;
      case Arg::Kind::List:
      case Arg::Kind::Tuple: {
        bool tuple = a.kind() == Arg::Kind::Tuple;
        out_ += tuple ? '(' : '[';
        for (size_t i = 0; i < a.items().size(); ++i) {
          if (i) out_ += ", ";
          arg(a.items()[i]);
        }
        if (tuple && a.items().size() == 1) out_ += ',';
        out_ += tuple ? ')' : ']';
        return;
      }
      case Arg::Kind::Opaque:
        out_ += "opaque(";
        appendJsonString(out_, a.str());
        out_ += ", ";
        appendJsonString(out_, a.opaqueRepr());
        out_ += ')';
        return;
    }
  }

  void meta(const Node& n) {
    const NodeMeta& m = n.meta();
    bool first = true;
    auto key = [&](std::string_view k) {
      out_ += first ? " {" : ", ";
      first = false;
      out_ += k;
      out_ += '=';
    };
    if (m.phase != Phase::Unknown) {
      key("phase");
      out_ += phaseName(m.phase);
    }
    if (m.recompute != Recompute::Unset) {
      key("recompute");
      out_ += recomputeName(m.recompute);
    }
    if (m.ac_graph_id) {
      key("ac_graph_id");
      appendInt(out_, *m.ac_graph_id);
    }
    if (m.seq_nr) {
      key("seq_nr");
      appendInt(out_, *m.seq_nr);
    }
    if (!m.module_fqn.empty()) {
      key("module");
      appendJsonString(out_, m.module_fqn.str());
    }
    // Input kinds live on placeholders only (the JSON header lists placeholders).
    if (n.op() == OpKind::Placeholder && n.inputKind() != InputKind::None) {
      key("input");
      out_ += inputKindName(n.inputKind());
    }
    if (n.op() == OpKind::Placeholder && !n.inputFqn().empty()) {
      key("fqn");
      appendJsonString(out_, n.inputFqn());
    }
    if (!m.stack_trace.empty()) {
      key("stack");
      appendJsonString(out_, m.stack_trace);
    }
    if (!m.attrs.empty()) {
      key("extra");
      out_ += mergeAttrs(m.extra_json, m.attrs);
    } else if (!m.extra_json.empty()) {
      key("extra");
      out_ += m.extra_json;
    }
    if (!first) out_ += '}';
  }

  std::string& out_;
  Symbol default_device_;
  std::vector<const std::pair<Symbol, Arg>*> sorted_kwargs_;
};

// The most common tensor device; ties go to the smallest name so every run picks the same one.
Symbol mostCommonDevice(const Graph& g) {
  std::vector<std::pair<Symbol, size_t>> counts;  // few distinct devices: a linear scan is fine
  auto count = [&](const ValueMeta& v, auto& self) -> void {
    if (v.kind == ValueMeta::Kind::Tensor) {
      for (auto& [dev, c] : counts) {
        if (dev == v.tensor.device) {
          ++c;
          return;
        }
      }
      counts.emplace_back(v.tensor.device, 1);
    }
    for (const auto& item : v.items)
      self(item, self);
  };
  for (Node* n = g.first(); n; n = n->next())
    count(n->val(), count);
  Symbol best;
  size_t best_count = 0;
  for (const auto& [dev, c] : counts) {
    if (c > best_count || (c == best_count && dev.str() < best.str())) {
      best = dev;
      best_count = c;
    }
  }
  return best;
}

// ------------------------------------------------------------------------------------- parser

// A hand-written recursive-descent parser over the whole buffer: no per-line copies, strings
// are views into the text unless they hold escapes.
class Parser : public NodeSite {
 public:
  Parser(std::string_view text, const std::string& filename)
      : p_(text.data()),
        end_(text.data() + text.size()),
        line_start_(text.data()),
        filename_(filename),
        loader_(SourceKind::Text, filename, *this),
        g_(&loader_.graph()) {}

  std::unique_ptr<Graph> parse() {
    // Node names are hashed once per definition and once per use: size the table up front.
    loader_.expectNodes(static_cast<size_t>(std::count(p_, end_, '\n')) + 1);
    bool seen_magic = false;
    bool in_nodes = false;
    while (p_ < end_) {
      node_name_.clear();
      skipSpaces();
      if (atEol() || *p_ == '#') {
        skipLine();
        continue;
      }
      if (!seen_magic) {
        magic();
        seen_magic = true;
      } else if (*p_ == '%') {
        nodeLine();
        in_nodes = true;
      } else if (in_nodes) {
        fail("expected a node line starting with '%' (header lines come before the nodes)");
      } else {
        headerLine();
      }
      skipSpaces();
      if (!atEol()) fail("expected end of line");
      skipLine();
    }
    if (!seen_magic) fail("expected the header line 'jointfx.graph 1'");
    return loader_.finish();
  }

  // NodeSite: the line of the node at `pos`, and the column of its name on the line being read.
  SourceLocation at(uint32_t pos, NodePart part) const override {
    SourceLocation loc;
    loc.file = filename_;
    loc.line = static_cast<int>(pos);
    if (part == NodePart::Name && static_cast<int>(pos) == line_) loc.column = column(name_at_);
    loc.node = node_name_;
    return loc;
  }

 private:
  // ---- cursor and errors

  int column(const char* at) const { return static_cast<int>(at - line_start_) + 1; }

  SourceLocation locationAt(const char* at) const {
    SourceLocation loc;
    loc.file = filename_;
    loc.line = line_;
    loc.column = column(at);
    loc.node = node_name_;
    return loc;
  }
  [[noreturn]] void failAt(const char* at, const std::string& message) const {
    throw JfxError(locationAt(at), message);
  }

  std::string found() const {
    if (p_ >= end_) return "end of file";
    if (atEol()) return "end of line";
    unsigned char c = static_cast<unsigned char>(*p_);
    if (c < 0x20 || c >= 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "0x%02x", c);
      return std::string("byte ") + buf;
    }
    return std::string("'") + *p_ + "'";
  }

  // "expected X, found Y" at the cursor.
  [[noreturn]] void fail(const std::string& expected) const {
    failAt(p_, expected + ", found " + found());
  }

  bool atEol() const {
    return p_ >= end_ || *p_ == '\n' || (*p_ == '\r' && (p_ + 1 == end_ || p_[1] == '\n'));
  }
  void skipSpaces() {
    while (p_ < end_ && (*p_ == ' ' || *p_ == '\t'))
      ++p_;
  }
  void skipLine() {
    if (p_ >= end_) {  // already at the end (also after an error caught mid-token)
      p_ = line_start_ = end_;
      ++line_;
      return;
    }
    const void* nl = std::memchr(p_, '\n', end_ - p_);
    p_ = nl ? static_cast<const char*>(nl) + 1 : end_;
    line_start_ = p_;
    ++line_;
  }
  bool peek(char c) const { return p_ < end_ && *p_ == c; }
  bool accept(char c) {
    if (!peek(c)) return false;
    ++p_;
    return true;
  }
  void expect(char c) {
    if (!accept(c)) fail(std::string("expected '") + c + "'");
  }
  // Reads characters matching `pred`; empty when there are none.
  template <typename Pred>
  std::string_view word(Pred pred) {
    const char* start = p_;
    while (p_ < end_ && pred(*p_))
      ++p_;
    return std::string_view(start, p_ - start);
  }
  std::string_view identifier() { return word(isNameChar); }
  void expectWord(std::string_view w) {
    const char* at = p_;
    if (word(isTargetChar) != w) {
      p_ = at;
      fail("expected " + quoteForMessage(w));
    }
  }

  // ---- lexemes

  // A string in JSON quoting. Returns a view of the text when there is nothing to unescape,
  // otherwise of `scratch`.
  std::string_view string(std::string& scratch) {
    if (!peek('"')) fail("expected a string in double quotes");
    const char* open = p_++;
    const char* run = p_;
    bool escaped = false;
    for (;;) {
      if (p_ >= end_ || *p_ == '\n') failAt(open, "unterminated string");
      unsigned char c = static_cast<unsigned char>(*p_);
      if (c == '"') {
        std::string_view result;
        if (escaped) {
          scratch.append(run, static_cast<size_t>(p_ - run));
          result = scratch;
        } else {
          result = std::string_view(run, p_ - run);
        }
        ++p_;
        return result;
      }
      if (c == '\\') {
        if (!escaped) scratch.clear();
        escaped = true;
        scratch.append(run, static_cast<size_t>(p_ - run));
        escape(scratch);
        run = p_;
        continue;
      }
      if (c < 0x20) fail("expected a printable character in a string (escape control characters)");
      if (c >= 0x80) {
        utf8();
        continue;
      }
      ++p_;
    }
  }
  std::string ownedString() {
    std::string scratch;
    return std::string(string(scratch));
  }

  unsigned hex4() {
    unsigned v = 0;
    for (int i = 0; i < 4; ++i, ++p_) {
      char c = p_ < end_ ? *p_ : '\0';
      unsigned d = isDigit(c)               ? c - '0'
                   : (c >= 'a' && c <= 'f') ? c - 'a' + 10
                   : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                                            : 16;
      if (d == 16) fail("expected 4 hex digits after \\u");
      v = v * 16 + d;
    }
    return v;
  }

  void escape(std::string& out) {
    const char* at = p_++;  // the backslash
    char c = p_ < end_ ? *p_ : '\0';
    if (p_ < end_) ++p_;  // a backslash at the end of the text must not move past it
    switch (c) {
      case '"':
        out += '"';
        return;
      case '\\':
        out += '\\';
        return;
      case '/':
        out += '/';
        return;
      case 'b':
        out += '\b';
        return;
      case 'f':
        out += '\f';
        return;
      case 'n':
        out += '\n';
        return;
      case 'r':
        out += '\r';
        return;
      case 't':
        out += '\t';
        return;
      case 'u':
        break;
      default:
        failAt(
            at,
            "invalid escape in string (expected one of \\\" \\\\ \\/ \\b \\f \\n \\r \\t \\uXXXX)");
    }
    unsigned cp = hex4();
    if (cp >= 0xDC00 && cp <= 0xDFFF) failAt(at, "unpaired UTF-16 surrogate in \\u escape");
    if (cp >= 0xD800 && cp <= 0xDBFF) {
      if (!(p_ + 1 < end_ && p_[0] == '\\' && p_[1] == 'u'))
        failAt(at, "unpaired UTF-16 surrogate in \\u escape");
      p_ += 2;
      unsigned lo = hex4();
      if (lo < 0xDC00 || lo > 0xDFFF) failAt(at, "unpaired UTF-16 surrogate in \\u escape");
      cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
    }
    appendUtf8(out, cp);
  }

  // One UTF-8 sequence (strings must be valid UTF-8, as in JSON, so either format can hold them).
  void utf8() {
    auto byte = [&](ptrdiff_t i) -> unsigned {
      return p_ + i < end_ ? static_cast<unsigned char>(p_[i]) : 0;
    };
    unsigned c = byte(0);
    int len = 0;
    unsigned lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (c >= 0xC2 && c <= 0xDF)
      len = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;  // no overlong forms
      if (c == 0xED) hi = 0x9F;  // no surrogates
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      fail("expected valid UTF-8 in a string");
    }
    if (byte(1) < lo || byte(1) > hi) fail("expected valid UTF-8 in a string");
    for (int i = 2; i < len; ++i)
      if (byte(i) < 0x80 || byte(i) > 0xBF) fail("expected valid UTF-8 in a string");
    p_ += len;
  }

  int64_t integer() {
    const char* start = p_;
    accept('-');
    if (word(isDigit).empty()) fail("expected an integer");
    int64_t v = 0;
    auto r = std::from_chars(start, p_, v);
    if (r.ec != std::errc()) failAt(start, "integer out of the int64 range");
    if (p_ < end_ && isTargetChar(*p_)) fail("expected an integer");
    return v;
  }

  // An integer for an OptionalInt64 field (`what`), which cannot hold INT64_MIN.
  int64_t optionalInteger(std::string_view what) {
    const char* start = p_;
    const int64_t v = integer();
    if (v == OptionalInt64::kReserved)
      failAt(start, std::string(what) + " " + std::to_string(v) +
                        " is out of range (INT64_MIN is reserved)");
    return v;
  }

  // Ints, floats, inf/-inf/nan. A float has '.' or an exponent, so 2 and 2.0 stay distinct.
  Arg number() {
    const char* start = p_;
    accept('-');
    if (peek('i')) {
      if (word(isNameChar) != "inf") failAt(start, "expected a number");
      return Arg::ofFloat(*start == '-' ? -std::numeric_limits<double>::infinity()
                                        : std::numeric_limits<double>::infinity());
    }
    if (word(isDigit).empty()) fail("expected a digit");
    bool is_float = false;
    if (accept('.')) {
      is_float = true;
      word(isDigit);
    }
    if (peek('e') || peek('E')) {
      is_float = true;
      ++p_;
      if (!accept('+')) accept('-');
      if (word(isDigit).empty()) fail("expected the exponent's digits");
    }
    if (p_ < end_ && isTargetChar(*p_)) fail("expected a number");
    if (!is_float) {
      int64_t v = 0;
      auto r = std::from_chars(start, p_, v);
      if (r.ec != std::errc()) failAt(start, "integer out of the int64 range");
      return Arg::ofInt(v);
    }
    double f = 0;
    auto r = std::from_chars(start, p_, f);
    if (r.ec != std::errc() || r.ptr != p_) failAt(start, "float out of range");
    return Arg::ofFloat(f);
  }

  double floating() {
    if (peek('n')) {
      if (word(isNameChar) != "nan") fail("expected a float");
      return std::numeric_limits<double>::quiet_NaN();
    }
    Arg a = number();
    return a.kind() == Arg::Kind::Float ? a.toFloat() : static_cast<double>(a.toInt());
  }

  // %name or %"any name"
  std::string_view nodeName(std::string& scratch) {
    if (peek('"')) return string(scratch);
    std::string_view name = identifier();
    if (name.empty()) fail("expected a node name");
    return name;
  }

  // ---- header lines

  void magic() {
    if (word(isTargetChar) != kMagic) {
      p_ = line_start_;
      skipSpaces();
      fail("expected the header line 'jointfx.graph 1'");
    }
    skipSpaces();
    const char* at = p_;
    int64_t version = integer();
    if (version != 1)
      failAt(at, "unsupported format version " + std::to_string(version) +
                     " (this reader reads version 1)");
  }

  void headerLine() {
    const char* at = p_;
    std::string_view kw = word(isTargetChar);
    skipSpaces();
    if (kw == "group") {
      groupLine();
    } else if (kw == "outputs") {
      if (seen_outputs_) failAt(at, "duplicate 'outputs' header line");
      seen_outputs_ = true;
      outputsLine();
    } else if (kw == "constant") {
      constantLine();
    } else if (kw == "meta") {
      if (seen_meta_) failAt(at, "duplicate 'meta' header line");
      seen_meta_ = true;
      const char* start = p_;
      while (!atEol())
        ++p_;
      const char* stop = p_;
      while (stop > start && (stop[-1] == ' ' || stop[-1] == '\t'))
        --stop;
      g_->extraJson() = jsonObject(start, stop, "graph meta");
      registerOpSchemas(g_->extraJson(), locationAt(start));
    } else if (kw == "default_device") {
      if (seen_default_device_) failAt(at, "duplicate 'default_device' header line");
      seen_default_device_ = true;
      default_device_ = Symbol::intern(ownedString());
    } else if (kw == kMagic) {
      failAt(at, "duplicate 'jointfx.graph' header line");
    } else {
      p_ = at;
      fail(
          "expected a header line (group, outputs, constant, meta, default_device) or a node line "
          "starting with '%'");
    }
  }

  // The rest of a `group "0" size=2 ranks=[0, 1]` line (docs/graph-format.md).
  void groupLine() {
    ProcessGroupInfo pg;
    const char* name_at = p_;
    pg.name = ownedString();
    if (g_->findProcessGroup(pg.name))
      failAt(name_at, "duplicate process group \"" + pg.name + "\"");
    skipSpaces();
    expectWord("size");
    expect('=');
    pg.size = integer();
    skipSpaces();
    expectWord("ranks");
    expect('=');
    {
      const DimsScratch ranks = intList('[', ']');
      pg.ranks.assign(ranks.begin(), ranks.end());
    }
    g_->processGroups().push_back(std::move(pg));
  }

  // The rest of an `outputs [loss, gradient "w"]` line: kinds, each with an optional FQN.
  void outputsLine() {
    expect('[');
    skipSpaces();
    if (accept(']')) return;
    for (;;) {
      const char* kind_at = p_;
      auto kind = outputKindFromName(identifier());
      if (!kind) {
        p_ = kind_at;
        fail("expected an output kind (loss, gradient, buffer_mutation, other, mesh, opaque)");
      }
      OutputSpec spec{*kind, {}};
      skipSpaces();
      if (peek('"')) spec.fqn = ownedString();
      g_->outputSpecs().push_back(std::move(spec));
      skipSpaces();
      if (accept(']')) break;
      expect(',');
      skipSpaces();
    }
  }

  // The rest of a `constant "c" dtype=float32 shape=[1] device="cpu" data="0000003f"` line,
  // `device=` optional.
  void constantLine() {
    ConstantInfo c;
    const char* name_at = p_;
    c.name = ownedString();
    if (g_->findConstant(c.name)) failAt(name_at, "duplicate constant \"" + c.name + "\"");
    skipSpaces();
    expectWord("dtype");
    expect('=');
    const char* dtype_at = p_;
    auto dtype = dtypeFromName(identifier());
    if (!dtype) failAt(dtype_at, "unknown dtype (expected a torch name such as float32)");
    c.meta.dtype = *dtype;
    skipSpaces();
    expectWord("shape");
    expect('=');
    c.meta.shape = Dims(intList('[', ']'));
    c.meta.stride = TensorMeta::contiguousStride(c.meta.shape);
    skipSpaces();
    if (std::string_view(p_, static_cast<size_t>(end_ - p_)).starts_with("device")) {
      expectWord("device");
      expect('=');
      c.meta.device = Symbol::intern(ownedString());
      skipSpaces();
    }
    expectWord("data");
    expect('=');
    const char* data_at = p_;
    if (!decodeHex(ownedString(), c.data))
      failAt(data_at, "expected lower-case hex digits (two per byte)");
    if (std::string e = constantSizeProblem(c); !e.empty()) failAt(data_at, e);
    g_->constants().push_back(std::move(c));
  }

  DimsScratch intList(char open, char close) {
    DimsScratch out;
    expect(open);
    skipSpaces();
    if (accept(close)) return out;
    for (;;) {
      out.push_back(integer());
      skipSpaces();
      if (accept(close)) return out;
      if (!accept(',')) fail(std::string("expected ',' or '") + close + "'");
      skipSpaces();
    }
  }

  // JSON on one line that must be an object; returns it canonical ("" when empty). Extra meta
  // (`extra`) must also keep out of the typed fields' way.
  std::string jsonObject(const char* start, const char* stop, std::string_view what,
                         bool extra_meta = false, bool has_module = false) {
    std::string_view text(start, stop - start);
    try {
      return extra_meta ? canonicalExtraMeta(text, has_module) : canonicalJsonObject(text);
    } catch (const JfxError& e) {
      // A syntax error knows its column within `text`, which is one line.
      const char* at = e.location().column > 0 ? start + (e.location().column - 1) : start;
      failAt(at, "invalid JSON in " + std::string(what) + ": " + e.message());
    }
  }

  // ---- node lines

  void nodeLine() {
    ++p_;  // '%'
    name_at_ = p_;
    std::string scratch;
    node_name_ = std::string(nodeName(scratch));
    loader_.announce(node_name_);
    skipSpaces();
    ValueMeta val;
    if (accept(':')) {
      skipSpaces();
      val = type(0);
      skipSpaces();
    }
    expect('=');
    skipSpaces();

    OpKind op = OpKind::CallFunction;
    Symbol target;
    std::vector<Arg> args;
    Kwargs kwargs;
    if (peek('"')) {
      target = Symbol::intern(string(scratch));
      argList(args, kwargs);
    } else {
      std::string_view w = word(isTargetChar);
      if (w.empty()) fail("expected placeholder, get_attr, output or an op target");
      skipSpaces();
      if (w == "placeholder") {
        op = OpKind::Placeholder;
        target = Symbol::intern(peek('"') ? string(scratch) : std::string_view(node_name_));
      } else if (w == "get_attr") {
        op = OpKind::GetAttr;
        target = Symbol::intern(string(scratch));
      } else if (w == "output") {
        op = OpKind::Output;
        target = Symbol::intern("output");
        argList(args, kwargs);
      } else {
        target = loader_.symbol(w);
        argList(args, kwargs);
      }
    }
    skipSpaces();
    MetaFields meta;
    if (peek('{')) metaBlock(meta, op);

    Node* n = loader_.define(op, target, std::move(args), std::move(kwargs), node_name_,
                             static_cast<uint32_t>(line_));
    n->val() = std::move(val);
    n->meta() = std::move(meta.meta);
    if (meta.input_kind != InputKind::None || !meta.input_fqn.empty())
      n->setInputInfo(meta.input_kind, std::move(meta.input_fqn));
  }

  ValueMeta type(int depth) {
    if (depth > kMaxNesting) fail("a type nested less deeply");
    ValueMeta v;
    if (accept('(')) {
      v.kind = ValueMeta::Kind::List;
      skipSpaces();
      while (!accept(')')) {
        v.items.push_back(type(depth + 1));
        skipSpaces();
        if (accept(')')) break;
        if (!accept(',')) fail("expected ',' or ')'");
        skipSpaces();
      }
      return v;
    }
    const char* at = p_;
    std::string_view w = identifier();
    if (w == "none") {
      v.kind = ValueMeta::Kind::None;
    } else if (w == "int") {
      v.kind = ValueMeta::Kind::Int;
      expect('(');
      v.i = integer();
      expect(')');
    } else if (w == "float") {
      v.kind = ValueMeta::Kind::Float;
      expect('(');
      v.f = floating();
      expect(')');
    } else if (w == "bool") {
      v.kind = ValueMeta::Kind::Bool;
      expect('(');
      std::string_view b = identifier();
      if (b != "true" && b != "false") fail("expected true or false");
      v.i = b == "true";
      expect(')');
    } else {
      auto dtype = dtypeFromShortName(w);
      if (!dtype) {
        p_ = at;
        fail(
            "expected a type: a dtype (f32, bf16, i64, ...), none, int(N), float(X), bool(B) "
            "or (T, ...)");
      }
      v.kind = ValueMeta::Kind::Tensor;
      TensorMeta& t = v.tensor;
      t.dtype = *dtype;
      const char* shape_at = p_;
      t.shape = Dims(intList('[', ']'));
      if (peek('{')) {
        const char* stride_at = p_;
        t.stride = Dims(intList('{', '}'));
        if (t.stride.size() != t.shape.size())
          failAt(stride_at, "stride has " + std::to_string(t.stride.size()) +
                                " dimensions but shape has " + std::to_string(t.shape.size()));
      } else {
        t.stride = TensorMeta::contiguousStride(t.shape);
      }
      if (std::string problem = t.sizeProblem(); !problem.empty()) failAt(shape_at, problem);
      t.device = default_device_;
      if (accept('@')) {
        if (peek('"')) {
          std::string scratch;
          t.device = loader_.symbol(string(scratch));
        } else {
          std::string_view d = word(isDeviceChar);
          if (d.empty()) fail("expected a device after '@' (cuda:0, or \"...\")");
          t.device = loader_.symbol(d);
        }
      }
    }
    return v;
  }

  void argList(std::vector<Arg>& args, Kwargs& kwargs) {
    expect('(');
    skipSpaces();
    if (accept(')')) return;
    std::string scratch;
    for (;;) {
      // A keyword argument is `name=value` or `"any key"=value`.
      const char* item_at = p_;
      std::string_view key;
      bool is_key = false;
      Arg value;
      bool have_value = false;
      if (p_ < end_ && (isAlpha(*p_) || *p_ == '_')) {
        key = identifier();
        skipSpaces();
        if (peek('='))
          is_key = true;
        else
          p_ = item_at;
      } else if (peek('"')) {
        key = string(scratch);
        skipSpaces();
        if (peek('=')) {
          is_key = true;
        } else {
          value = Arg::ofStr(key);
          have_value = true;
        }
      }
      if (is_key) {
        ++p_;  // '='
        skipSpaces();
        Symbol k = loader_.symbol(key);
        for (const auto& kv : kwargs)
          if (kv.first == k) failAt(item_at, "duplicate keyword argument " + quoteForMessage(key));
        kwargs.emplace_back(k, arg(0));
      } else {
        if (!kwargs.empty()) failAt(item_at, "positional argument after keyword arguments");
        args.push_back(have_value ? std::move(value) : arg(0));
      }
      skipSpaces();
      if (accept(')')) break;
      if (!accept(',')) fail("expected ',' or ')'");
      skipSpaces();
    }
    // The IR keeps kwargs sorted by key, as JSON objects are (see docs/graph-format.md).
    std::stable_sort(kwargs.begin(), kwargs.end(),
                     [](const auto& a, const auto& b) { return a.first.str() < b.first.str(); });
  }

  Arg arg(int depth) {
    if (depth > kMaxNesting) fail("arguments nested less deeply");
    if (p_ >= end_) fail("expected a value");
    char c = *p_;
    if (c == '%') {
      ++p_;
      return nodeRef();
    }
    if (c == '"') {
      std::string scratch;
      return Arg::ofStr(string(scratch));
    }
    if (c == '[' || c == '(') {
      bool tuple = c == '(';
      char close = tuple ? ')' : ']';
      ++p_;
      skipSpaces();
      std::vector<Arg> items;
      if (!accept(close)) {
        for (;;) {
          items.push_back(arg(depth + 1));
          skipSpaces();
          if (tuple && items.size() == 1 && peek(')'))
            fail("expected ',' (a one-element tuple is written (x,))");
          if (accept(close)) break;
          if (!accept(',')) fail(std::string("expected ',' or '") + close + "'");
          skipSpaces();
          if (tuple && items.size() == 1 && accept(')')) break;
        }
      }
      return tuple ? Arg::ofTuple(std::move(items)) : Arg::ofList(std::move(items));
    }
    if (c == '-' || isDigit(c)) return number();
    const char* at = p_;
    std::string_view w = word(isTargetChar);
    if (w == "None") return Arg::none();
    if (w == "True") return Arg::ofBool(true);
    if (w == "False") return Arg::ofBool(false);
    if (w == "inf") return Arg::ofFloat(std::numeric_limits<double>::infinity());
    if (w == "nan") return Arg::ofFloat(std::numeric_limits<double>::quiet_NaN());
    if (w == "device" || w == "layout" || w == "memory_format") {
      expect('(');
      std::string scratch;
      std::string_view s = string(scratch);
      expect(')');
      return w == "device"   ? Arg::ofDevice(s)
             : w == "layout" ? Arg::ofLayout(s)
                             : Arg::ofMemoryFormat(s);
    }
    if (w == "opaque") {
      expect('(');
      std::string type = ownedString();
      skipSpaces();
      expect(',');
      skipSpaces();
      std::string scratch;
      std::string_view repr = string(scratch);
      expect(')');
      return Arg::ofOpaque(type, repr);
    }
    if (w.starts_with("torch.")) {
      if (contains(kLayouts, w)) return Arg::ofLayout(w);
      if (contains(kMemoryFormats, w)) return Arg::ofMemoryFormat(w);
      if (auto t = dtypeFromName(w)) return Arg::ofDtype(*t);
      failAt(at, "unknown torch constant " + quoteForMessage(w) +
                     " (expected a dtype, layout or memory format; write others as "
                     "layout(\"...\") or memory_format(\"...\"))");
    }
    p_ = at;
    fail(
        "expected a value (%node, None, True, False, a number, a string, torch.<dtype>, "
        "device(...), a list, a tuple or opaque(...))");
  }

  Arg nodeRef() {
    const char* at = p_ - 1;
    std::string scratch;
    std::string_view name = nodeName(scratch);
    if (Node* n = loader_.resolve(name)) return Arg::ofNode(n);
    std::string ref(name);
    std::optional<uint32_t> later;
    if (ref != node_name_)
      if (int line = definitionLineAfterThisOne(ref)) later = static_cast<uint32_t>(line);
    loader_.unresolved(ref, locationAt(at), later, ref == node_name_);
  }

  // For error messages only: scans the rest of the file for a line defining %name.
  int definitionLineAfterThisOne(const std::string& name) {
    const char* save_p = p_;
    const char* save_line_start = line_start_;
    int save_line = line_;
    int found_line = 0;
    skipLine();
    while (p_ < end_ && !found_line) {
      skipSpaces();
      if (accept('%')) {
        std::string scratch;
        try {
          if (nodeName(scratch) == name) found_line = line_;
        } catch (const JfxError&) {
        }
      }
      skipLine();
    }
    p_ = save_p;
    line_start_ = save_line_start;
    line_ = save_line;
    return found_line;
  }

  struct MetaFields {
    NodeMeta meta;
    InputKind input_kind = InputKind::None;
    std::string input_fqn;
  };

  static constexpr std::string_view kMetaKeys[] = {
      "phase", "recompute", "ac_graph_id", "seq_nr", "module", "input", "fqn", "stack", "extra"};

  void metaBlock(MetaFields& f, OpKind op) {
    expect('{');
    skipSpaces();
    unsigned seen = 0;
    const char* extra_start = nullptr;
    const char* extra_stop = nullptr;
    std::string scratch;
    while (!accept('}')) {
      const char* key_at = p_;
      const size_t idx = metaKey(seen);
      skipSpaces();
      expect('=');
      skipSpaces();
      NodeMeta& m = f.meta;
      switch (idx) {
        case 0:
          m.phase = phaseValue();
          break;
        case 1:
          m.recompute = recomputeValue();
          break;
        case 2:
          m.ac_graph_id = optionalInteger("ac_graph_id");
          break;
        case 3:
          m.seq_nr = optionalInteger("seq_nr");
          break;
        case 4:
          m.module_fqn = loader_.symbol(string(scratch));
          break;
        case 5:
          if (op != OpKind::Placeholder) failAt(key_at, "input= is only valid on a placeholder");
          f.input_kind = inputKindValue();
          break;
        case 6:
          if (op != OpKind::Placeholder) failAt(key_at, "fqn= is only valid on a placeholder");
          f.input_fqn = std::string(string(scratch));
          break;
        case 7:
          m.stack_trace = std::string(string(scratch));
          break;
        case 8:
          extra_start = p_;
          extra_stop = skipJsonObject();
          break;
      }
      skipSpaces();
      if (accept('}')) break;
      if (!accept(',')) fail("expected ',' or '}'");
      skipSpaces();
    }
    // Read last: whether extra may hold custom.module_fqn depends on module=, wherever it is.
    if (extra_start) {
      std::string extra =
          jsonObject(extra_start, extra_stop, "extra", true, !f.meta.module_fqn.empty());
      liftAttrs(extra, f.meta.attrs);
      f.meta.extra_json = extra;
    }
  }

  // The index in kMetaKeys of the key at p_, which must not be one already `seen` (a bit per
  // index); marks it seen.
  size_t metaKey(unsigned& seen) {
    const char* key_at = p_;
    std::string_view key = identifier();
    size_t idx = std::find(std::begin(kMetaKeys), std::end(kMetaKeys), key) - std::begin(kMetaKeys);
    if (idx == std::size(kMetaKeys)) {
      p_ = key_at;
      fail(
          "expected a meta key (phase, recompute, ac_graph_id, seq_nr, module, input, fqn, "
          "stack, extra)");
    }
    if (seen & (1u << idx)) failAt(key_at, "duplicate meta key " + quoteForMessage(key));
    seen |= 1u << idx;
    return idx;
  }

  // The values of phase=, recompute= and input=: a name, reported at its start when unknown.
  Phase phaseValue() {
    const char* value_at = p_;
    auto phase = phaseFromName(identifier());
    if (!phase || *phase == Phase::Unknown) {
      p_ = value_at;
      fail("expected forward, loss or backward");
    }
    return *phase;
  }

  Recompute recomputeValue() {
    const char* value_at = p_;
    auto r = recomputeFromName(identifier());
    if (!r) {
      p_ = value_at;
      fail("expected MUST_SAVE, PREFER_SAVE, MUST_RECOMPUTE or PREFER_RECOMPUTE");
    }
    return *r;
  }

  InputKind inputKindValue() {
    const char* value_at = p_;
    auto k = inputKindFromName(identifier());
    if (!k) {
      p_ = value_at;
      fail("expected parameter, buffer, user_input or none");
    }
    return *k;
  }

  // extra={...}: one JSON object; its end is found by matching brackets outside strings.
  const char* skipJsonObject() {
    if (!peek('{')) fail("expected a JSON object after extra=");
    const char* start = p_;
    int depth = 0;
    bool in_string = false;
    while (!atEol()) {
      char c = *p_++;
      if (in_string) {
        if (c == '\\' && !atEol())
          ++p_;
        else if (c == '"')
          in_string = false;
        continue;
      }
      if (c == '"')
        in_string = true;
      else if (c == '{' || c == '[')
        ++depth;
      else if ((c == '}' || c == ']') && --depth == 0)
        break;
    }
    if (depth != 0) failAt(start, "unterminated JSON object after extra=");
    return p_;
  }

  const char* p_;
  const char* end_;
  const char* line_start_;
  int line_ = 1;
  const std::string& filename_;
  GraphLoader loader_;
  Graph* g_;
  std::string node_name_;          // the node being parsed, for error messages
  const char* name_at_ = nullptr;  // where its name starts
  Symbol default_device_;
  bool seen_outputs_ = false;
  bool seen_meta_ = false;
  bool seen_default_device_ = false;
};

}  // namespace

std::unique_ptr<Graph> parseTextGraph(std::string_view text, const std::string& filename) {
  return Parser(text, filename).parse();
}

std::string printTextGraph(const Graph& g) {
  std::string out;
  out.reserve(256 + g.size() * 160);
  Printer printer(out, mostCommonDevice(g));
  printer.header(g);
  forEachReadingInputNames(g, [&](const Node* n) {
    printer.node(*n);
    out += '\n';
  });
  return out;
}

void printTextGraph(const Graph& g, const ChunkSink& sink) {
  std::string out;
  out.reserve(kSinkChunkBytes + kSinkChunkBytes / 4);
  Printer printer(out, mostCommonDevice(g));
  printer.header(g);
  forEachReadingInputNames(g, [&](const Node* n) {
    printer.node(*n);
    out += '\n';
    if (out.size() >= kSinkChunkBytes) {
      sink(out);
      out.clear();
    }
  });
  if (!out.empty()) sink(out);
}

std::string printNode(const Node& n) {
  std::string out;
  Printer(out, Symbol::intern("cpu")).node(n);
  return out;
}

}  // namespace jfx
