// Reading JSON values from FastSax's tokens with located errors (docs/graph-format.md): the JSON
// pointer of the value being read, kept as a stack; containers with the tree's nesting limit;
// objects whose members are read in the file's order while their errors are held and raised in
// the order the format checks them; typed scalars. The JSON reader's rules (reader.cc) are
// written on these. Internal to ir/json/.
#pragma once

#include <deque>
#include <memory>
#include <optional>
#include <string>

#include "ir/json/tokenizer.h"

namespace jfx::json_detail {

class TokenReader {
 public:
  TokenReader(std::string_view text, const std::string& filename)
      : text_(text), filename_(filename) {}

 protected:
  // One step of the JSON pointer to the value being read, kept as a stack and only rendered when
  // an error needs it.
  struct Step {
    const char* key;  // nullptr: an array index
    size_t n;         // the key's length, or the index
  };
  // Pushed for every member and element read, so kept inline: a call each was a visible part of
  // reading a graph (bench/README.md, "One JSON decoder path").
  class Scope {
   public:
    [[gnu::always_inline]] Scope(TokenReader* r, std::string_view key) : r_(r) {
      r_->push(key.data() ? key.data() : "", key.size());
    }
    [[gnu::always_inline]] Scope(TokenReader* r, size_t index) : r_(r) { r_->push(nullptr, index); }
    [[gnu::always_inline]] ~Scope() { --r_->depth_; }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    TokenReader* r_;
  };

  // A fixed array, not a vector: steps are pushed and popped a few dozen times per node, and a
  // vector's emplace_back is an out-of-line call each time (bench/README.md, "Figures behind the
  // code"). Steps past the array (deeper than any document may nest) are counted, not kept.
  static constexpr size_t kMaxPath = kMaxNesting + 8;
  [[gnu::always_inline]] void push(const char* key, size_t n) {
    if (depth_ < kMaxPath) path_[depth_] = Step{key, n};
    ++depth_;
  }

