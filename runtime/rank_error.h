// How a rank's run ends when it fails: the exit code it should produce (ExecExit) and the message
// the rank prints.
#pragma once

#include <string>

#include "runtime/exec_command.h"

namespace jfx::rt {

struct RankError {
  int code;
  std::string message;
};

// Bad input (the graph, the data, the options against this world): kExecInputError.
[[noreturn]] inline void inputError(const std::string& m) {
  throw RankError{kExecInputError, m};
}

}  // namespace jfx::rt
