// Written storage: which values some op in the graph writes in place (OpInfo::mutates, from the
// schemas' alias annotations), so that passes which move nodes keep readers of those values where
// they are. A reader moved across a write would see the other side of it.
//
// A value's storage is its root: follow input 0 through View and InPlace outputs (views, in-place
// ops, waits) to the node that made it. Every storage an op writes is marked: its written
// positional arguments (OpInfo::written_args) and every node in its kwargs (out=). A node touches
// written storage when its own root or one of its operands' roots is marked.
//
// Conservative where the table is: an op not in the table, or known only to write something,
// marks every operand. Cost: O(N + E).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "passes/analysis_manager.h"

namespace jfx {

class WrittenStorage {
 public:
  explicit WrittenStorage(const Graph& g);
  // The analysis of any graph that writes nothing in place (what any() == false says).
  static WrittenStorage nothingWritten() { return WrittenStorage(); }
  // Whether `n` reads or produces a value some op writes in place.
  bool touches(const Node* n) const;
  // Whether the graph writes anything in place at all. When it does not, the analysis holds for
  // any graph that makes no op that may write (a known writer or an op the table does not know):
  // a pass that makes none may declare it preserved.
  bool any() const { return any_; }

 private:
  friend struct AnalysisTraits<WrittenStorage>;
  WrittenStorage() = default;
  uint32_t rootOf(const Node* n) const;
  std::vector<uint32_t> root_;    // by node id: id of the node that made its storage
  std::vector<uint8_t> written_;  // by root id
  bool any_ = false;
};

// Cached along the pipeline (dedup-fsdp-unshard, bucket and schedule read it; split-comm-groups
// keeps it, as it renames groups only).
template <>
struct AnalysisTraits<WrittenStorage> {
  static constexpr std::string_view name = "written";
  static WrittenStorage compute(const Graph& g, AnalysisManager&) { return WrittenStorage(g); }
  static std::string fingerprint(const Graph& g, const WrittenStorage& w);
  // Node ids only: the same answer for an exact copy.
  static WrittenStorage follow(const WrittenStorage& w, const NodeTranslation&) { return w; }
};

}  // namespace jfx
