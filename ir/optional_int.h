// An optional int64 in 8 bytes, for node meta that most nodes carry (seq_nr, ac_graph_id):
// std::optional<int64_t> takes 16. INT64_MIN stands for "absent", so that one value cannot be
// held; the readers reject it in their input with an error naming the place (kReserved), so no
// value is ever dropped silently. The interface is std::optional's, so readers of the fields
// stay as they are.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <stdexcept>

namespace jfx {

class OptionalInt64 {
 public:
  // The one int64 that cannot be held: it means "absent".
  static constexpr int64_t kReserved = std::numeric_limits<int64_t>::min();

  constexpr OptionalInt64() = default;
  constexpr OptionalInt64(std::nullopt_t) {}
  // `v` must not be kReserved (readers check; it would read back as absent).
  constexpr OptionalInt64(int64_t v) : v_(v) {}
  constexpr OptionalInt64(std::optional<int64_t> v) : v_(v ? *v : kReserved) {}

  constexpr bool has_value() const { return v_ != kReserved; }
  constexpr explicit operator bool() const { return has_value(); }
  constexpr int64_t operator*() const { return v_; }
  int64_t value() const {
    if (!has_value()) throw std::bad_optional_access();
    return v_;
  }
  constexpr int64_t value_or(int64_t fallback) const { return has_value() ? v_ : fallback; }
  constexpr void reset() { v_ = kReserved; }
  constexpr operator std::optional<int64_t>() const {
    return has_value() ? std::optional<int64_t>(v_) : std::nullopt;
  }

  friend constexpr bool operator==(OptionalInt64 a, OptionalInt64 b) { return a.v_ == b.v_; }
  friend constexpr bool operator==(OptionalInt64 a, std::nullopt_t) { return !a.has_value(); }

 private:
  int64_t v_ = kReserved;
};

}  // namespace jfx
