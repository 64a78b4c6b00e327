#include "ir/json_format.h"

#include <algorithm>
#include <array>
#include <bit>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <vector>

#include "ir/error.h"

namespace jfx {

using namespace std::string_view_literals;
namespace {

using json = nlohmann::json;

constexpr int64_t kFormatVersion = 1;
constexpr std::string_view kFormatName = "jointfx.graph";
// Deeper nesting is rejected while the tree is built, so the code that walks a tree may recurse
// without overflowing the stack on a hostile file. Real graphs nest a few levels.
constexpr int kMaxNesting = 200;

void appendInt(std::string& out, int64_t v) {
  char buf[24];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, static_cast<size_t>(r.ptr - buf));
}

void appendUnsigned(std::string& out, uint64_t v) {
  char buf[24];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, static_cast<size_t>(r.ptr - buf));
}

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

// ------------------------------------------------------------------------------- JSON tree

// A JSON value tree in one flat, pre-order array, built from nlohmann's SAX events. Its arrays
// are reused from value to value, so reading allocates nothing once they are warm; a nlohmann
// DOM (a std::map per object) allocates as it reads and was much slower (bench/README.md, "Figures
// behind the code").
struct JsonTree {
  // BigInt: an integer literal past 64 bits (Python writes any int), kept as its decimal text so
  // that meta the formats carry verbatim comes back unchanged rather than rounded to a double.
  enum class Type : uint8_t { Null, Bool, Int, Unsigned, BigInt, Float, String, Array, Object };
  struct Value {
    Type type = Type::Null;
    uint32_t key_off = 0;  // the member's key (in chars) when the parent is an object
    uint32_t key_len = 0;
    uint32_t end = 0;   // one past the last descendant: the index of the next sibling
    uint32_t size = 0;  // number of children (arrays, objects)
    union {
      bool b;
      int64_t i;   // every integer that fits int64
      uint64_t u;  // the others
      double f;
      uint32_t str[2];  // offset and length in chars (strings, BigInt's digits)
    };
  };
  std::vector<Value> values;
  // A string or key is a view of the document itself when it has no escapes (offsets below
  // text.size()); the others are copied into `chars` (offsets from text.size() on). Copying
  // every string was a visible part of loading a graph (bench/README.md, "Figures behind the
  // code").
  std::string_view text;
  std::string chars;

  std::string_view at(uint32_t off, uint32_t len) const {
    return off < text.size() ? std::string_view(text.data() + off, len)
                             : std::string_view(chars.data() + (off - text.size()), len);
  }
};

// A read-only view of one value in a JsonTree.
class JView {
 public:
  using Type = JsonTree::Type;
  JView() = default;
  JView(const JsonTree* t, uint32_t index) : t_(t), i_(index) {}

  explicit operator bool() const { return t_ != nullptr; }
  Type type() const { return v().type; }
  bool isString() const { return type() == Type::String; }
  bool isArray() const { return type() == Type::Array; }
  bool isObject() const { return type() == Type::Object; }
  bool isInteger() const { return type() == Type::Int || type() == Type::Unsigned; }
  bool boolean() const { return v().b; }
  int64_t integer() const { return v().i; }
  uint64_t unsignedInteger() const { return v().u; }
  // A BigInt reads as the nearest double, as JSON readers without big integers read it.
  double floating() const {
    return type() == Type::BigInt ? std::strtod(std::string(str()).c_str(), nullptr) : v().f;
  }
  std::string_view str() const { return t_->at(v().str[0], v().str[1]); }
  // Whether this integer fits none of the typed integer fields (an int64 other than the
  // OptionalInt64 reserved value): such a value in a typed meta key is carried as extra meta.
  bool isWideInteger() const {
    return type() == Type::Unsigned || type() == Type::BigInt ||
           (type() == Type::Int && integer() == OptionalInt64::kReserved);
  }
  std::string_view key() const { return t_->at(v().key_off, v().key_len); }
  uint32_t size() const { return v().size; }
  bool empty() const { return size() == 0; }

  class iterator {
   public:
    iterator(const JsonTree* t, uint32_t i) : t_(t), i_(i) {}
    JView operator*() const { return {t_, i_}; }
    iterator& operator++() {
      i_ = t_->values[i_].end;
      return *this;
    }
    bool operator!=(const iterator& o) const { return i_ != o.i_; }

   private:
    const JsonTree* t_;
    uint32_t i_;
  };
  iterator begin() const { return {t_, i_ + 1}; }
  iterator end() const { return {t_, v().end}; }

  // The first member with this key, or an empty view.
  JView find(std::string_view key) const {
    for (JView m : *this)
      if (m.key() == key) return m;
    return {};
  }

 private:
  const JsonTree::Value& v() const { return t_->values[i_]; }
  const JsonTree* t_ = nullptr;
  uint32_t i_ = 0;
};

std::string_view describe(JView j) {
  switch (j.type()) {
    case JView::Type::Null:
      return "null";
    case JView::Type::Bool:
      return "a boolean";
    case JView::Type::Int:
    case JView::Type::Unsigned:
    case JView::Type::BigInt:
      return "an integer";
    case JView::Type::Float:
      return "a float";
    case JView::Type::String:
      return "a string";
    case JView::Type::Array:
      return "an array";
    case JView::Type::Object:
      return "an object";
  }
  return "a value";
}

std::string scalarText(JView v) {
  std::string s;
  if (v.type() == JView::Type::Unsigned)
    appendUnsigned(s, v.unsignedInteger());
  else if (v.type() == JView::Type::Int)
    appendInt(s, v.integer());
  else if (v.type() == JView::Type::BigInt)
    s = v.str();
  else if (v.type() == JView::Type::Float)
    appendFloat(s, v.floating());
  else
    s = describe(v);
  return s;
}

// An object's members sorted by key into `out`. Returns a repeated key if there is one: JSON
// readers disagree on which of two equal keys wins, so the formats reject them.
std::optional<std::string_view> sortMembers(JView obj, std::vector<JView>& out) {
  out.clear();
  for (JView m : obj)
    out.push_back(m);
  // Insertion sort (stable, no buffer) for the handful of members nodes and meta have, where
  // std::stable_sort's merge buffer allocation cost more than the sort; stable_sort above that.
  auto by_key = [](JView a, JView b) { return a.key() < b.key(); };
  if (out.size() > 16) std::stable_sort(out.begin(), out.end(), by_key);
  for (size_t i = 1; i < out.size() && out.size() <= 16; ++i) {
    const JView m = out[i];
    size_t j = i;
    for (; j > 0 && by_key(m, out[j - 1]); --j)
      out[j] = out[j - 1];
    out[j] = m;
  }
  for (size_t i = 1; i < out.size(); ++i)
    if (out[i].key() == out[i - 1].key()) return out[i].key();
  return std::nullopt;
}

// Canonical compact JSON: sorted keys, floats as appendFloat, strings as appendJsonString.
template <class Out>
void appendCanonical(Out& out, JView v) {
  switch (v.type()) {
    case JView::Type::Null:
      out += "null";
      return;
    case JView::Type::Bool:
      out += v.boolean() ? "true"sv : "false"sv;
      return;
    case JView::Type::Int:
    case JView::Type::Unsigned:
    case JView::Type::BigInt:
    case JView::Type::Float:
      out += scalarText(v);
      return;
    case JView::Type::String:
      appendJsonString(out, v.str());
      return;
    case JView::Type::Array: {
      out += '[';
      bool first = true;
      for (JView item : v) {
        if (!first) out += ',';
        first = false;
        appendCanonical(out, item);
      }
      out += ']';
      return;
    }
    case JView::Type::Object: {
      std::vector<JView> members;
      if (auto dup = sortMembers(v, members))
        throw JfxError({}, "duplicate key " + quoteForMessage(*dup) + " in a JSON object");
      out += '{';
      bool first = true;
      for (JView m : members) {
        if (!first) out += ',';
        first = false;
        appendJsonString(out, m.key());
        out += ':';
        appendCanonical(out, m);
      }
      out += '}';
      return;
    }
  }
}

SourceLocation locate(std::string_view text, size_t offset, const std::string& filename) {
  SourceLocation loc;
  loc.file = filename;
  loc.line = 1;
  size_t line_start = 0;
  for (size_t i = 0; i < offset && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++loc.line;
      line_start = i + 1;
    }
  }
  loc.column = static_cast<int>(offset - line_start) + 1;
  return loc;
}

// Collects nlohmann's SAX events into a JsonTree. Nesting deeper than kMaxNesting is an error
// here, so everything that walks a tree may recurse freely. Subclasses watch values arrive.
// Which tokenizer feeds a TreeBuilder. Fast (FastSax, below) reads well-formed JSON without a
// string per token; whatever it does not accept (a syntax error, a number out of range, invalid
// UTF-8, anything unusual) is read again by nlohmann's SAX parser, so every error keeps
// nlohmann's message, byte offset and order. Nlohmann alone is for tests that compare the two.
enum class Tokenizer { Fast, Nlohmann };

// Thrown by TreeBuilder::parse when the fast tokenizer gives up on a builder that has already
// acted on its events (a JsonReader made nodes): the caller starts over with Nlohmann.
struct ReadAgainWithNlohmann {};
class FastSax;

class TreeBuilder : public nlohmann::json_sax<json> {
 public:
  explicit TreeBuilder(Tokenizer tokenizer = Tokenizer::Fast, bool restartable = true)
      : tokenizer_(tokenizer), restartable_(restartable) {}

  // Parses all of `text`. Throws JfxError; a syntax error names its line, column and byte.
  void parse(std::string_view text, const std::string& filename);
  JView root() const { return JView(&tree_, 0); }

  // The fast tokenizer asks this before each '{' two containers deep: true when a subclass read
  // the whole object from the text itself (readDirect), building no tree for it.
  bool tryDirect(FastSax& sax) {
    if (stack_.empty() || stack_.back() != direct_parent_ || !readDirect(sax)) return false;
    ++tree_.values[direct_parent_].size;
    return true;
  }

  // Events without a std::string (the fast tokenizer's).
  void stringView(std::string_view s) {
    const uint32_t off = stringOffset(s);
    JsonTree::Value& v = add(JView::Type::String);
    v.str[0] = off;
    v.str[1] = static_cast<uint32_t>(s.size());
    leafDone();
  }
  void keyView(std::string_view k) {
    key_off_ = stringOffset(k);
    key_len_ = static_cast<uint32_t>(k.size());
    if (stack_.size() <= hook_depth_) keyRead(tree_.at(key_off_, key_len_));
  }

