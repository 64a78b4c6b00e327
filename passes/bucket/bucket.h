// bucket: merges FSDP collectives into one collective per bucket, without baking in a rank.
//
// Does: groups collectives by (kind, target, process group, group size, dtype, reduce op, phase)
// and splits each group into buckets by plan:
//   blocks  one bucket per transformer block: the first dotted FQN component followed by an
//           index ("layers.12") names the block; other top-level modules get one bucket each,
//           except the `head` modules (default norm, output, lm_head, final_norm), which share one.
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
// Options: plan=blocks|size, cap-mb=N (size plan default 64; blocks: 0 = uncapped),
// kinds=ag,rs,ar, fsdp-only=true, head=norm,output,lm_head,final_norm.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "passes/pass.h"

namespace jfx {

struct BucketOptions {
  enum class Plan { Blocks, Size };
  Plan plan = Plan::Blocks;
  int64_t cap_bytes = 0;  // 0 = no cap
  bool all_gather = true;
  bool reduce_scatter = true;
  bool all_reduce = true;
  bool fsdp_only = true;
  std::vector<std::string> head = {"norm", "output", "lm_head", "final_norm"};
};

// Returns whether the graph changed. Statistics: buckets.<kind>, members.<kind>,
// collectives-before, collectives-after, hoisted, split.<reason>.
bool bucketCollectives(Graph& g, const BucketOptions& opts, PassContext& ctx);

// The bucket a module or parameter FQN belongs to under plan=blocks ("layers.3", "tok_embeddings",
// "head").
std::string blockOfFqn(std::string_view fqn, const std::vector<std::string>& head);

// True for a collective this pass made from FSDP members: its extra meta carries "fsdp_bucket"
// ({"kind", "plan", "members"}), which schedule and split-comm-groups read, since a bucketed
// all-gather no longer has the single-parameter shape the FSDP analysis matches.
bool hasFsdpBucketMeta(const Node& n);

// Moves `nodes` to just before `anchor`, keeping their order. Graph positions are gapped and a
// gap that runs out renumbers the whole graph (O(N)); moving k nodes one by one in front of one
// anchor halves its gap k times, this bisection order about log2(k) times. Bucket and schedule
// move dozens of nodes per bucket, so this keeps them O(N log N) on 10^6-node graphs.
void placeBefore(Graph& g, const std::vector<Node*>& nodes, Node* anchor);

class BucketPass : public Pass {
 public:
  std::string_view name() const override { return "bucket"; }
  void configure(PassOptions& options) override;
  bool run(Graph& g, PassContext& ctx) override { return bucketCollectives(g, opts_, ctx); }

 private:
  BucketOptions opts_;
};

}  // namespace jfx
