#include "runtime/memory_meter.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <unordered_map>
#include <vector>

#if JFX_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace jfx::rt {
namespace {

// Note [Measured memory], CPU. The counting allocator is c10's allocator registry entry for the
// CPU, the one piece of process-wide state here: c10 keeps one allocator per device type, and a
// deleter is a plain function pointer with no closure, so the table it reads has to be reachable
// from a function. It is made once and never destroyed (storages may be freed during exit).
class CountingCpuAllocator final : public c10::Allocator {
 public:
  explicit CountingCpuAllocator(c10::Allocator* base)
      : base_(base), base_deleter_(base->raw_deleter()) {}

  c10::DataPtr allocate(size_t n) override {
    c10::DataPtr p = base_->allocate(n);
    // Storages keep data == context (c10's raw_allocate, which oneDNN's allocator hook uses,
    // requires it), so only the deleter changes: to one that looks the storage up.
    if (!p.get() || p.get() != p.get_context() ||
        !p.compare_exchange_deleter(base_deleter_, &countingDelete))
      return p;
    if (n > 0 && tCounting) record(p.get(), static_cast<int64_t>(n));
    return p;
  }
  c10::DeleterFnPtr raw_deleter() const override { return &countingDelete; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    base_->copy_data(dest, src, count);
  }

  // Opens the window (false if one is open), counting this thread's allocations.
  bool open() {
    std::lock_guard<std::mutex> lock(mu_);
    if (window_open_) return false;
    window_open_ = true;
    ++window_;
    live_.store(0, std::memory_order_relaxed);
    peak_.store(0, std::memory_order_relaxed);
    tCounting = true;
    return true;
  }
  void close() {
    std::lock_guard<std::mutex> lock(mu_);
    tCounting = false;
    window_open_ = false;
    capturing_ = false;
    captured_.clear();
    ++window_;  // storages of the closed window no longer count against any
  }
  // Stops counting a storage of the open window that is still allocated (no-op for others).
  void release(const void* ptr) {
    if (!ptr || entries_.load(std::memory_order_relaxed) == 0) return;
    std::lock_guard<std::mutex> lock(mu_);
    auto it = table_.find(const_cast<void*>(ptr));
    if (it == table_.end() || it->second.released || !window_open_ || it->second.window != window_)
      return;
    it->second.released = true;
    live_.fetch_sub(it->second.bytes, std::memory_order_relaxed);
  }
  // The window's allocations between beginCapture and endCapture that are still allocated.
  void beginCapture() {
    std::lock_guard<std::mutex> lock(mu_);
    capturing_ = true;
    captured_.clear();
  }
  std::vector<void*> endCapture() {
    std::lock_guard<std::mutex> lock(mu_);
    capturing_ = false;
    std::vector<void*> out;
    for (void* p : captured_)
      if (table_.count(p)) out.push_back(p);
    captured_.clear();
    return out;
  }
  int64_t live() const { return live_.load(std::memory_order_relaxed); }
  int64_t peak() const { return peak_.load(std::memory_order_relaxed); }
  int64_t takePeak() { return peak_.exchange(live_.load(std::memory_order_relaxed)); }

  static CountingCpuAllocator* instance() { return instance_.load(std::memory_order_acquire); }

  // Wraps c10's CPU allocator once; nullptr (and `why`) when it cannot.
  static CountingCpuAllocator* install(std::string& why) {
    static std::mutex install_mu;
    std::lock_guard<std::mutex> lock(install_mu);
    if (CountingCpuAllocator* a = instance()) return a;
    c10::Allocator* base = c10::GetCPUAllocator();
    if (!base->raw_deleter()) {
      why = "c10's CPU allocator has no raw deleter to wrap";
      return nullptr;
    }
    auto* a = new CountingCpuAllocator(base);  // never freed: storages outlive everything
    // Priority 0 is the default allocator's; an allocator set with a higher one stays.
    c10::SetCPUAllocator(a, /*priority=*/0);
    if (c10::GetCPUAllocator() != a) {
      why = "another CPU allocator is installed with a higher priority";
      delete a;
      return nullptr;
    }
    instance_.store(a, std::memory_order_release);
    return a;
  }

 private:
  struct Entry {
    int64_t bytes = 0;
    uint64_t window = 0;
    bool released = false;  // no longer counted: the run has let go of it (release())
  };

