// A rank that stops making progress ends itself instead of hanging.
//
// Collectives carry their own timeout (--timeout-s), but c10d does not always honour it once a
// peer is gone: a gloo rank was seen spinning in a transport buffer's destructor for eleven
// minutes after its peer segfaulted, its collective's timeout long past. Under the launcher or
// torchrun a dead rank gets the others stopped; ranks started by hand have nobody to do that. So
// each rank watches itself: a counter that moves with every node and every phase of a step; if
// it stands still for longer than the limit, the rank reports where it is and exits.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>

namespace jfx::rt {

class Watchdog {
 public:
  // Calls `progress` every limit/20 (10 ms to 1 s) on its own thread; once its value has not
  // changed for `limit`, calls `on_stall` with the seconds it stood still, once, and stops
  // watching. Both run on the watchdog's thread (the trainer's on_stall prints and _Exits).
  Watchdog(std::chrono::milliseconds limit, std::function<uint64_t()> progress,
           std::function<void(double stalled_seconds)> on_stall);
  ~Watchdog();  // stops watching (joins the thread)
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

 private:
  void watch();

  std::chrono::milliseconds limit_;
  std::function<uint64_t()> progress_;
  std::function<void(double)> on_stall_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;  // last: it starts once every member it reads is set
};

}  // namespace jfx::rt
