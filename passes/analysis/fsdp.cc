#include "passes/analysis/fsdp.h"

#include <algorithm>

#include "ir/attributes.h"
#include "ir/fsdp_chains.h"
#include "ir/walk.h"

namespace jfx {
namespace {

bool isPure(const Node* n) {
  return n->isPure();
}

bool isInputFreeFactory(const Node* n) {
  return jfx::isInputFreeFactory(*n);
}

// The chain step back to the shard, and whether `n` is one (ir/fsdp_chains.h).
Node* soleDataInput(const Node* n) {
  return unshardChainInput(*n);
}

bool isUnshardPreOp(const Node* n) {
  return unshardChainInput(*n) != nullptr;
}

bool isPlainCollective(const Node* n, CollectiveKind kind) {
  const OpInfo& info = n->info();
  return n->op() == OpKind::CallFunction && info.collective == kind && !info.coalesced &&
         info.alias == AliasKind::None;
}

// The collective's wait when it is its only use.
Node* soleWait(const Node* coll) {
  if (coll->uses().size() != 1) return nullptr;
  Node* w = coll->uses().front().user;
  return w->isWait() ? w : nullptr;
}

bool isViewLike(const Node* n) {
  OpCategory c = n->info().category;
  return c == OpCategory::View || c == OpCategory::Getitem;
}

bool isConcat(const Node* n) {
  return n->is("aten.cat.default") || n->is("aten.stack.default");
}

bool sameSide(const PhaseInfo& phases, const Node* a, const Node* b) {
  return phases.isBackward(a) == phases.isBackward(b);
}

void sortByPosition(std::vector<Node*>& v) {
  std::sort(v.begin(), v.end(), [](const Node* a, const Node* b) { return a->isBefore(b); });
}

}  // namespace

std::string_view collectiveRoleName(CollectiveRole r) {
  switch (r) {
    case CollectiveRole::None:
      return "none";
    case CollectiveRole::FsdpUnshard:
      return "fsdp_unshard";
    case CollectiveRole::FsdpReduceGrad:
      return "fsdp_reduce_grad";
    case CollectiveRole::FsdpGradAllReduce:
      return "fsdp_grad_all_reduce";
    case CollectiveRole::Other:
      return "other";
  }
  return "none";
}

std::vector<Node*> FsdpUnshardChain::nodes() const {
  std::vector<Node*> out(pre);
  out.push_back(all_gather);
  out.push_back(wait);
  out.insert(out.end(), post.begin(), post.end());
  return out;
}

const FsdpUnshardChain* FsdpAnalysis::unshardChainOf(const Node* n) const {
  if (n->id() >= chain_of_.size() || chain_of_[n->id()] < 0) return nullptr;
  return &unshard[static_cast<size_t>(chain_of_[n->id()])];
}

CollectiveRole FsdpAnalysis::roleOf(const Node* n) const {
  if (n->id() >= role_.size())
    return n->isCollective() ? CollectiveRole::Other : CollectiveRole::None;
  return role_[n->id()];
}

Node* singleInputRoot(Node* n) {
  while (n && n->op() != OpKind::Placeholder) {
    if (!isUnshardPreOp(n)) return nullptr;
    n = soleDataInput(n);
  }
  return n;
}

// The FSDP chains of one graph, matched collective by collective (fsdp.h). Every search walks
// single-input chains and is memoized by node id: O(N + E) in all.
class FsdpMatcher {
 public:
  FsdpMatcher(const Graph& g, const PhaseInfo& phases, FsdpAnalysis& a);
  // Matches the chain `n` is the collective of, if any; collectives in program order.
  void visit(Node* n);

 private:
  void matchUnshard(Node* n);
  void collectPost(FsdpUnshardChain& c, int32_t idx);
  void findSavePoints(FsdpUnshardChain& c, int32_t idx);
  void matchGrad(Node* n);
  void matchReplicaGrad(Node* n);
  bool followToOutput(FsdpGradChain& c);
  void collectGradPre(FsdpGradChain& c, Node* n);
  Node* rootOf(Node* x);
  int32_t accumulatedGradOutput(Node* from);
  bool isGradientOutput(int32_t i) const;

