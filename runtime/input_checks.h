// The data checks before any rank starts (docs/executor.md, "Checks before launch"): --params
// and --batch against the graph's inputs, and the generated data's integer range.
#pragma once

#include <string>
#include <vector>

#include "ir/graph.h"
#include "runtime/exec_command.h"
#include "runtime/executor.h"

namespace jfx::rt {

// Bool and the integer dtypes.
bool isIntegral(ScalarType t);

// Checks --params and --batch against the graph, and the generated data's integer range, before
// anything runs: every tensor a graph input needs is there with a shape it fits and a dtype it
// can take; nothing in a file goes unused without a word; parameters are finite; integer inputs
// that index an embedding stay inside its rows. Returns the first error ("" when none); appends
// warnings (casts, unused tensors). Throws JfxError for an unreadable file.
std::string checkInputData(const Graph& g, const std::vector<GraphInput>& inputs,
                           const ExecOptions& o, std::vector<std::string>& warnings);

// Prints checkInputData's warnings to stderr, one line each.
void printWarnings(const std::vector<std::string>& warnings);

}  // namespace jfx::rt
