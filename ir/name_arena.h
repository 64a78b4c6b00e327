// Node names, stored once per graph (Note [Name arena]).
//
// Note [Name arena]
// A node holds its name as one pointer into its graph's arena: the characters, with their length
// in the 4 bytes before them and a NUL after. A std::string in the node was 32 bytes, and most
// traced names ("add_tensor_17", "model_layers_3_attention_wq_weight") are longer than its
// 15-character inline buffer, so they were a heap block of their own besides, with the heap's
// overhead on each (bench/README.md, "Figures behind the code"). The arena only grows; a renamed or
// erased node's old name stays until the graph is destroyed. A copy of a graph shares the chunks
// that hold the names it copied (they never change once written) and writes new names into chunks
// of its own.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <string_view>
#include <vector>

namespace jfx {

class NameArena {
 public:
  NameArena() = default;
  // Shares `o`'s chunks; writes its own names into new ones.
  NameArena(const NameArena& o) : chunks_(o.chunks_), non_identifiers_(o.non_identifiers_) {}
  NameArena& operator=(const NameArena& o) {
    if (this != &o) {
      chunks_ = o.chunks_;
      next_ = nullptr;
      left_ = 0;
      non_identifiers_ = o.non_identifiers_;
    }
    return *this;
  }
  NameArena(NameArena&& o) noexcept { swap(o); }
  NameArena& operator=(NameArena&& o) noexcept {
    swap(o);
    return *this;
  }
  void swap(NameArena& o) noexcept {
    chunks_.swap(o.chunks_);
    std::swap(next_, o.next_);
    std::swap(left_, o.left_);
    std::swap(non_identifiers_, o.non_identifiers_);
  }

  // A stored copy of `s`, valid while this arena or a copy of it lives.
  const char* add(std::string_view s);
  // How many of the names stored (also those of nodes since renamed or erased, and of a copied
  // graph's) are not Python identifiers (ir/identifier.h). Counted as each name is stored, while
  // its bytes are at hand: zero lets the verifier's rule `identifier` skip reading every node's
  // name, a cache miss per node on a large graph after the passes have reordered it.
  size_t nonIdentifiers() const { return non_identifiers_; }
  // The name stored at `p` (nullptr: the empty name).
  static std::string_view view(const char* p) {
    if (p == nullptr) return {};
    uint32_t n;
    std::memcpy(&n, p - sizeof n, sizeof n);
    return {p, n};
  }

 private:
  static constexpr size_t kChunk = size_t{64} << 10;
  std::vector<std::shared_ptr<char[]>> chunks_;
  char* next_ = nullptr;
  size_t left_ = 0;
  size_t non_identifiers_ = 0;
};

}  // namespace jfx
