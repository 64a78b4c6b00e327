// A string in one pointer: for node fields that are empty on most nodes or read only by the
// formats (a stack trace, meta the passes do not read, a placeholder's FQN). std::string takes
// 32 bytes on every node whether it holds anything or not; this takes 8, and its text lives in
// one heap block (its size first) only when there is text.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace jfx {

class CompactString {
 public:
  CompactString() = default;
  explicit CompactString(std::string_view s) { assign(s); }
  CompactString(const CompactString& o) { assign(o.view()); }
  CompactString(CompactString&& o) noexcept : p_(o.p_) { o.p_ = nullptr; }
  CompactString& operator=(const CompactString& o) {
    if (this != &o) assign(o.view());
    return *this;
  }
  CompactString& operator=(CompactString&& o) noexcept {
    if (this != &o) {
      release();
      p_ = o.p_;
      o.p_ = nullptr;
    }
    return *this;
  }
  CompactString& operator=(std::string_view s) {
    assign(s);
    return *this;
  }
  CompactString& operator=(const std::string& s) { return *this = std::string_view(s); }
  CompactString& operator=(const char* s) { return *this = std::string_view(s); }
  ~CompactString() { release(); }

  std::string_view view() const {
    if (!p_) return {};
    return {p_ + sizeof(uint64_t), size()};
  }
  operator std::string_view() const { return view(); }  // NOLINT: reads like a string
  std::string str() const { return std::string(view()); }
  bool empty() const { return p_ == nullptr; }
  size_t size() const {
    if (!p_) return 0;
    uint64_t n;
    std::memcpy(&n, p_, sizeof n);
    return static_cast<size_t>(n);
  }
  const char* data() const { return view().data(); }
  size_t find(std::string_view s) const { return view().find(s); }
  void clear() { release(); }

  friend bool operator==(const CompactString& a, const CompactString& b) {
    return a.view() == b.view();
  }
  friend bool operator==(const CompactString& a, std::string_view b) { return a.view() == b; }

 private:
  void assign(std::string_view s) {
    char* fresh = nullptr;
    if (!s.empty()) {
      // Copied before the old block goes: s may be a view of this string.
      const uint64_t n = s.size();
      fresh = new char[sizeof n + s.size()];
      std::memcpy(fresh, &n, sizeof n);
      std::memcpy(fresh + sizeof n, s.data(), s.size());
    }
    release();
    p_ = fresh;
  }
  void release() {
    delete[] p_;
    p_ = nullptr;
  }

  char* p_ = nullptr;  // null when empty; else the size (8 bytes) then the text
};

}  // namespace jfx
