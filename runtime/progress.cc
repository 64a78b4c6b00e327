#include "runtime/progress.h"

#include <cstdio>

namespace jfx::rt {

std::string formatLoss(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

void printProfile(const std::vector<OpProfile>& ops, int steps) {
  double total = 0;
  for (const OpProfile& p : ops)
    total += p.seconds;
  if (total <= 0) return;
  std::fprintf(stderr, "profile (rank 0, per step; %.3f ms in %zu targets):\n", 1e3 * total / steps,
               ops.size());
  std::fprintf(stderr, "  %9s %6s %6s  %s\n", "ms", "share", "calls", "target");
  size_t shown = 0;
  double rest = 0;
  for (const OpProfile& p : ops) {
    if (++shown > 15) {
      rest += p.seconds;
      continue;
    }
    std::fprintf(stderr, "  %9.3f %5.1f%% %6zu  %s\n", 1e3 * p.seconds / steps,
                 100 * p.seconds / total, p.calls / static_cast<size_t>(steps), p.target.c_str());
  }
  if (rest > 0)
    std::fprintf(stderr, "  %9.3f %5.1f%% %6s  (%zu more targets)\n", 1e3 * rest / steps,
                 100 * rest / total, "", ops.size() - 15);
}

void ProgressBar::update(int step, double loss, double seconds_per_step) {
  if (!enabled_) return;
  constexpr int kWidth = 24;
  int filled = total_ ? step * kWidth / total_ : kWidth;
  std::string bar(static_cast<size_t>(filled), '#');
  bar.append(static_cast<size_t>(kWidth - filled), '.');
  std::fprintf(stderr, "\r  [%s] %d/%d  loss %s  %.3f s/step", bar.c_str(), step, total_,
               formatLoss(loss).c_str(), seconds_per_step);
  std::fflush(stderr);
  drawn_ = true;
}

void ProgressBar::clear() {
  if (!drawn_) return;
  std::fputs("\r\033[K", stderr);
  std::fflush(stderr);
  drawn_ = false;
}

void ProgressBar::finish() {
  if (drawn_) std::fputc('\n', stderr);
  drawn_ = false;
}

}  // namespace jfx::rt
