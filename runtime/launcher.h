// Starts N rank processes the way torchrun does and watches them: no rank outlives a failure.
//
// Each rank is a fork/exec of `exe` with RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
// MASTER_ADDR and MASTER_PORT set. The launcher binds the rendezvous port itself (port 0, so
// the kernel picks a free one) and hands the bound socket to rank 0 (JFX_MASTER_LISTEN_FD): no
// race with another process for the port. When a rank exits non-zero or dies from a signal, the
// others get SIGTERM, then SIGKILL after a grace period, and the result names the first failed
// rank. Ranks die with the launcher (PR_SET_PDEATHSIG), and SIGINT/SIGTERM to the launcher are
// forwarded. Torch-free.
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace jfx::rt {

struct LaunchSpec {
  std::string exe;                // the program every rank runs
  std::vector<std::string> args;  // its arguments (argv[1..])
  int nproc = 1;
  std::string master_addr = "127.0.0.1";
  // After the first failure, how long the other ranks get to exit on SIGTERM before SIGKILL.
  std::chrono::milliseconds grace{3000};
};

struct LaunchResult {
  int exit_code = 0;     // 0 when every rank exited 0; else the first failed rank's code
                         // (128 + signal for a signal), 130 when interrupted
  int failed_rank = -1;  // first rank to fail, -1 if none
  std::string message;   // "rank 1 was killed by signal 9 (Killed)", empty on success
};

// Throws JfxError when the launch itself fails (no socket, fork failed).
LaunchResult launchRanks(const LaunchSpec& spec);

// Path of the running executable (/proc/self/exe), so ranks run the same binary.
std::string selfExecutable();

}  // namespace jfx::rt
