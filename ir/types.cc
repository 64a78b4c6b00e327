#include "ir/types.h"

#include <array>

#include "ir/checked.h"

namespace jfx {
namespace {

struct DtypeRow {
  ScalarType type;
  std::string_view name;
  std::string_view short_name;
  int64_t item_size;
  bool floating;
};

constexpr std::array<DtypeRow, 23> kDtypes{{
    {ScalarType::Bool, "bool", "b8", 1, false},
    {ScalarType::UInt8, "uint8", "u8", 1, false},
    {ScalarType::Int8, "int8", "i8", 1, false},
    {ScalarType::Int16, "int16", "i16", 2, false},
    {ScalarType::Int32, "int32", "i32", 4, false},
    {ScalarType::Int64, "int64", "i64", 8, false},
    {ScalarType::Float16, "float16", "f16", 2, true},
    {ScalarType::BFloat16, "bfloat16", "bf16", 2, true},
    {ScalarType::Float32, "float32", "f32", 4, true},
    {ScalarType::Float64, "float64", "f64", 8, true},
    {ScalarType::Complex64, "complex64", "c64", 8, false},
    {ScalarType::Complex128, "complex128", "c128", 16, false},
    {ScalarType::Float8_e4m3fn, "float8_e4m3fn", "f8e4m3fn", 1, true},
    {ScalarType::Float8_e5m2, "float8_e5m2", "f8e5m2", 1, true},
    {ScalarType::UInt16, "uint16", "u16", 2, false},
    {ScalarType::UInt32, "uint32", "u32", 4, false},
    {ScalarType::UInt64, "uint64", "u64", 8, false},
    {ScalarType::Float8_e4m3fnuz, "float8_e4m3fnuz", "f8e4m3fnuz", 1, true},
    {ScalarType::Float8_e5m2fnuz, "float8_e5m2fnuz", "f8e5m2fnuz", 1, true},
    {ScalarType::Float8_e8m0fnu, "float8_e8m0fnu", "f8e8m0fnu", 1, true},
    {ScalarType::Float4_e2m1fn_x2, "float4_e2m1fn_x2", "f4e2m1fnx2", 1, true},
    {ScalarType::Complex32, "complex32", "c32", 4, false},
    {ScalarType::Undefined, "undefined", "undef", 0, false},
}};

// row(t) indexes by the enum's value.
static_assert([] {
  for (size_t i = 0; i < kDtypes.size(); ++i)
    if (static_cast<size_t>(kDtypes[i].type) != i) return false;
  return kDtypes.back().type == ScalarType::Undefined;
}());

const DtypeRow& row(ScalarType t) {
  return kDtypes[static_cast<size_t>(t)];
}

}  // namespace

std::string_view dtypeName(ScalarType t) {
  return row(t).name;
}
std::string_view dtypeShortName(ScalarType t) {
  return row(t).short_name;
}
int64_t dtypeItemSize(ScalarType t) {
  return row(t).item_size;
}
bool dtypeIsFloatingPoint(ScalarType t) {
  return row(t).floating;
}

std::optional<ScalarType> dtypeFromName(std::string_view name) {
  if (name.starts_with("torch.")) name.remove_prefix(6);
  for (const auto& r : kDtypes)
    if (r.name == name) return r.type;
  // torch's aliases
  if (name == "float") return ScalarType::Float32;
  if (name == "double") return ScalarType::Float64;
  if (name == "half") return ScalarType::Float16;
  if (name == "long") return ScalarType::Int64;
  if (name == "int") return ScalarType::Int32;
  return std::nullopt;
}

std::optional<ScalarType> dtypeFromShortName(std::string_view name) {
  for (const auto& r : kDtypes)
    if (r.short_name == name) return r.type;
  return std::nullopt;
}

int64_t TensorMeta::numel() const {
  int64_t n = 1;
  for (int64_t d : shape)
    n = saturatingMul(n, d > 0 ? d : 0);
  return n;
}

int64_t TensorMeta::bytes() const {
  return saturatingMul(numel(), dtypeItemSize(dtype));
}

TensorMeta TensorMeta::contiguous(ScalarType dtype, Dims shape, Symbol device) {
  TensorMeta t;
  t.dtype = dtype;
  t.device = device;
  t.stride = contiguousStride(shape);
  t.shape = std::move(shape);
  return t;
}

Dims TensorMeta::contiguousStride(std::span<const int64_t> shape) {
  int64_t buf[16];
  std::vector<int64_t> big;
  int64_t* stride = buf;
  if (shape.size() > std::size(buf)) {
    big.resize(shape.size());
    stride = big.data();
  }
  int64_t s = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    stride[i] = s;
    s = saturatingMul(s, shape[i] > 1 ? shape[i] : 1);
  }
  return Dims(std::span<const int64_t>(stride, shape.size()));
}

