// Watchdog: fires once when the progress counter stands still for the limit, never while it
// moves, and stops cleanly.
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "runtime/watchdog.h"

namespace jfx {
namespace {

using namespace std::chrono_literals;

// What on_stall saw, and a way to wait for it without a busy loop.
struct Stalls {
  std::mutex mu;
  std::condition_variable cv;
  int count = 0;
  double seconds = 0;
  void record(double s) {
    std::lock_guard<std::mutex> lock(mu);
    ++count;
    seconds = s;
    cv.notify_all();
  }
  // A generous guard so that a broken watchdog fails the test instead of hanging it.
  bool waitForOne() {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, 60s, [this] { return count > 0; });
  }
};

TEST_CASE("watchdog: a counter that stands still fires on_stall once, after the limit",
          "[runtime]") {
  Stalls stalls;
  std::atomic<uint64_t> progress{7};
  auto t0 = std::chrono::steady_clock::now();
  rt::Watchdog dog(
      200ms, [&] { return progress.load(); }, [&](double s) { stalls.record(s); });
  REQUIRE(stalls.waitForOne());
  CHECK(std::chrono::steady_clock::now() - t0 >= 200ms);
  CHECK(stalls.seconds >= 0.2);
  std::this_thread::sleep_for(300ms);  // it stopped watching: no second call
  std::lock_guard<std::mutex> lock(stalls.mu);
  CHECK(stalls.count == 1);
}

TEST_CASE("watchdog: a moving counter never fires, it fires once the counter stops", "[runtime]") {
  Stalls stalls;
  std::atomic<uint64_t> progress{0};
  rt::Watchdog dog(
      200ms, [&] { return progress.load(); }, [&](double s) { stalls.record(s); });
  // 1 s of progress every 10 ms: five limits long, and never a gap of one.
  for (int i = 0; i < 100; ++i) {
    progress.fetch_add(1);
    std::this_thread::sleep_for(10ms);
  }
  {
    std::lock_guard<std::mutex> lock(stalls.mu);
    CHECK(stalls.count == 0);
  }
  REQUIRE(stalls.waitForOne());
  CHECK(stalls.seconds >= 0.2);
}

TEST_CASE("watchdog: destroying it stops the thread without waiting for the limit", "[runtime]") {
  bool fired = false;
  {
    rt::Watchdog dog(
        std::chrono::hours(1), [] { return uint64_t{0}; }, [&](double) { fired = true; });
    std::this_thread::sleep_for(50ms);
  }  // joins; a destructor that waited for the hour-long limit would hang the test here
  CHECK_FALSE(fired);
}

}  // namespace
}  // namespace jfx