  bool null() final { return leaf(JView::Type::Null); }
  bool boolean(bool b) final {
    add(JView::Type::Bool).b = b;
    return leafDone();
  }
  bool number_integer(number_integer_t i) final {
    add(JView::Type::Int).i = i;
    return leafDone();
  }
  bool number_unsigned(number_unsigned_t u) final {
    if (u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      add(JView::Type::Int).i = static_cast<int64_t>(u);
    else
      add(JView::Type::Unsigned).u = u;
    return leafDone();
  }
  bool number_float(number_float_t f, const string_t& text) final {
    // nlohmann reads an integer literal past 64 bits as a double; its text keeps every digit.
    const bool integer = !text.empty() && text.find_first_of(".eE") == std::string::npos;
    if (!integer) {
      add(JView::Type::Float).f = f;
      return leafDone();
    }
    const uint32_t off = stringOffset(text);
    JsonTree::Value& v = add(JView::Type::BigInt);
    v.str[0] = off;
    v.str[1] = static_cast<uint32_t>(text.size());
    return leafDone();
  }
  bool string(string_t& s) final {
    stringView(s);
    return true;
  }
  bool binary(binary_t&) final { return leaf(JView::Type::Null); }  // JSON text has none
  bool start_object(std::size_t) final { return open(JView::Type::Object); }
  bool start_array(std::size_t) final { return open(JView::Type::Array); }
  bool end_object() final { return close(); }
  bool end_array() final { return close(); }
  bool key(string_t& k) final {
    keyView(k);
    return true;
  }
  bool parse_error(std::size_t position, const std::string& token,
                   const nlohmann::detail::exception& e) final {
    // nlohmann counts bytes from 1 and points just past the offending character.
    size_t offset = std::min<size_t>(position > 0 ? position - 1 : 0, text_.size());
    // nlohmann's ids (parse_error.101, out_of_range.406 for a number like 1e400) say nothing to
    // a user: keep the message, say what kind of error it is.
    std::string detail = humanLibraryMessage(e.what());
    const bool range = e.id >= 400 && e.id < 500;
    // A number out of range: point at its first character, not its last.
    if (range && token.size() <= offset + 1) offset = offset + 1 - token.size();
    const char* kind = range ? "JSON number out of range" : "JSON syntax error";
    throw JfxError(locate(text_, offset, *filename_),
                   std::string(kind) + " at byte " + std::to_string(offset) + ": " + detail);
  }

 protected:
  // Hooks, called only for values at most `hook_depth_` containers deep (the document itself is
  // at depth 0): a call per value of a whole graph cost more than the reader's few checks.
  virtual void added(uint32_t index) {}      // a value was appended (a container: opened)
  virtual void completed(uint32_t index) {}  // a value is complete (a container: closed)
  virtual void keyRead(std::string_view key) {}
  size_t hook_depth_ = 0;
  // Reads an element of the array at `direct_parent_` from the tokens, or leaves `sax` where it
  // was and returns false for the tree to take it.
  virtual bool readDirect(FastSax& sax) { return false; }
  static constexpr uint32_t kNoDirect = std::numeric_limits<uint32_t>::max();
  uint32_t direct_parent_ = kNoDirect;

  // Drops every value from `index` on (and their strings), e.g. a node already read.
  void truncate(uint32_t index, uint32_t chars) {
    tree_.values.resize(index);
    tree_.chars.resize(chars);
  }

  JsonTree tree_;
  std::vector<uint32_t> stack_;  // open arrays and objects

 private:
  JsonTree::Value& add(JView::Type type) {
    if (tree_.values.size() >= std::numeric_limits<uint32_t>::max() ||
        tree_.chars.size() >= std::numeric_limits<uint32_t>::max())
      throw JfxError(fileOnly(), "JSON document too large");
    uint32_t index = static_cast<uint32_t>(tree_.values.size());
    JsonTree::Value& v = tree_.values.emplace_back();
    v.type = type;
    v.key_off = key_off_;
    v.key_len = key_len_;
    v.end = index + 1;
    v.i = 0;
    key_len_ = 0;
    if (!stack_.empty()) ++tree_.values[stack_.back()].size;
    if (stack_.size() <= hook_depth_) added(index);
    return tree_.values[index];
  }
  bool leaf(JView::Type type) {
    add(type);
    return leafDone();
  }
  bool leafDone() {
    if (stack_.size() <= hook_depth_) completed(static_cast<uint32_t>(tree_.values.size() - 1));
    return true;
  }
  bool open(JView::Type type) {
    if (stack_.size() >= static_cast<size_t>(kMaxNesting))
      throw JfxError(fileOnly(),
                     "JSON nested more than " + std::to_string(kMaxNesting) + " levels deep");
    add(type);
    stack_.push_back(static_cast<uint32_t>(tree_.values.size() - 1));
    return true;
  }
  bool close() {
    uint32_t index = stack_.back();
    stack_.pop_back();
    tree_.values[index].end = static_cast<uint32_t>(tree_.values.size());
    if (stack_.size() <= hook_depth_) completed(index);
    return true;
  }

  // Where `s` is in the tree's string space: its place in the document when it is a view of it,
  // else the place of a copy in `chars`.
  uint32_t stringOffset(std::string_view s) {
    const std::string_view t = tree_.text;
    const auto p = reinterpret_cast<uintptr_t>(s.data());
    const auto b = reinterpret_cast<uintptr_t>(t.data());
    if (!t.empty() && p >= b && p - b <= t.size() - s.size() && s.size() <= t.size())
      return static_cast<uint32_t>(p - b);
    if (t.size() + tree_.chars.size() + s.size() >= std::numeric_limits<uint32_t>::max())
      throw JfxError(fileOnly(), "JSON document too large");
    const auto off = static_cast<uint32_t>(t.size() + tree_.chars.size());
    tree_.chars += s;
    return off;
  }

  // SAX events carry no position, so only syntax errors can say where they are.
  SourceLocation fileOnly() const {
    SourceLocation loc;
    loc.file = *filename_;
    return loc;
  }

  void reset(std::string_view text, const std::string& filename) {
    text_ = text;
    filename_ = &filename;
    tree_.values.clear();
    tree_.chars.clear();
    // Strings are referenced in place only while every offset fits the tree's 32 bits.
    tree_.text = text.size() < (uint64_t{1} << 31) ? text : std::string_view();
    stack_.clear();
    key_len_ = 0;
    direct_parent_ = kNoDirect;
  }

  std::string_view text_;
  const std::string* filename_ = nullptr;
  uint32_t key_off_ = 0;  // the key of the next value, when inside an object
  uint32_t key_len_ = 0;
  Tokenizer tokenizer_;
  bool restartable_;  // nothing but the tree acts on events: parse can start over by itself
};

// A JSON tokenizer for the common case: it drives a TreeBuilder with the same events nlohmann's
// SAX parser would send, copying each string once into the tree (nlohmann builds a std::string a
// byte at a time per token). It accepts exactly RFC 8259 JSON as nlohmann does (a UTF-8 BOM
// skipped, strings well-formed UTF-8 without raw control characters, numbers classified as
// int64, uint64 or double the same way); on anything else it stops and returns false, and the
// caller lets nlohmann read the text to report it.
class FastSax {
 public:
  FastSax(std::string_view text, TreeBuilder& b)
      : p_(text.data()), end_(text.data() + text.size()), b_(b) {}

  // ---- for TreeBuilder::readDirect, which reads some values itself with these tokens. Each
  // reads past white space first and returns false on anything else than what it names.
  const char* pos() const { return p_; }
  const char* end() const { return end_; }
  void rewind(const char* p) { p_ = p; }
  // The next byte (after white space), or 0 at the end.
  char peek() {
    skipSpace();
    return p_ == end_ ? '\0' : *p_;
  }
  // The key `key` in quotes, exactly (no escapes).
  bool quotedKey(std::string_view key) {
    skipSpace();
    const size_t n = key.size();
    if (static_cast<size_t>(end_ - p_) < n + 2 || p_[0] != '"' || p_[n + 1] != '"' ||
        std::memcmp(p_ + 1, key.data(), n) != 0)
      return false;
    p_ += n + 2;
    return true;
  }
  bool eat(char c) {
    skipSpace();
    if (p_ == end_ || *p_ != c) return false;
    ++p_;
    return true;
  }
  // The next byte (after white space), consumed; 0 at the end (and nothing consumed).
  char take() {
    skipSpace();
    return p_ == end_ ? '\0' : *p_++;
  }
  // Consumes the byte peek() just returned (not 0). Returns true.
  bool advance() {
    ++p_;
    return true;
  }
  // A string, decoded: a view of the text, or (with escapes) of a buffer the next string reuses.
  bool stringToken(std::string_view& out) {
    if (!eat('"') || !string()) return false;
    out = str_;
    return true;
  }
  bool wordToken(std::string_view w) {
    skipSpace();
    return word(w);
  }
  struct Number {
    JsonTree::Type type;  // Int, Unsigned (past int64) or Float
    int64_t i = 0;
    uint64_t u = 0;
    double f = 0;
  };
  bool numberToken(Number& out) {
    skipSpace();
    return p_ != end_ && scanNumber(out);
  }

  bool run() {
    if (end_ - p_ >= 3 && std::memcmp(p_, "\xEF\xBB\xBF", 3) == 0) p_ += 3;
    // Open containers, '{' or '[', on an explicit stack (the builder bounds the depth: it throws
    // past kMaxNesting, as it does under nlohmann), so nothing here recurses.
    std::vector<char> open;
    for (;;) {
      // A value.
      skipSpace();
      if (p_ == end_) return false;
      if (open.size() == 2 && *p_ == '{' && b_.tryDirect(*this)) {
        // read by the builder straight from the text
      } else if (*p_ == '{' || *p_ == '[') {
        const char c = *p_++;
        if (c == '{')
          b_.start_object(static_cast<std::size_t>(-1));
        else
          b_.start_array(static_cast<std::size_t>(-1));
        open.push_back(c);
        skipSpace();
        if (p_ == end_) return false;
        if (*p_ != (c == '{' ? '}' : ']')) {
          if (c == '{' && !member()) return false;
          continue;  // the first member's or element's value
        }
        ++p_;  // empty: closed at once
        close(open);
      } else if (!scalar()) {
        return false;
      }
      // The value is complete: close what ends here, then a ',' starts the next one.
      for (;;) {
        skipSpace();
        if (open.empty()) return p_ == end_;
        if (p_ == end_) return false;
        if (*p_ == ',') {
          ++p_;
          skipSpace();
          if (open.back() == '{' && !member()) return false;
          break;
        }
        if (*p_ != (open.back() == '{' ? '}' : ']')) return false;
        ++p_;
        close(open);
      }
    }
  }

 private:
  void close(std::vector<char>& open) {
    if (open.back() == '{')
      b_.end_object();
    else
      b_.end_array();
    open.pop_back();
  }

  // A key and its ':' (after '{' or a ',' in an object).
  bool member() {
    if (p_ == end_ || *p_ != '"') return false;
    ++p_;
    if (!string()) return false;
    b_.keyView(str_);
    skipSpace();
    if (p_ == end_ || *p_ != ':') return false;
    ++p_;
    return true;
  }

  bool scalar() {
    switch (*p_) {
      case '"':
        ++p_;
        if (!string()) return false;
        b_.stringView(str_);
        return true;
      case 't':
        if (!word("true")) return false;
        b_.boolean(true);
        return true;
      case 'f':
        if (!word("false")) return false;
        b_.boolean(false);
        return true;
      case 'n':
        if (!word("null")) return false;
        b_.null();
        return true;
      default:
        return number();
    }
  }

  bool word(std::string_view w) {
    if (static_cast<size_t>(end_ - p_) < w.size() || std::memcmp(p_, w.data(), w.size()) != 0)
      return false;
    p_ += w.size();
    return true;
  }

