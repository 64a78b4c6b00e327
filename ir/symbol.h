// Interned strings for op targets, devices, process-group names and other short strings that
// repeat across a graph. Interning keeps Arg small and makes target comparison an integer compare.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace jfx {

class Symbol {
 public:
  constexpr Symbol() = default;  // the empty symbol: id 0, string ""
  static Symbol intern(std::string_view s);

  uint32_t id() const { return id_; }
  std::string_view str() const;
  bool empty() const { return id_ == 0; }

  friend bool operator==(Symbol a, Symbol b) { return a.id_ == b.id_; }
  friend bool operator!=(Symbol a, Symbol b) { return a.id_ != b.id_; }

 private:
  explicit constexpr Symbol(uint32_t id) : id_(id) {}
  uint32_t id_ = 0;
};

// A reader's direct-mapped cache in front of Symbol::intern: a file repeats a few dozen targets,
// devices and module paths over its nodes, and a hit here costs a hash and a compare instead of
// the shared table's lock and probe for each string of each node (bench/README.md, "Figures behind
// the code"). Symbols never die, so no entry goes stale.
class SymbolCache {
 public:
  // `slots`, a power of two: room for the strings a file repeats (a graph of thousands of
  // modules needs more than one of a few dozen targets).
  explicit SymbolCache(size_t slots = 1024) : slots_(std::max<size_t>(2, std::bit_ceil(slots))) {}

  // Two-way sets, the newer entry first: in a direct-mapped cache two hot strings that map to
  // one slot (likely among a few dozen targets in 1024 slots) evict each other on every node.
  Symbol intern(std::string_view s) {
    const uint64_t h = std::hash<std::string_view>()(s);
    Slot* set = &slots_[(h << 1) & (slots_.size() - 1)];
    if (set[0].hash == h && set[0].sym.str() == s) return set[0].sym;
    if (set[1].hash == h && set[1].sym.str() == s) {
      std::swap(set[0], set[1]);
      return set[0].sym;
    }
    set[1] = set[0];
    set[0] = {h, Symbol::intern(s)};
    return set[0].sym;
  }

 private:
  struct Slot {
    uint64_t hash = 0;
    Symbol sym;
  };
  std::vector<Slot> slots_;
};

}  // namespace jfx

template <>
struct std::hash<jfx::Symbol> {
  size_t operator()(jfx::Symbol s) const noexcept { return std::hash<uint32_t>()(s.id()); }
};
