#include "ir/symbol.h"

#include <array>
#include <atomic>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <stdexcept>
#include <unordered_map>

namespace jfx {
namespace {

// The process-wide string table: a registry (append-only, never cleared), the one kind of global
// state the project allows. Strings live in fixed-size chunks that never move, so str() reads
// without a lock; interning takes a lock only to insert.
constexpr uint32_t kChunkBits = 12;
constexpr uint32_t kChunkSize = 1u << kChunkBits;
constexpr uint32_t kMaxChunks = 1u << 16;

// The chunk pointers are constant-initialized (zero pages the process never writes until a chunk
// exists): a member array of 512 KiB was zeroed when the table was made and read whole when it
// was destroyed, a page fault per page in every run, however small its graph (bench/README.md,
// "Figures behind the code").
constinit std::array<std::atomic<std::string*>, kMaxChunks> g_chunks{};

struct SymbolTable {
  std::shared_mutex mu;
  std::unordered_map<std::string_view, uint32_t> ids;
  uint32_t size = 0;

  SymbolTable() { add(std::string_view()); }

  uint32_t add(std::string_view s) {
    uint32_t id = size;
    uint32_t chunk = id >> kChunkBits;
    if (chunk >= kMaxChunks) throw std::length_error("symbol table full");
    std::string* block = g_chunks[chunk].load(std::memory_order_relaxed);
    if (block == nullptr) {
      block = new std::string[kChunkSize];
      g_chunks[chunk].store(block, std::memory_order_release);
    }
    block[id & (kChunkSize - 1)] = std::string(s);
    ids.emplace(std::string_view(block[id & (kChunkSize - 1)]), id);
    ++size;
    return id;
  }
};

// Never destroyed: symbols are read until the process ends (a static's destructor could run
// while another thread still reads one), and freeing the strings at exit only costs time.
SymbolTable& table() {
  static SymbolTable* t = new SymbolTable;
  return *t;
}

}  // namespace

Symbol Symbol::intern(std::string_view s) {
  SymbolTable& t = table();
  {
    std::shared_lock lock(t.mu);
    auto it = t.ids.find(s);
    if (it != t.ids.end()) return Symbol(it->second);
  }
  std::unique_lock lock(t.mu);
  auto it = t.ids.find(s);
  if (it != t.ids.end()) return Symbol(it->second);
  return Symbol(t.add(s));
}

std::string_view Symbol::str() const {
  // A Symbol is only ever made by intern(), which published its chunk before returning the id;
  // the one exception is the empty symbol (id 0) read before anything was interned.
  const std::string* block = g_chunks[id_ >> kChunkBits].load(std::memory_order_acquire);
  if (block == nullptr) [[unlikely]]
    return {};
  return block[id_ & (kChunkSize - 1)];
}

}  // namespace jfx
