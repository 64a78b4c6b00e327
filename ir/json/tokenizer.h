// The JSON tokenizer and value tree the JSON reader and writer share (docs/graph-format.md):
// FastSax, which reads well-formed JSON itself, nlohmann's SAX parser for anything else, and the
// flat JsonTree they fill. Internal to ir/json/ and ir/json_format.h's functions.
#pragma once

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

#include "ir/json_format.h"

namespace jfx::json_detail {

using namespace std::string_view_literals;

using json = nlohmann::json;

constexpr int64_t kFormatVersion = 1;
constexpr std::string_view kFormatName = "jointfx.graph";
// Deeper nesting is rejected while the tree is built, so the code that walks a tree may recurse
// without overflowing the stack on a hostile file. Real graphs nest a few levels.
constexpr int kMaxNesting = 200;

inline void appendInt(std::string& out, int64_t v) {
  char buf[24];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, static_cast<size_t>(r.ptr - buf));
}

inline void appendUnsigned(std::string& out, uint64_t v) {
  char buf[24];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, static_cast<size_t>(r.ptr - buf));
}

// `key` as one token of a JSON pointer (RFC 6901: '~' and '/' escaped), appended to `out`.
inline void appendPointerToken(std::string& out, std::string_view key) {
  for (char c : key) {
    if (c == '~')
      out += "~0";
    else if (c == '/')
      out += "~1";
    else
      out += c;
  }
}

// The std::string writers (ir/json_format.h), beside the writer's JsonOut ones.
using ::jfx::appendFloat;
using ::jfx::appendHex;
using ::jfx::appendJsonString;

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

std::string_view describe(JView j);

std::string scalarText(JView v);

// An object's members sorted by key into `out`. Returns a repeated key if there is one: JSON
// readers disagree on which of two equal keys wins, so the formats reject them.
inline std::optional<std::string_view> sortMembers(JView obj, std::vector<JView>& out) {
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
inline void appendCanonical(Out& out, JView v) {
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

SourceLocation locate(std::string_view text, size_t offset, const std::string& filename);

// The error for a NUL byte at `offset`, once the text before it parsed: nlohmann takes a NUL for
// the end of its input, so "a document, then NUL" passes its parser.
[[noreturn]] void nulByteError(std::string_view text, size_t offset, const std::string& filename);

// Collects nlohmann's SAX events into a JsonTree. Nesting deeper than kMaxNesting is an error
// here, so everything that walks a tree may recurse freely. Subclasses watch values arrive.
// Which tokenizer feeds a TreeBuilder. Fast (FastSax, below) reads well-formed JSON without a
// string per token; whatever it does not accept (a syntax error, a number out of range, invalid
// UTF-8) is read again by nlohmann's SAX parser, so every syntax error keeps nlohmann's message
// and byte offset.
enum class Tokenizer { Fast, Nlohmann };

// Thrown by TreeBuilder::parse when the fast tokenizer stops on a builder that has already acted
// on its events (a JsonReader made nodes): the caller has nlohmann report the error.
struct ReadAgainWithNlohmann {};
class FastSax;

class TreeBuilder : public nlohmann::json_sax<json> {
 public:
  explicit TreeBuilder(Tokenizer tokenizer = Tokenizer::Fast, bool restartable = true)
      : tokenizer_(tokenizer), restartable_(restartable) {}

  // Parses all of `text`. Throws JfxError; a syntax error names its line, column and byte.
  void parse(std::string_view text, const std::string& filename);
  JView root() const { return JView(&tree_, 0); }

  // The fast tokenizer asks this before each value two containers deep: true when a subclass read
  // the whole value from the text itself (readDirect), building no tree for it.
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
  // Reads an element of the array at `direct_parent_` from the tokens (true), or leaves `sax`
  // where it was and returns false for the tree to take it.
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
// int64, uint64 or double the same way, an integer past 64 bits as nlohmann's double with its
// digits); on anything else it stops and returns false, and the caller lets nlohmann read the
// text to report it.
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
    JsonTree::Type type = JsonTree::Type::Int;  // Int, Unsigned (past int64), BigInt or Float
    int64_t i = 0;
    uint64_t u = 0;
    double f = 0;           // Float, and BigInt's nearest double
    std::string_view text;  // BigInt's digits
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
      if (open.size() == 2 && b_.tryDirect(*this)) {
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
  // an integer that fits int64 (or, without '-', uint64), else a double (an integer past 64 bits:
  // a BigInt, its digits kept). A double out of range is left to nlohmann, whose error it is.
  bool number() {
    Number n;
    if (!scanNumber(n)) return false;
    if (n.type == JsonTree::Type::Float) {
      static const std::string kNoText;
      b_.number_float(n.f, kNoText);
    } else if (n.type == JsonTree::Type::BigInt) {
      b_.number_float(n.f, std::string(n.text));  // as nlohmann hands an integer past 64 bits
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
        if (r.ec == std::errc() && r.ptr == p_) {
          out.type = JsonTree::Type::Int;
          out.i = v;
          return true;
        }
      } else {
        uint64_t v = 0;
        auto r = std::from_chars(start, p_, v);
        if (r.ec == std::errc() && r.ptr == p_) {
          // As the tree keeps it (number_unsigned): an int64 when it fits.
          if (v <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
            out.type = JsonTree::Type::Int;
            out.i = static_cast<int64_t>(v);
          } else {
            out.type = JsonTree::Type::Unsigned;
            out.u = v;
          }
          return true;
        }
      }
      // Past 64 bits: the nearest double, and the digits (a BigInt).
      double f = 0;
      if (!toDouble(start, f)) return false;
      out.type = JsonTree::Type::BigInt;
      out.f = f;
      out.text = std::string_view(start, static_cast<size_t>(p_ - start));
      return true;
    }
    double f = 0;
    if (!toDouble(start, f)) return false;
    out.type = JsonTree::Type::Float;
    out.f = f;
    return true;
  }

  // The number from `start` to p_ as a double, as nlohmann reads it: one that underflows is
  // the nearest (0 or a subnormal); one that overflows is not read (nlohmann's error).
  bool toDouble(const char* start, double& f) const {
    auto r = std::from_chars(start, p_, f);
    if (r.ec == std::errc::result_out_of_range)
      f = std::strtod(std::string(start, p_).c_str(), nullptr);
    else if (r.ec != std::errc() || r.ptr != p_)
      return false;
    return std::isfinite(f);
  }

  const char* p_;
  const char* end_;
  TreeBuilder& b_;
  std::string_view str_;  // the last string read
  std::string scratch_;   // its decoded bytes, when it had escapes or non-ASCII
};

// Parses a small JSON text that must be one object (extra meta and the like).
JView parseObject(TreeBuilder& b, std::string_view text);

}  // namespace jfx::json_detail
