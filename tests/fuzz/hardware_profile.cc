// Hardware profiles (configs/hardware/*.json): parsed or rejected with a JfxError; a profile
// that parses gives finite, non-negative rates for every dtype.
#include <cmath>

#include "fuzz_common.h"
#include "passes/analysis/cost_model.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  jfx::fuzz::expectOnlyJfxError([&] {
    jfx::HardwareProfile hw =
        jfx::parseHardwareProfile(jfx::fuzz::asText(data, size), "fuzz-hardware.json");
    for (auto t : {jfx::ScalarType::Float32, jfx::ScalarType::BFloat16, jfx::ScalarType::Int64}) {
      double f = hw.peakFlops(t);
      if (std::isnan(f)) jfx::fuzz::bug("peakFlops is NaN");
    }
    jfx::CostModel cost(hw);
    (void)cost.hardware();
  });
  return 0;
}
