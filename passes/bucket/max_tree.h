// MaxTree: range add and range max over a sequence of int64 values (schedule's memory curve).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace jfx {

// Range add / range max over the steps of the original order, for the memory limit. The steps
// come in blocks of kBlock: each step's own value is kept, and a tree over the blocks holds each
// block's max. An add or a max over [l, r) reads the steps of its two end blocks and the tree for
// the blocks between: O(kBlock + log n). A tree over the steps themselves was 2n cells of 16
// bytes, the pass's largest table; this is 8 bytes a step.
//
// In the tree each cell's max is the max of its children plus its own pending add, so no
// push-down is needed. The tree over [lo, hi) at k has its left child at k + 1 and its right
// child after the left's whole subtree, at k + 2 * (mid - lo): 2m - 1 cells for m blocks.
class MaxTree {
 public:
  // `base(i)`: the value at step i, for i < n.
  template <class Base>
  MaxTree(size_t n, const Base& base)
      : vals_(std::max<size_t>(1, n), 0), m_((vals_.size() + kBlock - 1) / kBlock) {
    for (size_t i = 0; i < n; ++i)
      vals_[i] = base(i);
    t_.assign(2 * m_ - 1, Cell{});
    build(0, 0, m_);
  }
  void add(size_t l, size_t r, int64_t v) {
    r = std::min(r, vals_.size());
    if (l >= r) return;
    const size_t bl = l / kBlock, br = (r - 1) / kBlock;
    if (bl == br) return addSteps(bl, l, r, v);
    addSteps(bl, l, (bl + 1) * kBlock, v);
    addSteps(br, br * kBlock, r, v);
    if (bl + 1 < br) addBlocks(0, 0, m_, bl + 1, br, v);
  }
  int64_t max(size_t l, size_t r) const {
    r = std::min(r, vals_.size());
    if (l >= r) return INT64_MIN;
    const size_t bl = l / kBlock, br = (r - 1) / kBlock;
    if (bl == br) return stepsMax(bl, l, r);
    int64_t m = std::max(stepsMax(bl, l, (bl + 1) * kBlock), stepsMax(br, br * kBlock, r));
    if (bl + 1 < br) m = std::max(m, maxBlocks(0, 0, m_, bl + 1, br));
    return m;
  }
  int64_t max() const { return t_[0].mx; }

 private:
  static constexpr size_t kBlock = 64;
  struct Cell {
    int64_t mx = 0;
    int64_t add = 0;
  };
  static size_t right(size_t k, size_t lo, size_t mid) { return k + 2 * (mid - lo); }
  // The max of block b's own step values.
  int64_t blockBase(size_t b) const {
    const size_t end = std::min((b + 1) * kBlock, vals_.size());
    return *std::max_element(vals_.begin() + static_cast<std::ptrdiff_t>(b * kBlock),
                             vals_.begin() + static_cast<std::ptrdiff_t>(end));
  }
  void build(size_t k, size_t lo, size_t hi) {
    if (hi - lo == 1) {
      t_[k].mx = blockBase(lo);
      return;
    }
    size_t mid = (lo + hi) / 2;
    build(k + 1, lo, mid);
    build(right(k, lo, mid), mid, hi);
    t_[k].mx = std::max(t_[k + 1].mx, t_[right(k, lo, mid)].mx);
  }
  // Adds v to steps [l, r) of block b, then brings the block's cell and its ancestors up to date.
  void addSteps(size_t b, size_t l, size_t r, int64_t v) {
    for (size_t i = l; i < r; ++i)
      vals_[i] += v;
    refresh(0, 0, m_, b);
  }
  void refresh(size_t k, size_t lo, size_t hi, size_t b) {
    if (hi - lo == 1) {
      t_[k].mx = blockBase(b) + t_[k].add;
      return;
    }
    size_t mid = (lo + hi) / 2;
    if (b < mid)
      refresh(k + 1, lo, mid, b);
    else
      refresh(right(k, lo, mid), mid, hi, b);
    t_[k].mx = std::max(t_[k + 1].mx, t_[right(k, lo, mid)].mx) + t_[k].add;
  }
  // The max of steps [l, r) within block b: their values plus the adds pending on the block's
  // path from the root.
  int64_t stepsMax(size_t b, size_t l, size_t r) const {
    int64_t m = *std::max_element(vals_.begin() + static_cast<std::ptrdiff_t>(l),
                                  vals_.begin() + static_cast<std::ptrdiff_t>(r));
    size_t k = 0, lo = 0, hi = m_;
    for (;;) {
      m += t_[k].add;
      if (hi - lo == 1) return m;
      const size_t mid = (lo + hi) / 2;
      if (b < mid) {
        k = k + 1, hi = mid;
      } else {
        k = right(k, lo, mid), lo = mid;
      }
    }
  }
  void addBlocks(size_t k, size_t lo, size_t hi, size_t l, size_t r, int64_t v) {
    if (r <= lo || hi <= l) return;
    if (l <= lo && hi <= r) {
      t_[k].mx += v;
      t_[k].add += v;
      return;
    }
    size_t mid = (lo + hi) / 2;
    addBlocks(k + 1, lo, mid, l, r, v);
    addBlocks(right(k, lo, mid), mid, hi, l, r, v);
    t_[k].mx = std::max(t_[k + 1].mx, t_[right(k, lo, mid)].mx) + t_[k].add;
  }
  int64_t maxBlocks(size_t k, size_t lo, size_t hi, size_t l, size_t r) const {
    if (r <= lo || hi <= l) return INT64_MIN;
    if (l <= lo && hi <= r) return t_[k].mx;
    size_t mid = (lo + hi) / 2;
    int64_t m =
        std::max(maxBlocks(k + 1, lo, mid, l, r), maxBlocks(right(k, lo, mid), mid, hi, l, r));
    return m == INT64_MIN ? m : m + t_[k].add;
  }
  std::vector<int64_t> vals_;  // by step, without the adds pending in the tree
  size_t m_;                   // blocks
  std::vector<Cell> t_;
};

}  // namespace jfx
