// The reference plan: what FSDP2 (eager `fully_shard` on each unit, docs/passes.md "Reference
// plan") runs on a graph, built from this project's own passes on a copy, so that its estimated
// peak and simulated step come from the same models as every other plan's:
//   dce, tag-fsdp{reshard=default} (keep-last=1: every unit resharded after forward except the
//   last, which backward needs first), remat, dedup-fsdp-unshard,
//   bucket{plan=blocks, kinds=ag,rs, memory-limit=none} (one all-gather and one reduce-scatter
//   bucket per unit: the blocks of passes/analysis/blocks.h; the parameters outside every block
//   by top-level module, as FSDP2's root wrap holds them),
//   schedule{prefetch=1, memory-limit=none} (the next unit's all-gather issued before this
//   unit's compute, in forward and in backward; each reduce-scatter waited for at the next, as
//   FSDP2 keeps one reduce-scatter in flight).
// The same process group carries all-gathers and reduce-scatters (FSDP2 issues both on one
// communicator); no all-reduce is bucketed.
//
// The default pipeline is bounded by it (memory-limit=reference in bucket and schedule) and
// falls back to it when its own schedule simulates slower (schedule's hardware option).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "ir/graph.h"
#include "passes/analysis/memory.h"

namespace jfx {

class CostModel;
class PassContext;
class PhaseInfo;

struct ReferencePlan {
  std::unique_ptr<Graph> graph;  // the planned copy
  int64_t peak_bytes = 0;        // estimated peak (passes/analysis/memory.h)
  int64_t forward_all_gathers = 0;
  int64_t backward_all_gathers = 0;
  int64_t reduce_scatters = 0;
};

// The whole pipeline above, as text (for messages and `jointfx opt -p`).
std::string referencePipelineSpec();

// The reference plan of `g`, on a copy (`g` is left as it is). Throws JfxError when a pass of
// the pipeline fails on it.
ReferencePlan buildReferencePlan(const Graph& g, const MemoryOptions& memory = {});

// What the reference plan's last two passes (bucket, schedule) give a graph that has been
// through the first four, as the default pipeline's bucket and schedule are given (their
// memory-limit=reference): its estimated peak, and its simulated step when `cost` is given.
struct ReferenceEstimate {
  int64_t peak_bytes = 0;
  double step = 0;  // seconds; 0 without a cost model
};

// The reference estimate of `g`, measured on `g` itself: the two passes run as a nested pipeline
// of `ctx` (served its analyses of `g`) and are then undone (Note [Undo] in ir/graph.h), so `g`
// is as it was on return, revision included, and `ctx`'s analyses of it still hold. Bounding a
// pass by the reference then costs the edits, not a copy of the graph and its analyses. A graph
// that is already recording undo (one recording at a time) is measured on a fork instead. A graph
// already bucketed per unit keeps its buckets (bucket merges only collectives it has not made), and
// the group split-comm-groups added for reduce-scatters goes back into the all-gathers' group
// (FSDP2 uses one communicator), so schedule's input gives the same plan as bucket's.
ReferenceEstimate estimateReferenceTail(Graph& g, PassContext& ctx,
                                        const CostModel* cost = nullptr);

// The reference plan's last two passes done to `g`, as a nested pipeline of `ctx`: the nodes `g`
// keeps keep their ids, so callers that tell nodes apart by id (the Python bridge's edit scripts)
// see a plan, not a new graph.
void applyReferenceTail(Graph& g, PassContext& ctx);

// Collectives of each kind by phase, as the plans are compared.
void countPlanCollectives(const Graph& g, const PhaseInfo& phases, ReferencePlan& counts);

}  // namespace jfx
