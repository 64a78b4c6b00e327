#include "passes/bucket/bucket.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <exception>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <thread>
#include <tuple>
#include <unordered_map>

#include "ir/builder.h"
#include "ir/clone.h"
#include "ir/collectives.h"
#include "ir/error.h"
#include "passes/analysis/blocks.h"
#include "passes/analysis/cost_model.h"
#include "passes/analysis/fsdp.h"
#include "passes/analysis/memory.h"
#include "passes/analysis/mutation.h"
#include "passes/analysis/phase.h"
#include "passes/analysis/simulator.h"
#include "passes/bucket/schedule.h"
#include "passes/bucket/split_comm_groups.h"
#include "passes/plan/reference_plan.h"

namespace jfx {
namespace {

constexpr int64_t kNever = std::numeric_limits<int64_t>::max();
// A pure producer chain longer than this between a parameter and its all-gather is not a cast
// chain; such a member is not hoisted (it starts a new bucket instead).
constexpr size_t kMaxHoist = 64;

// All-gathers are issued early, at the first member (their inputs are parameters); reduce-scatters
// and all-reduces consume computed gradients, so they are issued at the last member.
enum class Side { Gather, Data };

// Ops that may be moved past other nodes: no effects, no aliasing writes, known to the table.
bool isMovablePure(const Node* n) {
  const OpCategory c = n->info().category;
  return n->isPure() && c != OpCategory::Collective && c != OpCategory::Wait;
}

size_t distinctOperands(const Node* n) {
  size_t k = 0;
  const auto& ins = n->inputs();
  for (size_t i = 0; i < ins.size(); ++i)
    if (std::find(ins.begin(), ins.begin() + static_cast<std::ptrdiff_t>(i), ins[i]) ==
        ins.begin() + static_cast<std::ptrdiff_t>(i))
      ++k;
  return k;
}

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
};

std::string commonModulePrefix(const std::vector<Member>& members) {
  std::string prefix(members.front().coll->meta().module_fqn.str());
  for (const Member& m : members) {
    std::string_view f = m.coll->meta().module_fqn.str();
    size_t n = 0;
    while (n < prefix.size() && n < f.size() && prefix[n] == f[n])
      ++n;
    // Cut back to a whole dotted component.
    if (!(n == prefix.size() && (n == f.size() || f[n] == '.'))) {
      while (n > 0 && prefix[n - 1] != '.')
        --n;
      if (n > 0) --n;  // drop the dot
    }
    prefix.resize(n);
  }
  return prefix;
}

// Meta of the nodes a bucket shares: the members' phase, their common module, and the rest of
// the given member's meta (recompute tag, region, extra keys such as autograd_backward). No
// seq_nr or stack trace: a shared node is no single op's.
NodeMeta sharedMeta(const NodeMeta& from, Phase phase, const std::vector<Member>& members) {
  NodeMeta m = from;
  m.phase = phase;
  m.module_fqn = Symbol::intern(commonModulePrefix(members));
  m.seq_nr.reset();
  m.stack_trace.clear();
  return m;
}

// The bucket record a bucketed collective carries: attribute `key` = {kind, members, plan}.
void setBucketMeta(NodeMeta& meta, Symbol key, std::string_view kind, const std::string& plan,
                   size_t members) {
  meta.attrs.set(key, AttrValue{AttrValue::Dict{{"kind", std::string(kind)},
                                                {"members", static_cast<int64_t>(members)},
                                                {"plan", plan}}});
}

// What a Bucketer reads from its graph before any rewrite. Every lookup goes by node id (or FQN),
// so the analyses of one copy made by cloneGraph from a graph serve every other copy of that
// graph (same nodes, ids, order and use lists): plan=auto analyses one copy for all candidates.
struct BucketAnalyses {
  explicit BucketAnalyses(const Graph& g)
      : phases(computePhases(g)), fsdp(analyzeFsdp(g, phases)), written(g) {}
  PhaseInfo phases;
  FsdpAnalysis fsdp;
  WrittenStorage written;  // values written in place: their readers stay where they are
};

class Bucketer {
 public:
  // `blocks`: the block analysis of `g` or of a graph it is a copy of (it speaks of FQNs only),
  // when the caller has it; else the context's, for plan=blocks only (no other plan reads it).
  // `shared`: the analyses of another clone of the graph `g` is a clone of (see BucketAnalyses),
  // else the context's.
  Bucketer(Graph& g, const BucketOptions& opts, PassContext& ctx,
           const std::set<std::string>& excluded, const BlockAnalysis* blocks = nullptr,
           const BucketAnalyses* shared = nullptr)
      : excluded_(excluded),
        g_(g),
        opts_(opts),
        ctx_(ctx),
        phases_(shared ? shared->phases : ctx.analyses.get<PhaseInfo>(g)),
        fsdp_(shared ? shared->fsdp : ctx.analyses.get<FsdpAnalysis>(g)),
        written_(shared ? shared->written : ctx.analyses.get<WrittenStorage>(g)),
        blocks_(blocks                                     ? blocks
                : opts.plan == BucketOptions::Plan::Blocks ? &ctx.analyses.get<BlockAnalysis>(g)
                                                           : nullptr) {
    builder_.onCreate([this](Node* n) { staged_.emplace_back(n, anchor_); });
  }

  bool run();

  // Per finished bucket: its members' collectives (erased by the rewrite, which keeps an erased
  // node's name), and (node, bucket) for every node a rewrite created or moved; what the memory
  // check maps over-limit storages back to. Nodes, not names: 100K names were 6 MB of the peak
  // at 10^6 nodes.
  const std::vector<std::vector<const Node*>>& bucketMembers() const { return bucket_members_; }
  const std::vector<std::pair<const Node*, size_t>>& touched() const { return touched_; }
  std::vector<std::vector<const Node*>> takeBucketMembers() { return std::move(bucket_members_); }
  std::vector<std::pair<const Node*, size_t>> takeTouched() { return std::move(touched_); }

 private:
  const std::set<std::string>& excluded_;
  std::vector<std::vector<const Node*>> bucket_members_;
  std::vector<std::pair<const Node*, size_t>> touched_;
  bool enabled(CollectiveKind k) const {
    return (k == CollectiveKind::AllGather && opts_.all_gather) ||
           (k == CollectiveKind::ReduceScatter && opts_.reduce_scatter) ||
           (k == CollectiveKind::AllReduce && opts_.all_reduce);
  }
  static Side sideOf(CollectiveKind k) {
    return k == CollectiveKind::AllGather ? Side::Gather : Side::Data;
  }
  std::optional<Candidate> candidate(Node* n);
  bool collectHoist(Node* in, int64_t first_pos, std::vector<Node*>& out) const;
  int64_t hardUse(Node* wait) const;
  void finalize(Bucket& b);
  void finalizeGather(Bucket& b, const KeyTuple& key);
  void finalizeData(Bucket& b, const KeyTuple& key);
  // The builder, set to give the next nodes `meta` and to stage them before `anchor`.
  OpBuilder& at(Node* anchor, const NodeMeta& meta) {
    anchor_ = anchor;
    builder_.setMeta(meta);
    return builder_;
  }
  // Splits a bucket's waited value `packed` along `dim` into `sizes` and gives each payload
  // member its piece in the member's own shape (`copy`: reshape, for pieces that are not
  // contiguous; otherwise view), staged before `anchor`. `done(member, value)` runs after each.
  void unpack(Node* packed, int64_t dim, const std::vector<int64_t>& sizes,
              const std::vector<Member>& payload, Node* anchor, const NodeMeta& wait_meta,
              Phase phase, std::string_view split_name, bool copy,
              const std::function<void(const Member&, Node*)>& done);
  // Moves every staged node before its anchor; consecutive nodes with one anchor keep their order.
  void flush();
  // `base` + `suffix` in a buffer the next call reuses (a new node's name, copied by the graph):
  // a std::string per member node was a heap block each, names being longer than 15 bytes.
  std::string_view named(std::string_view base, std::string_view suffix) {
    name_buf_.assign(base);
    name_buf_ += suffix;
    return name_buf_;
  }
  // Points the uses of a member's wait at its replacement (O(1) per use, the output node's
  // included).
  void replaceMember(Node* wait, Node* replacement);
  // Erases a member's collective and wait.
  void retire(const Member& m);

