#include "runtime/grad_compare.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>
#include <set>

#include "ir/error.h"
#include "runtime/safetensors.h"

namespace jfx::rt {
namespace {

float halfToFloat(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: renormalize
      exp = 127 - 15 + 1;
      while (!(mant & 0x400)) {
        mant <<= 1;
        --exp;
      }
      bits = sign | (exp << 23) | ((mant & 0x3ff) << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000 | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Element i of a floating-point entry as double; nullopt for other dtypes.
std::optional<double> element(ScalarType t, std::string_view bytes, size_t i) {
  switch (t) {
    case ScalarType::Float32: {
      float f;
      std::memcpy(&f, bytes.data() + 4 * i, 4);
      return f;
    }
    case ScalarType::Float64: {
      double d;
      std::memcpy(&d, bytes.data() + 8 * i, 8);
      return d;
    }
    case ScalarType::BFloat16: {
      uint16_t h;
      std::memcpy(&h, bytes.data() + 2 * i, 2);
      uint32_t bits = static_cast<uint32_t>(h) << 16;
      float f;
      std::memcpy(&f, &bits, 4);
      return f;
    }
    case ScalarType::Float16: {
      uint16_t h;
      std::memcpy(&h, bytes.data() + 2 * i, 2);
      return halfToFloat(h);
    }
    default:
      return std::nullopt;
  }
}

std::string describeDiff(const SafetensorsEntry& ea, std::string_view a, std::string_view b,
                         int64_t* max_ulp) {
  size_t item = static_cast<size_t>(dtypeItemSize(ea.dtype));
  size_t n = item ? a.size() / item : 0;
  size_t differ = 0;
  double max_abs = 0;
  int64_t ulp = 0;
  bool numeric = true;
  for (size_t i = 0; i < n; ++i) {
    if (std::memcmp(a.data() + i * item, b.data() + i * item, item) == 0) continue;
    ++differ;
    auto x = element(ea.dtype, a, i), y = element(ea.dtype, b, i);
    if (!x || !y) {
      numeric = false;
      continue;
    }
    double d = std::fabs(*x - *y);
    if (std::isnan(d)) d = INFINITY;
    max_abs = std::max(max_abs, d);
    int64_t u = ulpDistance(ea.dtype, a, b, i);
    ulp = (u < 0 || ulp < 0) ? -1 : std::max(ulp, u);
  }
  if (max_ulp) *max_ulp = numeric ? ulp : -1;
  char buf[200];
  if (numeric && ulp >= 0)
    std::snprintf(buf, sizeof buf, "%zu of %zu elements differ (max |a-b| %.3g, max %lld ulp)",
                  differ, n, max_abs, static_cast<long long>(ulp));
  else if (numeric)
    std::snprintf(buf, sizeof buf, "%zu of %zu elements differ (max |a-b| %.3g, NaN in one)",
                  differ, n, max_abs);
  else
    std::snprintf(buf, sizeof buf, "%zu of %zu elements differ", differ, n);
  return buf;
}

std::string gradFile(const std::string& dir, int step, int rank) {
  return dir + "/grads.step" + std::to_string(step) + ".rank" + std::to_string(rank) +
         ".safetensors";
}

}  // namespace

int64_t ulpDistance(ScalarType t, std::string_view a, std::string_view b, size_t i) {
  // Floats ordered as sign-magnitude integers: the distance in representable values.
  auto ordered = [](uint64_t bits, int width) -> int64_t {
    const uint64_t sign = uint64_t{1} << (width - 1);
    const int64_t mag = static_cast<int64_t>(bits & (sign - 1));
    return (bits & sign) ? -mag : mag;
  };
  auto isNan = [](uint64_t bits, int width, int mant) {
    const uint64_t exp_mask = ((uint64_t{1} << (width - 1 - mant)) - 1) << mant;
    return (bits & exp_mask) == exp_mask && (bits & ((uint64_t{1} << mant) - 1)) != 0;
  };
  int width = 0, mant = 0;
  switch (t) {
    case ScalarType::Float32:
      width = 32, mant = 23;
      break;
    case ScalarType::Float64:
      width = 64, mant = 52;
      break;
    case ScalarType::BFloat16:
      width = 16, mant = 7;
      break;
    case ScalarType::Float16:
      width = 16, mant = 10;
      break;
    default:
      return -1;
  }
  const size_t item = static_cast<size_t>(width / 8);
  uint64_t x = 0, y = 0;
  std::memcpy(&x, a.data() + item * i, item);
  std::memcpy(&y, b.data() + item * i, item);
  const bool nx = isNan(x, width, mant), ny = isNan(y, width, mant);
  if (nx || ny) return nx && ny ? 0 : -1;
  const int64_t ox = ordered(x, width), oy = ordered(y, width);
  // 64-bit values can overflow the difference; saturate.
  if ((ox > 0 && oy < 0 && ox > INT64_MAX + oy) || (ox < 0 && oy > 0 && oy > INT64_MAX + ox))
    return INT64_MAX;
  return ox > oy ? ox - oy : oy - ox;
}

bool compareGradDirs(const std::string& dir_a, const std::string& dir_b, int nproc, int steps,
                     std::vector<std::string>& report, ParityUlp* ulp, bool* buffers) {
  bool same = true;
  if (buffers) *buffers = false;
  if (ulp) {
    ulp->loss.assign(static_cast<size_t>(std::max(steps, 0)), 0);
    ulp->gradients.assign(static_cast<size_t>(std::max(steps, 0)), 0);
  }
  auto note = [&](int step, const std::string& name, int64_t u) {
    if (!ulp) return;
    int64_t& slot =
        (name == "__loss__" ? ulp->loss : ulp->gradients)[static_cast<size_t>(step - 1)];
    slot = (u < 0 || slot < 0) ? -1 : std::max(slot, u);
  };
  for (int step = 1; step <= steps; ++step)
    for (int rank = 0; rank < nproc; ++rank) {
      std::string where = "step " + std::to_string(step) + " rank " + std::to_string(rank);
      std::optional<SafetensorsFile> fa, fb;
      try {
        fa = SafetensorsFile::read(gradFile(dir_a, step, rank));
        fb = SafetensorsFile::read(gradFile(dir_b, step, rank));
      } catch (const JfxError& e) {
        report.push_back(where + ": " + e.what());
        same = false;
        continue;
      }
      std::set<std::string> names;
      for (const auto& e : fa->entries()) {
        names.insert(e.name);
        if (buffers && e.name.starts_with("buffer:")) *buffers = true;
      }
      for (const auto& e : fb->entries())
        names.insert(e.name);
      for (const std::string& name : names) {
        const SafetensorsEntry* ea = fa->find(name);
        const SafetensorsEntry* eb = fb->find(name);
        std::string what = where + " " + quoteForMessage(name) + ": ";
        if (!ea || !eb) {
          report.push_back(what + "only in " + (ea ? "A" : "B"));
          note(step, name, -1);
          same = false;
        } else if (ea->dtype != eb->dtype || ea->shape != eb->shape) {
          report.push_back(what + "dtype/shape differ");
          note(step, name, -1);
          same = false;
        } else if (fa->bytes(*ea) != fb->bytes(*eb)) {
          int64_t u = 0;
          report.push_back(what + describeDiff(*ea, fa->bytes(*ea), fb->bytes(*eb), &u));
          note(step, name, u);
          same = false;
        }
      }
    }
  return same;
}

}  // namespace jfx::rt
