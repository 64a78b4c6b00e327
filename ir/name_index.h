// The graph's node-name index: an open-addressing hash table (linear probing, backward-shift
// deletion) of Node pointers, keyed by the node's own name. It replaces a node-based
// std::unordered_map, whose one heap allocation and pointer chase per node were a visible part of
// loading a graph (bench/README.md, "Figures behind the code"). Slots hold the full hash, so
// probing compares names only on a hash match.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

#include "ir/huge_pages.h"

namespace jfx {

template <class NodeT>
class NameIndex {
 public:
  NodeT* find(std::string_view name) const {
    if (slots_.empty()) return nullptr;
    const uint64_t h = hashOf(name);
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (!s.node) return nullptr;
      if (s.hash == h && s.node->name() == name) return s.node;
    }
  }
  bool contains(std::string_view name) const { return find(name) != nullptr; }
  size_t size() const { return size_; }

  // `n`'s name must not be in the index.
  void insert(NodeT* n) {
    if (full()) rehash(std::max<size_t>(16, slots_.size() * 2));
    place({hashOf(n->name()), n});
    ++size_;
  }

  // One probe for what `contains` then `insert` would do: the node already named like `n`, or
  // nullptr once `n` is in the index. Creating a node checks and claims its name this way.
  NodeT* insertOrFind(NodeT* n) { return insertOrFind(n, hashOf(n->name())); }
  // The same with `h` = hashOf(n->name()), computed (and its slot prefetched) beforehand.
  NodeT* insertOrFind(NodeT* n, uint64_t h) {
    if (full()) rehash(std::max<size_t>(16, slots_.size() * 2));
    size_t i = h & mask_;
    for (; slots_[i].node; i = (i + 1) & mask_)
      if (slots_[i].hash == h && slots_[i].node->name() == n->name()) return slots_[i].node;
    slots_[i] = {h, n};
    ++size_;
    return nullptr;
  }

  static uint64_t hashOf(std::string_view s) { return std::hash<std::string_view>()(s); }

  // Starts loading the slot where `name` would be: a reader calls it as soon as it has read a
  // node's name, so the cache miss of claiming the name (the index is as large as the graph, far
  // larger than the cache) overlaps with reading the rest of the node.
  void prefetch(std::string_view name) const { prefetchHash(hashOf(name)); }
  void prefetchHash(uint64_t h) const {
    if (!slots_.empty()) __builtin_prefetch(&slots_[h & mask_]);
  }

  // Removes the node named `name`, if any.
  void erase(std::string_view name) {
    if (slots_.empty()) return;
    const uint64_t h = hashOf(name);
    size_t i = h & mask_;
    for (;; i = (i + 1) & mask_) {
      if (!slots_[i].node) return;
      if (slots_[i].hash == h && slots_[i].node->name() == name) break;
    }
    // Backward-shift: pull later entries of the probe run into the hole, so lookups never need
    // tombstones.
    for (size_t j = (i + 1) & mask_; slots_[j].node; j = (j + 1) & mask_) {
      const size_t home = slots_[j].hash & mask_;
      // Move j into the hole at i unless its home lies cyclically in (i, j].
      const bool home_in_between = i <= j ? (i < home && home <= j) : (i < home || home <= j);
      if (!home_in_between) {
        slots_[i] = slots_[j];
        i = j;
      }
    }
    slots_[i] = {};
    --size_;
  }

  // This index with every node mapped through `map` (a node of another graph with the same
  // name): the slots and their hashes are kept, so nothing is rehashed.
  template <class OtherT, class F>
  NameIndex<OtherT> remapped(F&& map) const {
    NameIndex<OtherT> out;
    out.slots_.resize(slots_.size());
    for (size_t i = 0; i < slots_.size(); ++i)
      if (slots_[i].node) out.slots_[i] = {slots_[i].hash, map(slots_[i].node)};
    out.mask_ = mask_;
    out.size_ = size_;
    return out;
  }

  // Room for `n` names without rehashing.
  void reserve(size_t n) {
    size_t want = 16;
    while (want * 3 < n * 4)
      want *= 2;
    if (want > slots_.size()) rehash(want);
  }

 private:
  template <class>
  friend class NameIndex;
  struct Slot {
    uint64_t hash = 0;
    NodeT* node = nullptr;
  };

  // At most three quarters full. Slots keep the full hash, so a longer probe run costs compares
  // of hashes, not of names (at 3/4, about 2.5 slots for a hit and 8.5 for a miss); half full,
  // a loaded graph's index doubled as soon as passes added a few nodes (bench/README.md, "Figures
  // behind the code").
  bool full() const { return (size_ + 1) * 4 > slots_.size() * 3; }

  void place(Slot s) {
    size_t i = s.hash & mask_;
    while (slots_[i].node)
      i = (i + 1) & mask_;
    slots_[i] = s;
  }

  void rehash(size_t capacity) {  // a power of two
    std::vector<Slot, HugePageAllocator<Slot>> old = std::move(slots_);
    slots_.assign(capacity, Slot{});
    mask_ = capacity - 1;
    for (const Slot& s : old)
      if (s.node) place(s);
  }

  std::vector<Slot, HugePageAllocator<Slot>> slots_;
  size_t mask_ = 0;
  size_t size_ = 0;
};

// A reader's direct-mapped cache of the nodes it defined or looked up last, in front of the
// graph's index: an operand mostly names a node defined a few lines above, which then costs a
// hit in a table of a few KiB instead of a probe into an index as large as the graph (a cache
// miss per operand on large graphs). Entries are never stale because a reader only adds nodes;
// anything that erases or renames nodes must not keep one.
template <class NodeT>
class RecentNames {
 public:
  // The node named `name`, from the cache or else from `lookup(name)` (which is then cached).
  template <class Lookup>
  NodeT* find(std::string_view name, Lookup&& lookup) {
    const uint64_t h = NameIndex<NodeT>::hashOf(name);
    Slot& s = slots_[h & (kSlots - 1)];
    if (holds(s, h, name)) return s.node;
    NodeT* n = lookup(name);
    if (n) s = {h, n};
    return n;
  }
  // Calls `prefetch(name)` unless `name` is cached: a reader that knows a node's operands
  // before it resolves them starts the index's cache misses early.
  template <class Prefetch>
  void prefetch(std::string_view name, Prefetch&& prefetch) const {
    const uint64_t h = NameIndex<NodeT>::hashOf(name);
    if (!holds(slots_[h & (kSlots - 1)], h, name)) prefetch(name);
  }
  void add(NodeT* n) {
    const uint64_t h = NameIndex<NodeT>::hashOf(n->name());
    slots_[h & (kSlots - 1)] = {h, n};
  }

 private:
  static constexpr size_t kSlots = 1024;
  struct Slot {
    uint64_t hash = 0;
    NodeT* node = nullptr;
  };
  static bool holds(const Slot& s, uint64_t h, std::string_view name) {
    return s.node && s.hash == h && s.node->name() == name;
  }
  std::array<Slot, kSlots> slots_{};
};

}  // namespace jfx