  void record(void* ptr, int64_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!window_open_) return;
    table_[ptr] = Entry{bytes, window_};
    if (capturing_) captured_.push_back(ptr);
    entries_.store(table_.size(), std::memory_order_relaxed);
    int64_t live = live_.fetch_add(bytes, std::memory_order_relaxed) + bytes;
    int64_t peak = peak_.load(std::memory_order_relaxed);
    while (live > peak && !peak_.compare_exchange_weak(peak, live, std::memory_order_relaxed)) {
    }
  }

  void forget(void* ptr) {
    // With no window storage still allocated (the common case outside a run), no lock per free.
    if (entries_.load(std::memory_order_relaxed) == 0) return;
    std::lock_guard<std::mutex> lock(mu_);
    auto it = table_.find(ptr);
    if (it == table_.end()) return;
    if (window_open_ && it->second.window == window_ && !it->second.released)
      live_.fetch_sub(it->second.bytes, std::memory_order_relaxed);
    table_.erase(it);
    entries_.store(table_.size(), std::memory_order_relaxed);
  }

  static void countingDelete(void* ptr) {
    CountingCpuAllocator* a = instance();
    a->forget(ptr);
    a->base_deleter_(ptr);
  }

  static inline thread_local bool tCounting = false;
  static inline std::atomic<CountingCpuAllocator*> instance_{nullptr};

  c10::Allocator* base_;
  c10::DeleterFnPtr base_deleter_;
  std::mutex mu_;
  std::unordered_map<void*, Entry> table_;  // storages allocated in a window and not yet freed
  std::atomic<size_t> entries_{0};
  bool window_open_ = false;
  bool capturing_ = false;
  std::vector<void*> captured_;
  uint64_t window_ = 0;
  std::atomic<int64_t> live_{0};
  std::atomic<int64_t> peak_{0};
};

#if JFX_WITH_CUDA
const c10::CachingAllocator::Stat& allocatedBytes(
    const c10::CachingDeviceAllocator::DeviceStats& s) {
  return s.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)];
}
#endif

}  // namespace

MemoryWindow::MemoryWindow(c10::Device device) : device_(device) {
  if (device.is_cpu()) {
    CountingCpuAllocator* a = CountingCpuAllocator::install(why_not_);
    if (!a) return;
    active_ = a->open();
    if (!active_) why_not_ = "another memory window is open in this process";
    return;
  }
#if JFX_WITH_CUDA
  if (device.is_cuda()) {
    namespace cca = c10::cuda::CUDACachingAllocator;
    cca::resetPeakStats(device.index());
    cuda_base_ = allocatedBytes(cca::getDeviceStats(device.index())).current;
    active_ = true;
    return;
  }
#endif
  why_not_ = "no memory measurement on " + device.str();
}

MemoryWindow::~MemoryWindow() {
  if (active_ && device_.is_cpu()) CountingCpuAllocator::instance()->close();
}

void MemoryWindow::release(const void* data) {
  if (active_ && device_.is_cpu()) CountingCpuAllocator::instance()->release(data);
}

void MemoryWindow::beginCapture() {
  if (active_ && device_.is_cpu()) CountingCpuAllocator::instance()->beginCapture();
}

std::vector<void*> MemoryWindow::endCapture() {
  if (active_ && device_.is_cpu()) return CountingCpuAllocator::instance()->endCapture();
  return {};
}

int64_t MemoryWindow::current() const {
  if (!active_) return 0;
  if (device_.is_cpu()) return CountingCpuAllocator::instance()->live();
#if JFX_WITH_CUDA
  namespace cca = c10::cuda::CUDACachingAllocator;
  return allocatedBytes(cca::getDeviceStats(device_.index())).current - cuda_base_;
#else
  return 0;
#endif
}

int64_t MemoryWindow::peak() const {
  if (!active_) return 0;
  if (device_.is_cpu()) return std::max(peak_, CountingCpuAllocator::instance()->peak());
#if JFX_WITH_CUDA
  namespace cca = c10::cuda::CUDACachingAllocator;
  return std::max(peak_, allocatedBytes(cca::getDeviceStats(device_.index())).peak - cuda_base_);
#else
  return 0;
#endif
}

int64_t MemoryWindow::takePeak() {
  if (!active_) return 0;
  if (device_.is_cpu()) {
    int64_t p = CountingCpuAllocator::instance()->takePeak();
    peak_ = std::max(peak_, p);
    return p;
  }
#if JFX_WITH_CUDA
  namespace cca = c10::cuda::CUDACachingAllocator;
  int64_t p = allocatedBytes(cca::getDeviceStats(device_.index())).peak - cuda_base_;
  peak_ = std::max(peak_, p);
  cca::resetPeakStats(device_.index());
  return p;
#else
  return 0;
#endif
}

}  // namespace jfx::rt
