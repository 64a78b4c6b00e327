// Hardware profiles (configs/hardware/*.json): parsed or rejected with a JfxError; a profile
// that parses is inside the physical ranges (docs/passes.md, "Cost model and hardware
// profiles"), so every rate is positive and finite and every collective time, at any size a
// tensor can have and any group, is a finite number of seconds.
#include <cmath>

#include "fuzz_common.h"
#include "ir/collectives.h"
#include "passes/analysis/cost_model.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  jfx::fuzz::expectOnlyJfxError([&] {
    jfx::HardwareProfile hw =
        jfx::parseHardwareProfile(jfx::fuzz::asText(data, size), "fuzz-hardware.json");
    for (auto t : {jfx::ScalarType::Float32, jfx::ScalarType::BFloat16, jfx::ScalarType::Int64}) {
      double f = hw.peakFlops(t);
      if (!std::isfinite(f) || !(f > 0)) jfx::fuzz::bug("peakFlops is not a positive number");
    }
    jfx::CostModel cost(hw);
    for (auto kind : {jfx::CollectiveKind::AllGather, jfx::CollectiveKind::AllReduce,
                      jfx::CollectiveKind::Broadcast})
      for (int64_t group : {int64_t{1}, int64_t{2}, int64_t{9}, int64_t{1} << 40})
        for (double bytes : {0.0, 3.0, 9.2e18}) {
          double t = cost.collectiveCost(kind, bytes, group).seconds;
          if (!std::isfinite(t) || t < 0)
            jfx::fuzz::bug("a collective takes a time that is not a finite number of seconds");
        }
  });
  return 0;
}
