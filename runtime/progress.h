// What a rank prints while it trains: the loss as text, the progress bar, and rank 0's time per
// op target at the end (--profile).
#pragma once

#include <string>
#include <vector>

#include "runtime/executor.h"

namespace jfx::rt {

// A loss as `step N loss X` prints it: 9 significant digits, enough to compare runs bit for bit.
std::string formatLoss(double v);

// Rank 0's time per op target (Executor::profile), per step, largest first: where a step goes,
// e.g. how much of it is spent waiting for collectives (wait_tensor).
void printProfile(const std::vector<OpProfile>& ops, int steps);

// A one-line bar on stderr: steps done, the last loss and the time per step.
class ProgressBar {
 public:
  ProgressBar(bool enabled, int total) : enabled_(enabled), total_(total) {}
  ~ProgressBar() { finish(); }
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;
  void update(int step, double loss, double seconds_per_step);
  // Erases the bar so a line printed next (stdout may be the same terminal) starts clean.
  void clear();
  // Leaves the last state on screen and moves below it.
  void finish();

 private:
  bool enabled_;
  int total_;
  bool drawn_ = false;
};

}  // namespace jfx::rt
