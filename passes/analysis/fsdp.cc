#include "passes/analysis/fsdp.h"

#include <algorithm>

#include "ir/attributes.h"

namespace jfx {
namespace {

// A node with no node operands that makes a fresh tensor (zeros, full, empty): padding material,
// not a second data input.
bool isInputFreeFactory(const Node* n) {
  return n->op() == OpKind::CallFunction && n->info().category == OpCategory::Factory &&
         !n->isRandom() && n->inputs().empty();
}

// The one distinct node operand of `n` other than input-free factories; nullptr if none or several.
Node* soleDataInput(const Node* n) {
  Node* sole = nullptr;
  for (Node* p : n->inputs()) {
    if (p == sole || isInputFreeFactory(p)) continue;
    if (sole) return nullptr;
    sole = p;
  }
  return sole;
}

bool isPure(const Node* n) {
  return n->isPure();
}

// Ops that may sit between a parameter and its all-gather: casts, views, padding.
bool isUnshardPreOp(const Node* n) {
  if (!isPure(n)) return false;
  switch (n->info().category) {
    case OpCategory::View:
    case OpCategory::Copy:
    case OpCategory::Index:
    case OpCategory::Getitem:
      return soleDataInput(n) != nullptr;
    default:
      return false;
  }
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

FsdpAnalysis analyzeFsdp(const Graph& g, const PhaseInfo& phases) {
  FsdpAnalysis a;
  const size_t n_ids = g.maxId();
  a.chain_of_.assign(n_ids, -1);
  a.role_.assign(n_ids, CollectiveRole::None);

  // Graph-output positions, for gradient chains. 32 bits, like the memo below: these are
  // n_ids-long and freshly zeroed on each of the pipeline's analyses (24 MB a run at 10^6 nodes
  // as int64).
  std::vector<int32_t> output_pos(n_ids, -1);
  if (Node* out = g.outputNode(); out && out->numArgs() > 0) {
    const Arg& list = out->arg(0);
    if (list.isSequence()) {
      for (size_t i = 0; i < list.items().size(); ++i)
        if (Node* v = list.items()[i].node(); v && output_pos[v->id()] < 0)
          output_pos[v->id()] = static_cast<int32_t>(i);
    } else if (Node* v = list.node()) {
      output_pos[v->id()] = 0;
    }
  }

  // Memo of accumulatedGradOutput, by node id: -2 not yet known. Each node is walked once.
  std::vector<int32_t> accum_out(n_ids, -2);
  auto accumulatedGradOutput = [&](Node* from) -> int64_t {
    // From `from` (a wait or its unary post), along single uses of pure adds of two tensors
    // (and unary View/Copy ops between them) to a gradient output: its index, else -1.
    std::vector<Node*> path;
    int32_t result = -1;
    bool through_add = false;
    for (Node* x = from;;) {
      if (accum_out[x->id()] != -2) {
        result = accum_out[x->id()];
        break;
      }
      path.push_back(x);
      if (x->uses().size() != 1) break;
      Node* u = x->uses().front().user;
      if (u->op() == OpKind::Output) {
        const int32_t i = output_pos[x->id()];
        const auto& specs = g.outputSpecs();
        const bool grad = i >= 0 && (specs.empty() ||
                                     (static_cast<size_t>(i) < specs.size() &&
                                      specs[static_cast<size_t>(i)].kind == OutputKind::Gradient));
        if (through_add && grad) result = i;
        break;
      }
      if (!isPure(u)) break;
      const bool add = u->is("aten.add.Tensor") && u->numArgs() == 2 && u->inputs().size() == 2 &&
                       u->kwargs().empty();
      const OpCategory cat = u->info().category;
      const bool unary =
          u->inputs().size() == 1 && (cat == OpCategory::View || cat == OpCategory::Copy);
      if (!add && !unary) break;
      through_add |= add;
      x = u;
    }
    // Only a result reached through an add is memoized positively; a plain chain walked from
    // `from` has no add and returns -1, which is also right for every node on it.
    for (Node* x : path)
      accum_out[x->id()] = result;
    return result;
  };

  // Single-input roots (singleInputRoot), found walking back from each all-gather and memoized
  // on the way: one memo over the whole walk read the op facts of every node, 40% of them views,
  // where only the chains need them.
  // root_id[id]: the root's id + 1, 0 for none, kUnknown before the node is reached.
  constexpr uint32_t kUnknown = UINT32_MAX;
  std::vector<uint32_t> root_id(n_ids, kUnknown);
  std::vector<Node*> root_path;
  auto rootOf = [&](Node* x) -> Node* {
    Node* r = nullptr;
    root_path.clear();
    for (; x; x = soleDataInput(x)) {
      if (const uint32_t known = root_id[x->id()]; known != kUnknown) {
        r = known ? g.nodeById(known - 1) : nullptr;
        break;
      }
      root_path.push_back(x);
      if (x->op() == OpKind::Placeholder) {
        r = x;
        break;
      }
      if (!isUnshardPreOp(x)) break;
    }
    for (Node* p : root_path)
      root_id[p->id()] = r ? r->id() + 1 : 0;
    return r;
  };
  const std::vector<Node*> collectives = g.collectives();  // program order
  std::vector<Node*> work, chain_nodes;                    // per chain, reused
  std::vector<uint8_t> below_local;
  for (size_t ci = 0; ci < collectives.size(); ++ci) {
    Node* n = collectives[ci];
    if (ci + 8 < collectives.size()) collectives[ci + 8]->prefetchHead();
    if (ci + 4 < collectives.size()) collectives[ci + 4]->prefetchNeighbourHeads();
    // Until a chain claims it. An HSDP all-reduce was claimed by its reduce-scatter already.
    if (a.role_[n->id()] == CollectiveRole::None) a.role_[n->id()] = CollectiveRole::Other;

    if (isPlainCollective(n, CollectiveKind::AllGather)) {
      Node* in = n->input(0);
      Node* param = rootOf(in);
      Node* wait = soleWait(n);
      if (!param || param->inputKind() != InputKind::Parameter || !wait) continue;
      FsdpUnshardChain c;
      c.param = param;
      c.all_gather = n;
      c.wait = wait;
      c.phase = phases.of(n);
      for (Node* p = in; p != param; p = soleDataInput(p))
        c.pre.push_back(p);
      std::reverse(c.pre.begin(), c.pre.end());
      const int32_t idx = static_cast<int32_t>(a.unshard.size());
      for (Node* p : c.pre)
        if (a.chain_of_[p->id()] < 0) a.chain_of_[p->id()] = idx;
      a.chain_of_[n->id()] = idx;
      a.chain_of_[wait->id()] = idx;
      // The wait's view/copy descendants on the same side of the loss. A concat joins the chain
      // once all its operands are in it (split -> getitems -> cat), so it is re-checked from
      // each operand; cats are small, so this stays linear in practice.
      work.assign(1, wait);
      while (!work.empty()) {
        Node* cur = work.back();
        work.pop_back();
        for (const Use& use : cur->uses()) {  // a user twice is checked twice: harmless
          Node* u = use.user;
          if (a.chain_of_[u->id()] >= 0 || !isPure(u) || !sameSide(phases, u, wait)) continue;
          bool joins = false;
          OpCategory cat = u->info().category;
          if (cat == OpCategory::View || cat == OpCategory::Copy || cat == OpCategory::Getitem) {
            joins = soleDataInput(u) == cur;
          } else if (isConcat(u)) {
            joins = true;
            for (Node* p : u->inputs())
              joins &= a.chain_of_[p->id()] == idx || isInputFreeFactory(p);
          }
          if (!joins) continue;
          a.chain_of_[u->id()] = idx;
          c.post.push_back(u);
          work.push_back(u);
        }
      }
      sortByPosition(c.post);
      // Save points: non-view chain nodes with no non-view chain node below them. `below[id]`
      // says whether a non-view chain node is at or below a node; filled in reverse order.
      chain_nodes.assign(1, wait);
      chain_nodes.insert(chain_nodes.end(), c.post.begin(), c.post.end());
      below_local.assign(chain_nodes.size(), 0);
      for (size_t k = chain_nodes.size(); k-- > 0;) {
        Node* cn = chain_nodes[k];
        bool any_below = false;
        for (const Use& use : cn->uses()) {
          Node* u = use.user;
          if (a.chain_of_[u->id()] != idx) continue;
          auto it = std::lower_bound(chain_nodes.begin(), chain_nodes.end(), u,
                                     [](const Node* x, const Node* y) { return x->isBefore(y); });
          if (it != chain_nodes.end() && *it == u)
            any_below |= below_local[it - chain_nodes.begin()];
        }
        const bool non_view = !isViewLike(cn);
        if (non_view && !any_below) c.save_points.push_back(cn);
        below_local[k] = non_view || any_below;
      }
      std::reverse(c.save_points.begin(), c.save_points.end());
      a.role_[n->id()] = CollectiveRole::FsdpUnshard;
      a.unshard.push_back(std::move(c));
      continue;
    }

    if (isPlainCollective(n, CollectiveKind::ReduceScatter)) {
      Node* wait = soleWait(n);
      if (!wait) continue;
      FsdpGradChain c;
      c.reduce_scatter = n;
      c.wait = wait;
      Node* cur = wait;
      bool reached_output = false;
      while (cur->uses().size() == 1) {
        Node* u = cur->uses().front().user;
        if (u->op() == OpKind::Output) {
          reached_output = output_pos[cur->id()] >= 0;
          break;
        }
        if (isPlainCollective(u, CollectiveKind::AllReduce) && u->input(0) == cur &&
            !c.all_reduce) {
          Node* ar_wait = soleWait(u);
          if (!ar_wait) break;
          c.all_reduce = u;
          c.post.push_back(u);
          c.post.push_back(ar_wait);
          cur = ar_wait;
          continue;
        }
        OpCategory cat = u->info().category;
        bool unary =
            isPure(u) && u->inputs().size() == 1 &&
            (cat == OpCategory::View || cat == OpCategory::Copy || cat == OpCategory::Elementwise);
        if (!unary) break;
        c.post.push_back(u);
        cur = u;
      }
      // A parameter read k times (a tied embedding, ALBERT's shared layer, T5's shared
      // embedding) has k reduce-scatters whose waits autograd sums into its gradient. Each is
      // still that gradient's reduction: follow the sum to the output. The adds are not `post`
      // (they read other chains' waits, so they cannot move with this one).
      if (!reached_output) {
        const int64_t out = accumulatedGradOutput(cur);
        if (out < 0) continue;
        c.output_index = static_cast<size_t>(out);
      } else {
        c.output_index = static_cast<size_t>(output_pos[cur->id()]);
      }
      const auto& specs = g.outputSpecs();
      if (c.output_index < specs.size() && specs[c.output_index].kind == OutputKind::Gradient)
        c.param_fqn = specs[c.output_index].fqn;
      Node* p = n->input(0);
      for (; p && p->uses().size() == 1 && isPure(p) && p->inputs().size() == 1 &&
             (p->info().category == OpCategory::Copy || p->info().category == OpCategory::View);
           p = p->input(0))
        c.pre.push_back(p);
      // torchtitan's SimpleFSDP reduces an HSDP gradient across replicas before it scatters it
      // within the replica (all-reduce -> wait -> [views] -> reduce-scatter); FSDP2 does the
      // reverse (the all-reduce in `post`, above).
      if (p && !c.all_reduce && p->isWait() && p->uses().size() == 1) {
        Node* ar = p->input(0);
        if (ar && isPlainCollective(ar, CollectiveKind::AllReduce) && soleWait(ar) == p) {
          c.all_reduce = ar;
          c.pre.push_back(p);
          c.pre.push_back(ar);
        }
      }
      std::reverse(c.pre.begin(), c.pre.end());
      a.role_[n->id()] = CollectiveRole::FsdpReduceGrad;
      if (c.all_reduce) a.role_[c.all_reduce->id()] = CollectiveRole::FsdpGradAllReduce;
      a.grads.push_back(std::move(c));
    }
  }
  // Only collectives get a role, so the ones left Other are read off the sweep's list of them (in
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
  s += 'o';
  appendIds(s, a.other_collectives);
  return s;
}

bool hasFsdpBucketMeta(const Node& n) {
  return n.meta().attrs.has(attr::fsdpBucket());
}

}  // namespace jfx
