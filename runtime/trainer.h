// One rank's training run: process groups, executor, data, optimizer, logs (docs/executor.md).
#pragma once

#include <string>

#include "runtime/exec_command.h"

namespace jfx::rt {

// Empty when `device` can run here; else why not ("this build has no CUDA", "no CUDA device").
std::string deviceProblem(const std::string& device);

// Empty unless --device cuda and some op of the graph has no CUDA kernel in this build (a graph
// traced on CPU with CPU-only ops). Checked before deviceProblem: it is the graph's problem, and a
// machine without a GPU can tell it too.
std::string deviceGraphProblem(const ExecOptions& o);

// Loads and plans the graph without process groups, so a bad graph fails once, in the launcher,
// before any rank starts. Returns an empty string or the error.
std::string preflight(const ExecOptions& o);

// Runs this process as one rank (DistEnv from the environment). Returns an ExecExit code;
// prints errors prefixed with the rank.
int runRank(const ExecOptions& o);

}  // namespace jfx::rt
