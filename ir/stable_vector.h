// An append-only sequence whose elements never move, stored in fixed-size chunks: the graph's
// node arena. std::deque also keeps addresses, but libstdc++ sizes its blocks at 512 bytes, which
// holds a single Node, so every node cost a heap allocation of its own; here 64 nodes share one.
// The first kHeapChunks chunks come from the heap, so a small graph stays small; the rest are
// carved from mapped blocks (PageBlocks), which takes the heap's own overhead for chunks of 9 KiB
// off `jointfx opt`'s peak RSS (bench/README.md, "Figures behind the code").
#pragma once

#include <cstddef>
#include <iterator>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>
#include <vector>

#include "ir/page_blocks.h"

namespace jfx {

template <class T, size_t kChunk = 64>
class StableVector {
 public:
  template <bool kConst>
  class Iterator {
   public:
    using iterator_category = std::forward_iterator_tag;
    using value_type = T;
    using difference_type = std::ptrdiff_t;
    using Owner = std::conditional_t<kConst, const StableVector, StableVector>;
    using reference = std::conditional_t<kConst, const T&, T&>;
    Iterator() = default;
    Iterator(Owner* v, size_t i) : v_(v), i_(i) {}
    reference operator*() const { return (*v_)[i_]; }
    auto* operator->() const { return &(*v_)[i_]; }
    Iterator& operator++() { return ++i_, *this; }
    Iterator operator++(int) {
      Iterator old = *this;
      ++i_;
      return old;
    }
    friend bool operator==(const Iterator& a, const Iterator& b) { return a.i_ == b.i_; }

   private:
    Owner* v_ = nullptr;
    size_t i_ = 0;
  };

  StableVector() = default;
  StableVector(const StableVector&) = delete;
  StableVector& operator=(const StableVector&) = delete;
  ~StableVector() { clear(); }

  template <class... Args>
  T& emplace_back(Args&&... args) {
    if (size_ == chunks_.size() * kChunk) addChunk();
    T* p = new (raw(size_)) T(std::forward<Args>(args)...);
    ++size_;
    return *p;
  }
  void push_back(const T& v) { emplace_back(v); }
  void pop_back() { (*this)[--size_].~T(); }

  T& operator[](size_t i) { return *std::launder(reinterpret_cast<T*>(raw(i))); }
  const T& operator[](size_t i) const { return *std::launder(reinterpret_cast<const T*>(raw(i))); }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

  void clear() {
    while (size_ > 0)
      pop_back();
    for (size_t i = 0; i < chunks_.size() && i < kHeapChunks; ++i)
      delete chunks_[i];
    chunks_.clear();
    blocks_.release();
  }
  // Hands the chunks over: every element keeps its address.
  void swap(StableVector& o) noexcept {
    chunks_.swap(o.chunks_);
    blocks_.swap(o.blocks_);
    std::swap(size_, o.size_);
  }

  Iterator<false> begin() { return {this, 0}; }
  Iterator<false> end() { return {this, size_}; }
  Iterator<true> begin() const { return {this, 0}; }
  Iterator<true> end() const { return {this, size_}; }

 private:
  struct Chunk {
    alignas(T) std::byte bytes[sizeof(T) * kChunk];
  };
  static constexpr size_t kHeapChunks = 16;
  static_assert(sizeof(Chunk) <= PageBlocks::kBlockBytes && alignof(Chunk) <= 4096);
  // A chunk's bytes are raw storage that emplace constructs into (zeroing them first wrote
  // every node twice).
  void addChunk() {
    if (chunks_.size() < kHeapChunks) {
      auto chunk = std::make_unique_for_overwrite<Chunk>();
      chunks_.push_back(chunk.get());
      chunk.release();
    } else {
      chunks_.push_back(static_cast<Chunk*>(blocks_.take(sizeof(Chunk), alignof(Chunk))));
    }
  }
  std::byte* raw(size_t i) const { return chunks_[i / kChunk]->bytes + sizeof(T) * (i % kChunk); }

  std::vector<Chunk*> chunks_;  // the first kHeapChunks owned, the rest in blocks_
  PageBlocks blocks_;
  size_t size_ = 0;
};

}  // namespace jfx