namespace {

// sizeProblem's rules without their messages: every tensor a reader or the verifier sees passes
// them, so the strings are built only for the rare meta that fails.
bool sizesFit(const TensorMeta& t) {
  const size_t rank = t.shape.size();
  const int64_t* shape = t.shape.data();
  const int64_t* stride = t.stride.data();
  int64_t n = 1, s = 1, bytes;
  bool bad = false;
  for (size_t i = 0; i < rank; ++i) {
    bad |= shape[i] < 0 || __builtin_mul_overflow(n, shape[i], &n);
    if (i > 0) bad |= __builtin_mul_overflow(s, shape[i] > 1 ? shape[i] : 1, &s);
  }
  for (size_t i = 0; i < t.stride.size(); ++i)
    bad |= stride[i] < 0;
  if (bad || __builtin_mul_overflow(n, dtypeItemSize(t.dtype), &bytes)) return false;
  if (n > 0 && t.stride.size() == rank) {
    int64_t extent = 1, step;
    for (size_t i = 0; i < rank; ++i)
      bad |= __builtin_mul_overflow(shape[i] - 1, stride[i], &step) ||
             __builtin_add_overflow(extent, step, &extent);
    if (bad || __builtin_mul_overflow(extent, dtypeItemSize(t.dtype), &bytes)) return false;
  }
  return true;
}

}  // namespace

std::string TensorMeta::sizeProblem() const {
  if (sizesFit(*this)) return {};
  auto dims = [](const Dims& v) {
    std::string s = "[";
    for (size_t i = 0; i < v.size(); ++i)
      s += (i ? ", " : "") + std::to_string(v[i]);
    return s + "]";
  };
  for (size_t i = 0; i < shape.size(); ++i)
    if (shape[i] < 0)
      return "dimension " + std::to_string(i) + " of shape " + dims(shape) + " is negative";
  for (size_t i = 0; i < stride.size(); ++i)
    if (stride[i] < 0)
      return "stride " + std::to_string(i) + " of " + dims(stride) +
             " is negative (PyTorch has no negative strides)";
  // Elements, then the row-major strides: both products of dims, each must fit int64.
  std::optional<int64_t> n = 1;
  for (int64_t d : shape)
    if (n) n = checkedMul(*n, d);
  if (!n) return "shape " + dims(shape) + ": the number of elements overflows int64";
  std::optional<int64_t> s = 1;
  for (size_t i = shape.size(); i-- > 1 && s;)
    s = checkedMul(*s, shape[i] > 1 ? shape[i] : 1);
  if (!s) return "shape " + dims(shape) + ": the contiguous strides overflow int64";
  const int64_t item = dtypeItemSize(dtype);
  if (!checkedMul(*n, item))
    return "shape " + dims(shape) + " of " + std::string(dtypeName(dtype)) +
           ": the size in bytes overflows int64";
  // The storage an explicit stride reaches: 1 + sum((d - 1) * s) elements, as PyTorch's
  // computeStorageNbytes checks; an empty tensor reaches nothing.
  if (*n > 0 && stride.size() == shape.size()) {
    std::optional<int64_t> extent = 1;
    for (size_t i = 0; i < shape.size() && extent; ++i)
      if (auto step = checkedMul(shape[i] - 1, stride[i]))
        extent = checkedAdd(*extent, *step);
      else
        extent.reset();
    if (!extent || !checkedMul(*extent, item))
      return "shape " + dims(shape) + " with stride " + dims(stride) +
             ": the storage it spans overflows int64 bytes";
  }
  return {};
}

bool TensorMeta::isContiguous() const {
  return stride == contiguousStride(shape);
}

int64_t ValueMeta::bytes() const {
  switch (kind) {
    case Kind::Tensor:
      return tensor.bytes();
    case Kind::List: {
      int64_t b = 0;
      for (const auto& v : items)
        b = saturatingAdd(b, v.bytes());
      return b;
    }
    default:
      return 0;
  }
}

std::string ValueMeta::sizeProblem() const {
  if (kind == Kind::Tensor) return tensor.sizeProblem();
  if (kind != Kind::List) return {};
  for (size_t i = 0; i < items.size(); ++i)
    if (std::string p = items[i].sizeProblem(); !p.empty())
      return "item " + std::to_string(i) + ": " + p;
  return {};
}

}  // namespace jfx
