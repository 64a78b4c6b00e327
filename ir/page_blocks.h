// Memory for an arena that a large graph fills (the node arena, StableVector): 2 MiB blocks
// mapped from the system and faulted in 256 KiB at a time as the arena reaches them, with one
// call each (MADV_POPULATE_WRITE), instead of a page fault per 4 KiB page as they are first
// written (a fault costs more than a page populated in one call). Populating a whole block at once
// cost large graphs time in pages they never used. Blocks are freed with the owner, never one by
// one: the arena only grows. Systems without the call (Linux before 5.14, or not Linux) fault the
// pages in as they are used. Memory the heap would reuse (freed tables) is better taken from the
// heap: operand slots from here raised the peak (bench/README.md, "Figures behind the code").
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <new>
#include <utility>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#endif

// LeakSanitizer scans the heap, stacks and globals for pointers, not memory mapped by hand: the
// heap blocks that nodes in these blocks own would look leaked (jointfx leaves its graph to the
// exit), so the blocks are registered as roots.
#if defined(__SANITIZE_ADDRESS__)
#define JFX_LSAN_ROOTS 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(leak_sanitizer)
#define JFX_LSAN_ROOTS 1
#endif
#endif
#if defined(JFX_LSAN_ROOTS)
#include <sanitizer/lsan_interface.h>
#endif

namespace jfx {

class PageBlocks {
 public:
  static constexpr size_t kBlockBytes = size_t{2} << 20;
  static constexpr size_t kPopulateBytes = size_t{256} << 10;

  PageBlocks() = default;
  PageBlocks(const PageBlocks&) = delete;
  PageBlocks& operator=(const PageBlocks&) = delete;
  ~PageBlocks() { release(); }

  // `bytes` (at most kBlockBytes) aligned to `align` (a power of two, at most 4096), from the
  // current block or a new one; what was left of the current block is given up.
  void* take(size_t bytes, size_t align) {
    auto at = (reinterpret_cast<uintptr_t>(next_) + align - 1) & ~(uintptr_t{align} - 1);
    if (next_ == nullptr || at + bytes > reinterpret_cast<uintptr_t>(end_)) {
      std::byte* block = newBlock();
      at = reinterpret_cast<uintptr_t>(block);
      populated_ = block;
      end_ = block + kBlockBytes;
    }
    next_ = reinterpret_cast<std::byte*>(at + bytes);
    if (next_ > populated_) {  // fault in the windows up to the one next_ lies in
      std::byte* const block = end_ - kBlockBytes;
      const auto want = static_cast<size_t>(next_ - block);
      std::byte* const upto = block + std::min(kBlockBytes, (want + kPopulateBytes - 1) /
                                                                kPopulateBytes * kPopulateBytes);
      populate(populated_, static_cast<size_t>(upto - populated_));
      populated_ = upto;
    }
    return reinterpret_cast<void*>(at);
  }

  void release() {
    for (void* b : blocks_)
      freeBlock(b);
    blocks_.clear();
    next_ = end_ = populated_ = nullptr;
  }
  void swap(PageBlocks& o) noexcept {
    blocks_.swap(o.blocks_);
    std::swap(next_, o.next_);
    std::swap(end_, o.end_);
    std::swap(populated_, o.populated_);
  }

  // Faults in [p, p + bytes) in one call where the system can.
  static void populate([[maybe_unused]] void* p, [[maybe_unused]] size_t bytes) {
#if defined(__linux__) && defined(MADV_POPULATE_WRITE)
    ::madvise(p, bytes, MADV_POPULATE_WRITE);  // a hint: failing leaves the pages to fault
#endif
  }

 private:
  std::byte* newBlock() {
#if defined(__linux__)
    void* p =
        ::mmap(nullptr, kBlockBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
#else
    void* p = ::operator new (kBlockBytes, std::align_val_t{4096});
#endif
    try {
      blocks_.push_back(p);
    } catch (...) {
      unmapBlock(p);
      throw;
    }
#if defined(JFX_LSAN_ROOTS)
    __lsan_register_root_region(p, kBlockBytes);
#endif
    return static_cast<std::byte*>(p);
  }
  static void freeBlock(void* p) {
#if defined(JFX_LSAN_ROOTS)
    __lsan_unregister_root_region(p, kBlockBytes);
#endif
    unmapBlock(p);
  }
  static void unmapBlock(void* p) {
#if defined(__linux__)
    ::munmap(p, kBlockBytes);
#else
    ::operator delete (p, std::align_val_t{4096});
#endif
  }

  std::vector<void*> blocks_;
  std::byte* next_ = nullptr;
  std::byte* end_ = nullptr;
  std::byte* populated_ = nullptr;  // the current block is faulted in up to here
};

}  // namespace jfx
