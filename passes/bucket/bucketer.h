// The rewrite `bucket` makes (passes/bucket/bucket.h): one sweep that forms the buckets, then one
// rewrite per bucket. The pass (bucket.cc) decides what to leave out to meet its memory bound and,
// under plan=auto, which plan to run.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "ir/builder.h"
#include "ir/walk.h"
#include "passes/analysis/blocks.h"
#include "passes/analysis/fsdp.h"
#include "passes/analysis/mutation.h"
#include "passes/analysis/phase.h"
#include "passes/bucket/bucket.h"

namespace jfx {

struct BucketStatistics : StatisticSet {
  Statistic collectives_before{this, "collectives-before", "collectives in the input"};
  Statistic collectives_after{this, "collectives-after", "collectives in the output"};
  Statistic buckets{this, "buckets.<kind>", "buckets made, per collective kind"};
  Statistic members{this, "members.<kind>", "collectives merged into buckets, per kind"};
  Statistic split{this, "split.<reason>",
                  "buckets closed early: cap, dependency, repeat, placement, interleaved"};
  Statistic hoisted{this, "hoisted", "producers hoisted ahead of a bucket's first member"};
  Statistic moved_down{this, "moved-down", "consumers moved below a bucket's wait"};
  Statistic rs_pad{this, "rs-pad-elements", "elements of zero padding added for exact-rs-order"};
  Statistic unbucketed_rs_order{this, "unbucketed.rs-order",
                                "reduce-scatters left alone to keep their summation order"};
  Statistic unbucketed_memory{this, "unbucketed.memory",
                              "collectives left alone to stay under memory-limit"};
  Statistic peak_before{this, "memory-peak-before", "estimated peak bytes of the input"};
  Statistic memory_limit{this, "memory-limit", "the bound in bytes"};
  Statistic reference_peak{this, "reference-peak",
                           "memory-limit=reference: the reference plan's estimated peak bytes"};
  Statistic memory_rounds{this, "memory-rounds", "rounds that dropped buckets to fit the bound"};
  Statistic peak_estimate{this, "memory-peak-estimate", "estimated peak bytes of the output"};
  Statistic auto_candidates{this, "auto-candidates", "plan=auto: candidate plans timed"};
  Statistic auto_plan{this, "auto-plan", "plan=auto: the index of the chosen candidate"};
  Statistic simulated_step{this, "simulated-step-us",
                           "plan=auto: the chosen candidate's simulated step, microseconds"};
};
const BucketStatistics& bucketStats();

namespace bucketing {

constexpr int64_t kNever = std::numeric_limits<int64_t>::max();
// Whether a member's payload order is a parameter's ordinal (others order from kNever / 2 on).
constexpr bool isParamOrder(int64_t order) {
  return order < kNever / 2;
}

// All-gathers are issued early, at the first member (their inputs are parameters); reduce-scatters
// and all-reduces consume computed gradients, so they are issued at the last member.
enum class Side { Gather, Data };

struct KeyTuple {
  CollectiveKind kind;
  uint32_t target;
  std::string group;
  int64_t group_size;
  ScalarType dtype;
  std::string reduce_op;
  Phase phase;
  auto tie() const { return std::tie(kind, target, group, group_size, dtype, reduce_op, phase); }
  friend bool operator<(const KeyTuple& a, const KeyTuple& b) { return a.tie() < b.tie(); }
};

struct Member {
  Node* coll = nullptr;
  Node* wait = nullptr;
  int64_t order = 0;          // payload order: parameter placeholder ordinal
  int64_t pos = 0;            // program index at scan time
  int64_t bytes = 0;          // max(in, out)
  int64_t hard_use = kNever;  // data side: first user of the wait that cannot move down
  std::vector<Node*> hoist;   // gather side: pure producers to move up to the bucket
};

struct Candidate {
  size_t key = 0;
  std::string block;
  Member m;
};

struct Bucket {
  uint32_t id = 0;
  size_t key = 0;
  std::string block;
  std::vector<Member> members;  // program order
  int64_t bytes = 0;
  int64_t min_hard_use = kNever;
  std::set<int64_t> params;  // param-once: the members' parameter ordinals
};

}  // namespace bucketing

class Bucketer {
 public:
  // Reads the phase, FSDP and in-place-write analyses of `g` from `ctx` (and, for plan=blocks,
  // the block analysis) before any rewrite. `excluded`: names of collectives left alone.
  Bucketer(Graph& g, const BucketOptions& opts, PassContext& ctx,
           const std::set<std::string>& excluded);

  bool run();

  // Per finished bucket: its members' collectives (erased by the rewrite, which keeps an erased
  // node's name), and (node, bucket) for every node a rewrite created or moved and every
  // reduction's payload (alive until the bucket's launch); what the memory
  // check maps over-limit storages back to. Nodes, not names: names were a share of the
  // pipeline's peak (bench/README.md, "Figures behind the code").
  const std::vector<std::vector<const Node*>>& bucketMembers() const { return bucket_members_; }
  const std::vector<std::pair<const Node*, size_t>>& touched() const { return touched_; }
  std::vector<std::vector<const Node*>> takeBucketMembers() { return std::move(bucket_members_); }
  std::vector<std::pair<const Node*, size_t>> takeTouched() { return std::move(touched_); }
  // The block analysis of the input it bucketed by (plan=blocks), else nullptr.
  const BlockAnalysis* blocks() const { return blocks_; }

