#include "ir/name_arena.h"

#include <stdexcept>

#include "ir/identifier.h"

namespace jfx {

namespace {

// Writes `s` at `at` as the arena stores it (length, characters, NUL); returns its characters.
const char* store(char* at, std::string_view s) {
  const auto n = static_cast<uint32_t>(s.size());
  std::memcpy(at, &n, sizeof n);
  std::memcpy(at + sizeof n, s.data(), s.size());
  at[sizeof n + s.size()] = '\0';
  return at + sizeof n;
}

}  // namespace

const char* NameArena::add(std::string_view s) {
  if (s.size() > UINT32_MAX - sizeof(uint32_t) - 1)
    throw std::length_error("a node name longer than 4 GiB");
  if (!isPythonIdentifier(s)) ++non_identifiers_;
  const size_t need = sizeof(uint32_t) + s.size() + 1;
  if (need > left_) {
    // A name larger than a quarter chunk gets a chunk of its own, so the current one is not
    // abandoned half empty; next_ and left_ stay on the chunk in use.
    const size_t size = need > kChunk / 4 ? need : kChunk;
    chunks_.push_back(std::shared_ptr<char[]>(new char[size]));
    if (size != kChunk) return store(chunks_.back().get(), s);
    next_ = chunks_.back().get();
    left_ = size;
  }
  const char* out = store(next_, s);
  next_ += need;
  left_ -= need;
  return out;
}

}  // namespace jfx