  Graph& g_;
  const BucketOptions& opts_;
  PassContext& ctx_;
  // New nodes are made at the end of the graph and put in place by flush() (see
  // Graph::placeBefore()).
  OpBuilder builder_{g_};
  Node* anchor_ = nullptr;
  // Of the graph before this pass edits it (cached along the pipeline, or shared by the caller).
  const PhaseInfo& phases_;
  const FsdpAnalysis& fsdp_;
  const WrittenStorage& written_;  // values written in place: their readers stay where they are
  const BlockAnalysis* blocks_;    // plan=blocks only (or when the caller gave it)
  std::vector<uint32_t> pos_;      // program index by node id, at scan time (4 bytes an id)
  std::vector<KeyTuple> keys_;
  std::map<KeyTuple, size_t> key_index_;
  std::unordered_map<std::string, int64_t> param_ordinal_by_fqn_;  // lookups only
  std::vector<int32_t> param_ordinal_;           // by node id: placeholder ordinal, or -1
  std::vector<int32_t> grad_chain_;              // RS node id -> grads index
  std::vector<std::pair<Node*, Node*>> staged_;  // (node, place before it)
  std::string name_buf_;                         // named()'s
};

std::optional<Candidate> Bucketer::candidate(Node* n) {
  const OpInfo& info = n->info();
  if (n->op() != OpKind::CallFunction || !n->isCollective() || !enabled(info.collective) ||
      info.coalesced || info.alias != AliasKind::None)
    return std::nullopt;
  CollectiveRole role = fsdp_.roleOf(n);
  bool fsdp = role == CollectiveRole::FsdpUnshard || role == CollectiveRole::FsdpReduceGrad ||
              role == CollectiveRole::FsdpGradAllReduce;
  if (opts_.fsdp_only && !fsdp) return std::nullopt;
  if (n->uses().size() != 1 || !n->uses().front().user->isWait()) return std::nullopt;
  if (!excluded_.empty() && excluded_.count(std::string(n->name()))) {
    ctx_.stat("unbucketed.memory");
    return std::nullopt;
  }
  Node* wait = n->uses().front().user;
  Node* in = n->input(0);
  if (!in || !in->val().isTensor() || !n->val().isTensor() || !wait->val().isTensor())
    return std::nullopt;
  std::string_view group = collectiveGroupName(*n);
  if (group.empty()) return std::nullopt;
  int64_t gsize = collectiveGroupSize(*n, g_);
  const TensorMeta& tin = in->val().tensor;
  const TensorMeta& tout = n->val().tensor;
  if (tin.dtype != tout.dtype) return std::nullopt;
  switch (info.collective) {
    case CollectiveKind::AllGather:
      if (tout.numel() != saturatingMul(tin.numel(), gsize)) return std::nullopt;
      break;
    case CollectiveKind::ReduceScatter:
      if (tin.numel() % gsize != 0 || saturatingMul(tout.numel(), gsize) != tin.numel())
        return std::nullopt;
      // Summation order (bucket.h): a gradient whose own reduce-scatter splits its ring chunks
      // off its rank rows cannot keep that order inside a bucket; it stays on its own.
      if (opts_.exact_rs_order && gsize >= 3 &&
          glooRingChunkElems(tin.numel(), dtypeItemSize(tin.dtype), gsize) != tout.numel()) {
        ctx_.stat("unbucketed.rs-order");
        ctx_.remark(
            "bucket: reduce-scatter " + quoteForMessage(n->name()) + " stays unbucketed: " +
            std::to_string(tout.numel()) + " elements per rank is not a gloo ring chunk (" +
            std::to_string(glooRingChunkElems(tin.numel(), dtypeItemSize(tin.dtype), gsize)) +
            "), so no bucket keeps its summation order");
        return std::nullopt;
      }
      break;
    default:
      if (tout.numel() != tin.numel()) return std::nullopt;
      break;
  }
  KeyTuple key{info.collective,
               n->target().id(),
               std::string(group),
               gsize,
               tin.dtype,
               info.reduce_op_arg >= 0 && n->arg(info.reduce_op_arg).isStr()
                   ? std::string(n->arg(info.reduce_op_arg).str())
                   : std::string(),
               phases_.of(n)};
  // Looked up before inserting: an emplace makes (and for all but a few keys drops) a map node
  // per collective.
  auto it = key_index_.find(key);
  if (it == key_index_.end()) {
    it = key_index_.emplace(key, keys_.size()).first;
    keys_.push_back(key);
  }

  Candidate c;
  c.key = it->second;
  c.m.coll = n;
  c.m.wait = wait;
  c.m.pos = pos_[n->id()];
  c.m.bytes = std::max(tin.bytes(), tout.bytes());
  // Payload order is parameter order: FSDP2 lays out its flat buffers that way, and a different
  // order changes byte offsets and NCCL's ring order (torchtitan #3590). Non-parameter members
  // follow, in program order.
  c.m.order = kNever / 2 + c.m.pos;
  std::string fqn;
  if (role == CollectiveRole::FsdpUnshard) {
    const FsdpUnshardChain* chain = fsdp_.unshardChainOf(n);
    if (chain && chain->param) {
      const int32_t ordinal = param_ordinal_[chain->param->id()];
      c.m.order = ordinal >= 0 ? ordinal : kNever / 2;
      fqn = chain->param->inputFqn();
    }
  } else if (role == CollectiveRole::FsdpReduceGrad && grad_chain_[n->id()] >= 0) {
    const FsdpGradChain& chain = fsdp_.grads[static_cast<size_t>(grad_chain_[n->id()])];
    fqn = chain.param_fqn;
    auto p = param_ordinal_by_fqn_.find(fqn);
    if (p != param_ordinal_by_fqn_.end()) c.m.order = p->second;
  }
  if (fqn.empty()) fqn = std::string(n->meta().module_fqn.str());
  if (opts_.plan == BucketOptions::Plan::Blocks) {
    c.block = blockOfFqn(fqn, *blocks_, opts_.head);
    // group=N: N consecutive blocks (in forward order) share one bucket, named by its range.
    if (const int32_t bi = opts_.group_blocks > 1 ? blocks_->blockOfFqn(fqn) : -1; bi >= 0) {
      const size_t first = static_cast<size_t>(bi / opts_.group_blocks * opts_.group_blocks);
      const size_t last =
          std::min(first + static_cast<size_t>(opts_.group_blocks), blocks_->blocks.size()) - 1;
      c.block = blocks_->blocks[first].name;
      if (last > first) c.block += ".." + blocks_->blocks[last].name;
    }
  }
  return c;
}

// Gather side: the pure producers of `in` that sit after the bucket's first member, which must
// move up to it. False when one of them cannot move (an effect, a collective, a wait) or the chain
// is too long to be a cast chain.
bool Bucketer::collectHoist(Node* in, int64_t first_pos, std::vector<Node*>& out) const {
  std::vector<Node*> work{in};
  std::vector<Node*> seen;
  while (!work.empty()) {
    Node* x = work.back();
    work.pop_back();
    if (pos_[x->id()] < first_pos) continue;
    if (std::find(seen.begin(), seen.end(), x) != seen.end()) continue;
    if (!isMovablePure(x) || written_.touches(x) || seen.size() >= kMaxHoist) return false;
    seen.push_back(x);
    for (Node* p : x->inputs())
      work.push_back(p);
  }
  out = std::move(seen);
  return true;
}

// Data side: the position of the first user of `wait` that cannot move below a new bucket wait.
// Single-operand pure users (the views and casts between a gradient and the graph output) can
// move, so the search continues through them.
int64_t Bucketer::hardUse(Node* wait) const {
  int64_t first = kNever;
  std::vector<Node*> work{wait};
  while (!work.empty()) {
    Node* x = work.back();
    work.pop_back();
    for (const Use& u : x->uses()) {
      Node* user = u.user;
      if (isMovablePure(user) && !written_.touches(user) && distinctOperands(user) == 1)
        work.push_back(user);
      else
        first = std::min<int64_t>(first, pos_[user->id()]);
    }
  }
  return first;
}

void Bucketer::unpack(Node* packed, int64_t dim, const std::vector<int64_t>& sizes,
                      const std::vector<Member>& payload, Node* anchor, const NodeMeta& wait_meta,
                      Phase phase, std::string_view split_name, bool copy,
                      const std::function<void(const Member&, Node*)>& done) {
  Node* split = at(anchor, wait_meta).splitWithSizes(packed, sizes, dim, split_name);
  for (size_t i = 0; i < payload.size(); ++i) {
    const Member& m = payload[i];
    NodeMeta meta = m.wait->meta();
    meta.phase = phase;
    OpBuilder& b = at(anchor, meta);
    Node* piece = b.getitem(split, static_cast<int64_t>(i), named(m.wait->name(), "_piece"));
    const Dims& shape = m.coll->val().tensor.shape;
    Node* out = copy ? b.reshape(piece, shape, named(m.wait->name(), "_out"))
                     : b.view(piece, shape, named(m.wait->name(), "_out"));
    done(m, out);
  }
}

void Bucketer::replaceMember(Node* wait, Node* replacement) {
  g_.replaceAllUsesWith(wait, replacement);
}

void Bucketer::retire(const Member& m) {
  g_.erase(m.wait);
  g_.erase(m.coll);
}

void Bucketer::flush() {
  for (size_t i = 0; i < staged_.size();) {
    size_t j = i;
    std::vector<Node*> run;
    while (j < staged_.size() && staged_[j].second == staged_[i].second)
      run.push_back(staged_[j++].first);
    g_.placeBefore(run, staged_[i].second);
    i = j;
  }
  for (const auto& [n, anchor] : staged_)
    touched_.emplace_back(n, bucket_members_.empty() ? 0 : bucket_members_.size() - 1);
  staged_.clear();
}

bool Bucketer::run() {
  // One walk for the program positions, the placeholders' ordinals and the collectives (at 10^6
  // nodes each walk costs a cache miss per node; three walks were 2% of the pipeline).
  std::vector<Node*> order = g_.nodes();
  pos_.assign(g_.maxId(), 0);
  param_ordinal_.assign(g_.maxId(), -1);
  std::vector<Node*> collectives;  // program order
  int32_t ordinal = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    Node* n = order[i];
    pos_[n->id()] = static_cast<uint32_t>(i);
    if (n->isCollective()) {
      collectives.push_back(n);
    } else if (n->op() == OpKind::Placeholder) {
      param_ordinal_[n->id()] = ordinal;
      if (!n->inputFqn().empty()) param_ordinal_by_fqn_.emplace(n->inputFqn(), ordinal);
      ++ordinal;
    }
  }
  grad_chain_.assign(g_.maxId(), -1);
  for (size_t i = 0; i < fsdp_.grads.size(); ++i)
    grad_chain_[fsdp_.grads[i].reduce_scatter->id()] = static_cast<int32_t>(i);