  void skipSpace() {
    while (p_ != end_ && (*p_ == ' ' || *p_ == '\n' || *p_ == '\r' || *p_ == '\t'))
      ++p_;
  }

  // After the opening quote; leaves the decoded string in str_ (a view of the text itself when
  // it has no escapes).
  bool string() {
    const char* start = p_;
    // Eight bytes at a time up to the first quote, backslash, control character or non-ASCII
    // byte. Each test below sets a byte's high bit for a special byte or (by a borrow) for a
    // byte after one, never before, so the lowest bit set marks the first special byte.
    constexpr uint64_t kOnes = 0x0101010101010101ull, kHigh = 0x8080808080808080ull;
    const char* p = p_;
    while (end_ - p >= 8) {
      uint64_t w;
      std::memcpy(&w, p, 8);
      const uint64_t quote = w ^ (kOnes * '"'), backslash = w ^ (kOnes * '\\');
      const uint64_t special = (((quote - kOnes) & ~quote) | ((backslash - kOnes) & ~backslash) |
                                (w - kOnes * 0x20) | w) &
                               kHigh;
      if (special) {
        if constexpr (std::endian::native == std::endian::little)
          p += std::countr_zero(special) >> 3;
        break;
      }
      p += 8;
    }
    p_ = p;
    while (p_ != end_) {
      const auto c = static_cast<unsigned char>(*p_);
      if (c == '"') {
        str_ = std::string_view(start, static_cast<size_t>(p_ - start));
        ++p_;
        return true;
      }
      if (c == '\\' || c < 0x20 || c >= 0x80) break;
      ++p_;
    }
    return decodeString(start);
  }

  // The slow path of string(), from the first escape or non-ASCII byte at p_ on: decodes the
  // string begun at `start` into scratch_.
  bool decodeString(const char* start) {
    scratch_.assign(start, p_);
    while (p_ != end_) {
      const auto c = static_cast<unsigned char>(*p_);
      if (c == '"') {
        ++p_;
        str_ = scratch_;
        return true;
      }
      if (c < 0x20) return false;  // a raw control character
      if (c >= 0x80) {
        const size_t n = utf8Length();
        if (n == 0) return false;
        scratch_.append(p_, n);
        p_ += n;
        continue;
      }
      if (c != '\\') {
        scratch_ += static_cast<char>(c);
        ++p_;
        continue;
      }
      if (!escape()) return false;
    }
    return false;  // no closing quote
  }

  // At a backslash: appends the character its escape stands for to scratch_.
  bool escape() {
    if (++p_ == end_) return false;
    switch (*p_++) {
      case '"':
        scratch_ += '"';
        break;
      case '\\':
        scratch_ += '\\';
        break;
      case '/':
        scratch_ += '/';
        break;
      case 'b':
        scratch_ += '\b';
        break;
      case 'f':
        scratch_ += '\f';
        break;
      case 'n':
        scratch_ += '\n';
        break;
      case 'r':
        scratch_ += '\r';
        break;
      case 't':
        scratch_ += '\t';
        break;
      case 'u':
        return unicodeEscape();
      default:
        return false;
    }
    return true;
  }

  // After \u: one code point, from four hex digits or a surrogate pair of two \u escapes.
  bool unicodeEscape() {
    uint32_t cp = 0;
    if (!hex4(cp)) return false;
    if (cp >= 0xD800 && cp <= 0xDBFF) {  // a high surrogate: a low one must follow
      uint32_t lo = 0;
      if (end_ - p_ < 2 || p_[0] != '\\' || p_[1] != 'u') return false;
      p_ += 2;
      if (!hex4(lo) || lo < 0xDC00 || lo > 0xDFFF) return false;
      cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
    } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
      return false;
    }
    appendUtf8(scratch_, cp);
    return true;
  }

  bool hex4(uint32_t& cp) {
    if (end_ - p_ < 4) return false;
    for (int i = 0; i < 4; ++i) {
      const char h = *p_++;
      cp <<= 4;
      if (h >= '0' && h <= '9')
        cp |= static_cast<uint32_t>(h - '0');
      else if (h >= 'a' && h <= 'f')
        cp |= static_cast<uint32_t>(h - 'a' + 10);
      else if (h >= 'A' && h <= 'F')
        cp |= static_cast<uint32_t>(h - 'A' + 10);
      else
        return false;
    }
    return true;
  }

  // The length of the well-formed UTF-8 sequence at p_ (Unicode table 3-7: no overlong forms,
  // no surrogates, nothing past U+10FFFF), or 0.
  size_t utf8Length() const {
    auto at = [&](ptrdiff_t i) { return p_ + i < end_ ? static_cast<unsigned char>(p_[i]) : 0u; };
    auto cont = [&](ptrdiff_t i, unsigned lo = 0x80, unsigned hi = 0xBF) {
      const unsigned c = at(i);
      return c >= lo && c <= hi;
    };
    const unsigned c = at(0);
    if (c >= 0xC2 && c <= 0xDF) return cont(1) ? 2 : 0;
    if (c == 0xE0) return cont(1, 0xA0) && cont(2) ? 3 : 0;
    if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) return cont(1) && cont(2) ? 3 : 0;
    if (c == 0xED) return cont(1, 0x80, 0x9F) && cont(2) ? 3 : 0;
    if (c == 0xF0) return cont(1, 0x90) && cont(2) && cont(3) ? 4 : 0;
    if (c >= 0xF1 && c <= 0xF3) return cont(1) && cont(2) && cont(3) ? 4 : 0;
    if (c == 0xF4) return cont(1, 0x80, 0x8F) && cont(2) && cont(3) ? 4 : 0;
    return 0;
  }

  // RFC 8259 number: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?, classified as nlohmann does:
  // an integer that fits int64 (or, without '-', uint64), else a double. Overflow of either
  // kind is left to nlohmann (a double out of range is its error to report).
  bool number() {
    Number n;
    if (!scanNumber(n)) return false;
    if (n.type == JsonTree::Type::Float) {
      static const std::string kNoText;
      b_.number_float(n.f, kNoText);
    } else if (n.type == JsonTree::Type::Int && n.i < 0) {
      b_.number_integer(n.i);
    } else {
      b_.number_unsigned(n.type == JsonTree::Type::Int ? static_cast<uint64_t>(n.i) : n.u);
    }
    return true;
  }
  bool scanNumber(Number& out) {
    const char* start = p_;
    const bool negative = *p_ == '-';
    if (negative) ++p_;
    if (p_ == end_) return false;
    // The integer part's value as it is scanned: exact up to 18 digits (no overflow), so most
    // integers need no from_chars.
    uint64_t value = 0;
    const char* digits = p_;
    if (*p_ == '0') {
      ++p_;
    } else if (*p_ >= '1' && *p_ <= '9') {
      while (p_ != end_ && *p_ >= '0' && *p_ <= '9')
        value = value * 10 + static_cast<uint64_t>(*p_++ - '0');
    } else {
      return false;
    }
    if (p_ - digits <= 18 && (p_ == end_ || (*p_ != '.' && *p_ != 'e' && *p_ != 'E'))) {
      out.type = JsonTree::Type::Int;
      out.i = negative ? -static_cast<int64_t>(value) : static_cast<int64_t>(value);
      return true;
    }
    bool integer = true;
    if (p_ != end_ && *p_ == '.') {
      integer = false;
      ++p_;
      if (p_ == end_ || *p_ < '0' || *p_ > '9') return false;
      while (p_ != end_ && *p_ >= '0' && *p_ <= '9')
        ++p_;
    }
    if (p_ != end_ && (*p_ == 'e' || *p_ == 'E')) {
      integer = false;
      ++p_;
      if (p_ != end_ && (*p_ == '+' || *p_ == '-')) ++p_;
      if (p_ == end_ || *p_ < '0' || *p_ > '9') return false;
      while (p_ != end_ && *p_ >= '0' && *p_ <= '9')
        ++p_;
    }
    if (integer) {
      if (negative) {
        int64_t v = 0;
        auto r = std::from_chars(start, p_, v);
        if (r.ec != std::errc() || r.ptr != p_) return false;
        out.type = JsonTree::Type::Int;
        out.i = v;
      } else {
        uint64_t v = 0;
        auto r = std::from_chars(start, p_, v);
        if (r.ec != std::errc() || r.ptr != p_) return false;
        // As the tree keeps it (number_unsigned): an int64 when it fits.
        if (v <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
          out.type = JsonTree::Type::Int;
          out.i = static_cast<int64_t>(v);
        } else {
          out.type = JsonTree::Type::Unsigned;
          out.u = v;
        }
      }
      return true;
    }
    double f = 0;
    auto r = std::from_chars(start, p_, f);
    if (r.ec != std::errc() || r.ptr != p_ || !std::isfinite(f)) return false;
    out.type = JsonTree::Type::Float;
    out.f = f;
    return true;
  }

  const char* p_;
  const char* end_;
  TreeBuilder& b_;
  std::string_view str_;  // the last string read
  std::string scratch_;   // its decoded bytes, when it had escapes or non-ASCII
};