  std::string pointer() const {
    std::string p;
    for (size_t i = 0; i < std::min(depth_, kMaxPath); ++i) {
      const Step& s = path_[i];
      p += '/';
      if (!s.key) {
        p += std::to_string(s.n);
        continue;
      }
      appendPointerToken(p, std::string_view(s.key, s.n));
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

  // Thrown where the fast tokenizer stops (a syntax error, a number out of range): nlohmann
  // reads the text again to say where (readJsonGraph).
  struct Malformed {};
  // Thrown past kMaxNesting open containers, the tree's limit.
  struct TooDeep {};

  // An error found in a member, held until its object has been read.
  struct Held {
    SourceLocation loc;
    std::string message;
    std::string key;  // the unexpected or repeated key it is about (members), else empty
  };
  // Empty until an error is held: a slot is made for every member read, and an empty pointer
  // costs a store where an empty std::optional<Held> was zeroed whole (bench/README.md, "One JSON
  // decoder path, built").
  using Slot = std::unique_ptr<Held>;

  // Throws the error held in `slot`, if any, naming the node (its name may come after the
  // member in the file).
  void raise(const Slot& slot) const {
    if (slot) [[unlikely]]
      raiseHeld(*slot);
  }
  [[noreturn, gnu::noinline]] void raiseHeld(const Held& held) const {
    SourceLocation loc = held.loc;
    if (loc.node.empty()) loc.node = node_name_;
    throw JfxError(loc, held.message);
  }
  [[noreturn]] void missing(std::string_view key, std::string_view what) {
    Scope at(this, key);
    fail("missing key " + quoteForMessage(key) + " (" + std::string(what) + ")");
  }
  Held here(const std::string& message) const { return Held{where(), message, {}}; }

  // Reads a value with `read`; an error it throws is held in `slot` (the first one) and the
  // rest of the value is skipped.
  template <class F>
  void hold(FastSax& s, Slot& slot, F&& read) {
    const char* start = s.pos();
    try {
      read();
    } catch (const JfxError& e) {
      if (!slot) slot = std::make_unique<Held>(Held{e.location(), e.message(), {}});
      s.rewind(start);
      skip(s);
    }
  }

  // ---- containers

  // One more open container, at most kMaxNesting.
  class Open {
   public:
    explicit Open(TokenReader* r) : r_(r) {
      if (r_->open_ >= static_cast<size_t>(kMaxNesting)) throw TooDeep{};
      ++r_->open_;
    }
    ~Open() { --r_->open_; }
    Open(const Open&) = delete;
    Open& operator=(const Open&) = delete;

   private:
    TokenReader* r_;
  };

  // Reads "{...}": f(key) reads each member's value. `key` lasts until the node is read.
  template <class F>
  void object(FastSax& s, F&& f) {
    static constexpr std::array<std::string_view, 0> kAnyKey{};
    keyedObject(s, kAnyKey, [&](int, std::string_view key) { f(key); });
  }

  // Reads "[...]": f(i) reads element i.
  template <class F>
  void array(FastSax& s, F&& f) {
    Open open(this);
    if (!s.eat('[')) throw Malformed{};
    if (s.peek() == ']') {
      s.advance();
      return;
    }
    for (size_t i = 0;; ++i) {
      f(i);
      const char c = s.take();
      if (c == ']') return;
      if (c != ',') throw Malformed{};
    }
  }

  // Reads "{...}": f(i, key) reads each member's value; i is the index of its key in `keys`, or -1.
  // `key` lasts until the node is read. The writer sorts keys: the key after the last one found
  // in `keys` is tried first, against the text itself.
  template <size_t N, class F>
  void keyedObject(FastSax& s, const std::array<std::string_view, N>& keys, F&& f) {
    Open open(this);
    if (!s.eat('{')) throw Malformed{};
    if (s.peek() == '}') {
      s.advance();
      return;
    }
    size_t next = 0;
    for (;;) {
      int i = -1;
      std::string_view key;
      if (next < N && s.quotedKey(keys[next])) {
        i = static_cast<int>(next);
      } else {
        if (!s.stringToken(key)) throw Malformed{};
        i = keyIndex(key, keys);
      }
      if (!s.eat(':')) throw Malformed{};
      if (i >= 0) {
        key = keys[static_cast<size_t>(i)];
        next = static_cast<size_t>(i) + 1;
      } else {
        key = keptKey(key);
      }
      f(i, key);
      const char c = s.take();
      if (c == '}') return;
      if (c != ',') throw Malformed{};
    }
  }

  // Reads "{...}" whose keys are some of `keys`: read(i) reads the first value of keys[i] (its
  // error held in held[i]); other(key) may read a value under any other key (true) or leave it
  // to be skipped. The smallest unknown or repeated key's error is held in held[N].
  struct Read {
    unsigned seen = 0;  // bit i: keys[i] was present
    size_t count = 0;   // members, repeated ones too
    bool has(size_t i) const { return (seen >> i & 1u) != 0; }
  };
  // A required member's checks, in the format's order: the error held for it, then whether it
  // is there at all.
  template <size_t N>
  void required(const Read& r, const std::array<Slot, N + 1>& held,
                const std::array<std::string_view, N>& keys, size_t i, std::string_view what) {
    raise(held[i]);
    if (!r.has(i)) missing(keys[i], what);
  }
  template <size_t N, class F, class G>
  Read members(FastSax& s, const std::array<std::string_view, N>& keys, std::string_view what,
               std::array<Slot, N + 1>& held, F&& read, G&& other) {
    Read r;
    keyedObject(s, keys, [&](int i, std::string_view key) {
      ++r.count;
      const unsigned bit = i >= 0 ? 1u << i : 0u;
      Scope at(this, key);
      if (bit && !(r.seen & bit)) {
        r.seen |= bit;
        hold(s, held[static_cast<size_t>(i)], [&] { read(i); });
        return;
      }
      // The smallest such key, so the error does not depend on the order of the keys.
      if (!held[N] || key < held[N]->key) {
        held[N] = std::make_unique<Held>(
            here(bit ? "duplicate key " + quoteForMessage(key) : unexpectedKey(key, keys, what)));
        held[N]->key = key;
      }
      if (!other(key)) skip(s);
    });
    return r;
  }
  template <size_t N, class F>
  Read members(FastSax& s, const std::array<std::string_view, N>& keys, std::string_view what,
               std::array<Slot, N + 1>& held, F&& read) {
    return members(s, keys, what, held, read, [](std::string_view) { return false; });
  }

  template <size_t N>
  static int keyIndex(std::string_view key, const std::array<std::string_view, N>& keys) {
    for (size_t i = 0; i < N; ++i)
      if (keys[i] == key) return static_cast<int>(i);
    return -1;
  }
  template <size_t N>
  static std::string unexpectedKey(std::string_view key,
                                   const std::array<std::string_view, N>& keys,
                                   std::string_view what) {
    std::string list;
    for (auto k : keys)
      list += (list.empty() ? "" : ", ") + std::string(k);
    return "unexpected key " + quoteForMessage(key) + " in " + std::string(what) + " (expected " +
           list + ")";
  }

  // Skips a value, checking its syntax.
  void skip(FastSax& s) {
    std::string_view str;
    FastSax::Number num;
    switch (s.peek()) {
      case '{':
        object(s, [&](std::string_view) { skip(s); });
        return;
      case '[':
        array(s, [&](size_t) { skip(s); });
        return;
      case '"':
        if (!s.stringToken(str)) throw Malformed{};
        return;
      case 't':
        if (!s.wordToken("true")) throw Malformed{};
        return;
      case 'f':
        if (!s.wordToken("false")) throw Malformed{};
        return;
      case 'n':
        if (!s.wordToken("null")) throw Malformed{};
        return;
      default:
        if (!s.numberToken(num)) throw Malformed{};
    }
  }

  // What the next value is, for an error message ("a string", "an integer"), reading nothing.
  std::string describeNext(FastSax& s) {
    switch (s.peek()) {
      case '{':
        return "an object";
      case '[':
        return "an array";
      case '"':
        return "a string";
      case 't':
      case 'f':
        return "a boolean";
      case 'n':
        return "null";
      default: {
        const char* at = s.pos();
        FastSax::Number num;
        if (!s.numberToken(num)) throw Malformed{};
        s.rewind(at);
        return num.type == JView::Type::Float ? "a float" : "an integer";
      }
    }
  }

  // ---- scalars: each fails with the place of the value it reads.

  // A string: a view of the text, or of a buffer the next string reuses.
  std::string_view str(FastSax& s, std::string_view what) {
    std::string_view out;
    if (s.peek() != '"')
      fail("expected " + std::string(what) + " (a string), got " + describeNext(s));
    if (!s.stringToken(out)) throw Malformed{};
    return out;
  }

  // An integer that fits int64.
  int64_t integer(FastSax& s, std::string_view what) {
    FastSax::Number num;
    const char c = s.peek();
    if (c != '-' && (c < '0' || c > '9'))
      fail("expected " + std::string(what) + " (an integer), got " + describeNext(s));
    if (!s.numberToken(num)) throw Malformed{};
    return integerOf(num, what);
  }
  int64_t integerOf(const FastSax::Number& num, std::string_view what) const {
    switch (num.type) {
      case JView::Type::Int:
        return num.i;
      case JView::Type::Unsigned:
      case JView::Type::BigInt:
        fail("integer " + numberText(num) + " is out of the int64 range");
      default:
        fail("expected " + std::string(what) + " (an integer), got a float");
    }
  }
  static std::string numberText(const FastSax::Number& num) {
    std::string t;
    if (num.type == JView::Type::Unsigned)
      appendUnsigned(t, num.u);
    else if (num.type == JView::Type::Int)
      appendInt(t, num.i);
    else if (num.type == JView::Type::BigInt)
      t = num.text;
    else
      appendFloat(t, num.f);
    return t;
  }

  // A shape or stride, read into a DimsScratch and interned: no heap allocation.
  void ints(FastSax& s, Dims& out, std::string_view what) {
    if (s.peek() != '[')
      fail("expected " + std::string(what) + " (an array of integers), got " + describeNext(s));
    DimsScratch dims;
    array(s, [&](size_t i) {
      FastSax::Number num;
      const char c = s.peek();
      if (c == '-' || (c >= '0' && c <= '9')) {
        if (!s.numberToken(num)) throw Malformed{};
        if (num.type == JView::Type::Int) {
          dims.push_back(num.i);
          return;
        }
        Scope at(this, i);
        integerOf(num, "an integer");
      }
      Scope at(this, i);
      fail("expected an integer (an integer), got " + describeNext(s));
    });
    out = Dims(dims);
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
  // A key with escapes, kept while the node is read (for the error pointer).
  std::string_view keptKey(std::string_view key) {
    if (inText(key)) return key;
    return kept_names_.emplace_back(key);
  }

 protected:
  std::string_view text_;
  const std::string& filename_;
  std::string node_name_;               // the node being read, named in errors
  std::deque<std::string> kept_names_;  // the node's names and keys with escapes

 private:
  std::array<Step, kMaxPath> path_;
  size_t depth_ = 0;
  size_t open_ = 2;  // open containers: the document and "nodes", then the node's
};

}  // namespace jfx::json_detail