  // Candidates are few; index them by node id rather than keeping one slot per node. Made after
  // the walk: a candidate reads its parameter's ordinal and its own position.
  std::vector<Candidate> cands;
  std::vector<int32_t> cand_of(g_.maxId(), -1);
  int64_t before = 0;
  for (Node* n : collectives) {
    ++before;
    if (auto c = candidate(n)) {
      cand_of[n->id()] = static_cast<int32_t>(cands.size());
      cands.push_back(std::move(*c));
    }
  }
  ctx_.stat("collectives-before", before);
  const size_t nkeys = keys_.size();
  if (nkeys == 0) {
    ctx_.stat("collectives-after", before);
    return false;
  }
  if (opts_.plan == BucketOptions::Plan::Blocks) {
    if (blocks_->blocks.empty())
      ctx_.warn(blocks_->noBlocksMessage("bucket") +
                "; plan=blocks makes one bucket per top-level module instead");
    else
      ctx_.remark("bucket: " + blocks_->summary());
  }

  // taint[id * nkeys + k]: the newest bucket of key k that node id depends on (0 = none). Bucket
  // ids grow, so the open bucket of a key is that key's newest: a node depends on it exactly
  // when its taint equals the open bucket's id.
  std::vector<uint32_t> taint(static_cast<size_t>(g_.maxId()) * nkeys, 0);
  std::vector<std::optional<Bucket>> open(nkeys);
  std::vector<Bucket> done;
  uint32_t next_id = 1;
  std::set<std::pair<size_t, std::string>> blocks_seen;  // (key, block) that had a bucket

  auto close = [&](size_t k) {
    if (open[k] && open[k]->members.size() >= 2) done.push_back(std::move(*open[k]));
    open[k].reset();
  };

  for (Node* n : order) {
    uint32_t* tn = &taint[static_cast<size_t>(n->id()) * nkeys];
    for (Node* p : n->inputs()) {
      const uint32_t* tp = &taint[static_cast<size_t>(p->id()) * nkeys];
      for (size_t k = 0; k < nkeys; ++k)
        tn[k] = std::max(tn[k], tp[k]);
    }
    if (cand_of[n->id()] < 0) continue;
    Candidate* c = &cands[static_cast<size_t>(cand_of[n->id()])];
    const size_t k = c->key;
    const Side side = sideOf(keys_[k].kind);
    if (side == Side::Data) c->m.hard_use = hardUse(c->m.wait);
    std::optional<Bucket>& b = open[k];
    const char* reject = nullptr;
    if (b) {
      if (b->block != c->block)
        reject = "block";
      else if (opts_.cap_bytes > 0 && saturatingAdd(b->bytes, c->m.bytes) > opts_.cap_bytes)
        reject = "cap";
      else if (tn[k] == b->id)
        reject = "dependency";
      else if (side == Side::Gather &&
               !collectHoist(n->input(0), b->members.front().pos, c->m.hoist))
        reject = "placement";
      else if (side == Side::Data && c->m.pos >= b->min_hard_use)
        reject = "placement";
      // Moving on to the next block is the plan working; coming back to a block that already
      // had a bucket means blocks interleave, and the block gets a second bucket.
      if (reject && std::string_view(reject) == "block")
        reject = blocks_seen.count({k, c->block}) ? "interleaved" : nullptr;
      if (reject) {
        ctx_.stat(std::string("split.") + reject);
        ctx_.remark("bucket: " + std::string(collectiveKindName(keys_[k].kind)) + " " +
                    quoteForMessage(n->name()) + " starts a new bucket (" + reject + ")");
      }
      if (reject || b->block != c->block) close(k);
    }
    if (!b) {
      blocks_seen.insert({k, c->block});
      b.emplace();
      b->id = next_id++;
      b->key = k;
      b->block = c->block;
      c->m.hoist.clear();
    }
    b->bytes = saturatingAdd(b->bytes, c->m.bytes);
    b->min_hard_use = std::min(b->min_hard_use, c->m.hard_use);
    b->members.push_back(std::move(c->m));
    tn[k] = b->id;
  }
  for (size_t k = 0; k < nkeys; ++k)
    close(k);
  // The scan's tables go before the rewrite makes its nodes: at 10^6 nodes they are 25 MB, and
  // the end of the rewrite is the pass's (and the pipeline's) peak.
  std::vector<uint32_t>().swap(taint);
  std::vector<int32_t>().swap(cand_of);
  std::vector<Node*>().swap(order);

