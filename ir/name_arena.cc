#include "ir/name_arena.h"

#include <stdexcept>

namespace jfx {

const char* NameArena::add(std::string_view s) {
  if (s.size() > UINT32_MAX - sizeof(uint32_t) - 1)
    throw std::length_error("a node name longer than 4 GiB");
  const auto n = static_cast<uint32_t>(s.size());
  const size_t need = sizeof n + s.size() + 1;
  if (need > left_) {
    // A name larger than a quarter chunk gets a chunk of its own, so the current one is not
    // abandoned half empty.
    const size_t size = need > kChunk / 4 ? need : kChunk;
    chunks_.push_back(std::shared_ptr<char[]>(new char[size]));
    char* c = chunks_.back().get();
    if (size != kChunk) {  // next_ and left_ stay on the chunk in use
      std::memcpy(c, &n, sizeof n);
      std::memcpy(c + sizeof n, s.data(), s.size());
      c[sizeof n + s.size()] = '\0';
      return c + sizeof n;
    }
    next_ = c;
    left_ = size;
  }
  char* p = next_;
  std::memcpy(p, &n, sizeof n);
  std::memcpy(p + sizeof n, s.data(), s.size());
  p[sizeof n + s.size()] = '\0';
  next_ += need;
  left_ -= need;
  return p + sizeof n;
}

}  // namespace jfx