  static constexpr uint32_t kUnknown = UINT32_MAX;
  const Graph& g_;
  const PhaseInfo& phases_;
  FsdpAnalysis& a_;
  // Graph-output positions, for gradient chains. 32 bits, like the memos below: these are made
  // on each of the pipeline's analyses.
  NodeMap<int32_t> output_pos_;
  // accumulatedGradOutput's memo: -2 not yet known. Each node is walked once.
  NodeMap<int32_t> accum_out_;
  // rootOf's memo: the root's id + 1, 0 for none, kUnknown before the node is reached. Filled
  // walking back from each all-gather: one memo over the whole walk read the op facts of every
  // node, 40% of them views, where only the chains need them.
  NodeMap<uint32_t> root_id_;
  std::vector<Node*> path_, work_, chain_nodes_;  // scratch, reused
  std::vector<uint8_t> below_local_;
};

FsdpMatcher::FsdpMatcher(const Graph& g, const PhaseInfo& phases, FsdpAnalysis& a)
    : g_(g), phases_(phases), a_(a), output_pos_(g, -1), accum_out_(g, -2), root_id_(g, kUnknown) {
  a_.chain_of_.assign(g.maxId(), -1);
  a_.role_.assign(g.maxId(), CollectiveRole::None);
  Node* out = g.outputNode();
  if (!out || out->numArgs() == 0) return;
  const Arg& list = out->arg(0);
  if (list.isSequence()) {
    for (size_t i = 0; i < list.items().size(); ++i)
      if (Node* v = list.items()[i].node(); v && output_pos_[v] < 0)
        output_pos_[v] = static_cast<int32_t>(i);
  } else if (Node* v = list.node()) {
    output_pos_[v] = 0;
  }
}

void FsdpMatcher::visit(Node* n) {
  // Until a chain claims it. An HSDP all-reduce was claimed by its reduce-scatter already.
  if (a_.role_[n->id()] == CollectiveRole::None) a_.role_[n->id()] = CollectiveRole::Other;
  if (isPlainCollective(n, CollectiveKind::AllGather))
    matchUnshard(n);
  else if (isPlainCollective(n, CollectiveKind::ReduceScatter))
    matchGrad(n);
  else if (isPlainCollective(n, CollectiveKind::AllReduce) &&
           a_.role_[n->id()] == CollectiveRole::Other)
    matchReplicaGrad(n);
}

// The single-input root of `x` (singleInputRoot), memoized on the way.
Node* FsdpMatcher::rootOf(Node* x) {
  Node* r = nullptr;
  path_.clear();
  for (; x; x = soleDataInput(x)) {
    if (const uint32_t known = root_id_[x]; known != kUnknown) {
      r = known ? g_.nodeById(known - 1) : nullptr;
      break;
    }
    path_.push_back(x);
    if (x->op() == OpKind::Placeholder) {
      r = x;
      break;
    }
    if (!isUnshardPreOp(x)) break;
  }
  for (Node* p : path_)
    root_id_[p] = r ? r->id() + 1 : 0;
  return r;
}

void FsdpMatcher::matchUnshard(Node* n) {
  Node* in = n->input(0);
  Node* param = rootOf(in);
  Node* wait = soleWait(n);
  if (!param || param->inputKind() != InputKind::Parameter || !wait) return;
  FsdpUnshardChain c;
  c.param = param;
  c.all_gather = n;
  c.wait = wait;
  c.phase = phases_.of(n);
  for (Node* p = in; p != param; p = soleDataInput(p))
    c.pre.push_back(p);
  std::reverse(c.pre.begin(), c.pre.end());
  const int32_t idx = static_cast<int32_t>(a_.unshard.size());
  for (Node* p : c.pre)
    if (a_.chain_of_[p->id()] < 0) a_.chain_of_[p->id()] = idx;
  a_.chain_of_[n->id()] = idx;
  a_.chain_of_[wait->id()] = idx;
  collectPost(c, idx);
  findSavePoints(c, idx);
  a_.role_[n->id()] = CollectiveRole::FsdpUnshard;
  a_.unshard.push_back(std::move(c));
}

// The wait's view/copy descendants on the same side of the loss. A concat joins the chain once
// all its operands are in it (split -> getitems -> cat), so it is re-checked from each operand;
// cats are small, so this stays linear in practice.
void FsdpMatcher::collectPost(FsdpUnshardChain& c, int32_t idx) {
  work_.assign(1, c.wait);
  while (!work_.empty()) {
    Node* cur = work_.back();
    work_.pop_back();
    for (const Use& use : cur->uses()) {  // a user twice is checked twice: harmless
      Node* u = use.user;
      if (a_.chain_of_[u->id()] >= 0 || !isPure(u) || !sameSide(phases_, u, c.wait)) continue;
      bool joins = false;
      const OpCategory cat = u->info().category;
      if (cat == OpCategory::View || cat == OpCategory::Copy || cat == OpCategory::Getitem) {
        joins = soleDataInput(u) == cur;
      } else if (isConcat(u)) {
        joins = true;
        for (Node* p : u->inputs())
          joins &= a_.chain_of_[p->id()] == idx || isInputFreeFactory(p);
      }
      if (!joins) continue;
      a_.chain_of_[u->id()] = idx;
      c.post.push_back(u);
      work_.push_back(u);
    }
  }
  sortByPosition(c.post);
}

// Save points: non-view chain nodes with no non-view chain node below them. `below_local_[k]`
// says whether a non-view chain node is at or below chain node k; filled in reverse order.
void FsdpMatcher::findSavePoints(FsdpUnshardChain& c, int32_t idx) {
  chain_nodes_.assign(1, c.wait);
  chain_nodes_.insert(chain_nodes_.end(), c.post.begin(), c.post.end());
  below_local_.assign(chain_nodes_.size(), 0);
  for (size_t k = chain_nodes_.size(); k-- > 0;) {
    Node* cn = chain_nodes_[k];
    bool any_below = false;
    for (const Use& use : cn->uses()) {
      Node* u = use.user;
      if (a_.chain_of_[u->id()] != idx) continue;
      auto it = std::lower_bound(chain_nodes_.begin(), chain_nodes_.end(), u,
                                 [](const Node* x, const Node* y) { return x->isBefore(y); });
      if (it != chain_nodes_.end() && *it == u)
        any_below |= below_local_[static_cast<size_t>(it - chain_nodes_.begin())];
    }
    const bool non_view = !isViewLike(cn);
    if (non_view && !any_below) c.save_points.push_back(cn);
    below_local_[k] = non_view || any_below;
  }
  std::reverse(c.save_points.begin(), c.save_points.end());
}

void FsdpMatcher::matchGrad(Node* n) {
  Node* wait = soleWait(n);
  if (!wait) return;
  FsdpGradChain c;
  c.reduce_scatter = n;
  c.wait = wait;
  if (!followToOutput(c)) return;
  const auto& specs = g_.outputSpecs();
  if (c.output_index < specs.size() && specs[c.output_index].kind == OutputKind::Gradient)
    c.param_fqn = specs[c.output_index].fqn;
  collectGradPre(c, n);
  a_.role_[n->id()] = CollectiveRole::FsdpReduceGrad;
  if (c.all_reduce) a_.role_[c.all_reduce->id()] = CollectiveRole::FsdpGradAllReduce;
  a_.grads.push_back(std::move(c));
}

// An all-reduce no reduce-scatter claimed (SimpleFSDP's HSDP all-reduce comes before its
// reduce-scatter, whose wait is then the only use: followToOutput stops there) whose wait leads
// to a gradient output.
void FsdpMatcher::matchReplicaGrad(Node* n) {
  Node* wait = soleWait(n);
  // A gradient is made in backward: a forward all-reduce (TP's, on an activation) that some
  // output happens to read is no gradient reduction.
  if (!wait || !phases_.isBackward(n)) return;
  FsdpGradChain walk;  // followToOutput's state; all_reduce set: no second all-reduce absorbed
  walk.wait = wait;
  walk.all_reduce = n;
  if (!followToOutput(walk) || !isGradientOutput(static_cast<int32_t>(walk.output_index))) return;
  ReplicaGradChain c;
  c.all_reduce = n;
  c.wait = wait;
  c.post = std::move(walk.post);
  c.output_index = walk.output_index;
  const auto& specs = g_.outputSpecs();
  if (c.output_index < specs.size()) c.param_fqn = specs[c.output_index].fqn;
  a_.role_[n->id()] = CollectiveRole::FsdpGradAllReduce;
  a_.replica_grads.push_back(std::move(c));
}

// From the wait along single uses (unary pure ops, an HSDP all-reduce and its wait) to the graph
// output: fills `post` and `output_index`; false when no gradient output is reached.
bool FsdpMatcher::followToOutput(FsdpGradChain& c) {
  Node* cur = c.wait;
  while (cur->uses().size() == 1) {
    Node* u = cur->uses().front().user;
    if (u->op() == OpKind::Output) {
      if (output_pos_[cur] < 0) break;
      c.output_index = static_cast<size_t>(output_pos_[cur]);
      return true;
    }
    if (isPlainCollective(u, CollectiveKind::AllReduce) && u->input(0) == cur && !c.all_reduce) {
      Node* ar_wait = soleWait(u);
      if (!ar_wait) break;
      c.all_reduce = u;
      c.post.push_back(u);
      c.post.push_back(ar_wait);
      cur = ar_wait;
      continue;
    }
    const OpCategory cat = u->info().category;
    const bool unary =
        isPure(u) && u->inputs().size() == 1 &&
        (cat == OpCategory::View || cat == OpCategory::Copy || cat == OpCategory::Elementwise);
    if (!unary) break;
    c.post.push_back(u);
    cur = u;
  }
  // A parameter read k times (a tied embedding, ALBERT's shared layer, T5's shared embedding)
  // has k reduce-scatters whose waits autograd sums into its gradient. Each is still that
  // gradient's reduction: follow the sum to the output. The adds are not `post` (they read other
  // chains' waits, so they cannot move with this one).
  const int32_t out = accumulatedGradOutput(cur);
  if (out < 0) return false;
  c.output_index = static_cast<size_t>(out);
  return true;
}

// The gradient's casts and views before the reduce-scatter, and an HSDP all-reduce that comes
// first: torchtitan's SimpleFSDP reduces an HSDP gradient across replicas before it scatters it
// within the replica (all-reduce -> wait -> [views] -> reduce-scatter); FSDP2 does the reverse
// (the all-reduce in `post`).
void FsdpMatcher::collectGradPre(FsdpGradChain& c, Node* n) {
  Node* p = n->input(0);
  for (; p && p->uses().size() == 1 && isPure(p) && p->inputs().size() == 1 &&
         (p->info().category == OpCategory::Copy || p->info().category == OpCategory::View);
       p = p->input(0))
    c.pre.push_back(p);
  if (p && !c.all_reduce && p->isWait() && p->uses().size() == 1) {
    Node* ar = p->input(0);
    if (ar && isPlainCollective(ar, CollectiveKind::AllReduce) && soleWait(ar) == p) {
      c.all_reduce = ar;
      c.pre.push_back(p);
      c.pre.push_back(ar);
    }
  }
  std::reverse(c.pre.begin(), c.pre.end());
}

bool FsdpMatcher::isGradientOutput(int32_t i) const {
  const auto& specs = g_.outputSpecs();
  return i >= 0 && (specs.empty() || (static_cast<size_t>(i) < specs.size() &&
                                      specs[static_cast<size_t>(i)].kind == OutputKind::Gradient));
}

// From `from` (a wait or its unary post), along single uses of pure adds of two tensors (and
// unary View/Copy ops between them) to a gradient output: its index, else -1.
int32_t FsdpMatcher::accumulatedGradOutput(Node* from) {
  path_.clear();
  int32_t result = -1;
  bool through_add = false;
  for (Node* x = from;;) {
    if (accum_out_[x] != -2) {
      result = accum_out_[x];
      break;
    }
    path_.push_back(x);
    if (x->uses().size() != 1) break;
    Node* u = x->uses().front().user;
    if (u->op() == OpKind::Output) {
      if (through_add && isGradientOutput(output_pos_[x])) result = output_pos_[x];
      break;
    }
    // An in-place add (a chunked loss accumulates its chunks' gradients so: alias(first), then
    // add_(acc, next) per chunk) counts too: `x` is its only reader, so the write is private.
    const bool add = (u->is("aten.add.Tensor") || u->is("aten.add_.Tensor")) && u->numArgs() == 2 &&
                     u->inputs().size() == 2 && u->kwargs().empty();
    if (!isPure(u) && !add) break;
    const OpCategory cat = u->info().category;
    const bool unary =
        u->inputs().size() == 1 && (cat == OpCategory::View || cat == OpCategory::Copy);
    if (!add && !unary) break;
    through_add |= add;
    x = u;
  }
  // Only a result reached through an add is memoized positively; a plain chain walked from
  // `from` has no add and returns -1, which is also right for every node on it.
  for (Node* x : path_)
    accum_out_[x] = result;
  return result;
}

FsdpAnalysis analyzeFsdp(const Graph& g, const PhaseInfo& phases) {
  FsdpAnalysis a;
  const std::vector<Node*> collectives = g.collectives();  // program order
  {
    FsdpMatcher matcher(g, phases, a);
    forEachPrefetched(collectives, [&](Node* n, size_t) { matcher.visit(n); });
  }
  // Only collectives get a role, so the ones left Other are read off the list of them (in
  // program order, with their final roles) instead of a second walk over every node.
  for (Node* n : collectives)
    if (a.role_[n->id()] == CollectiveRole::Other) a.other_collectives.push_back(n);
  return a;
}

namespace {
void appendIds(std::string& s, const std::vector<Node*>& nodes) {
  s += '[';
  for (const Node* n : nodes) {
    s += std::to_string(n->id());
    s += ',';
  }
  s += ']';
}
void appendId(std::string& s, const Node* n, char sep) {
  if (n)
    s += std::to_string(n->id());
  else
    s += '-';
  s += sep;
}
}  // namespace

std::string AnalysisTraits<FsdpAnalysis>::fingerprint(const Graph&, const FsdpAnalysis& a) {
  std::string s;
  for (const FsdpUnshardChain& c : a.unshard) {
    s += 'u';
    appendId(s, c.param, '/');
    appendIds(s, c.pre);
    appendId(s, c.all_gather, '/');
    appendId(s, c.wait, '/');
    s += phaseName(c.phase);
    appendIds(s, c.post);
    appendIds(s, c.save_points);
    s += ';';
  }
  for (const FsdpGradChain& c : a.grads) {
    s += 'g';
    appendIds(s, c.pre);
    appendId(s, c.reduce_scatter, '/');
    appendId(s, c.wait, '/');
    appendId(s, c.all_reduce, '/');
    s += std::to_string(c.output_index);
    s += '/';
    s += c.param_fqn;
    appendIds(s, c.post);
    s += ';';
  }
  for (const ReplicaGradChain& c : a.replica_grads) {
    s += 'r';
    appendId(s, c.all_reduce, '/');
    appendId(s, c.wait, '/');
    s += std::to_string(c.output_index);
    s += '/';
    s += c.param_fqn;
    appendIds(s, c.post);
    s += ';';
  }
  s += 'o';
  appendIds(s, a.other_collectives);
  return s;
}

FsdpAnalysis AnalysisTraits<FsdpAnalysis>::follow(const FsdpAnalysis& a,
                                                  const NodeTranslation& to) {
  FsdpAnalysis b = a;
  for (FsdpUnshardChain& c : b.unshard) {
    c.param = to(c.param);
    to.all(c.pre);
    c.all_gather = to(c.all_gather);
    c.wait = to(c.wait);
    to.all(c.post);
    to.all(c.save_points);
  }
  for (FsdpGradChain& c : b.grads) {
    to.all(c.pre);
    c.reduce_scatter = to(c.reduce_scatter);
    c.wait = to(c.wait);
    to.all(c.post);
    c.all_reduce = to(c.all_reduce);
  }
  for (ReplicaGradChain& c : b.replica_grads) {
    c.all_reduce = to(c.all_reduce);
    c.wait = to(c.wait);
    to.all(c.post);
  }
  to.all(b.other_collectives);
  return b;
}

bool hasFsdpBucketMeta(const Node& n) {
  return n.meta().attrs.has(attr::fsdpBucket());
}

}  // namespace jfx
