// Overflow-checked 64-bit arithmetic on sizes (element counts, strides, bytes, option values).
//
// Sizes come from files: a shape of [9223372036854775807, 2] is one edit away from any graph, and
// signed overflow is undefined behaviour. Readers and the verifier reject such sizes with a located
// error (TensorMeta::sizeProblem); everything that computes with sizes afterwards goes through
// these helpers, so a graph that slipped past them (built in memory, unverified) still gives
// well-defined, saturated figures instead of wrapped ones.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>

namespace jfx {

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
constexpr int64_t kInt64Min = std::numeric_limits<int64_t>::min();

// a * b, or nullopt when it does not fit int64.
inline std::optional<int64_t> checkedMul(int64_t a, int64_t b) {
  int64_t out;
  if (__builtin_mul_overflow(a, b, &out)) return std::nullopt;
  return out;
}

// a + b, or nullopt when it does not fit int64.
inline std::optional<int64_t> checkedAdd(int64_t a, int64_t b) {
  int64_t out;
  if (__builtin_add_overflow(a, b, &out)) return std::nullopt;
  return out;
}

// a * b clamped to [kInt64Min, kInt64Max].
inline int64_t saturatingMul(int64_t a, int64_t b) {
  int64_t out;
  if (!__builtin_mul_overflow(a, b, &out)) return out;
  return (a < 0) != (b < 0) ? kInt64Min : kInt64Max;
}

// a + b clamped to [kInt64Min, kInt64Max].
inline int64_t saturatingAdd(int64_t a, int64_t b) {
  int64_t out;
  if (!__builtin_add_overflow(a, b, &out)) return out;
  return a < 0 ? kInt64Min : kInt64Max;
}

// a - b clamped to [kInt64Min, kInt64Max].
inline int64_t saturatingSub(int64_t a, int64_t b) {
  int64_t out;
  if (!__builtin_sub_overflow(a, b, &out)) return out;
  return b > 0 ? kInt64Min : kInt64Max;
}

// A double as int64, clamped (NaN gives 0): static_cast of an out-of-range double is undefined.
inline int64_t saturatingFromDouble(double v) {
  if (!(v == v)) return 0;
  if (v >= 9223372036854775807.0) return kInt64Max;
  if (v <= -9223372036854775808.0) return kInt64Min;
  return static_cast<int64_t>(v);
}

// Sums of many sizes (live bytes over a schedule) are kept in 128 bits, where adding and then
// removing a term is exact, and clamped when reported.
__extension__ using WideInt = __int128;

inline int64_t clampToInt64(WideInt v) {
  return v > kInt64Max ? kInt64Max : v < kInt64Min ? kInt64Min : static_cast<int64_t>(v);
}

}  // namespace jfx
