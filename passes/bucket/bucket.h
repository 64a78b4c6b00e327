// bucket: merges FSDP collectives into one collective per bucket, without baking in a rank.
//
// Does: groups collectives by (kind, target, process group, group size, dtype, reduce op, phase)
// and splits each group into buckets by plan:
//   blocks  one bucket per block of passes/analysis/blocks.h (the same blocks tag-fsdp, schedule
//           and `jointfx analyze` see: layers.12, transformer.h.3, stages.0.blocks.1); parameters
//           outside blocks get one bucket per top-level module, except the `head` modules
//           (default norm, output, lm_head, final_norm), which share one. A graph with
//           parameters but no block warns (every top-level module is then its own bucket).
//           FQNs come from the parameter (input FQN / gradient output spec), else module meta.
//   size    greedy in program order, closing a bucket before it would exceed cap-mb.
// A bucket is a run of same-key collectives adjacent in program order (a member of another block
// closes the open one), so bucketing never reorders two collectives of one key. Rewrites (members
// in parameter order, i.e. placeholder order; every rank computes the same thing):
//   all-gather     cat([flatten(in_i)]) -> all_gather -> wait -> view(G, -1)
//                  -> split_with_sizes(numel_i, dim=1) -> getitem -> reshape(out_i)
//   reduce-scatter cat([in_i.view(G, -1)], dim=1).flatten() -> reduce_scatter -> wait
//                  -> split_with_sizes(numel_i / G) -> getitem -> view(out_i)
//   all-reduce     cat([flatten(in_i)]) -> all_reduce -> wait -> split_with_sizes -> view
// Placement: an all-gather bucket is issued at its first member (member inputs are parameters
// and casts: their pure producer chains move up to it) and waited at the earliest member wait. A
// reduce-scatter / all-reduce bucket is issued at its last member (when every input is ready)
// and waited at the earliest member wait, or right away when that came earlier; pure users of
// member waits (views to the output) move below the new wait.
// Assumes: FSDP roles from passes/analysis/fsdp.h (TP and other collectives are left alone unless
// fsdp-only=false). A member joins only if it has no path from the open bucket (a forward taint
// sweep in program order, one counter per key: O(N * keys), no reachability matrix) and its
// placement is legal by position. Buckets of one member are left as they are.
// Memory: under a bound (memory-limit, default the input's estimated peak) the pass buckets a
// copy, and leaves out every bucket owning or moving a storage live at a step above the bound,
// until the estimate is within it (at most 8 rounds, each O(N); then nothing is bucketed).
// Summation order: PyTorch's gloo backend reduce-scatters by a ring all-reduce of the whole
// buffer (gloo/allreduce.cc), which sums the elements of ring chunk k (boundaries at multiples
// of C = glooRingChunkElems(N)) starting from rank k-1 backwards. With G >= 3 ranks a different
// chunk is a different association, so an element that changes chunk can change by an ulp. The
// bucket keeps every element's chunk: a gradient joins only when its own ring chunks are its
// rank rows (C(G n) = n: per-rank count even below 2G MiB, a multiple of the segments per rank
// above), and the bucket's rows are zero-padded until C(G T) = T, so row r of the bucket is ring
// chunk r and every member element is summed by the same ranks in the same order. Other
// gradients stay unbucketed (stat unbucketed.rs-order). exact-rs-order=false drops the rule.
// NCCL's algorithms are not modelled.
// plan=auto picks the plan from the cost model (passes/analysis/cost_model.h, the profile named
// by hardware=FILE): each candidate (blocks, blocks two at a time, blocks four at a time, size
// caps 16/32/64/128/256 MB) is bucketed on an in-memory copy (ir/clone.h) under the
// same memory bound, then split-comm-groups and schedule{prefetch=1} run on the copy as the
// default pipeline would, and the simulator (passes/analysis/simulator.h) times it. The
// candidate with the shortest simulated step wins; ties go to the earlier candidate, so the
// choice is deterministic. Every candidate is within the bound (the bound above), so the choice
// is too. O(candidates x N log N). Statistics auto-plan (candidate index), auto-candidates,
// simulated-step-us.
// Options: plan=blocks|size|auto, cap-mb=N (size plan default 64; blocks: 0 = uncapped),
// group=N (blocks per bucket under plan=blocks, default 1), kinds=ag,rs,ar, fsdp-only=true,
// head=norm,output,lm_head,final_norm, exact-rs-order=true, param-once=false,
// memory-limit=input|none|BYTES,
// hardware=FILE (plan=auto only, required there).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "passes/analysis/blocks.h"
#include "passes/analysis/cost_model.h"
#include "passes/bucket/schedule.h"
#include "passes/pass.h"