  // Rewrites run after the scan so every decision above saw the original positions. Buckets are
  // disjoint, and a rewrite only moves pure producers up and pure consumers down, which keeps
  // the other buckets' placements legal.
  std::sort(done.begin(), done.end(), [](const Bucket& a, const Bucket& b) { return a.id < b.id; });
  for (Bucket& b : done)
    finalize(b);

  // Each bucket replaced its members' collectives with one (no second walk over the graph).
  int64_t after = before;
  for (const Bucket& b : done)
    after -= static_cast<int64_t>(b.members.size()) - 1;
  ctx_.stat("collectives-after", after);
  return !done.empty();
}

void Bucketer::finalize(Bucket& b) {
  const KeyTuple& key = keys_[b.key];
  std::string kind(collectiveKindName(key.kind));
  ctx_.stat("buckets." + kind);
  ctx_.stat("members." + kind, static_cast<int64_t>(b.members.size()));
  std::vector<const Node*> colls;
  colls.reserve(b.members.size());
  for (const Member& m : b.members)
    colls.push_back(m.coll);
  bucket_members_.push_back(std::move(colls));
  // The rewrite ends by erasing the members, whose index slots lie at random in an index as
  // large as the graph: fetched now, they arrive while the rewrite builds the new nodes.
  for (const Member& m : b.members) {
    g_.prefetchName(m.coll->name());
    g_.prefetchName(m.wait->name());
  }
  if (sideOf(key.kind) == Side::Gather)
    finalizeGather(b, key);
  else
    finalizeData(b, key);
}

void Bucketer::finalizeGather(Bucket& b, const KeyTuple& key) {
  Node* first = b.members.front().coll;
  // Move the members' cast chains up to the first member, in program order.
  std::vector<Node*> hoist;
  for (const Member& m : b.members)
    for (Node* x : m.hoist)
      if (first->isBefore(x) && std::find(hoist.begin(), hoist.end(), x) == hoist.end())
        hoist.push_back(x);
  std::sort(hoist.begin(), hoist.end(),
            [](const Node* a, const Node* c) { return a->isBefore(c); });
  for (Node* x : hoist)
    staged_.emplace_back(x, first);
  ctx_.stat("hoisted", static_cast<int64_t>(hoist.size()));

  std::vector<Member> payload = b.members;
  std::stable_sort(payload.begin(), payload.end(),
                   [](const Member& a, const Member& c) { return a.order < c.order; });
  const int64_t G = key.group_size;

  NodeMeta shared = sharedMeta(first->meta(), key.phase, b.members);
  const std::string plan = opts_.plan == BucketOptions::Plan::Blocks ? b.block : "size";

  std::vector<Node*> flats;
  std::vector<int64_t> sizes;
  for (const Member& m : payload) {
    Node* in = m.coll->input(0);
    const TensorMeta& t = in->val().tensor;
    NodeMeta meta = m.coll->meta();
    meta.phase = key.phase;
    // view when the shard is contiguous (a free alias); reshape copies otherwise.
    OpBuilder& bl = at(first, meta);
    flats.push_back(t.isContiguous() ? bl.view(in, {-1}, named(in->name(), "_flat"))
                                     : bl.reshape(in, {-1}, named(in->name(), "_flat")));
    sizes.push_back(t.numel());
  }
  Node* cat = at(first, shared).cat(flats, 0, "ag_bucket_cat");
  NodeMeta coll_meta = shared;
  setBucketMeta(coll_meta,
                fsdp_.roleOf(first) == CollectiveRole::Other ? attr::bucket() : attr::fsdpBucket(),
                collectiveKindName(key.kind), plan, b.members.size());
  Node* ag = at(first, coll_meta).allGather(first->target(), cat, G, key.group, "ag_bucket");

  Node* w0 = b.members.front().wait;
  for (const Member& m : b.members)
    if (m.wait->isBefore(w0)) w0 = m.wait;
  NodeMeta wait_meta = sharedMeta(w0->meta(), key.phase, b.members);
  Node* wait = at(w0, wait_meta).wait(w0->target(), ag, "ag_bucket_wait");
  Node* rows = at(w0, wait_meta).view(wait, {G, -1}, "ag_bucket_rows");
  // Each piece is a column block of the [G, total] rows (rank-major, not contiguous): reshape
  // copies it into the gathered layout.
  unpack(rows, 1, sizes, payload, w0, wait_meta, key.phase, "ag_bucket_split", /*copy=*/true,
         [&](const Member& m, Node* full) { replaceMember(m.wait, full); });
  flush();
  for (const Member& m : b.members)
    retire(m);
}

void Bucketer::finalizeData(Bucket& b, const KeyTuple& key) {
  Node* last = b.members.back().coll;
  std::vector<Member> payload = b.members;
  std::stable_sort(payload.begin(), payload.end(),
                   [](const Member& a, const Member& c) { return a.order < c.order; });
  const bool rs = key.kind == CollectiveKind::ReduceScatter;
  const int64_t G = key.group_size;
  const TensorMeta& like = last->input(0)->val().tensor;
  const char* prefix = rs ? "rs_bucket" : "ar_bucket";
  const std::string p(prefix);

  NodeMeta shared = sharedMeta(last->meta(), key.phase, b.members);
  const std::string plan = opts_.plan == BucketOptions::Plan::Blocks ? b.block : "size";

  // Reduce-scatter: rank r's output is row r of every input viewed as [G, numel_i / G], so the
  // inputs are concatenated along dim 1. All-reduce: plain flatten and concatenate.
  std::vector<Node*> parts;
  std::vector<int64_t> sizes;
  int64_t total = 0;
  for (const Member& m : payload) {
    Node* in = m.coll->input(0);
    const TensorMeta& t = in->val().tensor;
    NodeMeta meta = m.coll->meta();
    meta.phase = key.phase;
    int64_t cols = rs ? t.numel() / G : t.numel();
    std::vector<int64_t> view_arg = rs ? std::vector<int64_t>{G, -1} : std::vector<int64_t>{-1};
    OpBuilder& bl = at(last, meta);
    parts.push_back(t.isContiguous() ? bl.view(in, view_arg, named(in->name(), "_rows"))
                                     : bl.reshape(in, view_arg, named(in->name(), "_rows")));
    sizes.push_back(cols);
    total += cols;
  }
  Node* payload_node = nullptr;
  if (rs) {
    Node* cat = at(last, shared).cat(parts, 1, p + "_cat");
    // Pad every rank's row so the bucket's gloo ring chunks are its rank rows (bucket.h,
    // summation order); the pad columns are zeros and their sums are dropped.
    if (opts_.exact_rs_order && G >= 3) {
      int64_t padded = total;
      while (glooRingChunkElems(G * padded, dtypeItemSize(like.dtype), G) != padded)
        ++padded;
      if (padded > total) {
        ctx_.stat("rs-pad-elements", padded - total);
        sizes.push_back(padded - total);
        total = padded;
        cat = at(last, shared).constantPadNd(cat, {0, sizes.back()}, 0.0, p + "_pad");
      }
    }
    payload_node = at(last, shared).view(cat, {-1}, p + "_flat");
  } else {
    payload_node = at(last, shared).cat(parts, 0, p + "_cat");
  }
  NodeMeta coll_meta = shared;
  setBucketMeta(coll_meta,
                fsdp_.roleOf(last) == CollectiveRole::Other ? attr::bucket() : attr::fsdpBucket(),
                collectiveKindName(key.kind), plan, b.members.size());
  Node* coll =
      rs ? at(last, coll_meta)
               .reduceScatter(last->target(), payload_node, key.reduce_op, G, key.group, p)
         : at(last, coll_meta).allReduce(last->target(), payload_node, key.reduce_op, key.group, p);

  Node* w0 = b.members.front().wait;
  for (const Member& m : b.members)
    if (m.wait->isBefore(w0)) w0 = m.wait;
  // The new wait goes where the earliest member waited, unless that was before the bucket could
  // be issued: then right after the bucket (the schedule pass defers it).
  Node* anchor = last->isBefore(w0) ? w0 : last;
  NodeMeta wait_meta = sharedMeta(w0->meta(), key.phase, b.members);
  Node* wait = at(anchor, wait_meta).wait(w0->target(), coll, p + "_wait");
  unpack(
      wait, 0, sizes, payload, anchor, wait_meta, key.phase, p + "_split", /*copy=*/false,
      [&](const Member& m, Node* shaped) {
        // Pure users of the old wait that ran before the new one move below it, in program
        // order.
        if (anchor == last) {
          std::vector<Node*> movers;
          std::vector<Node*> work{m.wait};
          while (!work.empty()) {
            Node* x = work.back();
            work.pop_back();
            for (const Use& use : x->uses())
              if (Node* u = use.user;
                  u->isBefore(last) && std::find(movers.begin(), movers.end(), u) == movers.end()) {
                movers.push_back(u);
                work.push_back(u);
              }
          }
          std::sort(movers.begin(), movers.end(),
                    [](const Node* a, const Node* c) { return a->isBefore(c); });
          for (Node* u : movers)
            staged_.emplace_back(u, last);
          ctx_.stat("moved-down", static_cast<int64_t>(movers.size()));
        }
        replaceMember(m.wait, shaped);
      });
  flush();
  for (const Member& m : b.members)
    retire(m);
}

}  // namespace

