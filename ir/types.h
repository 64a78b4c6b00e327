// Tensor and value types carried on nodes: dtype, tensor meta (shape, stride, device) and the
// value meta of a node's output (a tensor, a tuple of values, a scalar, or nothing).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ir/boxed_vector.h"
#include "ir/checked.h"
#include "ir/dims.h"
#include "ir/symbol.h"

namespace jfx {

// Mirrors torch.dtype. Names follow torch ("float32"); short names are the text-IR spellings.
enum class ScalarType : uint8_t {
  Bool,
  UInt8,
  Int8,
  Int16,
  Int32,
  Int64,
  Float16,
  BFloat16,
  Float32,
  Float64,
  Complex64,
  Complex128,
  Float8_e4m3fn,
  Float8_e5m2,
  UInt16,
  UInt32,
  UInt64,
  // Scaled-precision training (float8 on AMD, MX scales, packed fp4) and complex half.
  Float8_e4m3fnuz,
  Float8_e5m2fnuz,
  Float8_e8m0fnu,
  Float4_e2m1fn_x2,  // two 4-bit values per byte: itemsize 1, as in PyTorch
  Complex32,
  Undefined,
};

std::string_view dtypeName(ScalarType t);                             // "float32"
std::string_view dtypeShortName(ScalarType t);                        // "f32"
std::optional<ScalarType> dtypeFromName(std::string_view name);       // accepts "torch.float32" too
std::optional<ScalarType> dtypeFromShortName(std::string_view name);  // "f32"
int64_t dtypeItemSize(ScalarType t);
bool dtypeIsFloatingPoint(ScalarType t);

struct TensorMeta {
  Dims shape;
  Dims stride;
  Symbol device;  // "cpu", "cuda:0"; empty when unknown
  // Last: the 3 bytes of tail padding after it hold ValueMeta's kind.
  ScalarType dtype = ScalarType::Undefined;

  // Element count and size in bytes. Both saturate at INT64_MAX and count a negative dimension
  // as 0, so they are well defined on any meta; readers and the verifier reject the metas where
  // that matters (sizeProblem).
  int64_t numel() const;
  int64_t bytes() const;
  bool isContiguous() const;
  // Row-major strides of `shape` (dims of size 0 and 1 count as 1); saturate at INT64_MAX.
  static Dims contiguousStride(std::span<const int64_t> shape);
  // A contiguous tensor of `shape`.
  static TensorMeta contiguous(ScalarType dtype, Dims shape, Symbol device = {});
  // Why this meta cannot describe a tensor, or "" when it can: a negative dimension or stride,
  // or an element count, a stride or a size in bytes (including the extent its strides reach)
  // that does not fit int64. PyTorch rejects the same tensors.
  std::string sizeProblem() const;
  friend bool operator==(const TensorMeta&, const TensorMeta&) = default;
};

// What FX keeps in meta["val"]: a tensor, a list/tuple of values (multi-output ops), a Python
// scalar (SymInt made concrete), None, or absent (no meta at all).
struct ValueMeta {
  enum class Kind : uint8_t { Absent, None, Tensor, List, Int, Float, Bool };
  // kind lives in tensor's tail padding: 40 bytes a node instead of 48.
  [[no_unique_address]] TensorMeta tensor;  // kind == Tensor
  Kind kind = Kind::Absent;
  BoxedVector<ValueMeta> items;  // kind == List
  union {                        // one of the two, by kind (8 bytes a node instead of 16)
    int64_t i = 0;               // kind == Int or Bool
    double f;                    // kind == Float
  };

  static ValueMeta ofTensor(TensorMeta t) {
    ValueMeta v;
    v.kind = Kind::Tensor;
    v.tensor = std::move(t);
    return v;
  }
  static ValueMeta ofList(std::vector<ValueMeta> items) {
    ValueMeta v;
    v.kind = Kind::List;
    v.items = std::move(items);
    return v;
  }
  bool isTensor() const { return kind == Kind::Tensor; }
  // Total bytes of every tensor in this value (a tuple sums its members); saturates at INT64_MAX.
  int64_t bytes() const;
  // The first TensorMeta::sizeProblem() of a tensor in this value ("item 1: ..." inside lists),
  // or "".
  std::string sizeProblem() const;
  // Fields by kind; a float compares as a double (NaN != NaN, 0.0 == -0.0).
  friend bool operator==(const ValueMeta& a, const ValueMeta& b) {
    return a.kind == b.kind && a.tensor == b.tensor && a.items == b.items &&
           (a.kind == Kind::Float ? a.f == b.f : a.i == b.i);
  }
};

}  // namespace jfx
