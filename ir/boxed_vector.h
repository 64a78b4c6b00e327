// BoxedVector<T>: a std::vector<T> held through one pointer, null while empty. Nested lists in
// the IR (a list argument's items, a multi-output node's item metas, a node's kwargs) are empty
// in most values that carry them, so an inline std::vector cost 24 bytes in every Arg and every
// ValueMeta, and a node has a ValueMeta and two or so Args: every node carried several vectors'
// worth of pointers to nothing (bench/README.md, "Smaller values" and "Figures behind the code").
// Reading goes through the vector itself (get(), or the implicit conversion), so callers keep
// std::vector's interface.
#pragma once

#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

namespace jfx {

template <class T>
class BoxedVector {
 public:
  using value_type = T;
  using size_type = std::size_t;
  using iterator = typename std::vector<T>::iterator;
  using const_iterator = typename std::vector<T>::const_iterator;

  BoxedVector() = default;
  BoxedVector(std::vector<T> v) { assign(std::move(v)); }  // NOLINT: implicit, as a vector's
  BoxedVector(const BoxedVector& o) {
    if (!o.empty()) p_ = std::make_unique<std::vector<T>>(*o.p_);
  }
  BoxedVector(BoxedVector&&) noexcept = default;
  BoxedVector& operator=(const BoxedVector& o) {
    if (this != &o) assign(o.get());
    return *this;
  }
  BoxedVector& operator=(BoxedVector&&) noexcept = default;
  BoxedVector& operator=(std::vector<T> v) {
    assign(std::move(v));
    return *this;
  }
  ~BoxedVector() = default;

  const std::vector<T>& get() const { return p_ ? *p_ : emptyVector(); }
  operator const std::vector<T>&() const { return get(); }  // NOLINT: implicit on purpose
  // The vector itself, made if there is none yet.
  std::vector<T>& mut() {
    if (!p_) p_ = std::make_unique<std::vector<T>>();
    return *p_;
  }
  // The vector, leaving this empty.
  std::vector<T> take() {
    std::vector<T> out = p_ ? std::move(*p_) : std::vector<T>();
    p_.reset();
    return out;
  }

  size_type size() const { return p_ ? p_->size() : 0; }
  bool empty() const { return !p_ || p_->empty(); }
  const T& operator[](size_type i) const { return (*p_)[i]; }
  T& operator[](size_type i) { return (*p_)[i]; }
  const T& front() const { return p_->front(); }
  const T& back() const { return p_->back(); }
  T& back() { return p_->back(); }
  const_iterator begin() const { return get().begin(); }
  const_iterator end() const { return get().end(); }
  iterator begin() { return p_ ? p_->begin() : iterator(); }
  iterator end() { return p_ ? p_->end() : iterator(); }
  void reserve(size_type n) {
    if (n) mut().reserve(n);
  }
  void push_back(const T& v) { mut().push_back(v); }
  void push_back(T&& v) { mut().push_back(std::move(v)); }
  template <class... A>
  T& emplace_back(A&&... a) {
    return mut().emplace_back(std::forward<A>(a)...);
  }
  void clear() { p_.reset(); }

  friend bool operator==(const BoxedVector& a, const BoxedVector& b) { return a.get() == b.get(); }
  friend bool operator==(const BoxedVector& a, const std::vector<T>& b) { return a.get() == b; }

 private:
  void assign(std::vector<T> v) {
    if (v.empty())
      p_.reset();
    else if (p_)
      *p_ = std::move(v);
    else
      p_ = std::make_unique<std::vector<T>>(std::move(v));
  }
  static const std::vector<T>& emptyVector() {
    static const std::vector<T> kEmpty;
    return kEmpty;
  }

  std::unique_ptr<std::vector<T>> p_;
};

}  // namespace jfx