std::string blockOfFqn(std::string_view fqn, const BlockAnalysis& blocks,
                       const std::vector<std::string>& head) {
  if (int32_t b = blocks.blockOfFqn(fqn); b >= 0) return blocks.blocks[static_cast<size_t>(b)].name;
  std::string_view top = fqn.substr(0, fqn.find('.'));
  for (const std::string& h : head)
    if (top == h) return "head";
  return std::string(top);
}

namespace {

constexpr OptionDecl kBucketOptions[] = {
    {"plan", "blocks|size|auto", "blocks",
     "one bucket per block (blocks), greedy in program order up to cap-mb (size), or the "
     "candidate with the shortest simulated step within memory-limit (auto: blocks, blocks x2, "
     "x4, caps 16-256 MB)"},
    {"group", "int", "1", "plan=blocks: this many consecutive blocks per bucket, in [1, 1000000]"},
    {"hardware", "path", "", "plan=auto: the hardware profile (JSON) that times the candidates"},
    {"threads", "int", "0",
     "plan=auto: candidates evaluated at once, each on its own copy (0 = one per hardware "
     "thread); the plan chosen does not depend on it; in [0, 256]"},
    {"cap-mb", "int", "0",
     "bucket size cap in MiB, 0 = none; plan=size uses 64 when unset; in [0, 1073741824]"},
    {"kinds", "list", "ag,rs,ar", "collective kinds to bucket: ag, rs, ar"},
    {"fsdp-only", "bool", "true",
     "only FSDP collectives (unshard gathers, gradient reduce-scatters and all-reduces)"},
    {"head", "list", "norm,output,lm_head,final_norm",
     "top-level modules outside blocks that share one bucket"},
    {"exact-rs-order", "bool", "true",
     "keep each gradient's summation order: pad reduce-scatter buckets to gloo ring chunks, leave "
     "the others alone"},
    {"memory-limit", "bytes", "input",
     "estimated peak bound: input (the input's own peak), reference (the reference plan's, "
     "FSDP2's, if larger), none, or BYTES"},
};
constexpr StatisticDecl kBucketStatistics[] = {
    {"collectives-before", "collectives in the input"},
    {"collectives-after", "collectives in the output"},
    {"buckets.<kind>", "buckets made, per collective kind"},
    {"members.<kind>", "collectives merged into buckets, per kind"},
    {"split.<reason>", "buckets closed early: cap, dependency, placement, interleaved"},
    {"hoisted", "producers hoisted ahead of a bucket's first member"},
    {"moved-down", "consumers moved below a bucket's wait"},
    {"rs-pad-elements", "elements of zero padding added for exact-rs-order"},
    {"unbucketed.rs-order", "reduce-scatters left alone to keep their summation order"},
    {"unbucketed.memory", "collectives left alone to stay under memory-limit"},
    {"memory-peak-before", "estimated peak bytes of the input"},
    {"memory-limit", "the bound in bytes"},
    {"reference-peak", "memory-limit=reference: the reference plan's estimated peak bytes"},
    {"memory-rounds", "rounds that dropped buckets to fit the bound"},
    {"memory-peak-estimate", "estimated peak bytes of the output"},
    {"auto-candidates", "plan=auto: candidate plans timed"},
    {"auto-plan", "plan=auto: the index of the chosen candidate"},
    {"simulated-step-us", "plan=auto: the chosen candidate's simulated step, microseconds"},
};

}  // namespace

std::span<const OptionDecl> BucketPass::options() const {
  return kBucketOptions;
}
std::span<const StatisticDecl> BucketPass::statistics() const {
  return kBucketStatistics;
}

void BucketPass::configure(PassOptions& options) {
  std::string plan = options.getEnum("plan", {"blocks", "size", "auto"}, "blocks");
  opts_.plan = plan == "size"   ? BucketOptions::Plan::Size
               : plan == "auto" ? BucketOptions::Plan::Auto
                                : BucketOptions::Plan::Blocks;
  opts_.group_blocks = options.getInt("group", 1, 1, 1000000);
  if (opts_.group_blocks > 1 && opts_.plan != BucketOptions::Plan::Blocks)
    throw JfxError({}, "pass 'bucket': option 'group' is read by plan=blocks only");
  std::string hardware = options.getString("hardware", "");
  if (opts_.plan == BucketOptions::Plan::Auto) {
    if (hardware.empty())
      throw JfxError({},
                     "pass 'bucket': plan=auto needs hardware=FILE (a profile such as "
                     "configs/hardware/h100.json) to time its candidates");
    opts_.cost = std::make_shared<const CostModel>(loadHardwareProfile(hardware));
  } else if (!hardware.empty()) {
    throw JfxError({}, "pass 'bucket': option 'hardware' is read by plan=auto only");
  }
  opts_.threads = options.getInt("threads", 0, 0, 256);
  if (opts_.plan != BucketOptions::Plan::Auto && opts_.threads != 0)
    throw JfxError({}, "pass 'bucket': option 'threads' is read by plan=auto only");
  // Up to 1 PiB: any real bucket, and far from where cap_mb * 2^20 would overflow.
  int64_t cap_mb = options.getInt("cap-mb", opts_.plan == BucketOptions::Plan::Size ? 64 : 0, 0,
                                  int64_t{1} << 30);
  opts_.cap_bytes = cap_mb * 1024 * 1024;
  if (opts_.plan == BucketOptions::Plan::Auto && options.has("cap-mb"))
    throw JfxError({},
                   "pass 'bucket': option 'cap-mb' is not read by plan=auto (it tries its own "
                   "caps)");
  std::vector<std::string> kinds = options.getList("kinds", {"ag", "rs", "ar"});
  opts_.all_gather = opts_.reduce_scatter = opts_.all_reduce = false;
  for (const std::string& k : kinds) {
    if (k == "ag")
      opts_.all_gather = true;
    else if (k == "rs")
      opts_.reduce_scatter = true;
    else if (k == "ar")
      opts_.all_reduce = true;
    else
      throw JfxError({}, "pass 'bucket': option 'kinds': unknown kind " + quoteForMessage(k) +
                             " (expected ag, rs, ar)");
  }
  opts_.fsdp_only = options.getBool("fsdp-only", true);
  opts_.head = options.getList("head", opts_.head);
  opts_.exact_rs_order = options.getBool("exact-rs-order", true);
  opts_.memory_limit = parseMemoryLimitOption(options, "bucket");
}