void TreeBuilder::parse(std::string_view text, const std::string& filename) {
  reset(text, filename);
  if (tokenizer_ == Tokenizer::Fast) {
    if (FastSax(text, *this).run()) return;
    if (!restartable_) throw ReadAgainWithNlohmann{};
    reset(text, filename);
  }
  try {
    json::sax_parse(text.begin(), text.end(), this);
  } catch (const json::exception& e) {
    // Syntax errors arrive through parse_error(); anything else nlohmann throws is still bad
    // input, not a crash.
    throw JfxError(fileOnly(), "malformed JSON: " + humanLibraryMessage(e.what()));
  }
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
    InputNamePrefetcher ahead(g.first());
    for (Node* n = g.first(); n; n = n->next()) {
      ahead.step();
      out_ += first ? "\n"sv : ",\n"sv;
      first = false;
      node(*n);
      maybeFlush();
    }
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

// ------------------------------------------------------------------------------------ reader

// Reads the document with nlohmann's SAX parser into a JsonTree and turns each element of
// "nodes" into a Node as soon as it is complete, then drops it from the tree: memory stays
// proportional to one node, not to the file. The header is small and read at the end.
class JsonReader : public TreeBuilder {
 public:
  // `into`: a graph whose nodes were built already (readJsonInto); the document's nodes are
  // appended to it and its header applies to all of them.
  JsonReader(std::string_view text, const std::string& filename, Tokenizer tokenizer,
             std::unique_ptr<Graph> into = nullptr)
      : TreeBuilder(tokenizer, /*restartable=*/false),
        text_(text),
        filename_(filename),
        g_(into ? std::move(into) : std::make_unique<Graph>()),
        // Module FQNs grow with the model (a large one has more than a fixed 8192-slot cache holds,
        // and its backward revisits them in reverse, missing such a cache on most nodes).
        fqn_symbols_(std::max<size_t>(8192, text.size() / 4096)) {
    hook_depth_ = 2;  // the header's members and the elements of "nodes"
  }

  std::unique_ptr<Graph> read() {
    // Node names are hashed once per definition and once per use: size the table up front. A
    // node takes 300 bytes or more as the writer writes it (traced ones with stack traces:
    // several KB), so this seldom overestimates; an index twice too large costs a load its
    // zeroed pages (bench/README.md, "Figures behind the code"). Room for half as many again:
    // passes add nodes (the default pipeline does, on the llama3-70b shape enough to rehash the
    // index during bucket), and a table rehashed in a pass costs a second table's pages plus a
    // scattered reinsert of every name.
    g_->reserve(text_.size() / 320 * 3 / 2 + 16);
    parse(text_, filename_);
    node_name_.clear();
    if (bad_ref_) badReference();
    JView doc = root();
    if (!doc.isObject())
      fail("expected a JSON object at the top level, got " + std::string(describe(doc)));
    header(doc);
    return std::move(g_);
  }

 private:
  // ---- streaming: hooks called while the tree is built

  void keyRead(std::string_view key) override {
    if (stack_.size() == 1) checkTopKey(key);
  }

  void added(uint32_t index) override {
    if (stack_.size() == 1 && tree_.values[index].type == JView::Type::Array &&
        JView(&tree_, index).key() == "nodes") {
      nodes_array_ = index;
      direct_parent_ = index;
    } else if (stack_.size() == 2 && stack_[1] == nodes_array_) {
      // A new element of "nodes": remember where it starts so it can be dropped once read.
      node_start_ = index;
      node_chars_ = static_cast<uint32_t>(tree_.chars.size());
    }
  }

  // Format and version are checked as soon as they are read, so a wrong version is reported
  // before any node; a node is read as soon as it is complete, then dropped from the tree.
  void completed(uint32_t index) override {
    if (index == nodes_array_) {
      claimAll();
      nodes_array_ = kNone;
      direct_parent_ = kNoDirect;
    } else if (stack_.size() == 1) {
      JView v(&tree_, index);
      if (v.key() == "format" || v.key() == "version") checkFormat(v.key(), v);
    } else if (stack_.size() == 2 && stack_[1] == nodes_array_) {
      Scope nodes(this, "nodes");
      Scope at(this, node_index_);
      node(JView(&tree_, index));
      node_name_.clear();
      ++node_index_;
      truncate(node_start_, node_chars_);
    }
  }

  // ---- nodes read straight from the text
  //
  // A node in the shape the writer gives it (and PyTorch's graphs have: operands, scalars,
  // lists, dtypes, devices, tensor metas, phase, seq_nr, module FQN) is read from the tokens,
  // without the tree: the tree and the lookups in it were a large part of loading a graph
  // (bench/README.md, "Figures behind the code"). On anything else (another key, an escaped name,
  // an error of any kind) readDirect gives up before changing the graph and the tree reads the node
  // as before, so every error message and every unusual node is the tree path's. Both paths give
  // the same graph: the fuzzer and the tokenizer tests compare them with the nlohmann tokenizer's,
  // which never reads directly.

  bool readDirect(FastSax& s) override {
    if (bad_ref_) return false;  // the tree path then only looks for the name's definition
    const char* start = s.pos();
    pending_.clear();
    const bool read = directNode(s);
    node_name_.clear();
    if (!read) {
      s.rewind(start);
      claimAll();  // the tree path reads this node against the whole index
      return false;
    }
    ++node_index_;
    ++direct_nodes_;
    return true;
  }

  // Reads "{...}": f(key) reads each member's value; false from f gives up.
  template <class F>
  static bool directObject(FastSax& s, F&& f) {
    if (!s.eat('{')) return false;
    if (s.peek() == '}') return s.advance();
    for (;;) {
      std::string_view key;
      if (!s.stringToken(key) || !s.eat(':') || !f(key)) return false;
      const char c = s.take();
      if (c == '}') return true;
      if (c != ',') return false;
    }
  }
  // Reads "{...}" whose keys are some of `keys`, each once (bit i of `seen`): f(i) reads the
  // value of keys[i], f(-1) is called for any other key. The writer sorts keys, so the key after
  // the last one seen is tried first, against the text itself.
  template <size_t N, class F>
  static bool directMembers(FastSax& s, const std::array<std::string_view, N>& keys, unsigned& seen,
                            F&& f) {
    if (!s.eat('{')) return false;
    if (s.peek() == '}') return s.advance();
    for (;;) {
      const auto next = static_cast<size_t>(std::bit_width(seen));
      int i = -1;
      if (next < N && s.quotedKey(keys[next])) {
        seen |= 1u << next;
        i = static_cast<int>(next);
      } else {
        std::string_view key;
        if (!s.stringToken(key)) return false;
        i = directKey(key, keys, seen);
      }
      if (!s.eat(':') || !f(i)) return false;
      const char c = s.take();
      if (c == '}') return true;
      if (c != ',') return false;
    }
  }
  // Reads "[...]": f() reads each element.
  template <class F>
  static bool directArray(FastSax& s, F&& f) {
    if (!s.eat('[')) return false;
    if (s.peek() == ']') return s.advance();
    for (;;) {
      if (!f()) return false;
      const char c = s.take();
      if (c == ']') return true;
      if (c != ',') return false;
    }
  }
  // Which of `keys` `key` is, once each (bit i of `seen`), or -1. The writer sorts keys, so the
  // search starts after the last key seen.
  template <size_t N>
  static int directKey(std::string_view key, const std::array<std::string_view, N>& keys,
                       unsigned& seen) {
    const size_t next = static_cast<size_t>(std::bit_width(seen));
    for (size_t j = 0; j < N; ++j) {
      const size_t i = (next + j) % N;
      if (keys[i].size() != key.size() || keys[i][0] != key[0] ||
          !std::equal(key.begin(), key.end(), keys[i].begin()))
        continue;
      if (seen & (1u << i)) return -1;
      seen |= 1u << i;
      return static_cast<int>(i);
    }
    return -1;
  }
  // `v` (a token just read) as it stays valid: the text's own bytes, or a copy in `buf`.
  bool inText(std::string_view v) const {
    const auto p = reinterpret_cast<uintptr_t>(v.data());
    const auto b = reinterpret_cast<uintptr_t>(text_.data());
    return p >= b && p - b <= text_.size() && v.size() <= text_.size() - (p - b);
  }
  std::string_view kept(std::string_view v, std::string& buf) const {
    if (inText(v)) return v;
    buf.assign(v);
    return buf;
  }

  bool directNode(FastSax& s) {
    static constexpr std::array<std::string_view, 6> kKeys = {"args", "kwargs", "meta",
                                                              "name", "op",     "target"};
    std::vector<Arg> args;
    Kwargs kwargs;
    ValueMeta val;
    NodeMeta meta;
    std::optional<OpKind> op;
    std::string_view target;
    unsigned seen = 0;                      // bit i: kKeys[i] was read
    size_t args_refs = 0, kwargs_refs = 0;  // where their operands' names start in pending_
    const bool ok = directMembers(s, kKeys, seen, [&](int key) {
      std::string_view str;
      switch (key) {
        case 0:
          args_refs = pending_.size();
          return directList(s, args, 0);
        case 1:
          kwargs_refs = pending_.size();
          return directKwargs(s, kwargs);
        case 2:
          return directMeta(s, meta, val);
        case 3:
          if (!s.stringToken(str) || str.empty()) return false;
          node_name_ = str;
          node_name_hash_ = Graph::nameHash(str);
          g_->prefetchNameHash(node_name_hash_);
          return true;
        case 4:
          return s.stringToken(str) && (op = opKindFromName(str)).has_value();
        case 5:
          if (!s.stringToken(str)) return false;
          target = kept(str, target_buf_);
          return true;
        default:
          return false;
      }
    });
    constexpr unsigned kRequired = 1u << 3 | 1u << 4 | 1u << 5;  // name, op, target
    if (!ok || (seen & kRequired) != kRequired) return false;
    // Operands are looked up once the whole node is read: their index slots, prefetched as
    // their names were read, have had the meta's reading to arrive.
    if (!resolvePending(args, args_refs) || !resolvePending(kwargs, kwargs_refs)) return false;
    if (*op == OpKind::Output && target != "output") return false;
    if (*op == OpKind::CallFunction && target.empty()) return false;
    if ((*op == OpKind::Placeholder || *op == OpKind::GetAttr) &&
        (!args.empty() || !kwargs.empty()))
      return false;
    const Symbol sym =
        *op == OpKind::CallFunction ? symbols_.intern(target) : Symbol::intern(target);
    Node* n = g_->createUnclaimed(*op, sym, std::move(args), std::move(kwargs), node_name_);
    claimLater(n);
    recent_.add(n);
    n->val() = std::move(val);
    n->meta() = std::move(meta);
    return true;
  }

  // A direct node's name is claimed in the graph's index kClaimLag nodes after the node is made
  // (Graph::createUnclaimed), so the probe's cache miss overlaps with reading those nodes. The
  // newest nodes are found through recent_ (or unclaimedNamed, for one that recent_ dropped);
  // every name is claimed before the tree path reads a node and when the node list ends, so
  // the tree path and everything after the list see a complete index, and a duplicate name is
  // reported at its own node, as create() would have.
  static constexpr size_t kClaimLag = 8;
  struct Unclaimed {
    Node* node = nullptr;
    uint64_t hash = 0;
    size_t index = 0;  // in "nodes"
  };
  void claimLater(Node* n) {
    if (unclaimed_count_ == kClaimLag) claimOldest();
    unclaimed_[(unclaimed_first_ + unclaimed_count_++) % kClaimLag] = {n, node_name_hash_,
                                                                       node_index_};
  }
  void claimOldest() {
    const Unclaimed u = unclaimed_[unclaimed_first_];
    unclaimed_first_ = (unclaimed_first_ + 1) % kClaimLag;
    --unclaimed_count_;
    if (g_->claimName(u.node, u.hash)) return;
    Scope nodes(this, "nodes");
    Scope at(this, u.index);
    Scope k(this, "name");
    node_name_ = u.node->name();  // where() names the node
    fail("duplicate node name " + quoteForMessage(node_name_));
  }
  void claimAll() {
    while (unclaimed_count_ > 0)
      claimOldest();
  }
  Node* unclaimedNamed(std::string_view name) const {
    for (size_t i = unclaimed_count_; i-- > 0;)  // newest first, as a taken name's lookup was
      if (Node* n = unclaimed_[(unclaimed_first_ + i) % kClaimLag].node; n->name() == name)
        return n;
    return nullptr;
  }

  // Operands are looked up once the node is read, after prefetching each one's index slot as
  // it is read (prefetchOperands does the same on the tree path).
  bool directNodeRef(FastSax& s, Arg& out) {
    std::string_view name;
    if (!s.stringToken(name) || !inText(name)) return false;  // kept in pending_ as a view
    recent_.prefetch(name, [&](std::string_view n) { g_->prefetchName(n); });
    pending_.push_back(name);
    out = Arg::ofNode(nullptr);
    return true;
  }
  // Points the node references in `args` at the nodes named by pending_[first...], in order.
  template <class Args>
  bool resolvePending(Args& args, size_t first) {
    size_t i = first;
    bool ok = true;
    auto resolve = [&](Node*& ref) {
      ref = recent_.find(pending_[i++], [&](std::string_view s) {
        Node* found = g_->findNode(s);
        return found ? found : unclaimedNamed(s);
      });
      ok = ok && ref != nullptr;
    };
    for (auto& a : args) {
      if constexpr (std::is_same_v<std::decay_t<decltype(a)>, Arg>)
        a.forEachNode(resolve);
      else
        a.second.forEachNode(resolve);
    }
    return ok;  // an undefined operand: the tree path reports it
  }

  bool directArg(FastSax& s, Arg& out, int depth) {
    std::string_view str;
    switch (s.peek()) {
      case '"':
        if (!s.stringToken(str)) return false;
        out = Arg::ofStr(symbols_.intern(str));
        return true;
      case 't':
        out = Arg::ofBool(true);
        return s.wordToken("true");
      case 'f':
        out = Arg::ofBool(false);
        return s.wordToken("false");
      case 'n':
        out = Arg::none();
        return s.wordToken("null");
      case '[': {
        std::vector<Arg> items;
        if (!directList(s, items, depth + 1)) return false;
        out = Arg::ofList(std::move(items));
        return true;
      }
      case '{':
        return directBoxed(s, out, depth);
      default: {
        FastSax::Number num;
        if (!s.numberToken(num) || num.type == JView::Type::Unsigned) return false;
        out = num.type == JView::Type::Float ? Arg::ofFloat(num.f) : Arg::ofInt(num.i);
        return true;
      }
    }
  }

  // Every boxed argument but {"opaque": ...}, which is left to the tree path.
  bool directBoxed(FastSax& s, Arg& out, int depth) {
    std::string_view key, str;
    if (!s.eat('{') || !s.stringToken(key) || !s.eat(':')) return false;
    if (key == "node") {
      if (!directNodeRef(s, out)) return false;
    } else if (key == "dtype") {
      if (!s.stringToken(str)) return false;
      const auto t = dtypeFromName(str);
      if (!t) return false;
      out = Arg::ofDtype(*t);
    } else if (key == "device") {
      if (!s.stringToken(str)) return false;
      out = Arg::ofDevice(symbols_.intern(str));
    } else if (key == "layout") {
      if (!s.stringToken(str)) return false;
      out = Arg::ofLayout(symbols_.intern(str));
    } else if (key == "memory_format") {
      if (!s.stringToken(str)) return false;
      out = Arg::ofMemoryFormat(symbols_.intern(str));
    } else if (key == "float") {
      if (!s.stringToken(str)) return false;
      if (str == "inf")
        out = Arg::ofFloat(std::numeric_limits<double>::infinity());
      else if (str == "-inf")
        out = Arg::ofFloat(-std::numeric_limits<double>::infinity());
      else if (str == "nan")
        out = Arg::ofFloat(std::numeric_limits<double>::quiet_NaN());
      else
        return false;
    } else if (key == "tuple") {
      std::vector<Arg> items;
      if (!directList(s, items, depth + 1)) return false;
      out = Arg::ofTuple(std::move(items));
    } else {
      return false;
    }
    return s.eat('}');  // exactly one key
  }

  // A list of arguments `depth` lists deep, gathered in a buffer of the reader's so the list
  // is allocated once, at its size (a vector grown item by item made loading exceed three heap
  // allocations per node).
  bool directList(FastSax& s, std::vector<Arg>& out, int depth) {
    if (depth >= kDirectDepth) return false;
    std::vector<Arg>& items = arg_buffers_[static_cast<size_t>(depth)];
    items.clear();
    if (!directArray(s, [&] { return directArg(s, items.emplace_back(), depth); })) return false;
    out.reserve(items.size());
    std::move(items.begin(), items.end(), std::back_inserter(out));
    return true;
  }

  // Kwargs in the IR's order (sorted by key, as the writer gives them); others go the tree path.
  bool directKwargs(FastSax& s, Kwargs& out) {
    kwargs_buffer_.clear();
    const bool ok = directObject(s, [&](std::string_view key) {
      const Symbol k = symbols_.intern(key);
      if (!kwargs_buffer_.empty() && !(kwargs_buffer_.back().first.str() < k.str())) return false;
      return directArg(s, kwargs_buffer_.emplace_back(k, Arg()).second, 0);
    });
    if (!ok) return false;
    out.reserve(kwargs_buffer_.size());
    std::move(kwargs_buffer_.begin(), kwargs_buffer_.end(), std::back_inserter(out));
    return true;  // its operands are resolved with the node's (directNode)
  }

  bool directMeta(FastSax& s, NodeMeta& m, ValueMeta& val) {
    static constexpr std::array<std::string_view, 7> kKeys = {
        "ac_graph_id", "custom", "phase", "recompute", "seq_nr", "stack_trace", "val"};
    unsigned seen = 0;
    return directMembers(s, kKeys, seen, [&](int key) {
      std::string_view str;
      FastSax::Number num;
      switch (key) {
        case 0:
          if (!s.numberToken(num) || num.type != JView::Type::Int ||
              num.i == OptionalInt64::kReserved)
            return false;  // the tree path says why
          m.ac_graph_id = num.i;
          return true;
        case 1: {  // {"module_fqn": "..."} alone; anything more is extra meta
          unsigned custom_seen = 0;
          static constexpr std::array<std::string_view, 1> kFqn = {"module_fqn"};
          return directMembers(s, kFqn, custom_seen,
                               [&](int k) {
                                 if (k != 0 || !s.stringToken(str) || str.empty()) return false;
                                 // Nodes of one module come together: most FQNs are the last
                                 // node's. The others have a cache of their own: thousands of
                                 // them would evict the few targets and devices every node has.
                                 if (str != last_fqn_.str()) last_fqn_ = fqn_symbols_.intern(str);
                                 m.module_fqn = last_fqn_;
                                 return true;
                               }) &&
                 custom_seen == 1;
        }
        case 2: {
          if (!s.stringToken(str)) return false;
          const auto p = phaseFromName(str);
          if (!p || *p == Phase::Unknown) return false;
          m.phase = *p;
          return true;
        }
        case 3:
          if (!s.numberToken(num) || num.type != JView::Type::Int || num.i < 0 || num.i > 3)
            return false;
          m.recompute = static_cast<Recompute>(num.i);
          return true;
        case 4:
          if (!s.numberToken(num) || num.type != JView::Type::Int ||
              num.i == OptionalInt64::kReserved)
            return false;
          m.seq_nr = num.i;
          return true;
        case 5:
          if (!s.stringToken(str)) return false;
          m.stack_trace = str;
          return true;
        case 6:
          return directVal(s, val, 0);
        default:
          return false;
      }
    });
  }

  bool directVal(FastSax& s, ValueMeta& v, int depth) {
    FastSax::Number num;
    switch (s.peek()) {
      case 'n':
        v.kind = ValueMeta::Kind::None;
        return s.wordToken("null");
      case 't':
      case 'f':
        v.kind = ValueMeta::Kind::Bool;
        v.i = s.peek() == 't';
        return s.wordToken(v.i ? "true" : "false");
      case '[': {
        if (depth >= kDirectDepth) return false;
        v.kind = ValueMeta::Kind::List;
        std::vector<ValueMeta>& items = val_buffers_[static_cast<size_t>(depth)];
        items.clear();
        if (!directArray(s, [&] { return directVal(s, items.emplace_back(), depth + 1); }))
          return false;
        v.items.reserve(items.size());
        std::move(items.begin(), items.end(), std::back_inserter(v.items));
        return true;
      }
      case '{':
        v.kind = ValueMeta::Kind::Tensor;
        return cachedTensor(s, v.tensor);
      case '"':
        return false;
      default:
        if (!s.numberToken(num) || num.type == JView::Type::Unsigned) return false;
        if (num.type == JView::Type::Float) {
          v.kind = ValueMeta::Kind::Float;
          v.f = num.f;
        } else {
          v.kind = ValueMeta::Kind::Int;
          v.i = num.i;
        }
        return true;
    }
  }

  // A tensor meta whose text was read before is not parsed again: a graph repeats a few shapes,
  // strides, dtypes and devices (formatting their numbers was a large part of reading a value;
  // bench/README.md, "Figures behind the code"). The key is the text up to the first '}', which
  // ends a tensor's object unless a string in it holds one: then it is a prefix, which no earlier
  // object's whole text equals (it would end inside a string), so it misses, and a hit is the same
  // bytes, so the same meta.
  bool cachedTensor(FastSax& s, TensorMeta& t) {
    const char* start = s.pos();  // at '{' (directVal peeked it)
    const auto* close =
        static_cast<const char*>(std::memchr(start, '}', static_cast<size_t>(s.end() - start)));
    if (!close) return directTensor(s, t);
    const std::string_view text(start, static_cast<size_t>(close + 1 - start));
    TensorEntry& e = tensor_cache_[std::hash<std::string_view>()(text) % tensor_cache_.size()];
    if (e.text == text) {
      t = e.meta;
      s.rewind(close + 1);
      return true;
    }
    if (!directTensor(s, t)) return false;
    if (s.pos() == close + 1) e = {text, t};  // the input outlives the reader
    return true;
  }

  bool directTensor(FastSax& s, TensorMeta& t) {
    static constexpr std::array<std::string_view, 4> kKeys = {"device", "dtype", "shape", "stride"};
    unsigned seen = 0;
    const bool ok = directMembers(s, kKeys, seen, [&](int key) {
      std::string_view str;
      switch (key) {
        case 0:
          if (!s.stringToken(str)) return false;
          // A graph's tensors mostly share one device and a few dtypes: the last one is
          // compared before anything is hashed or searched.
          if (last_device_.empty() || str != last_device_.str())
            last_device_ = symbols_.intern(str);
          t.device = last_device_;
          return true;
        case 1: {
          if (!s.stringToken(str)) return false;
          if (last_dtype_name_.empty() || str != last_dtype_name_) {
            const auto d = dtypeFromName(str);
            if (!d) return false;
            last_dtype_ = *d;
            // Canonical names only: an alias ("torch.float", "half") is looked up each time.
            last_dtype_name_ = str == dtypeName(*d) ? dtypeName(*d) : std::string_view();
          }
          t.dtype = last_dtype_;
          return true;
        }
        case 2:
          return directInts(s, t.shape);
        case 3:
          return directInts(s, t.stride);
        default:
          return false;
      }
    });
    // dtype and shape are required; a stride has the shape's rank.
    if (!ok || (seen & 6u) != 6u) return false;
    if (!(seen & 8u))
      t.stride = TensorMeta::contiguousStride(t.shape);
    else if (t.stride.size() != t.shape.size())
      return false;
    return t.sizeProblem().empty();
  }

  bool directInts(FastSax& s, Dims& out) {
    DimsScratch dims;
    const bool ok = directArray(s, [&] {
      FastSax::Number num;
      if (!s.numberToken(num) || num.type != JView::Type::Int) return false;
      dims.push_back(num.i);
      return true;
    });
    if (ok) out = Dims(dims);
    return ok;
  }

  // Deeper nesting of argument lists or values than this is read by the tree path.
  static constexpr int kDirectDepth = 16;

  // ---- locations

  // One step of the JSON pointer to the value being read, kept as a stack and only rendered when
  // an error needs it.
  struct Step {
    std::string_view key;
    size_t index = 0;
    bool is_key = false;
  };
  class Scope {
   public:
    Scope(JsonReader* r, std::string_view key) : r_(r) { r_->push({key, 0, true}); }
    Scope(JsonReader* r, size_t index) : r_(r) { r_->push({{}, index, false}); }
    ~Scope() { --r_->depth_; }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    JsonReader* r_;
  };

  // A fixed array, not a vector: steps are pushed and popped a few dozen times per node, and a
  // vector's emplace_back is an out-of-line call each time (bench/README.md, "Figures behind the
  // code"). Steps past the array (deeper than any document may nest) are counted, not kept.
  static constexpr size_t kMaxPath = kMaxNesting + 8;
  void push(const Step& s) {
    if (depth_ < kMaxPath) path_[depth_] = s;
    ++depth_;
  }

  std::string pointer() const {
    std::string p;
    for (size_t i = 0; i < std::min(depth_, kMaxPath); ++i) {
      const Step& s = path_[i];
      p += '/';
      if (!s.is_key) {
        p += std::to_string(s.index);
        continue;
      }
      for (char c : s.key) {  // RFC 6901 escaping
        if (c == '~')
          p += "~0";
        else if (c == '/')
          p += "~1";
        else
          p += c;
      }
    }
    return p;
  }

  SourceLocation where() const {
    SourceLocation loc;
    loc.file = filename_;
    loc.json_pointer = pointer();
    if (loc.json_pointer.empty() && !loc.file.empty()) loc.json_pointer = "/";
    loc.node = node_name_;
    return loc;
  }

  [[noreturn]] void fail(const std::string& message) const { throw JfxError(where(), message); }

  void checkTopKey(std::string_view key) {
    static constexpr std::string_view kKeys[] = {"format",  "version",   "process_groups", "inputs",
                                                 "outputs", "constants", "meta",           "nodes"};
    if (std::find(std::begin(kKeys), std::end(kKeys), key) != std::end(kKeys)) return;
    Scope at(this, key);
    fail("unexpected header key " + quoteForMessage(key) +
         " (expected format, version, process_groups, inputs, outputs, constants, meta, "
         "nodes)");
  }

  void checkFormat(std::string_view key, JView v) {
    Scope at(this, key);
    if (key == "format") {
      if (!v.isString() || v.str() != kFormatName) fail("expected \"format\": \"jointfx.graph\"");
    } else {
      if (!v.isInteger()) fail("expected an integer version, got " + std::string(describe(v)));
      if (v.type() != JView::Type::Int || v.integer() != kFormatVersion)
        fail("unsupported format version " + scalarText(v) + " (this reader reads version 1)");
    }
  }

  // Extra meta is stored canonical, so the same content in any key order reads the same.
  void canonical(std::string& out, JView v) {
    try {
      appendCanonical(out, v);
    } catch (const JfxError& e) {
      fail(e.message());
    }
  }

  // An object's members, sorted, in a buffer of the reader's that the next node reuses: a
  // fresh vector per object was a heap allocation per object, many of a node's (bench/README.md,
  // "Figures behind the code"). Objects nest (meta holds custom), so the buffers are a stack; a
  // Members gives its buffer back when it goes.
  class Members {
   public:
    Members(JsonReader* r, const std::vector<JView>* v) : r_(r), v_(v) {}
    ~Members() { --r_->members_depth_; }
    Members(const Members&) = delete;
    Members& operator=(const Members&) = delete;
    auto begin() const { return v_->begin(); }
    auto end() const { return v_->end(); }

   private:
    JsonReader* r_;
    const std::vector<JView>* v_;
  };
  Members sortedMembers(JView obj) {
    if (members_depth_ == members_pool_.size()) members_pool_.emplace_back();
    std::vector<JView>& members = members_pool_[members_depth_];
    if (auto dup = sortMembers(obj, members)) {
      Scope at(this, *dup);
      fail("duplicate key " + quoteForMessage(*dup));
    }
    ++members_depth_;
    return Members(this, &members);
  }

  // ---- typed accessors: each fails with the pointer of the value it was given.

  std::string_view str(JView j, std::string_view what) const {
    if (!j.isString())
      fail("expected " + std::string(what) + " (a string), got " + std::string(describe(j)));
    return j.str();
  }

  int64_t integer(JView j, std::string_view what) const {
    if (j.type() == JView::Type::BigInt)
      fail("integer " + scalarText(j) + " is out of the int64 range");
    if (!j.isInteger())
      fail("expected " + std::string(what) + " (an integer), got " + std::string(describe(j)));
    if (j.type() == JView::Type::Unsigned)
      fail("integer " + scalarText(j) + " is out of the int64 range");
    return j.integer();
  }

  // An integer for an OptionalInt64 field, which cannot hold INT64_MIN.
  int64_t optionalInteger(JView j, std::string_view what) {
    const int64_t i = integer(j, what);
    if (i == OptionalInt64::kReserved)
      fail(std::string(what) + " " + std::to_string(i) +
           " is out of range (INT64_MIN is reserved)");
    return i;
  }

  // Read into a DimsScratch and interned, so a shape or stride is read without a heap allocation.
  Dims ints(JView j, std::string_view what) {
    if (!j.isArray())
      fail("expected " + std::string(what) + " (an array of integers), got " +
           std::string(describe(j)));
    DimsScratch out;
    out.reserve(j.size());
    for (JView item : j) {
      if (item.type() != JView::Type::Int) {  // not an int64: fail with the item's place
        Scope at(this, out.size());
        integer(item, "an integer");
      }
      out.push_back(item.integer());
    }
    return Dims(out);
  }

  JView member(JView obj, std::string_view key, std::string_view what) {
    return present(obj.find(key), key, what);
  }

  // An object's members under a fixed list of keys, found in one pass: at[i] is the first member
  // named keys[i] (or empty); `bad` says whether a member is one onlyKeys rejects. The caller reads
  // members from `at` and calls onlyKeys where it always did if `bad` is set, so errors and their
  // order stay as they were; a find() per key plus onlyKeys compared each key about 8 times.
  template <size_t N>
  struct Keyed {
    std::array<JView, N> at{};
    bool bad = false;
  };
  template <size_t N>
  static Keyed<N> keyed(JView obj, const std::array<std::string_view, N>& keys) {
    Keyed<N> out;
    for (JView m : obj) {
      const std::string_view k = m.key();
      size_t i = 0;
      while (i < N && keys[i] != k)
        ++i;
      if (i == N || out.at[i])
        out.bad = true;
      else
        out.at[i] = m;
    }
    return out;
  }
  // `m`, the member named `key` (from find or a Keyed), or the error for a missing key.
  JView present(JView m, std::string_view key, std::string_view what) const {
    if (!m) fail("missing key " + quoteForMessage(key) + " (" + std::string(what) + ")");
    return m;
  }

  // Unknown keys are errors rather than silently dropped: the formats are lossless.
  void onlyKeys(JView obj, std::initializer_list<std::string_view> keys, std::string_view what) {
    unsigned seen = 0;
    for (JView m : obj) {
      auto it = std::find(keys.begin(), keys.end(), m.key());
      if (it != keys.end() && !(seen & (1u << (it - keys.begin())))) {
        seen |= 1u << (it - keys.begin());
        continue;  // the common case: no path step to push for an error that does not come
      }
      Scope at(this, m.key());
      if (it == keys.end()) {
        std::string list;
        for (auto k : keys)
          list += (list.empty() ? "" : ", ") + std::string(k);
        fail("unexpected key " + quoteForMessage(m.key()) + " in " + std::string(what) +
             " (expected " + list + ")");
      }
      unsigned bit = 1u << (it - keys.begin());
      if (seen & bit) fail("duplicate key " + quoteForMessage(m.key()));
      seen |= bit;
    }
  }

  // ---- nodes

  void node(JView j) {
    if (!j.isObject()) fail("expected a node object, got " + std::string(describe(j)));
    static constexpr std::array<std::string_view, 6> kKeys = {"args", "kwargs", "meta",
                                                              "name", "op",     "target"};
    const Keyed<6> k = keyed(j, kKeys);
    {
      Scope at(this, "name");
      std::string_view name =
          str(present(k.at[3], "name", "every node has a name"), "the node name");
      if (name.empty()) fail("empty node name");
      node_name_ = name;
      g_->prefetchName(name);
    }
    if (bad_ref_) {
      // An earlier node referred to a name not yet defined: only look for where it is defined.
      if (!bad_ref_defined_at_ && node_name_ == bad_ref_->target) bad_ref_defined_at_ = node_index_;
      return;
    }
    if (k.bad) onlyKeys(j, {"args", "kwargs", "meta", "name", "op", "target"}, "a node");
    prefetchOperands(k.at[0]);

    const OpKind op = nodeOp(k.at[4]);
    const Symbol target = nodeTarget(k.at[5], op);
    std::vector<Arg> args = nodeArgs(k.at[0]);
    Kwargs kwargs = nodeKwargs(k.at[1]);
    if (bad_ref_) return;
    if ((op == OpKind::Placeholder || op == OpKind::GetAttr) &&
        (!args.empty() || !kwargs.empty())) {
      Scope at(this, args.empty() ? "kwargs" : "args");
      fail("a " + std::string(opKindName(op)) + " takes no arguments");
    }

    Node* n = g_->create(op, target, std::move(args), std::move(kwargs), node_name_);
    if (n->name() != node_name_) {  // create() renames a taken name; here that is an error
      Scope at(this, "name");
      fail("duplicate node name " + quoteForMessage(node_name_));
    }
    recent_.add(n);
    if (JView m = k.at[2]) {
      Scope at(this, "meta");
      meta(m, n);
    }
  }

  // The kind named by the node's "op" member (`op`, empty when the node has none).
  OpKind nodeOp(JView op) {
    Scope at(this, "op");
    std::string_view s =
        str(present(op, "op", "placeholder, call_function, get_attr or output"), "the op kind");
    auto k = opKindFromName(s);
    if (!k)
      fail("unknown op kind " + quoteForMessage(s) +
           " (expected placeholder, call_function, get_attr, output)");
    return *k;
  }

  Symbol nodeTarget(JView target, OpKind op) {
    Scope at(this, "target");
    std::string_view s = str(present(target, "target", "the op's target"), "the target");
    if (op == OpKind::Output && s != "output")
      fail("the output node's target must be \"output\", got " + quoteForMessage(s));
    if (op == OpKind::CallFunction && s.empty()) fail("empty call_function target");
    // A placeholder's target is its own name: caching it would only evict the op targets.
    return op == OpKind::CallFunction ? symbols_.intern(s) : Symbol::intern(s);
  }

  std::vector<Arg> nodeArgs(JView a) {
    std::vector<Arg> args;
    if (!a) return args;
    Scope at(this, "args");
    if (!a.isArray()) fail("expected args to be an array, got " + std::string(describe(a)));
    args.reserve(a.size());
    for (JView item : a) {
      Scope k(this, args.size());
      args.push_back(arg(item));
    }
    return args;
  }

  Kwargs nodeKwargs(JView kw) {
    Kwargs kwargs;
    if (!kw) return kwargs;
    Scope at(this, "kwargs");
    if (!kw.isObject()) fail("expected kwargs to be an object, got " + std::string(describe(kw)));
    kwargs.reserve(kw.size());
    for (JView m : sortedMembers(kw)) {  // the IR keeps kwargs sorted, as the printers do
      Scope k(this, m.key());
      kwargs.emplace_back(symbols_.intern(m.key()), arg(m));
    }
    return kwargs;
  }

  // Operands name nodes defined anywhere before (a backward node reads a forward activation
  // from half a graph back), so resolving one is often a cache miss in the name index; starting
  // them all before the arguments are read overlaps those misses with each other.
  void prefetchOperands(JView args) {
    if (!args || !args.isArray()) return;
    auto one = [&](JView item) {
      if (!item.isObject() || item.size() != 1) return;
      JView v = *item.begin();
      if (v.key() != "node" || !v.isString()) return;
      recent_.prefetch(v.str(), [&](std::string_view name) { g_->prefetchName(name); });
    };
    for (JView item : args) {
      if (item.isArray())  // a list of tensors (cat, stack, a bucket's split)
        for (JView inner : item)
          one(inner);
      else
        one(item);
    }
  }

  Arg arg(JView j) {
    switch (j.type()) {
      case JView::Type::Null:
        return Arg::none();
      case JView::Type::Bool:
        return Arg::ofBool(j.boolean());
      case JView::Type::Int:
      case JView::Type::Unsigned:
        return Arg::ofInt(integer(j, "an integer"));
      case JView::Type::BigInt:  // no op takes an integer past 64 bits: the double it reads as
      case JView::Type::Float:
        return Arg::ofFloat(j.floating());
      case JView::Type::String:
        return Arg::ofStr(j.str());
      case JView::Type::Array: {
        std::vector<Arg> items;
        items.reserve(j.size());
        for (JView item : j) {
          Scope at(this, items.size());
          items.push_back(arg(item));
        }
        return Arg::ofList(std::move(items));
      }
      case JView::Type::Object:
        return boxedArg(j);
    }
    fail("unexpected JSON value");
  }

  Arg boxedArg(JView j) {
    static constexpr std::string_view kExpected =
        "(expected one of {\"node\": ...}, {\"float\": ...}, {\"dtype\": ...}, {\"device\": ...}, "
        "{\"layout\": ...}, {\"memory_format\": ...}, {\"tuple\": [...]}, {\"opaque\": ...})";
    if (j.size() != 1)
      fail("expected an argument object with exactly one key, got " + std::to_string(j.size()) +
           " keys " + std::string(kExpected));
    JView v = *j.begin();
    std::string_view key = v.key();
    Scope at(this, key);
    if (key == "node") {
      std::string_view name = str(v, "a node name");
      if (Node* ref = recent_.find(name, [&](std::string_view s) { return g_->findNode(s); }))
        return Arg::ofNode(ref);
      // Not defined yet: keep reading to learn whether it is defined later (a forward reference
      // or cycle) or nowhere (dangling), and report the first one at the end.
      if (!bad_ref_) {
        bad_ref_ = BadRef{where(), std::string(name), node_index_};
        if (name == node_name_) bad_ref_defined_at_ = node_index_;
      }
      return Arg::none();
    }
    if (key == "float") {
      std::string_view s = str(v, "\"inf\", \"-inf\" or \"nan\"");
      if (s == "inf") return Arg::ofFloat(std::numeric_limits<double>::infinity());
      if (s == "-inf") return Arg::ofFloat(-std::numeric_limits<double>::infinity());
      if (s == "nan") return Arg::ofFloat(std::numeric_limits<double>::quiet_NaN());
      fail("expected \"inf\", \"-inf\" or \"nan\", got " + quoteForMessage(s));
    }
    if (key == "dtype") {
      std::string_view s = str(v, "a dtype name");
      auto t = dtypeFromName(s);
      if (!t) fail("unknown dtype " + quoteForMessage(s));
      return Arg::ofDtype(*t);
    }
    if (key == "device") return Arg::ofDevice(str(v, "a device"));
    if (key == "layout") return Arg::ofLayout(str(v, "a layout"));
    if (key == "memory_format") return Arg::ofMemoryFormat(str(v, "a memory format"));
    if (key == "tuple") {
      if (!v.isArray())
        fail("expected the tuple's items (an array), got " + std::string(describe(v)));
      std::vector<Arg> items;
      items.reserve(v.size());
      for (JView item : v) {
        Scope k(this, items.size());
        items.push_back(arg(item));
      }
      return Arg::ofTuple(std::move(items));
    }
    if (key == "opaque") {
      if (!v.isObject())
        fail("expected {\"repr\": ..., \"type\": ...}, got " + std::string(describe(v)));
      onlyKeys(v, {"repr", "type"}, "an opaque value");
      std::string_view repr, type;
      {
        Scope k(this, "repr");
        repr = str(member(v, "repr", "the value's repr"), "the repr");
      }
      {
        Scope k(this, "type");
        type = str(member(v, "type", "the value's type name"), "the type name");
      }
      return Arg::ofOpaque(type, repr);
    }
    fail("unknown argument object key " + quoteForMessage(key) + " " + std::string(kExpected));
  }

  ValueMeta val(JView j) {
    ValueMeta v;
    switch (j.type()) {
      case JView::Type::Null:
        v.kind = ValueMeta::Kind::None;
        return v;
      case JView::Type::Bool:
        v.kind = ValueMeta::Kind::Bool;
        v.i = j.boolean() ? 1 : 0;
        return v;
      case JView::Type::Int:
      case JView::Type::Unsigned:
        v.kind = ValueMeta::Kind::Int;
        v.i = integer(j, "an integer");
        return v;
      case JView::Type::BigInt:  // as for arguments
      case JView::Type::Float:
        v.kind = ValueMeta::Kind::Float;
        v.f = j.floating();
        return v;
      case JView::Type::Array:
        v.kind = ValueMeta::Kind::List;
        v.items.reserve(j.size());
        for (JView item : j) {
          Scope at(this, v.items.size());
          v.items.push_back(val(item));
        }
        return v;
      case JView::Type::Object:
        if (j.size() == 1 && j.find("float")) {
          v.kind = ValueMeta::Kind::Float;
          v.f = boxedArg(j).toFloat();
          return v;
        }
        v.kind = ValueMeta::Kind::Tensor;
        v.tensor = tensor(j);
        return v;
      case JView::Type::String:
        break;
    }
    fail("expected a value meta (tensor object, array, null or scalar), got " +
         std::string(describe(j)));
  }

  // {"name", "dtype", "shape", "device", "data"}: data is the contiguous little-endian bytes in
  // lower-case hex, exactly meta.bytes() of them.
  ConstantInfo constant(JView c) {
    ConstantInfo info;
    {
      Scope k(this, "name");
      info.name = str(member(c, "name", "the get_attr target"), "the constant's name");
      if (g_->findConstant(info.name)) fail("duplicate constant " + quoteForMessage(info.name));
    }
    {
      Scope k(this, "dtype");
      std::string_view s = str(member(c, "dtype", "a constant needs a dtype"), "a dtype name");
      auto d = dtypeFromName(s);
      if (!d) fail("unknown dtype " + quoteForMessage(s));
      info.meta.dtype = *d;
    }
    {
      Scope k(this, "shape");
      info.meta.shape = ints(member(c, "shape", "a constant needs a shape"), "the shape");
      info.meta.stride = TensorMeta::contiguousStride(info.meta.shape);
    }
    if (JView d = c.find("device")) {
      Scope k(this, "device");
      info.meta.device = Symbol::intern(str(d, "a device"));
    }
    Scope k(this, "data");
    if (!decodeHex(str(member(c, "data", "the constant's bytes in hex"), "hex bytes"), info.data))
      fail("expected lower-case hex digits (two per byte)");
    if (std::string e = constantSizeProblem(info); !e.empty()) fail(e);
    return info;
  }

  TensorMeta tensor(JView j) {
    static constexpr std::array<std::string_view, 4> kKeys = {"device", "dtype", "shape", "stride"};
    const Keyed<4> k = keyed(j, kKeys);
    if (k.bad) onlyKeys(j, {"device", "dtype", "shape", "stride"}, "a tensor meta");
    TensorMeta t;
    {
      Scope at(this, "dtype");
      std::string_view s =
          str(present(k.at[1], "dtype", "a tensor meta needs a dtype"), "a dtype name");
      auto d = dtypeFromName(s);
      if (!d) fail("unknown dtype " + quoteForMessage(s));
      t.dtype = *d;
    }
    {
      Scope at(this, "shape");
      t.shape = ints(present(k.at[2], "shape", "a tensor meta needs a shape"), "the shape");
    }
    if (JView s = k.at[3]) {
      Scope at(this, "stride");
      t.stride = ints(s, "the stride");
      if (t.stride.size() != t.shape.size())
        fail("stride has " + std::to_string(t.stride.size()) + " dimensions but shape has " +
             std::to_string(t.shape.size()));
    } else {
      t.stride = TensorMeta::contiguousStride(t.shape);
    }
    if (std::string problem = t.sizeProblem(); !problem.empty()) {
      Scope at(this, "shape");
      fail(problem);
    }
    if (JView d = k.at[0]) {
      Scope at(this, "device");
      t.device = symbols_.intern(str(d, "a device"));
    }
    return t;
  }

  void meta(JView j, Node* n) {
    if (!j.isObject()) fail("expected meta to be an object, got " + std::string(describe(j)));
    NodeMeta& m = n->meta();
    std::string extra;
    auto extraKey = [&](std::string_view key) {
      extra += extra.empty() ? "{" : ",";
      appendJsonString(extra, key);
      extra += ':';
    };
    for (JView v : sortedMembers(j)) {  // sorted, so `extra` comes out sorted
      std::string_view key = v.key();
      Scope at(this, key);
      if (key == "val") {
        n->val() = val(v);
      } else if (key == "phase") {
        std::string_view s = str(v, "a phase");
        auto p = phaseFromName(s);
        if (!p || *p == Phase::Unknown)
          fail("unknown phase " + quoteForMessage(s) + " (expected forward, loss or backward)");
        m.phase = *p;
      } else if (key == "recompute") {
        int64_t r = integer(v, "a CheckpointPolicy value 0..3");
        if (r < 0 || r > 3)
          fail("recompute must be 0..3 (CheckpointPolicy), got " + std::to_string(r));
        m.recompute = static_cast<Recompute>(r);
      } else if ((key == "ac_graph_id" || key == "seq_nr") && v.isWideInteger()) {
        // Past what the typed field holds (seq_nr is 2^64-1 on nodes autograd numbers as
        // "none", e.g. a chunked loss's backward): jointfx reads neither beyond its value, so
        // the number rides along as extra meta, unchanged.
        extraKey(key);
        canonical(extra, v);
      } else if (key == "ac_graph_id") {
        m.ac_graph_id = optionalInteger(v, "the ac_graph_id");
      } else if (key == "seq_nr") {
        m.seq_nr = optionalInteger(v, "the seq_nr");
      } else if (key == "stack_trace") {
        m.stack_trace = str(v, "the stack trace");
      } else if (key == "custom" && v.isObject() && v.find("module_fqn")) {
        {
          Scope f(this, "module_fqn");
          m.module_fqn = symbols_.intern(str(v.find("module_fqn"), "the module FQN"));
        }
        if (m.module_fqn.empty()) {
          // An empty FQN is not typed (empty means absent); carry it verbatim instead.
          extraKey(key);
          canonical(extra, v);
        } else if (v.size() > 1) {
          extraKey(key);
          extra += '{';
          bool first = true;
          for (JView c : sortedMembers(v)) {
            if (c.key() == "module_fqn") continue;
            Scope k(this, c.key());
            extra += first ? "" : ",";
            first = false;
            appendJsonString(extra, c.key());
            extra += ':';
            canonical(extra, c);
          }
          extra += '}';
        }
      } else {
        extraKey(key);
        canonical(extra, v);
      }
    }
    if (!extra.empty()) {
      extra += '}';
      liftAttrs(extra, m.attrs);
      m.extra_json = extra;
    }
  }

  // ---- header

  void header(JView doc) {
    // Already checked while streaming when present; here only whether they are missing.
    for (std::string_view key : {"format", "version"}) {
      if (!doc.find(key))
        fail("missing key " + quoteForMessage(key) + " (expected " +
             (key == "format" ? "\"format\": \"jointfx.graph\"" : "\"version\": 1") + ")");
    }
    JView nodes = doc.find("nodes");
    if (!nodes) fail("missing key 'nodes'");
    if (!nodes.isArray()) {
      Scope at(this, "nodes");
      fail("expected nodes to be an array, got " + std::string(describe(nodes)));
    }
    onlyKeys(
        doc,
        {"format", "version", "process_groups", "inputs", "outputs", "constants", "meta", "nodes"},
        "the header");
    if (JView list = doc.find("process_groups")) processGroups(list);
    if (JView list = doc.find("inputs")) inputs(list);
    if (JView list = doc.find("outputs")) outputs(list);
    if (JView list = doc.find("constants")) constants(list);
    if (JView meta = doc.find("meta")) {
      Scope at(this, "meta");
      if (!meta.isObject())
        fail("expected meta to be an object, got " + std::string(describe(meta)));
      if (!meta.empty()) canonical(g_->extraJson(), meta);
    }
  }

  void processGroups(JView list) {
    Scope at(this, "process_groups");
    if (!list.isArray())
      fail("expected an array of process groups, got " + std::string(describe(list)));
    size_t i = 0;
    for (JView pg : list) {
      Scope item(this, i++);
      if (!pg.isObject()) fail("expected a process group object, got " + std::string(describe(pg)));
      onlyKeys(pg, {"name", "ranks", "size"}, "a process group");
      ProcessGroupInfo info;
      {
        Scope k(this, "name");
        info.name = str(member(pg, "name", "the group_name collectives carry"), "the group name");
        if (g_->findProcessGroup(info.name))
          fail("duplicate process group " + quoteForMessage(info.name));
      }
      {
        Scope k(this, "size");
        info.size = integer(member(pg, "size", "the group size"), "the group size");
      }
      if (JView r = pg.find("ranks")) {
        Scope k(this, "ranks");
        info.ranks = ints(r, "the ranks");
      }
      g_->processGroups().push_back(std::move(info));
    }
  }

  void inputs(JView list) {
    Scope at(this, "inputs");
    if (!list.isArray()) fail("expected an array of inputs, got " + std::string(describe(list)));
    size_t i = 0;
    for (JView in : list) {
      Scope item(this, i++);
      if (!in.isObject()) fail("expected an input object, got " + std::string(describe(in)));
      onlyKeys(in, {"fqn", "kind", "name"}, "an input");
      Node* n = nullptr;
      {
        Scope k(this, "name");
        std::string_view name = str(member(in, "name", "the placeholder's name"), "a name");
        n = g_->findNode(name);
        if (!n) fail("input " + quoteForMessage(name) + " names no node");
        if (n->op() != OpKind::Placeholder)
          fail("input " + quoteForMessage(name) + " is not a placeholder");
      }
      InputKind kind;
      {
        Scope k(this, "kind");
        std::string_view s =
            str(member(in, "kind", "parameter, buffer, user_input, mesh or opaque"), "a kind");
        auto ik = inputKindFromName(s);
        if (!ik)
          fail("unknown input kind " + quoteForMessage(s) +
               " (expected parameter, buffer, user_input, mesh, opaque)");
        kind = *ik;
      }
      std::string fqn;
      if (JView f = in.find("fqn")) {
        Scope k(this, "fqn");
        fqn = str(f, "the FQN");
      }
      n->setInputInfo(kind, std::move(fqn));
    }
  }

  void outputs(JView list) {
    Scope at(this, "outputs");
    if (!list.isArray()) fail("expected an array of outputs, got " + std::string(describe(list)));
    size_t i = 0;
    for (JView out : list) {
      Scope item(this, i++);
      if (!out.isObject()) fail("expected an output object, got " + std::string(describe(out)));
      onlyKeys(out, {"fqn", "kind"}, "an output");
      OutputSpec spec;
      {
        Scope k(this, "kind");
        std::string_view s =
            str(member(out, "kind", "loss, gradient, buffer_mutation, other, mesh or opaque"),
                "a kind");
        auto ok = outputKindFromName(s);
        if (!ok)
          fail("unknown output kind " + quoteForMessage(s) +
               " (expected loss, gradient, buffer_mutation, other, mesh, opaque)");
        spec.kind = *ok;
      }
      if (JView f = out.find("fqn")) {
        Scope k(this, "fqn");
        spec.fqn = str(f, "the FQN");
      }
      g_->outputSpecs().push_back(std::move(spec));
    }
  }

  void constants(JView list) {
    Scope at(this, "constants");
    if (!list.isArray()) fail("expected an array of constants, got " + std::string(describe(list)));
    size_t i = 0;
    for (JView c : list) {
      Scope item(this, i++);
      if (!c.isObject()) fail("expected a constant object, got " + std::string(describe(c)));
      onlyKeys(c, {"data", "device", "dtype", "name", "shape"}, "a constant");
      g_->constants().push_back(constant(c));
    }
  }

  [[noreturn]] void badReference() {
    const BadRef& b = *bad_ref_;
    std::string msg;
    if (bad_ref_defined_at_ && *bad_ref_defined_at_ == b.node_index)
      msg = "node " + quoteForMessage(b.target) + " refers to itself (a cycle)";
    else if (bad_ref_defined_at_)
      msg = "node " + quoteForMessage(b.target) + " is used before its definition at /nodes/" +
            std::to_string(*bad_ref_defined_at_) +
            " (a forward reference or cycle: nodes must be in topological order)";
    else
      msg = "dangling reference to undefined node " + quoteForMessage(b.target);
    throw JfxError(b.loc, msg);
  }

  struct BadRef {
    SourceLocation loc;
    std::string target;
    size_t node_index;
  };
  static constexpr uint32_t kNone = std::numeric_limits<uint32_t>::max();

  std::string_view text_;
  const std::string& filename_;
  std::unique_ptr<Graph> g_;
  uint32_t nodes_array_ = kNone;  // index of the open "nodes" array
  uint32_t node_start_ = 0;       // where the node being read starts in the tree
  uint32_t node_chars_ = 0;
  std::array<Step, kMaxPath> path_;
  size_t depth_ = 0;
  std::deque<std::vector<JView>> members_pool_;  // sortedMembers' buffers (a deque: they stay put)
  size_t members_depth_ = 0;                     // how many are lent out
  std::string node_name_;
  uint64_t node_name_hash_ = 0;  // Graph::nameHash(node_name_), on the direct path
  size_t node_index_ = 0;
  std::array<Unclaimed, kClaimLag> unclaimed_;
  size_t unclaimed_first_ = 0, unclaimed_count_ = 0;
  std::optional<BadRef> bad_ref_;
  std::optional<size_t> bad_ref_defined_at_;
  RecentNames<Node> recent_;
  SymbolCache symbols_;
  std::vector<std::string_view> pending_;  // operands read directly, not yet looked up
  std::string target_buf_;
  Symbol last_fqn_;
  SymbolCache fqn_symbols_;
  Symbol last_device_;                             // directTensor's last device,
  ScalarType last_dtype_ = ScalarType::Undefined;  // dtype
  std::string_view last_dtype_name_;               // and its name (dtypeName's, or empty)
  struct TensorEntry {
    std::string_view text;  // in the input
    TensorMeta meta;
  };
  std::vector<TensorEntry> tensor_cache_ = std::vector<TensorEntry>(1024);  // cachedTensor's
  size_t direct_nodes_ = 0;
  // directList's and directVal's buffers, one per depth (references to them outlive deeper calls).
  std::vector<std::vector<Arg>> arg_buffers_ = std::vector<std::vector<Arg>>(kDirectDepth);
  std::vector<std::vector<ValueMeta>> val_buffers_ =
      std::vector<std::vector<ValueMeta>>(kDirectDepth);
  Kwargs kwargs_buffer_;

 public:
  size_t directNodes() const { return direct_nodes_; }
};

// Parses a small JSON text that must be one object (extra meta and the like).
JView parseObject(TreeBuilder& b, std::string_view text) {
  static const std::string kNoFile;
  b.parse(text, kNoFile);
  JView root = b.root();
  if (!root.isObject())
    throw JfxError({}, "expected a JSON object, got " + std::string(describe(root)));
  return root;
}

}  // namespace

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

