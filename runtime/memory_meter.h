// Measured tensor memory of one Executor::run (docs/executor.md, "Measured memory").
//
// Note [Measured memory]
// The executor measures what `jointfx analyze` estimates (passes/analysis/memory.h): the bytes of
// tensor storages live at once during one run of the graph. A window opens when run() starts and
// closes when it returns; the measured peak is
//
//   peak_bytes = input bytes + the most bytes of the window's storages counted at one moment
//
// where the input bytes are the storages of the run's inputs (placeholders and get_attr
// constants; a storage shared by several inputs counts once), held the whole run, as analyze
// counts its graph inputs.
//  - CPU: the window's storages are those c10's CPU allocator hands out on the thread that
//    opened it (the executor's: ops allocate their outputs and their scratch there, and gloo its
//    staging buffers), at their requested size (nbytes: c10's CPU allocator neither rounds nor
//    caches). Each counts from its allocation until it is freed or the run lets go of it,
//    whichever comes first: a value's storage when the executor drops its last value of it, a
//    collective's own buffers (what it allocated besides its outputs) at its last wait. The
//    executor says so (release()). Why not only when freed: gloo's worker thread still holds a
//    finished collective's tensors until it is scheduled again, and on a busy CPU that is after
//    the next collective; counting them would measure the scheduler, differently every run. The
//    allocator is wrapped once per process (c10::SetCPUAllocator): every storage gets a deleter
//    that looks it up in a table of the storages a window allocated. Storages allocated before
//    the window (parameters, optimizer state) are not in it, and nothing that runs outside a
//    window (data loading, the optimizer step) counts. Not counted: memory that bypasses c10's
//    allocator (BLAS packing buffers) and what other threads allocate.
//  - CUDA: the caching allocator's allocated bytes (c10::CachingDeviceAllocator's DeviceStats,
//    not reserved: the cache is not counted), as peak minus the value when the window opened,
//    after resetPeakStats. These are whole blocks (requests rounded up to 512 B) of every thread
//    and stream of the device, collectives' outputs included, and a block counts until the
//    allocator frees it (NCCL's watchdog may hold a finished collective's tensors a while).
// One window at a time per process: a second window opened while one is open measures nothing.
#pragma once

#include <c10/core/Device.h>

#include <cstdint>
#include <string>
#include <vector>

namespace jfx::rt {

class MemoryWindow {
 public:
  // Opens a window on the calling thread for `device`.
  explicit MemoryWindow(c10::Device device);
  ~MemoryWindow();
  MemoryWindow(const MemoryWindow&) = delete;
  MemoryWindow& operator=(const MemoryWindow&) = delete;

  // Whether the window measures; when not, why not (unavailable()).
  bool active() const { return active_; }
  const std::string& unavailable() const { return why_not_; }

  // CPU: stops counting the storage at `data` (allocated in this window and not yet freed) as
  // live from now on, though it is still allocated; a no-op elsewhere. The executor calls it when
  // the run has let go of a storage that a backend thread still holds.
  bool releases() const { return active_ && device_.is_cpu(); }
  void release(const void* data);
  // CPU: the storages allocated on this thread between the two calls and still allocated at the
  // second (a collective's own buffers).
  void beginCapture();
  std::vector<void*> endCapture();

  // Bytes allocated in the window and live now.
  int64_t current() const;
  // The most bytes allocated in the window and live at one moment since it opened.
  int64_t peak() const;
  // The most since the last call (or the opening), then starts over from what is live now: the
  // high-water mark of one node when called after each.
  int64_t takePeak();

 private:
  c10::Device device_;
  bool active_ = false;
  std::string why_not_;
  int64_t cuda_base_ = 0;  // allocated bytes when the window opened (CUDA)
  int64_t peak_ = 0;       // the most takePeak has seen
};

}  // namespace jfx::rt