int64_t glooRingChunkElems(int64_t numel, int64_t elem_size, int64_t group_size) {
  // gloo/allreduce.cc, ring(): kMaxSegmentSize 1 MiB, at least two segments per rank, as many
  // segments per rank on every rank, segments rounded up to whole elements.
  constexpr int64_t kMaxSegmentBytes = 1 << 20;
  const int64_t G = std::max<int64_t>(1, group_size);
  const int64_t e = std::max<int64_t>(1, elem_size);
  const int64_t max_seg = e * std::max<int64_t>(1, kMaxSegmentBytes / e);
  const int64_t bytes = numel * e;
  int64_t segments = std::max((bytes + max_seg - 1) / max_seg, 2 * G);
  segments = (segments + G - 1) / G * G;
  const int64_t seg_elems = (numel + segments - 1) / segments;
  return segments / G * seg_elems;
}

namespace {

// The memory bound of bucketCollectives for `g`, whose estimated peak is `peak_before`;
// memory-limit=reference builds the reference plan's bucket and schedule on a copy of `g`.
int64_t boundFor(const Graph& g, const BucketOptions& opts, int64_t peak_before, PassContext& ctx) {
  if (opts.memory_limit == kMemoryLimitReference) {
    const int64_t ref = referencePlanTail(g).peak_bytes;
    ctx.stat("reference-peak", ref);
    return std::max(ref, peak_before);
  }
  return opts.memory_limit == 0  ? 0
         : opts.memory_limit < 0 ? peak_before
                                 : std::max(opts.memory_limit, peak_before);
}

// A finding whenever the bound keeps collectives out of buckets (the warning below when it keeps
// every one out): how many, and under which bound.
void warnUnbucketedForMemory(bool changed, int64_t bound, PassContext& ctx) {
  auto it = ctx.stats.find("unbucketed.memory");
  if (!changed || it == ctx.stats.end() || it->second == 0) return;
  ctx.warn("bucket: " + std::to_string(it->second) +
           " collectives stay unbucketed to keep the estimated peak within the memory bound " +
           formatBytes(bound) + " (statistic unbucketed.memory)");
}

// After the final rewrite under `bound`: when the bound left out every collective a bucket would
// have merged, the pass changed nothing, and that is a warning (shown by default), not only a
// remark, so an unchanged graph is not taken for a bucketed one. Small models, whose weights
// outweigh their activations, are where it happens (convbn_w2 and vit_w2 under the default
// pipeline).
bool warnIfBoundLeftNothing(bool changed, size_t excluded, int64_t bound, PassContext& ctx) {
  if (!changed && excluded > 0)
    ctx.warn("bucket: formed no bucket: the memory bound " + formatBytes(bound) +
             " (memory-limit, or the input's own estimated peak if larger) left all " +
             std::to_string(excluded) +
             " collectives unbucketed, since their buckets raised the estimated peak above it; "
             "memory-limit=none or a device limit such as memory-limit=70GiB buckets them");
  return changed;
}

bool bucketFixed(Graph& g, const BucketOptions& opts, PassContext& ctx);
// What boundedCopy settled on besides the copy: the copy's phase analysis and memory profile,
// for a planner that goes on with it.
struct SettledAnalyses {
  std::optional<PhaseInfo> phases;
  std::optional<MemoryProfile> memory;
};
std::unique_ptr<Graph> boundedCopy(const Graph& g, const BucketOptions& opts, int64_t bound,
                                   std::set<std::string>& excluded, PassContext& ctx, int64_t* peak,
                                   const BlockAnalysis* blocks = nullptr,
                                   SettledAnalyses* settled = nullptr,
                                   const BucketAnalyses* shared = nullptr, int first_round = 0);

// plan=auto (bucket.h): every candidate on a copy, bucketed under the same bound, then
// split-comm-groups and schedule{prefetch=1} under that bound, simulated; the shortest step
// wins, ties to the earlier candidate.
bool bucketAuto(Graph& g, const BucketOptions& opts, PassContext& ctx) {
  if (!opts.cost) throw JfxError({}, "pass 'bucket': plan=auto needs a hardware profile");
  const int64_t peak_before = ctx.analyses.get<MemoryProfile>(g).peak_bytes;
  const int64_t bound = boundFor(g, opts, peak_before, ctx);
  const std::vector<BucketCandidate> cands = bucketAutoCandidates(opts);
  // Every copy is a clone of `g`, whose block analysis (FQNs only) is theirs too; and the
  // analyses of one pristine clone serve every candidate's copy (BucketAnalyses).
  const BlockAnalysis& blocks = ctx.analyses.get<BlockAnalysis>(g);
  const std::unique_ptr<Graph> pristine = cloneGraph(g);
  const BucketAnalyses shared(*pristine);
  SimOptions so;
  so.memory = false;
  // Each candidate is evaluated on its own copy of `g` and reads only `g`, `blocks`, `shared`
  // and the cost model, so candidates run on several threads at once; the choice below walks
  // the outcomes in candidate order, so it is the same for any number of threads.
  struct Outcome {
    bool over = false;
    double step = 0;
    int64_t peak = 0;
    std::set<std::string> excluded;
    std::exception_ptr error;
  };
  std::vector<Outcome> outcomes(cands.size());
  auto evaluate = [&](size_t i) {
    Outcome& out = outcomes[i];
    PassContext quiet;
    std::unique_ptr<Graph> copy;
    int64_t peak = peak_before;
    std::set<std::string> excluded;
    SettledAnalyses settled;
    if (bound > 0) {
      copy =
          boundedCopy(g, cands[i].opts, bound, excluded, quiet, &peak, &blocks, &settled, &shared);
    } else {
      copy = cloneGraph(g);
      Bucketer(*copy, cands[i].opts, quiet, excluded, &blocks, &shared).run();
      settled.phases.emplace(computePhases(*copy));
      peak = analyzeMemory(*copy, *settled.phases).peak_bytes;
    }
    if (!copy) copy = cloneGraph(g), peak = peak_before, settled = {};
    if (bound > 0 && peak > bound) {  // cannot happen (bucketFixed keeps the bound); be safe
      out.over = true;
      return;
    }
    // The copy is scored as the default pipeline goes on: split-comm-groups, then
    // schedule{prefetch=1} under the same bound (schedule{prefetch=auto} tunes the distance later).
    SplitCommGroupsPass().run(*copy, quiet);
    ScheduleOptions sched;
    sched.prefetch = 1;
    sched.memory_limit = bound;
    sched.report = false;
    if (settled.phases && (bound == 0 || settled.memory))
      scheduleCollectives(*copy, sched, quiet, *settled.phases,
                          settled.memory ? &*settled.memory : nullptr);
    else
      scheduleCollectives(*copy, sched, quiet);
    out.step = simulate(*copy, *opts.cost, so).step;
    out.peak = peak;
    out.excluded = std::move(excluded);
  };
  const size_t hw = std::max(1u, std::thread::hardware_concurrency());
  const size_t n_threads =
      std::min(cands.size(), opts.threads > 0 ? static_cast<size_t>(opts.threads) : hw);
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i; (i = next.fetch_add(1)) < cands.size();) {
      try {
        evaluate(i);
      } catch (...) {
        outcomes[i].error = std::current_exception();
      }
    }
  };
  {
    std::vector<std::jthread> pool;
    for (size_t t = 1; t < n_threads; ++t)
      pool.emplace_back(worker);
    worker();
  }  // joined
  size_t best = 0;
  double best_step = std::numeric_limits<double>::infinity();
  int64_t best_peak = 0;
  std::set<std::string> best_excluded;
  std::string report;
  for (size_t i = 0; i < cands.size(); ++i) {
    Outcome& out = outcomes[i];
    if (out.error) std::rethrow_exception(out.error);
    if (out.over) {
      report += "; " + cands[i].name + ": over the bound";
      continue;
    }
    report += (report.empty() ? "" : ", ") + cands[i].name + " " + formatMicros(out.step);
    if (out.step < best_step) {
      best = i, best_step = out.step, best_peak = out.peak;
      best_excluded = std::move(out.excluded);
    }
  }
  ctx.stat("auto-candidates", static_cast<int64_t>(cands.size()));
  ctx.stat("auto-plan", static_cast<int64_t>(best));
  if (!(best_step < std::numeric_limits<double>::infinity()))  // cannot happen: see `over`
    throw JfxError({}, "pass 'bucket': plan=auto: no candidate was simulated within the bound");
  ctx.stat("simulated-step-us", microsecondsStat(best_step, "pass 'bucket': plan=auto"));
  ctx.stat("memory-peak-estimate", best_peak);
  ctx.remark("bucket: plan=auto chose " + quoteForMessage(cands[best].name) +
             " (simulated step with " +
             "split-comm-groups and schedule{prefetch=1} under the bound " +
             (bound > 0 ? formatBytes(bound) : std::string("none")) + ", " +
             opts.cost->hardware().name + "): " + report);
  // The winner again, on the graph itself, leaving out what its bounded copy left out (the same
  // rewrite: Bucketer is deterministic given the exclusions).
  if (bound > 0) {
    ctx.stat("memory-peak-before", peak_before);
    ctx.stat("memory-limit", bound);
    if (!best_excluded.empty())
      ctx.remark("bucket: " + std::to_string(best_excluded.size()) +
                 " collectives left unbucketed to stay within the estimated peak " +
                 formatBytes(bound));
  }
  const bool changed = Bucketer(g, cands[best].opts, ctx, best_excluded, &blocks).run();
  warnUnbucketedForMemory(changed, bound, ctx);
  return warnIfBoundLeftNothing(changed, best_excluded.size(), bound, ctx);
}

}  // namespace