std::unique_ptr<Graph> readJsonGraph(std::string_view text, const std::string& filename) {
  try {
    return JsonReader(text, filename, Tokenizer::Fast).read();
  } catch (const ReadAgainWithNlohmann&) {
    // The fast tokenizer gave up part way (most likely on an error): nlohmann reads it all again
    // and reports what is wrong exactly as it always has. A text ends just past its first NUL
    // byte (readInputFile's rule; a mapped file is handed over whole, and the fast tokenizer
    // always stops at a NUL byte).
    if (const size_t nul = text.find('\0'); nul != std::string_view::npos)
      text = text.substr(0, nul + 1);
    return JsonReader(text, filename, Tokenizer::Nlohmann).read();
  }
}

bool fastJsonTokenizerAccepts(std::string_view text) {
  TreeBuilder b;
  try {
    return FastSax(text, b).run();
  } catch (const JfxError&) {
    return false;  // the builder's own limits (nesting, size)
  }
}

size_t jsonNodesReadDirectly(std::string_view text) {
  static const std::string kFile = "<test>";
  JsonReader r(text, kFile, Tokenizer::Fast);
  try {
    r.read();
  } catch (const ReadAgainWithNlohmann&) {
    return 0;
  }
  return r.directNodes();
}

std::unique_ptr<Graph> readJsonInto(std::string_view text, const std::string& filename,
                                    std::unique_ptr<Graph> g) {
  // nlohmann's tokenizer reads every document alone; the fast one may hand a document back to be
  // read again, which would need the graph as it was.
  return JsonReader(text, filename, Tokenizer::Nlohmann, std::move(g)).read();
}

std::unique_ptr<Graph> readJsonGraphWithNlohmann(std::string_view text,
                                                 const std::string& filename) {
  return JsonReader(text, filename, Tokenizer::Nlohmann).read();
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
