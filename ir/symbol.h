// Interned strings for op targets, devices, process-group names and other short strings that
// repeat across a graph. Interning keeps Arg small and makes target comparison an integer compare.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

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

}  // namespace jfx

template <>
struct std::hash<jfx::Symbol> {
  size_t operator()(jfx::Symbol s) const noexcept { return std::hash<uint32_t>()(s.id()); }
};