std::vector<BucketCandidate> bucketAutoCandidates(const BucketOptions& base) {
  std::vector<BucketCandidate> out;
  auto add = [&](std::string name, BucketOptions::Plan plan, int64_t group, int64_t cap_mb) {
    BucketCandidate c;
    c.name = std::move(name);
    c.opts = base;
    c.opts.plan = plan;
    c.opts.group_blocks = group;
    c.opts.cap_bytes = cap_mb * 1024 * 1024;
    out.push_back(std::move(c));
  };
  add("blocks", BucketOptions::Plan::Blocks, 1, 0);
  add("blocks x2", BucketOptions::Plan::Blocks, 2, 0);
  add("blocks x4", BucketOptions::Plan::Blocks, 4, 0);
  for (int64_t mb : {16, 32, 64, 128, 256})
    add("size " + std::to_string(mb) + "MB", BucketOptions::Plan::Size, 1, mb);
  return out;
}

bool bucketCollectives(Graph& g, const BucketOptions& opts, PassContext& ctx) {
  if (opts.plan == BucketOptions::Plan::Auto) return bucketAuto(g, opts, ctx);
  return bucketFixed(g, opts, ctx);
}

namespace {

// The estimated memory profile the bound is checked on.
MemoryProfile profileWith(const Graph& g, const PhaseInfo& phases) {
  MemoryOptions mo;  // the analysis manager's options, so a final profile can be handed to it
  mo.lifetimes = true;
  return analyzeMemory(g, phases, mo);
}
MemoryProfile boundProfile(const Graph& g, PhaseInfo* phases_out = nullptr) {
  PhaseInfo phases = computePhases(g);
  MemoryProfile prof = profileWith(g, phases);
  if (phases_out) *phases_out = std::move(phases);
  return prof;
}

// After `b` bucketed `trial` to the profile `prof`, over `bound`: leaves out (adds the member
// collectives' names to `excluded`) the buckets that own or move a storage live at an over-bound
// step, or every bucket when the rise is not where a bucket lives.
void excludeOverBound(const Graph& trial,
                      const std::vector<std::pair<const Node*, size_t>>& touched,
                      const std::vector<std::vector<const Node*>>& members,
                      const MemoryProfile& prof, int64_t bound, std::set<std::string>& excluded) {
  // over[t]: steps up to t that are above the bound (prefix count).
  std::vector<int64_t> over(prof.curve.size() + 1, 0);
  for (size_t t = 0; t < prof.curve.size(); ++t)
    over[t + 1] = over[t] + (prof.curve[t] > bound);
  std::vector<int32_t> bucket_of(trial.maxId(), -1);
  for (const auto& [n, bi] : touched)
    bucket_of[n->id()] = static_cast<int32_t>(bi);
  std::set<size_t> offending;
  for (const StorageLife& st : prof.storages) {
    int32_t bi = bucket_of[st.owner];
    if (bi < 0) continue;
    const size_t hi =
        st.pinned() ? prof.curve.size() : std::min(size_t{st.last_use} + 1, prof.curve.size());
    if (over[hi] - over[std::min(size_t{st.born}, hi)] > 0)
      offending.insert(static_cast<size_t>(bi));
  }
  if (offending.empty())  // the rise is not where a bucket lives: bucket nothing
    for (size_t bi = 0; bi < members.size(); ++bi)
      offending.insert(bi);
  for (size_t bi : offending)
    for (const Node* coll : members[bi])
      excluded.insert(std::string(coll->name()));
}

constexpr int kBoundRounds = 8;

// The memory-bound loop of bucketFixed: buckets copies of `g` under `bound` (> 0), leaving out
// the buckets that own or move a storage live at an over-bound step, until the copy's estimated
// peak is within it. Fills `excluded` with the collectives left out; returns the settled copy
// (nullptr when no round settled: then every collective is excluded) and its peak in `*peak`.
// `first_round`: rounds already spent by the caller (each round is one rewrite and check).
std::unique_ptr<Graph> boundedCopy(const Graph& g, const BucketOptions& opts, int64_t bound,
                                   std::set<std::string>& excluded, PassContext& ctx, int64_t* peak,
                                   const BlockAnalysis* blocks, SettledAnalyses* settled,
                                   const BucketAnalyses* shared, int first_round) {
  for (int round = first_round; round < kBoundRounds; ++round) {
    std::unique_ptr<Graph> trial = cloneGraph(g);
    PassContext quiet;
    Bucketer b(*trial, opts, quiet, excluded, blocks, shared);
    b.run();
    PhaseInfo phases;
    MemoryProfile prof = boundProfile(*trial, &phases);
    if (prof.peak_bytes <= bound) {
      *peak = prof.peak_bytes;
      if (settled) {
        settled->phases.emplace(std::move(phases));
        settled->memory.emplace(std::move(prof));
      }
      return trial;
    }
    excludeOverBound(*trial, b.touched(), b.bucketMembers(), prof, bound, excluded);
    ctx.stat("memory-rounds");
  }
  // Every candidate out: the graph stays as it is.
  g.forEach([&](const Node* n) {
    if (n->isCollective()) excluded.insert(std::string(n->name()));
  });
  return nullptr;
}

// Whether the block analysis of the input holds for the bucketed output: each bucket lies in one
// block or outside every block (plan=blocks, one block a bucket) and has at most
// kMaxParamsPerValue members, so the analysis reads a bucket's copy-in, gather and pieces as its
// parameters' values (passes/analysis/blocks.h) and finds the same first users.
bool blocksSurvive(const BucketOptions& opts,
                   const std::vector<std::vector<const Node*>>& bucket_members) {
  if (opts.plan != BucketOptions::Plan::Blocks || opts.group_blocks > 1) return false;
  return std::all_of(bucket_members.begin(), bucket_members.end(),
                     [](const auto& m) { return m.size() <= kMaxParamsPerValue; });
}

bool bucketFixed(Graph& g, const BucketOptions& opts, PassContext& ctx) {
  std::set<std::string> excluded;
  // Written storage holds when the input writes nothing: buckets make no writer. Asked before
  // the rewrite, after which a request would compute it afresh.
  const bool writes = ctx.analyses.get<WrittenStorage>(g).any();
  if (opts.memory_limit == 0) {
    Bucketer b(g, opts, ctx, excluded);
    const bool changed = b.run();
    if (blocksSurvive(opts, b.bucketMembers())) ctx.preserve<BlockAnalysis>();
    if (!writes) ctx.preserve<WrittenStorage>();
    return changed;
  }

  // Memory bound: while the estimated peak is above the bound, leave out the buckets whose new or
  // moved storages are live at an over-bound step. A few rounds settle it (each drops every
  // offending bucket at once); past 8 rounds nothing is bucketed.
  const int64_t peak_before = ctx.analyses.get<MemoryProfile>(g).peak_bytes;
  const int64_t bound = boundFor(g, opts, peak_before, ctx);
  ctx.stat("memory-peak-before", peak_before);
  ctx.stat("memory-limit", bound);
  // The copies are clones of `g`: one block analysis serves every round and the final rewrite.
  const BlockAnalysis* shared =
      opts.plan == BucketOptions::Plan::Blocks ? &ctx.analyses.get<BlockAnalysis>(g) : nullptr;

  // Round one on the graph itself, recording how to undo it (Note [Undo] in ir/graph.h): most
  // graphs stay within the bound with every bucket, and then this is the only rewrite (bucketing
  // a trial copy and then the graph again cost twice the rewrite, plus a clone; an exact copy to
  // go back to cost a second graph's memory). Its statistics and remarks count only if it stands.
  struct Recording {
    Graph& g;
    explicit Recording(Graph& graph) : g(graph) { g.beginUndo(); }
    ~Recording() {
      if (g.recordingUndo()) g.rollback();  // an exception inside the round: leave g as it was
    }
  } recording{g};
  const Statistics stats_before = ctx.stats;
  std::ostringstream held_log, held_warnings;
  struct Redirect {
    PassContext& ctx;
    std::ostream* log;
    std::ostream* warnings;
    ~Redirect() { ctx.log = log, ctx.warnings = warnings; }
  } redirect{ctx, ctx.log, ctx.warnings};
  if (ctx.log) ctx.log = &held_log;
  if (ctx.warnings) ctx.warnings = &held_warnings;
  // The input's block analysis, copied before the rewrite drops the cache: the output's too when
  // it survives bucketing, and the input's again after a rollback (which restores every node).
  std::optional<BlockAnalysis> input_blocks;
  // The input's phases hold for the output (the rewrite reads them, 1 byte a node): every node
  // it makes carries its bucket's phase in its meta, which PhaseInfo::of answers for a node newer
  // than the analysis; a surviving node keeps its operands' dataflow, so what it is an ancestor
  // of or depends on is unchanged; and a bucket never mixes phases. Unless the loss value was a
  // bucket member (an all-reduced loss under fsdp-only=false): then they are computed afresh.
  // --verify-full recomputes them and compares (test_analysis_manager.cc, every traced fixture).
  std::optional<PhaseInfo> input_phases = ctx.analyses.get<PhaseInfo>(g);
  {
    bool changed = false;
    std::vector<std::pair<const Node*, size_t>> touched;
    std::vector<std::vector<const Node*>> members;
    {
      Bucketer b(g, opts, ctx, excluded, shared);
      changed = b.run();
      touched = b.takeTouched();
      members = b.takeBucketMembers();
    }
    // The cached analyses describe the input, which the rewrite changed (and a rollback moves
    // its generation on): dropped before the output is profiled they stay out of the pass's
    // peak, which is the pipeline's (23 MB at 10^6 nodes). Only the block analysis and the
    // phases are kept, as copies (a few MB at 10^6 nodes).
    if (input_phases->lossNode() && input_phases->lossNode()->isDead()) input_phases.reset();
    if (changed) {
      if (shared) input_blocks = *shared;
      ctx.analyses.clear();
      shared = nullptr;
    }
    PhaseInfo phases;
    MemoryProfile prof;
    if (input_phases) {
      phases = std::move(*input_phases);
      prof = profileWith(g, phases);
    } else {
      prof = boundProfile(g, &phases);
    }
    if (prof.peak_bytes <= bound) {
      g.commitUndo();
      // The profile of the graph as it leaves: split-comm-groups and schedule reuse it.
      prof.storages = {};
      ctx.analyses.provide<PhaseInfo>(g, std::move(phases));
      ctx.analyses.provide<MemoryProfile>(g, std::move(prof), {AnalysisTraits<PhaseInfo>::name});
      ctx.preserve<PhaseInfo>();
      ctx.preserve<MemoryProfile>();
      if (input_blocks && blocksSurvive(opts, members)) {
        ctx.analyses.provide<BlockAnalysis>(g, std::move(*input_blocks),
                                            {AnalysisTraits<PhaseInfo>::name});
        ctx.preserve<BlockAnalysis>();
      }
      if (!writes) {
        ctx.analyses.provide<WrittenStorage>(g, WrittenStorage::nothingWritten());
        ctx.preserve<WrittenStorage>();
      }
      if (redirect.log) *redirect.log << held_log.str();
      if (redirect.warnings) *redirect.warnings << held_warnings.str();
      return changed;
    }
    excludeOverBound(g, touched, members, prof, bound, excluded);
  }
  ctx.log = redirect.log;
  ctx.warnings = redirect.warnings;
  g.rollback();
  ctx.stats = stats_before;
  ctx.stat("memory-rounds");
  // The graph is as before, but its generation moved: the block analysis is the input's.
  if (opts.plan == BucketOptions::Plan::Blocks) {
    if (input_blocks)
      ctx.analyses.provide<BlockAnalysis>(g, std::move(*input_blocks),
                                          {AnalysisTraits<PhaseInfo>::name});
    shared = &ctx.analyses.get<BlockAnalysis>(g);
  }
  int64_t peak = 0;
  boundedCopy(g, opts, bound, excluded, ctx, &peak, shared, nullptr, nullptr, 1);
  if (!excluded.empty())
    ctx.remark("bucket: " + std::to_string(excluded.size()) +
               " collectives left unbucketed to stay within the estimated peak " +
               formatBytes(bound));
  Bucketer last(g, opts, ctx, excluded, shared);
  const bool changed = last.run();
  if (blocksSurvive(opts, last.bucketMembers())) ctx.preserve<BlockAnalysis>();
  if (!writes) ctx.preserve<WrittenStorage>();
  warnUnbucketedForMemory(changed, bound, ctx);
  return warnIfBoundLeftNothing(changed, excluded.size(), bound, ctx);
}

}  // namespace

}  // namespace jfx
