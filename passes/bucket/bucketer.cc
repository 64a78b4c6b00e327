#include "passes/bucket/bucketer.h"

#include <algorithm>

#include "ir/attributes.h"
#include "ir/collectives.h"

namespace jfx {

const BucketStatistics& bucketStats() {
  static const BucketStatistics s;
  return s;
}

namespace {

using bucketing::Bucket;
using bucketing::Candidate;
using bucketing::isParamOrder;
using bucketing::KeyTuple;
using bucketing::kNever;
using bucketing::Member;
using bucketing::Side;

// A pure producer chain longer than this between a parameter and its all-gather is not a cast
// chain; such a member is not hoisted (it starts a new bucket instead).
constexpr size_t kMaxHoist = 64;
// Deeper sums of gradient reductions than this are not followed below a bucket's wait.
constexpr size_t kMaxSumDepth = 64;

Side sideOf(CollectiveKind k) {
  return k == CollectiveKind::AllGather ? Side::Gather : Side::Data;
}

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

// Members in payload order (parameter order; bucket.h).
std::vector<Member> payloadOrder(const std::vector<Member>& members) {
  std::vector<Member> payload = members;
  std::stable_sort(payload.begin(), payload.end(),
                   [](const Member& a, const Member& c) { return a.order < c.order; });
  return payload;
}

// The earliest member wait.
Node* firstWait(const std::vector<Member>& members) {
  Node* w0 = members.front().wait;
  for (const Member& m : members)
    if (m.wait->isBefore(w0)) w0 = m.wait;
  return w0;
}

}  // namespace

Bucketer::Bucketer(Graph& g, const BucketOptions& opts, PassContext& ctx,
                   const std::set<std::string>& excluded)
    : excluded_(excluded),
      g_(g),
      opts_(opts),
      ctx_(ctx),
      stats_(bucketStats()),
      phases_(ctx.analyses.get<PhaseInfo>(g)),
      fsdp_(ctx.analyses.get<FsdpAnalysis>(g)),
      written_(ctx.analyses.get<WrittenStorage>(g)),
      blocks_(opts.plan == BucketOptions::Plan::Blocks ? &ctx.analyses.get<BlockAnalysis>(g)
                                                       : nullptr) {
  builder_.onCreate([this](Node* n) { noteTouched(n); });
}

bool Bucketer::run() {
  // One sweep for the program positions, the placeholders' ordinals and the collectives.
  pos_ = NodeMap<uint32_t>(g_);
  param_ordinal_ = NodeMap<int32_t>(g_, -1);
  std::vector<Node*> collectives;  // program order
  int32_t ordinal = 0;
  sweep(g_, visitor([&](Node* n, uint32_t step) {
          pos_[n] = step;
          if (n->isCollective()) {
            collectives.push_back(n);
          } else if (n->op() == OpKind::Placeholder) {
            param_ordinal_[n] = ordinal;
            if (!n->inputFqn().empty()) param_ordinal_by_fqn_.emplace(n->inputFqn(), ordinal);
            ++ordinal;
          }
        }));
  grad_chain_ = NodeMap<int32_t>(g_, -1);
  for (size_t i = 0; i < fsdp_.grads.size(); ++i)
    grad_chain_[fsdp_.grads[i].reduce_scatter] = static_cast<int32_t>(i);
  all_reduce_fqn_ = NodeMap<const std::string*>(g_, nullptr);
  next_in_chain_ = NodeMap<Node*>(g_, nullptr);
  for (const FsdpGradChain& c : fsdp_.grads) {
    if (!c.all_reduce) continue;
    all_reduce_fqn_[c.all_reduce] = &c.param_fqn;
    // HSDP: the chain's second reduction reads the first one's wait.
    if (c.all_reduce->isBefore(c.reduce_scatter))
      next_in_chain_[c.all_reduce] = c.reduce_scatter;
    else
      next_in_chain_[c.reduce_scatter] = c.all_reduce;
  }
  for (const ReplicaGradChain& c : fsdp_.replica_grads)
    all_reduce_fqn_[c.all_reduce] = &c.param_fqn;

  std::vector<Candidate> cands = candidates(collectives);
  const auto before = static_cast<int64_t>(collectives.size());
  ctx_.stat(stats_.collectives_before, before);
  if (keys_.empty()) {
    ctx_.stat(stats_.collectives_after, before);
    return false;
  }
  if (opts_.plan == BucketOptions::Plan::Blocks) {
    if (blocks_->blocks.empty())
      ctx_.warn(blocks_->noBlocksMessage("bucket") +
                "; plan=blocks makes one bucket per top-level module instead");
    else
      ctx_.remark("bucket: " + blocks_->summary());
  }
  std::vector<Bucket> done = formBuckets(cands);
  // The scan's tables go before the rewrite makes its nodes: the end of the rewrite is the pass's
  // (and the pipeline's) peak (bench/README.md, "Figures behind the code").
  std::vector<Candidate>().swap(cands);

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
  ctx_.stat(stats_.collectives_after, after);
  return !done.empty();
}

std::vector<Candidate> Bucketer::candidates(const std::vector<Node*>& collectives) {
  std::vector<Candidate> cands;
  for (Node* n : collectives)
    if (auto c = candidate(n)) cands.push_back(std::move(*c));
  return cands;
}

std::optional<Candidate> Bucketer::candidate(Node* n) {
  const OpInfo& info = n->info();
  if (n->op() != OpKind::CallFunction || !n->isCollective() || !enabled(info.collective) ||
      info.coalesced || info.alias != AliasKind::None)
    return std::nullopt;
  const CollectiveRole role = fsdp_.roleOf(n);
  const bool fsdp = role == CollectiveRole::FsdpUnshard || role == CollectiveRole::FsdpReduceGrad ||
                    role == CollectiveRole::FsdpGradAllReduce;
  if (opts_.fsdp_only && !fsdp) return std::nullopt;
  if (n->uses().size() != 1 || !n->uses().front().user->isWait()) return std::nullopt;
  if (!excluded_.empty() && excluded_.count(std::string(n->name()))) {
    ctx_.stat(stats_.unbucketed_memory);
    return std::nullopt;
  }
  Node* wait = n->uses().front().user;
  Node* in = n->input(0);
  if (!in || !in->val().isTensor() || !n->val().isTensor() || !wait->val().isTensor())
    return std::nullopt;
  const std::string_view group = collectiveGroupName(*n);
  if (group.empty() || !fitsBucket(n, info.collective)) return std::nullopt;
  const TensorMeta& tin = in->val().tensor;
  const TensorMeta& tout = n->val().tensor;
  Candidate c;
  c.key = keyOf(n, group, collectiveGroupSize(*n, g_), tin.dtype);
  c.m.coll = n;
  c.m.wait = wait;
  c.m.pos = pos_[n];
  c.m.bytes = std::max(tin.bytes(), tout.bytes());
  placeInPayload(c, n, role);
  return c;
}

// Whether the collective's shapes are the kind's (gather: dim 0 times the group; scatter:
// divided; all-reduce: equal) and, under exact-rs-order, a reduce-scatter keeps its summation
// order in a bucket (bucket.h, "Summation order").
bool Bucketer::fitsBucket(Node* n, CollectiveKind kind) {
  const TensorMeta& tin = n->input(0)->val().tensor;
  const TensorMeta& tout = n->val().tensor;
  const int64_t gsize = collectiveGroupSize(*n, g_);
  if (tin.dtype != tout.dtype) return false;
  switch (kind) {
    case CollectiveKind::AllGather:
      return tout.numel() == saturatingMul(tin.numel(), gsize);
    case CollectiveKind::ReduceScatter:
      break;
    case CollectiveKind::AllReduce:
      if (tout.numel() != tin.numel()) return false;
      if (!opts_.exact_rs_order || gsize < 3) return true;
      // gloo's ring sums chunk k of the buffer from rank k-1 backwards: over 3+ ranks an
      // element's association follows its chunk, which a member's offset in a bucket changes.
      ctx_.stat(stats_.unbucketed_rs_order);
      ctx_.remark("bucket: all-reduce " + quoteForMessage(n->name()) + " over " +
                  std::to_string(gsize) +
                  " ranks stays unbucketed: a bucket would move its elements to other gloo ring "
                  "chunks, summed in another order");
      return false;
    default:
      return tout.numel() == tin.numel();
  }
  if (tin.numel() % gsize != 0 || saturatingMul(tout.numel(), gsize) != tin.numel()) return false;
  if (!opts_.exact_rs_order || gsize < 3) return true;
  const int64_t chunk = glooRingChunkElems(tin.numel(), dtypeItemSize(tin.dtype), gsize);
  if (chunk == tout.numel()) return true;
  ctx_.stat(stats_.unbucketed_rs_order);
  ctx_.remark("bucket: reduce-scatter " + quoteForMessage(n->name()) + " stays unbucketed: " +
              std::to_string(tout.numel()) + " elements per rank is not a gloo ring chunk (" +
              std::to_string(chunk) + "), so no bucket keeps its summation order");
  return false;
}

// The index of the collective's bucketing key (kind, target, group, size, dtype, reduce op,
// phase): members of one bucket share it.
size_t Bucketer::keyOf(Node* n, std::string_view group, int64_t group_size, ScalarType dtype) {
  const OpInfo& info = n->info();
  KeyTuple key{info.collective,
               n->target().id(),
               std::string(group),
               group_size,
               dtype,
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
  return it->second;
}

// The candidate's payload order and, under plan=blocks, its block. Payload order is parameter
// order: FSDP2 lays out its flat buffers that way, and a different order changes byte offsets
// and NCCL's ring order (torchtitan #3590). Non-parameter members follow, in program order.
void Bucketer::placeInPayload(Candidate& c, Node* n, CollectiveRole role) {
  c.m.order = kNever / 2 + c.m.pos;
  std::string fqn;
  if (role == CollectiveRole::FsdpUnshard) {
    const FsdpUnshardChain* chain = fsdp_.unshardChainOf(n);
    if (chain && chain->param) {
      const int32_t ordinal = param_ordinal_[chain->param];
      c.m.order = ordinal >= 0 ? ordinal : kNever / 2;
      fqn = chain->param->inputFqn();
    }
  } else if (role == CollectiveRole::FsdpReduceGrad && grad_chain_[n] >= 0) {
    const FsdpGradChain& chain = fsdp_.grads[static_cast<size_t>(grad_chain_[n])];
    fqn = chain.param_fqn;
    auto p = param_ordinal_by_fqn_.find(fqn);
    if (p != param_ordinal_by_fqn_.end()) c.m.order = p->second;
  } else if (role == CollectiveRole::FsdpGradAllReduce && all_reduce_fqn_[n]) {
    fqn = *all_reduce_fqn_[n];
    auto p = param_ordinal_by_fqn_.find(fqn);
    if (p != param_ordinal_by_fqn_.end()) c.m.order = p->second;
  }
  if (fqn.empty()) fqn = std::string(n->meta().module_fqn.str());
  if (opts_.plan != BucketOptions::Plan::Blocks) return;
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

std::vector<Bucket> Bucketer::formBuckets(std::vector<Candidate>& cands) {
  const size_t nkeys = keys_.size();
  NodeMap<int32_t> cand_of(g_, -1);  // candidates are few: indexed by node id
  for (size_t i = 0; i < cands.size(); ++i)
    cand_of[cands[i].m.coll] = static_cast<int32_t>(i);
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
  sweep(g_, visitor([&](Node* n, uint32_t) {
          uint32_t* tn = &taint[static_cast<size_t>(n->id()) * nkeys];
          for (Node* p : n->inputs()) {
            const uint32_t* tp = &taint[static_cast<size_t>(p->id()) * nkeys];
            for (size_t k = 0; k < nkeys; ++k)
              tn[k] = std::max(tn[k], tp[k]);
          }
          if (cand_of[n] < 0) return;
          Candidate& c = cands[static_cast<size_t>(cand_of[n])];
          std::optional<Bucket>& b = open[c.key];
          if (sideOf(keys_[c.key].kind) == Side::Data) c.m.hard_use = hardUse(c.m.coll, c.m.wait);
          if (b) {
            const char* reject = rejection(*b, c, n, tn[c.key]);
            // Moving on to the next block is the plan working; coming back to a block that
            // already had a bucket means blocks interleave, and the block gets a second bucket.
            if (reject && std::string_view(reject) == "block")
              reject = blocks_seen.count({c.key, c.block}) ? "interleaved" : nullptr;
            if (reject) {
              ctx_.stat(stats_.split, reject);
              ctx_.remark("bucket: " + std::string(collectiveKindName(keys_[c.key].kind)) + " " +
                          quoteForMessage(n->name()) + " starts a new bucket (" + reject + ")");
            }
            if (reject || b->block != c.block) close(c.key);
          }
          if (!b) {
            blocks_seen.insert({c.key, c.block});
            b.emplace();
            b->id = next_id++;
            b->key = c.key;
            b->block = c.block;
            c.m.hoist.clear();
          }
          b->bytes = saturatingAdd(b->bytes, c.m.bytes);
          b->min_hard_use = std::min(b->min_hard_use, c.m.hard_use);
          if (isParamOrder(c.m.order)) b->params.insert(c.m.order);
          b->members.push_back(std::move(c.m));
          tn[c.key] = b->id;
        }));
  for (size_t k = 0; k < nkeys; ++k)
    close(k);
  return done;
}

// Why candidate `c` (node `n`, whose taint for its key is `taint`) cannot join the open bucket
// `b`: "block", "cap", "dependency", "repeat" (param-once), "placement", or nullptr when it can.
const char* Bucketer::rejection(const Bucket& b, Candidate& c, Node* n, uint32_t taint) const {
  if (b.block != c.block) return "block";
  if (opts_.cap_bytes > 0 && saturatingAdd(b.bytes, c.m.bytes) > opts_.cap_bytes) return "cap";
  if (taint == b.id) return "dependency";
  if (opts_.param_once && isParamOrder(c.m.order) && b.params.count(c.m.order)) return "repeat";
  if (sideOf(keys_[c.key].kind) == Side::Gather) {
    if (!collectHoist(n->input(0), b.members.front().pos, c.m.hoist)) return "placement";
  } else if (c.m.pos >= b.min_hard_use) {
    return "placement";
  }
  return nullptr;
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
    if (pos_[x] < first_pos) continue;
    if (std::find(seen.begin(), seen.end(), x) != seen.end()) continue;
    if (!isMovablePure(x) || written_.touches(x) || seen.size() >= kMaxHoist) return false;
    seen.push_back(x);
    for (Node* p : x->inputs())
      work.push_back(p);
  }
  out = std::move(seen);
  return true;
}

// Data side: the position of the first user of `coll`'s `wait` that cannot move below a new
// bucket wait. Single-operand pure users (the views and casts between a gradient and the graph
// output) can move, so the search continues through them; so can the next reduction of the same
// HSDP gradient chain with its wait (the reduce-scatter after a replica all-reduce), which then
// reduces the bucket's piece: each group's reductions stay in their order, so every rank agrees.
int64_t Bucketer::hardUse(Node* coll, Node* wait) const {
  int64_t first = kNever;
  Node* next = next_in_chain_[coll];
  const bool grad = isGradReduction(coll);
  std::vector<Node*> work{wait};
  while (!work.empty()) {
    Node* x = work.back();
    work.pop_back();
    for (const Use& u : x->uses()) {
      Node* user = u.user;
      if (user == next && user->uses().size() == 1 && user->uses().front().user->isWait())
        work.push_back(user->uses().front().user);
      else if (grad && accumulates(x, user))
        work.push_back(user);
      else if (isMovablePure(user) && !written_.touches(user) && distinctOperands(user) == 1)
        work.push_back(user);
      else
        first = std::min<int64_t>(first, pos_[user]);
    }
  }
  return first;
}

bool Bucketer::isGradReduction(const Node* coll) const {
  const CollectiveRole r = fsdp_.roleOf(coll);
  return r == CollectiveRole::FsdpGradAllReduce || r == CollectiveRole::FsdpReduceGrad;
}

// Whether `user` is a sum of gradient reductions, or a view of one, over private storage:
// `user` reads `x` (such a sum itself, or a reduction's wait) as x's only reader, and its other
// operand is a private sum too (a chunked loss's alias(first) then add_(acc, next) per chunk, a
// tied weight's add; the analysis's accumulated gradients). Nothing else reads what such a chain
// writes, so below a bucket's wait it reads the same values.
bool Bucketer::accumulates(const Node* x, const Node* user) const {
  if (x->uses().size() != 1) return false;
  if (isUnaryView(user)) return true;
  if (!isGradSum(user)) return false;
  return privateSum(user->input(0) == x ? user->input(1) : user->input(0), 0);
}

bool Bucketer::isGradSum(const Node* n) {
  return (n->is("aten.add.Tensor") || n->is("aten.add_.Tensor")) && n->numArgs() == 2 &&
         n->inputs().size() == 2 && n->input(0) != n->input(1) && n->kwargs().empty();
}

bool Bucketer::isUnaryView(const Node* n) {
  const OpCategory c = n->info().category;
  return n->isPure() && n->inputs().size() == 1 && (c == OpCategory::View || c == OpCategory::Copy);
}

// Whether `v` is a gradient reduction's wait, a view of one or a sum of such (isGradSum), each
// node read once. Sums nest as deep as a model reads one parameter; past kMaxSumDepth, no.
bool Bucketer::privateSum(const Node* v, size_t depth) const {
  for (; v->uses().size() == 1 && depth < kMaxSumDepth; v = v->input(0), ++depth) {
    if (v->isWait()) return v->input(0) && isGradReduction(v->input(0));
    if (isGradSum(v))
      return privateSum(v->input(0), depth + 1) && privateSum(v->input(1), depth + 1);
    if (!isUnaryView(v)) return false;
  }
  return false;
}

// Whether `v`'s storage is a graph output: through views and in-place writes (which return
// their operand) to the output node.
bool Bucketer::reachesOutput(const Node* v) {
  std::vector<const Node*> work{v};
  for (size_t seen = 0; !work.empty() && seen < kMaxSumDepth; ++seen) {
    const Node* x = work.back();
    work.pop_back();
    for (const Use& u : x->uses()) {
      const Node* user = u.user;
      if (user->op() == OpKind::Output) return true;
      const AliasKind a = user->info().alias;
      if ((a == AliasKind::View || a == AliasKind::InPlace) && user->input(0) == x)
        work.push_back(user);
    }
  }
  return false;
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

void Bucketer::retire(const Member& m) {
  g_.erase(m.wait);
  g_.erase(m.coll);
}

void Bucketer::noteTouched(const Node* n) {
  touched_.emplace_back(n, bucket_members_.empty() ? 0 : bucket_members_.size() - 1);
}

void Bucketer::moveBefore(Node* n, Node* anchor) {
  g_.moveBefore(n, anchor);
  noteTouched(n);
}

void Bucketer::finalize(Bucket& b) {
  const KeyTuple& key = keys_[b.key];
  const std::string_view kind = collectiveKindName(key.kind);
  ctx_.stat(stats_.buckets, kind);
  ctx_.stat(stats_.members, kind, static_cast<int64_t>(b.members.size()));
  std::vector<const Node*> colls;
  colls.reserve(b.members.size());
  for (const Member& m : b.members)
    colls.push_back(m.coll);
  bucket_members_.push_back(std::move(colls));
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
    moveBefore(x, first);
  ctx_.stat(stats_.hoisted, static_cast<int64_t>(hoist.size()));

  const std::vector<Member> payload = payloadOrder(b.members);
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

  Node* w0 = firstWait(b.members);
  NodeMeta wait_meta = sharedMeta(w0->meta(), key.phase, b.members);
  Node* wait = at(w0, wait_meta).wait(w0->target(), ag, "ag_bucket_wait");
  Node* rows = at(w0, wait_meta).view(wait, {G, -1}, "ag_bucket_rows");
  // Each piece is a column block of the [G, total] rows (rank-major, not contiguous): reshape
  // copies it into the gathered layout.
  unpack(rows, 1, sizes, payload, w0, wait_meta, key.phase, "ag_bucket_split", /*copy=*/true,
         [&](const Member& m, Node* full) { g_.replaceAllUsesWith(m.wait, full); });
  for (const Member& m : b.members)
    retire(m);
}

// The data side's payload: reduce-scatter rank r's output is row r of every input viewed as
// [G, numel_i / G], so the inputs are concatenated along dim 1 (and, under exact-rs-order, padded
// so the bucket's gloo ring chunks are its rank rows; bucket.h, summation order); all-reduce:
// plain flatten and concatenate. Fills `sizes` with each member's (and the pad's) columns.
Node* Bucketer::packData(const std::vector<Member>& payload, const KeyTuple& key, Node* last,
                         const NodeMeta& shared, std::vector<int64_t>& sizes) {
  const bool rs = key.kind == CollectiveKind::ReduceScatter;
  const int64_t G = key.group_size;
  const std::string p = rs ? "rs_bucket" : "ar_bucket";
  std::vector<Node*> parts;
  int64_t total = 0;
  for (const Member& m : payload) {
    Node* in = m.coll->input(0);
    const TensorMeta& t = in->val().tensor;
    NodeMeta meta = m.coll->meta();
    meta.phase = key.phase;
    const int64_t cols = rs ? t.numel() / G : t.numel();
    std::vector<int64_t> view_arg = rs ? std::vector<int64_t>{G, -1} : std::vector<int64_t>{-1};
    OpBuilder& bl = at(last, meta);
    parts.push_back(t.isContiguous() ? bl.view(in, view_arg, named(in->name(), "_rows"))
                                     : bl.reshape(in, view_arg, named(in->name(), "_rows")));
    sizes.push_back(cols);
    total += cols;
  }
  if (!rs) return at(last, shared).cat(parts, 0, p + "_cat");
  Node* cat = at(last, shared).cat(parts, 1, p + "_cat");
  if (opts_.exact_rs_order && G >= 3) {
    const ScalarType dtype = last->input(0)->val().tensor.dtype;
    int64_t padded = total;
    while (glooRingChunkElems(G * padded, dtypeItemSize(dtype), G) != padded)
      ++padded;
    if (padded > total) {
      ctx_.stat(stats_.rs_pad, padded - total);
      sizes.push_back(padded - total);
      cat = at(last, shared).constantPadNd(cat, {0, sizes.back()}, 0.0, p + "_pad");
    }
  }
  return at(last, shared).view(cat, {-1}, p + "_flat");
}

void Bucketer::finalizeData(Bucket& b, const KeyTuple& key) {
  Node* last = b.members.back().coll;
  const std::vector<Member> payload = payloadOrder(b.members);
  const bool rs = key.kind == CollectiveKind::ReduceScatter;
  const std::string p = rs ? "rs_bucket" : "ar_bucket";
  NodeMeta shared = sharedMeta(last->meta(), key.phase, b.members);
  const std::string plan = opts_.plan == BucketOptions::Plan::Blocks ? b.block : "size";

  // A member's payload now lives until the bucket's launch: over the memory bound, its storage
  // is the bucket's doing.
  for (const Member& m : b.members)
    noteTouched(m.coll->input(0));
  std::vector<int64_t> sizes;
  Node* packed = packData(payload, key, last, shared, sizes);
  NodeMeta coll_meta = shared;
  setBucketMeta(coll_meta,
                fsdp_.roleOf(last) == CollectiveRole::Other ? attr::bucket() : attr::fsdpBucket(),
                collectiveKindName(key.kind), plan, b.members.size());
  OpBuilder& cb = at(last, coll_meta);
  Node* coll =
      rs ? cb.reduceScatter(last->target(), packed, key.reduce_op, key.group_size, key.group, p)
         : cb.allReduce(last->target(), packed, key.reduce_op, key.group, p);

  Node* w0 = firstWait(b.members);
  // The new wait goes where the earliest member waited, unless that was before the bucket could
  // be issued: then right after the bucket (the schedule pass defers it).
  Node* anchor = last->isBefore(w0) ? w0 : last;
  NodeMeta wait_meta = sharedMeta(w0->meta(), key.phase, b.members);
  Node* wait = at(anchor, wait_meta).wait(w0->target(), coll, p + "_wait");
  // Every piece is made before any user moves below them: a moved user (a sum of several
  // members' gradients) may read a later member's piece. A bucket holding a sum accumulated in
  // place (a chunked loss adds its chunks' gradients into the first one) mostly dies with the
  // sum: when its pieces that reach the graph's outputs (the first chunk, the final norm's
  // gradient beside it) are under half of it, they are copies, since as views they would keep
  // the whole bucket alive to the graph's end.
  int64_t escaping = 0;
  bool accumulated = false;
  for (const Member& m : b.members) {
    accumulated |= written_.touches(m.wait);
    if (reachesOutput(m.wait)) escaping += m.bytes;
  }
  const bool own = accumulated && escaping > 0 && 2 * escaping < b.bytes;
  std::vector<std::pair<const Member*, Node*>> pieces;
  unpack(wait, 0, sizes, payload, anchor, wait_meta, key.phase, p + "_split", /*copy=*/false,
         [&](const Member& m, Node* shaped) {
           if (own && reachesOutput(m.wait)) {
             NodeMeta meta = m.wait->meta();
             meta.phase = key.phase;
             shaped = at(anchor, meta).clone(shaped, named(m.wait->name(), "_own"));
           }
           pieces.emplace_back(&m, shaped);
         });
  for (auto [m, shaped] : pieces) {
    if (anchor == last) moveUsersBelow(m->wait, wait, last);
    g_.replaceAllUsesWith(m->wait, shaped);
  }
  for (const Member& m : b.members)
    retire(m);
}

void Bucketer::moveUsersBelow(Node* wait, Node* bucket_wait, Node* last) {
  // In program order, moved before `last` (the new wait's anchor). Between the bucket's wait and
  // `last` lie only its pieces and users moved for an earlier member: those stay.
  std::vector<Node*> movers;
  std::vector<Node*> work{wait};
  while (!work.empty()) {
    Node* x = work.back();
    work.pop_back();
    for (const Use& use : x->uses())
      if (Node* u = use.user; u->isBefore(last) && !bucket_wait->isBefore(u) &&
                              std::find(movers.begin(), movers.end(), u) == movers.end()) {
        movers.push_back(u);
        work.push_back(u);
      }
  }
  std::sort(movers.begin(), movers.end(),
            [](const Node* a, const Node* c) { return a->isBefore(c); });
  for (Node* u : movers)
    moveBefore(u, last);
  ctx_.stat(stats_.moved_down, static_cast<int64_t>(movers.size()));
}

}  // namespace jfx
