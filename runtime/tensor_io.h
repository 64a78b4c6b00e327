// at::Tensor <-> our dtypes and safetensors entries.
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>
#include <string>

#include "ir/types.h"
#include "runtime/safetensors.h"

namespace jfx::rt {

// Throws JfxError for ScalarType::Undefined.
c10::ScalarType atenDtype(ScalarType t);
std::optional<ScalarType> jfxDtype(c10::ScalarType t);
// A meta's shape or stride as LibTorch takes sizes (a view of `d`, valid while `d` is).
inline c10::IntArrayRef atenSizes(const Dims& d) {
  return {d.data(), d.size()};
}

// A CPU tensor holding a copy of the entry's bytes (safetensors is little-endian, as is every
// machine we run on).
at::Tensor readTensor(const SafetensorsFile& f, const SafetensorsEntry& e);
// Adds a contiguous CPU copy of `t` (from any device) under `name`.
void addTensor(SafetensorsWriter& w, const std::string& name, const at::Tensor& t);
// The raw bytes of a contiguous CPU copy of `t`, as lowercase hex (bitwise comparison in logs).
std::string tensorHex(const at::Tensor& t);

}  // namespace jfx::rt