 private:
  using Bucket = bucketing::Bucket;
  using Candidate = bucketing::Candidate;
  using KeyTuple = bucketing::KeyTuple;
  using Member = bucketing::Member;
  class Scan;

  bool enabled(CollectiveKind k) const {
    return (k == CollectiveKind::AllGather && opts_.all_gather) ||
           (k == CollectiveKind::ReduceScatter && opts_.reduce_scatter) ||
           (k == CollectiveKind::AllReduce && opts_.all_reduce);
  }
  // The candidates among the collectives, in program order (the sweep of run() filled pos_).
  std::vector<Candidate> candidates(const std::vector<Node*>& collectives);
  std::optional<Candidate> candidate(Node* n);
  bool fitsBucket(Node* n, CollectiveKind kind);
  size_t keyOf(Node* n, std::string_view group, int64_t group_size, ScalarType dtype);
  void placeInPayload(Candidate& c, Node* n, CollectiveRole role);
  // The buckets of `cands`, from one sweep over the program in order.
  std::vector<Bucket> formBuckets(std::vector<Candidate>& cands);
  const char* rejection(const Bucket& b, Candidate& c, Node* n, uint32_t taint) const;
  bool collectHoist(Node* in, int64_t first_pos, std::vector<Node*>& out) const;
  int64_t hardUse(Node* coll, Node* wait) const;
  bool isGradReduction(const Node* coll) const;
  bool accumulates(const Node* x, const Node* user) const;
  bool privateSum(const Node* v, size_t depth) const;
  static bool isGradSum(const Node* n);
  static bool isUnaryView(const Node* n);
  static bool reachesOutput(const Node* v);
  void finalize(Bucket& b);
  void finalizeGather(Bucket& b, const KeyTuple& key);
  void finalizeData(Bucket& b, const KeyTuple& key);
  Node* packData(const std::vector<Member>& payload, const KeyTuple& key, Node* last,
                 const NodeMeta& shared, std::vector<int64_t>& sizes);
  // Users of a member's old wait that ran before the bucket's launch `last` move below the
  // bucket's wait `bucket_wait`.
  void moveUsersBelow(Node* wait, Node* bucket_wait, Node* last);
  // The builder, set to give the next nodes `meta` and to make them before `anchor`.
  OpBuilder& at(Node* anchor, const NodeMeta& meta) {
    builder_.setInsertionPoint(anchor);
    builder_.setMeta(meta);
    return builder_;
  }
  // Splits a bucket's waited value `packed` along `dim` into `sizes` and gives each payload
  // member its piece in the member's own shape (`copy`: reshape, for pieces that are not
  // contiguous; otherwise view), made before `anchor`. `done(member, value)` runs after each.
  void unpack(Node* packed, int64_t dim, const std::vector<int64_t>& sizes,
              const std::vector<Member>& payload, Node* anchor, const NodeMeta& wait_meta,
              Phase phase, std::string_view split_name, bool copy,
              const std::function<void(const Member&, Node*)>& done);
  // Every node the rewrite makes or moves is recorded in touched_ with its bucket.
  void noteTouched(const Node* n);
  void moveBefore(Node* n, Node* anchor);
  // `base` + `suffix` in a buffer the next call reuses (a new node's name, copied by the graph):
  // a std::string per member node was a heap block each, names being longer than 15 bytes.
  std::string_view named(std::string_view base, std::string_view suffix) {
    name_buf_.assign(base);
    name_buf_ += suffix;
    return name_buf_;
  }
  // Erases a member's collective and wait.
  void retire(const Member& m);

  const std::set<std::string>& excluded_;
  std::vector<std::vector<const Node*>> bucket_members_;
  std::vector<std::pair<const Node*, size_t>> touched_;
  Graph& g_;
  const BucketOptions& opts_;
  PassContext& ctx_;
  const BucketStatistics& stats_;
  // New nodes are made in place, before the anchor at() was given: made at the end and moved
  // into place afterwards, each was a move more in the undo log of a bounded rewrite.
  OpBuilder builder_{g_};
  // Of the graph before this pass edits it (cached along the pipeline, or followed to a copy).
  const PhaseInfo& phases_;
  const FsdpAnalysis& fsdp_;
  const WrittenStorage& written_;  // values written in place: their readers stay where they are
  const BlockAnalysis* blocks_;    // plan=blocks only
  NodeMap<uint32_t> pos_;          // program index, at scan time (4 bytes an id)
  std::vector<KeyTuple> keys_;
  std::map<KeyTuple, size_t> key_index_;
  std::unordered_map<std::string, int64_t> param_ordinal_by_fqn_;  // lookups only
  NodeMap<int32_t> param_ordinal_;                                 // placeholder ordinal, or -1
  NodeMap<int32_t> grad_chain_;  // a reduce-scatter's index in fsdp_.grads, or -1
  // An FSDP gradient all-reduce's parameter (HSDP's, a replica chain's), or nullptr.
  NodeMap<const std::string*> all_reduce_fqn_;
  // An HSDP gradient chain's first reduction -> its second (all-reduce <-> reduce-scatter).
  NodeMap<Node*> next_in_chain_;
  std::string name_buf_;  // named()'s
};

}  // namespace jfx
