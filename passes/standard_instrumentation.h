// The pass manager's own instrumentation (passes/instrumentation.h), one object per concern:
// verification, the unchanged check, timing, print-IR, reproducers, the caller's hooks.
#pragma once

#include <ostream>

#include "passes/instrumentation.h"
#include "passes/pass_manager.h"

namespace jfx {

// Adds them to `inst` in their order (passes/instrumentation.h): hooks, print-IR, the preserved-
// analyses check, verification, the unchanged check, the reproducer, timing. They fill `result`
// (timing, verification and hash figures) and print to `out`.
void addStandardInstrumentation(PassInstrumentor& inst, const PassManagerOptions& opts,
                                PipelineResult& result, std::ostream& out);

}  // namespace jfx
