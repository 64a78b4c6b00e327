#include "runtime/watchdog.h"

#include <algorithm>

namespace jfx::rt {

Watchdog::Watchdog(std::chrono::milliseconds limit, std::function<uint64_t()> progress,
                   std::function<void(double)> on_stall)
    : limit_(limit),
      progress_(std::move(progress)),
      on_stall_(std::move(on_stall)),
      thread_([this] { watch(); }) {}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Watchdog::watch() {
  using Clock = std::chrono::steady_clock;
  // Often enough that a stall is caught within 5% of the limit, rarely enough to cost nothing.
  auto period =
      std::clamp(limit_ / 20, std::chrono::milliseconds(10), std::chrono::milliseconds(1000));
  uint64_t last = progress_();
  Clock::time_point since = Clock::now();
  std::unique_lock<std::mutex> lock(mu_);
  while (!cv_.wait_for(lock, period, [this] { return stop_; })) {
    uint64_t now_progress = progress_();
    Clock::time_point now = Clock::now();
    if (now_progress != last) {
      last = now_progress;
      since = now;
    } else if (now - since >= limit_) {
      on_stall_(std::chrono::duration<double>(now - since).count());
      return;
    }
  }
}

}  // namespace jfx::rt
