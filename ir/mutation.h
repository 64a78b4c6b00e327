// Which values a node writes in place, and which buffers a graph updates.
//
// Note [Buffer updates]
// A graph updates a buffer (BatchNorm's running_mean / running_var / num_batches_tracked) in one of
// two ways, and the IR represents both (docs/graph-format.md, "Buffer updates"):
//   * functional, as torch.export and AOTAutograd write it: an output of kind buffer_mutation
//     names the buffer, and the runner copies that output into the buffer after the step;
//   * in place, as make_fx traces it: an op writes the buffer placeholder (or a view of it), e.g.
//     aten.native_batch_norm.default(x, w, b, running_mean, running_var, True, ...) or
//     aten.add_.Tensor(num_batches_tracked, 1).
// Passes must keep in-place writes (dce), never duplicate them (remat) and never move a read of a
// written buffer across the write (schedule); outputs are live by construction.
#pragma once

#include <cstdint>
#include <vector>

#include "ir/graph.h"

namespace jfx {

// The operands `n` writes in place, from the op table: the positional arguments in
// OpInfo::written_args (schema alias annotations, plus ir/ops.def MUTATES rows for writes a schema
// does not annotate, such as native_batch_norm's running statistics), operand 0 of an in-place op
// and the `out` kwarg. The batch-norm family writes only in training mode.
std::vector<Node*> mutatedOperands(const Node& n);

// The node whose storage `n` shares through views (View ops follow operand 0): `n` itself when it
// is no view.
const Node* storageRoot(const Node* n);

struct BufferMutations {
  // By node id: the buffer placeholder the node writes in place, or nullptr.
  std::vector<const Node*> writer_of;
  // By node id: 1 for a buffer placeholder some node writes in place, and for views of it.
  std::vector<uint8_t> written_alias;
  // In-place writes to buffers, in program order.
  std::vector<const Node*> writers;

  bool writesBuffer(const Node* n) const {
    return n->id() < writer_of.size() && writer_of[n->id()] != nullptr;
  }
  // True when an operand of `n` is a buffer written in place somewhere in the graph (or a view
  // of one): moving `n` across that write changes what it reads.
  bool readsWrittenBuffer(const Node* n) const;
};

// One O(N) walk over the graph.
BufferMutations analyzeBufferMutations(const Graph& g);

}  // namespace jfx
