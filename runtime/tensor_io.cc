#include "runtime/tensor_io.h"

#include <ATen/ops/empty.h>

#include <cstring>

#include "ir/error.h"

namespace jfx::rt {

c10::ScalarType atenDtype(ScalarType t) {
  switch (t) {
    case ScalarType::Bool:
      return c10::ScalarType::Bool;
    case ScalarType::UInt8:
      return c10::ScalarType::Byte;
    case ScalarType::Int8:
      return c10::ScalarType::Char;
    case ScalarType::Int16:
      return c10::ScalarType::Short;
    case ScalarType::Int32:
      return c10::ScalarType::Int;
    case ScalarType::Int64:
      return c10::ScalarType::Long;
    case ScalarType::Float16:
      return c10::ScalarType::Half;
    case ScalarType::BFloat16:
      return c10::ScalarType::BFloat16;
    case ScalarType::Float32:
      return c10::ScalarType::Float;
    case ScalarType::Float64:
      return c10::ScalarType::Double;
    case ScalarType::Complex64:
      return c10::ScalarType::ComplexFloat;
    case ScalarType::Complex128:
      return c10::ScalarType::ComplexDouble;
    case ScalarType::Float8_e4m3fn:
      return c10::ScalarType::Float8_e4m3fn;
    case ScalarType::Float8_e5m2:
      return c10::ScalarType::Float8_e5m2;
    case ScalarType::UInt16:
      return c10::ScalarType::UInt16;
    case ScalarType::UInt32:
      return c10::ScalarType::UInt32;
    case ScalarType::UInt64:
      return c10::ScalarType::UInt64;
    case ScalarType::Float8_e4m3fnuz:
      return c10::ScalarType::Float8_e4m3fnuz;
    case ScalarType::Float8_e5m2fnuz:
      return c10::ScalarType::Float8_e5m2fnuz;
    case ScalarType::Float8_e8m0fnu:
      return c10::ScalarType::Float8_e8m0fnu;
    case ScalarType::Float4_e2m1fn_x2:
      return c10::ScalarType::Float4_e2m1fn_x2;
    case ScalarType::Complex32:
      return c10::ScalarType::ComplexHalf;
    case ScalarType::Undefined:
      break;
  }
  throw JfxError({}, "undefined dtype");
}

std::optional<ScalarType> jfxDtype(c10::ScalarType t) {
  for (int i = 0; i < static_cast<int>(ScalarType::Undefined); ++i) {
    auto ours = static_cast<ScalarType>(i);
    if (atenDtype(ours) == t) return ours;
  }
  return std::nullopt;
}

at::Tensor readTensor(const SafetensorsFile& f, const SafetensorsEntry& e) {
  at::Tensor t = at::empty(e.shape, at::TensorOptions().dtype(atenDtype(e.dtype)));
  std::string_view b = f.bytes(e);
  if (!b.empty()) std::memcpy(t.data_ptr(), b.data(), b.size());
  return t;
}

namespace {
std::string cpuBytes(const at::Tensor& t) {
  at::Tensor c = t.to(at::kCPU).contiguous();
  std::string bytes(static_cast<size_t>(c.nbytes()), '\0');
  if (!bytes.empty()) std::memcpy(bytes.data(), c.const_data_ptr(), bytes.size());
  return bytes;
}
}  // namespace

void addTensor(SafetensorsWriter& w, const std::string& name, const at::Tensor& t) {
  auto dtype = jfxDtype(t.scalar_type());
  if (!dtype)
    throw JfxError({}, "tensor " + quoteForMessage(name) + ": dtype " +
                           std::string(c10::toString(t.scalar_type())) + " cannot be saved");
  w.add(name, *dtype, t.sizes().vec(), cpuBytes(t));
}

std::string tensorHex(const at::Tensor& t) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string bytes = cpuBytes(t);
  std::string hex;
  hex.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    hex += kDigits[c >> 4];
    hex += kDigits[c & 15];
  }
  return hex;
}

}  // namespace jfx::rt