namespace jfx {

struct BucketOptions {
  enum class Plan { Blocks, Size, Auto };
  Plan plan = Plan::Blocks;
  int64_t cap_bytes = 0;     // 0 = no cap
  int64_t group_blocks = 1;  // plan=blocks: consecutive blocks sharing one bucket
  bool all_gather = true;
  bool reduce_scatter = true;
  bool all_reduce = true;
  bool fsdp_only = true;
  std::vector<std::string> head = {"norm", "output", "lm_head", "final_norm"};
  // Keep every reduce-scatter element's summation order under gloo (see "Summation order").
  bool exact_rs_order = true;
  // A bucket holds at most one collective per parameter; a parameter's next gather or gradient
  // reduction starts a new bucket. FSDP2 keeps each gradient once in a unit's reduce-scatter
  // buffer (autograd sums a parameter's uses before its hook fires), so the reference plan
  // buckets this way; merging a chunked loss's k reductions of one gradient holds k gradients.
  bool param_once = false;
  // Bound on the estimated peak (passes/analysis/memory.h): 0 = none, -1 = the input's own peak
  // (the pass default: bucketing never raises it). A bound below the input's peak acts as the
  // input's peak.
  int64_t memory_limit = 0;
  // plan=auto: the cost model candidates are timed with (required there).
  std::shared_ptr<const CostModel> cost;
  // plan=auto: threads that evaluate candidates at once (each on its own copy of the graph);
  // 0 = one per hardware thread, at most one per candidate. The choice does not depend on it.
  int64_t threads = 0;
};

// One candidate of plan=auto: a fixed plan and how remarks name it ("blocks", "blocks x2",
// "size 64MB").
struct BucketCandidate {
  std::string name;
  BucketOptions opts;
};
// plan=auto's candidates for `base` (its kinds, head, memory bound...), in tie-break order.
std::vector<BucketCandidate> bucketAutoCandidates(const BucketOptions& base);

// Returns whether the graph changed. Statistics: buckets.<kind>, members.<kind>,
// collectives-before, collectives-after, hoisted, split.<reason>.
bool bucketCollectives(Graph& g, const BucketOptions& opts, PassContext& ctx);

// The bucket a module or parameter FQN belongs to under plan=blocks: its block
// (passes/analysis/blocks.h: "layers.3", "transformer.h.0", "stages.0.blocks.2"), else its
// top-level module ("tok_embeddings"), the head modules sharing one ("head").
std::string blockOfFqn(std::string_view fqn, const BlockAnalysis& blocks,
                       const std::vector<std::string>& head);

// Elements per ring chunk when gloo all-reduces `numel` elements of `elem_size` bytes over
// `group_size` ranks (the unit whose summation order is fixed).
int64_t glooRingChunkElems(int64_t numel, int64_t elem_size, int64_t group_size);

class BucketPass : public Pass {
 public:
  std::span<const Statistic* const> statistics() const override;
  bool run(Graph& g, PassContext& ctx) override { return bucketCollectives(g, opts_, ctx); }

 private:
  using Plan = BucketOptions::Plan;
  void initialize() override;

  EnumOption<Plan> plan_{this,
                         "plan",
                         {{"blocks", Plan::Blocks}, {"size", Plan::Size}, {"auto", Plan::Auto}},
                         Plan::Blocks,
                         "one bucket per block (blocks), greedy in program order up to cap-mb "
                         "(size), or the candidate with the shortest simulated step within "
                         "memory-limit (auto: blocks, blocks x2, x4, caps 16-256 MB)"};
  Option<int64_t> group_{
      this, "group", 1, "plan=blocks: this many consecutive blocks per bucket", {1, 1000000}};
  Option<std::string> hardware_{this, "hardware", "",
                                "plan=auto: the hardware profile (JSON) that times the candidates",
                                Option<std::string>::Kind::Path};
  Option<int64_t> threads_{this,
                           "threads",
                           0,
                           "plan=auto: candidates evaluated at once, each on its own copy (0 = "
                           "one per hardware thread); the plan chosen does not depend on it",
                           {0, 256}};
  // Up to 1 PiB: any real bucket, and far from where cap_mb * 2^20 would overflow.
  Option<int64_t> cap_mb_{this,
                          "cap-mb",
                          0,
                          "bucket size cap in MiB, 0 = none; plan=size uses 64 when unset",
                          {0, int64_t{1} << 30}};
  Option<std::vector<std::string>> kinds_{this,
                                          "kinds",
                                          {"ag", "rs", "ar"},
                                          "collective kinds to bucket: ag, rs, ar",
                                          {"ag", "rs", "ar"},
                                          "kind"};
  Option<bool> fsdp_only_{
      this, "fsdp-only", true,
      "only FSDP collectives (unshard gathers, gradient reduce-scatters and all-reduces)"};
  Option<std::vector<std::string>> head_{this,
                                         "head",
                                         {"norm", "output", "lm_head", "final_norm"},
                                         "top-level modules outside blocks that share one bucket"};
  Option<bool> exact_rs_order_{this, "exact-rs-order", true,
                               "keep each gradient's summation order: pad reduce-scatter buckets "
                               "to gloo ring chunks, leave the others alone"};
  Option<bool> param_once_{this, "param-once", false,
                           "at most one collective per parameter in a bucket (FSDP2's buffers: "
                           "a parameter's repeated gathers or reductions go to other buckets)"};
  BytesOption memory_limit_{this,
                            "memory-limit",
                            "input",
                            "estimated peak bound: input (the input's own peak), reference (the "
                            "reference plan's, FSDP2's, if larger), none, or BYTES",
                            {{"input", -1}, {"reference", kMemoryLimitReference}, {"none", 0}}};
  BucketOptions opts_;
};

}  // namespace jfx
