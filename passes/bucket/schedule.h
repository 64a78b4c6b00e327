// schedule: overlaps FSDP communication with compute by moving collective chains only; the order
// of compute nodes is left exactly as it was.
//
// Does, per phase side (forward + loss, then backward), over the FSDP all-gathers in program order
// (buckets from `bucket`, or single FSDP all-gathers): the launch chain of all-gather j (the
// collective and the pure producers it needs: casts, flattens, the bucket's cat) moves to just
// before the wait of all-gather j - K, so it is issued before the compute of the K-th bucket
// ahead of it. Backward re-gathers come in reverse block order and get the same treatment. Then
// the wait of each FSDP reduce-scatter / all-reduce (with the views below it) moves down to just
// after the next one's launch: deferred by one bucket.
// Never: moves a collective past another collective of its process group (NCCL runs one group's
// collectives in issue order on every rank; passing split-comm-groups first gives all-gathers and
// reduce-scatters separate groups and so more room), moves a launch later or a wait earlier, or
// moves a compute node (a chain stops at the first non-pure producer).
// memory-limit=BYTES is a hard limit on the estimated peak (passes/analysis/memory.h): each move
// adds the chain's fresh bytes over the steps it spans (a segment tree over the original order,
// range add / range max, O(log N) a move); a move that would exceed the limit is retried with a
// smaller prefetch distance, down to none, with a remark naming the collective. When the input
// already exceeds the limit, no move raises the peak further.
// Default limit: the input's own estimated peak (memory-limit=input), so schedule never raises
// the estimated peak of the graph it is given; memory-limit=none (or 0) lifts it.
// prefetch=auto picks K from the cost model (passes/analysis/cost_model.h, the profile named by
// hardware=FILE): K = 0 .. max-prefetch (default 3) each runs on the input under the same memory
// limit as a nested pipeline (PassContext::runPipeline), is timed by the simulator
// (passes/analysis/simulator.h), and has its moves undone (Graph::rollback; no copy: the
// candidates share the input's analyses, which a rollback makes current again); the
// shortest simulated step whose estimated peak (memory analysis of the scheduled order) is
// within the limit wins, ties to the smaller K. O(max-prefetch x N log N). Statistics
// auto-prefetch, auto-candidates, simulated-step-us.
// memory-limit=reference bounds the estimated peak by the reference plan's (FSDP2's: bucket per
// unit, prefetch 1; passes/plan/reference_plan.h) of the input, the input's own if larger; with
// hardware=FILE the result is then simulated against the reference plan, and when the reference
// is faster the pass returns the reference plan instead (a warning says so; statistics
// reference-peak, reference-step-us, simulated-step-us, reference-fallback). What the default
// pipeline runs (configs/pipelines/default.json): never more memory, never slower than FSDP2 by
// the project's own models.
// Options: prefetch=K|auto (default 1; 0 = no all-gather moves), max-prefetch=N (auto only),
// hardware=FILE (auto: required; memory-limit=reference: optional), defer-rs=true,
// memory-limit=BYTES | input | reference | none (suffixes K, M, G, Ki, Mi, Gi with optional B;
// default input). O(N log N); reference adds the reference plan's bucket and schedule on a copy.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "passes/analysis/cost_model.h"
#include "passes/pass.h"

namespace jfx {

// memory-limit=reference (bucket and schedule): the estimated peak of the reference plan
// (passes/plan/reference_plan.h) of the pass's input, or the input's own peak if larger.
inline constexpr int64_t kMemoryLimitReference = -2;

struct ScheduleOptions {
  int64_t prefetch = 1;
  bool defer_reduce_scatter = true;
  // bytes; 0 = none; -1 = the input's estimated peak; kMemoryLimitReference (SchedulePass only)
  int64_t memory_limit = 0;
  bool auto_prefetch = false;  // prefetch=auto: the best K in 0..max_prefetch by simulation
  int64_t max_prefetch = 3;
  // prefetch=auto (required there); memory-limit=reference: times the result against the
  // reference plan's (optional there)
  std::shared_ptr<const CostModel> cost;
};

// Statistics: prefetched, prefetch-lowered, waits-deferred, defer-skipped-memory, moved-nodes,
// memory-peak-before, memory-limit, memory-peak-estimate, blocks (not in a quiet nested run:
// PassContext::quiet).
bool scheduleCollectives(Graph& g, const ScheduleOptions& opts, PassContext& ctx);

// memory-limit=reference (above): schedules `g` under the reference plan's estimated peak and,
// with opts.cost, replaces the result by the reference plan when that simulates faster.
bool scheduleWithinReference(Graph& g, const ScheduleOptions& opts, PassContext& ctx);

class SchedulePass : public Pass {
 public:
  std::span<const Statistic* const> statistics() const override;
  bool run(Graph& g, PassContext& ctx) override;

 private:
  void initialize() override;
  Option<int64_t> prefetch_{this,
                            "prefetch",
                            1,
                            "all-gathers issued this many buckets ahead; auto: the K in "
                            "0..max-prefetch with the shortest simulated step within memory-limit",
                            {0, 1000000},
                            {{"auto", -1}}};
  Option<int64_t> max_prefetch_{
      this, "max-prefetch", std::nullopt, "prefetch=auto: the largest K tried (unset: 3)", {0, 64}};
  Option<std::string> hardware_{this, "hardware", "",
                                "prefetch=auto: the hardware profile (JSON) that times the "
                                "candidates; memory-limit=reference: times the result against "
                                "the reference plan",
                                Option<std::string>::Kind::Path};
  Option<bool> defer_rs_{this, "defer-rs", true,
                         "defer each reduce-scatter's wait past the next reduce-scatter's launch"};
  BytesOption memory_limit_{this,
                            "memory-limit",
                            "input",
                            "estimated peak bound: input (the input's own peak), reference (the "
                            "reference plan's, FSDP2's, if larger), none, or BYTES",
                            {{"input", -1}, {"reference", kMemoryLimitReference}, {"none", 0}}};
  ScheduleOptions opts_;
};

}  // namespace jfx
