// Comparing what two runs wrote with --save-grads, byte for byte and in ulp: the check behind
// `jointfx parity` (tools/jointfx/parity.h runs the graphs; this compares their files).
// Torch-free.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ir/types.h"

namespace jfx::rt {

// Units in the last place between A and B, largest per step (index step - 1): how far apart
// the values are where they differ. -1 where a value is not a float or is NaN in one only.
struct ParityUlp {
  std::vector<int64_t> loss;       // "__loss__"
  std::vector<int64_t> gradients;  // every other entry
};

// Byte-level comparison of two directories written by --save-grads (used by parity; exposed
// for tests). Appends one line per difference to `report`; returns true when identical. With
// `ulp`, also the largest ulp distance per step for the loss and for the gradients. Entries named
// "buffer:<fqn>" are the buffers the graph updates, after the step's update; `buffers` (when
// given) is set to whether A's files hold any.
bool compareGradDirs(const std::string& dir_a, const std::string& dir_b, int nproc, int steps,
                     std::vector<std::string>& report, ParityUlp* ulp = nullptr,
                     bool* buffers = nullptr);

// Units in the last place between two floats of one dtype (same sign: bit distance; else the
// sum of both distances from zero). -1 when either is NaN and they are not both NaN.
int64_t ulpDistance(ScalarType t, std::string_view a, std::string_view b, size_t i);

}  // namespace jfx::rt
