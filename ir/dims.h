// Dims: the sizes or strides of a tensor, interned. Every distinct list of dimensions is stored
// once for the life of the process (a registry, like Symbol), and a Dims is a pointer to it.
//
// Why: every node holds a shape and a stride, and the nodes of a layer repeat a handful of them.
// Held inline (absl::InlinedVector<int64_t, 5>) the two took 96 of a node's 384 bytes; interned
// they take 16, and copying and comparing a tensor meta stop looking at its dimensions
// (two Dims are equal exactly when their pointers are). MLIR uniques its types in the context for
// the same reasons; this project has no context object, so the table is process-wide.
//
// A Dims is immutable: code that edits a shape copies it to a std::vector<int64_t> (implicit),
// edits that and assigns it back, or builds a new one with `with(i, v)`.
#pragma once

#include <absl/container/inlined_vector.h>

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

namespace jfx {

// A list of dimensions being read or computed, before it is interned: no heap up to rank 8.
using DimsScratch = absl::InlinedVector<int64_t, 8>;

class Dims {
 public:
  using value_type = int64_t;
  using size_type = size_t;
  using const_iterator = const int64_t*;
  using iterator = const int64_t*;  // read-only either way

  Dims() = default;  // rank 0
  Dims(std::span<const int64_t> dims) : rep_(intern(dims)) {}
  Dims(std::initializer_list<int64_t> dims) : Dims(std::span<const int64_t>(dims)) {}
  // Implicit to and from std::vector<int64_t>: the builder, the synthesizer, the runtime and the
  // tests compute shapes as vectors, assign them to a meta and take a meta's shape as a vector to
  // edit. Converting to a vector allocates, so the load, copy, hash and write paths use Dims or a
  // std::span instead.
  Dims(const std::vector<int64_t>& dims) : Dims(std::span<const int64_t>(dims)) {}
  template <class It>
  requires(!std::is_integral_v<It>) Dims(It first, It last)
      : Dims(std::vector<int64_t>(first, last)) {}
  // `n` copies of `value`.
  explicit Dims(size_t n, int64_t value = 0) : Dims(std::vector<int64_t>(n, value)) {}
  operator std::vector<int64_t>() const { return {begin(), end()}; }

  size_t size() const { return rep_ ? rep_->size : 0; }
  bool empty() const { return rep_ == nullptr; }
  const int64_t* data() const { return rep_ ? rep_->data() : nullptr; }
  const int64_t* begin() const { return data(); }
  const int64_t* end() const { return data() + size(); }
  int64_t operator[](size_t i) const { return data()[i]; }
  int64_t front() const { return data()[0]; }
  int64_t back() const { return data()[size() - 1]; }
  // This list with dimension `i` set to `value`.
  Dims with(size_t i, int64_t value) const;
  // A hash of the elements, computed once when the list was interned.
  uint64_t hash() const { return rep_ ? rep_->hash : 0; }

  friend bool operator==(Dims a, Dims b) { return a.rep_ == b.rep_; }
  friend bool operator==(Dims a, std::span<const int64_t> b);
  friend bool operator==(Dims a, const std::vector<int64_t>& b) {
    return a == std::span<const int64_t>(b);
  }

  // Lists interned so far, for tests and statistics.
  static size_t internedCount();

  // Another contiguous list of int64 (absl::InlinedVector, std::array).
  template <class R>
  requires(std::is_convertible_v<decltype(std::declval<const R&>().data()), const int64_t*> &&
           !std::is_same_v<R, std::vector<int64_t>> &&
           !std::is_same_v<R, Dims>) explicit Dims(const R& dims)
      : Dims(std::span<const int64_t>(dims.data(), dims.size())) {}

  // The stored list: a header and then the elements. Public only so the table in dims.cc can
  // name it.
  struct Rep {
    uint64_t size;
    uint64_t hash;
    const int64_t* data() const { return reinterpret_cast<const int64_t*>(this + 1); }
  };

 private:
  // The one stored list equal to `dims`, created on first sight; null for an empty list.
  static const Rep* intern(std::span<const int64_t> dims);
  const Rep* rep_ = nullptr;
};

}  // namespace jfx
