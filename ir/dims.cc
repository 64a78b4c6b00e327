#include "ir/dims.h"

#include <absl/container/flat_hash_set.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>

namespace jfx {
namespace {

using Rep = Dims::Rep;

uint64_t hashDims(std::span<const int64_t> dims) {
  // Multiply-xorshift over the elements and the length; the table's own hasher mixes it again.
  uint64_t h = 0x9E3779B97F4A7C15ull ^ dims.size();
  for (int64_t d : dims) {
    h ^= static_cast<uint64_t>(d);
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 31;
  }
  return h;
}

bool sameDims(const Rep* r, std::span<const int64_t> dims) {
  return r->size == dims.size() && std::equal(dims.begin(), dims.end(), r->data());
}

// A list being looked up, with its hash computed once.
struct Key {
  std::span<const int64_t> dims;
  uint64_t hash;
};

struct RepHash {
  using is_transparent = void;
  size_t operator()(const Rep* r) const { return r->hash; }
  size_t operator()(const Key& k) const { return k.hash; }
};

struct RepEq {
  using is_transparent = void;
  bool operator()(const Rep* a, const Rep* b) const { return a == b; }
  bool operator()(const Rep* a, const Key& k) const { return sameDims(a, k.dims); }
  bool operator()(const Key& k, const Rep* a) const { return sameDims(a, k.dims); }
};

// The process-wide table: a registry (append-only, never cleared), the one kind of global state
// the project allows. Lists live in slabs that never move or die, so a Dims reads without a lock;
// interning takes the lock only on a miss in the calling thread's cache.
class DimsTable {
 public:
  const Rep* intern(const Key& k) {
    std::lock_guard lock(mu_);
    auto it = set_.find(k);
    if (it != set_.end()) return *it;
    const Rep* r = store(k);
    set_.insert(r);
    return r;
  }

  size_t count() {
    std::lock_guard lock(mu_);
    return set_.size();
  }

 private:
  static constexpr size_t kSlabBytes = size_t{64} << 10;

  const Rep* store(const Key& k) {
    const size_t bytes = sizeof(Rep) + k.dims.size() * sizeof(int64_t);
    if (bytes > left_) {
      const size_t slab = std::max(bytes, kSlabBytes);
      slabs_.push_back(std::make_unique_for_overwrite<uint64_t[]>(slab / sizeof(uint64_t)));
      next_ = reinterpret_cast<std::byte*>(slabs_.back().get());
      left_ = slab;
    }
    auto* r = reinterpret_cast<Rep*>(next_);
    r->size = k.dims.size();
    r->hash = k.hash;
    if (!k.dims.empty())
      std::memcpy(reinterpret_cast<int64_t*>(r + 1), k.dims.data(), k.dims.size_bytes());
    next_ += bytes;
    left_ -= bytes;
    return r;
  }

  std::mutex mu_;
  absl::flat_hash_set<const Rep*, RepHash, RepEq> set_;
  std::vector<std::unique_ptr<uint64_t[]>> slabs_;
  std::byte* next_ = nullptr;
  size_t left_ = 0;
};

DimsTable& table() {
  static DimsTable t;
  return t;
}

// Each thread's direct-mapped cache in front of the table: a graph repeats a few hundred lists
// over its nodes, and a hit costs a hash and a compare instead of the lock and the probe. Lists
// never die, so no entry goes stale.
constexpr size_t kCacheSlots = 512;

}  // namespace

const Rep* Dims::intern(std::span<const int64_t> dims) {
  if (dims.empty()) return nullptr;
  const Key k{dims, hashDims(dims)};
  thread_local std::array<const Rep*, kCacheSlots> cache{};
  const Rep*& slot = cache[(k.hash >> 7) & (kCacheSlots - 1)];
  if (slot != nullptr && slot->hash == k.hash && sameDims(slot, dims)) return slot;
  slot = table().intern(k);
  return slot;
}

size_t Dims::internedCount() {
  return table().count();
}

Dims Dims::with(size_t i, int64_t value) const {
  if (i >= size()) throw std::out_of_range("Dims::with: index " + std::to_string(i));
  // Shapes are short: edited on the stack, so a shape already interned costs no allocation.
  int64_t small[8];
  std::vector<int64_t> big;
  int64_t* v = small;
  if (size() > std::size(small)) {
    big.resize(size());
    v = big.data();
  }
  std::copy(begin(), end(), v);
  v[i] = value;
  return Dims(std::span<const int64_t>(v, size()));
}

bool operator==(Dims a, std::span<const int64_t> b) {
  return a.size() == b.size() && std::equal(b.begin(), b.end(), a.begin());
}

}  // namespace jfx
