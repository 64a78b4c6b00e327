#include "passes/fsdp/remat.h"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ir/error.h"
#include "ir/mutation.h"
#include "ir/walk.h"
#include "passes/analysis/blocks.h"
#include "passes/analysis/mutation.h"
#include "passes/analysis/phase.h"

namespace jfx {
namespace {

struct RematStatistics : StatisticSet {
  Statistic nodes_cloned{this, "nodes-cloned", "forward nodes cloned into backward"};
  Statistic uses_rewired{this, "uses-rewired", "backward uses pointed at a clone"};
  Statistic originals_erased{this, "originals-erased",
                             "forward originals erased once nothing read them"};
  Statistic sac_boundary_saved{
      this, "sac-boundary-saved",
      "tagged nodes kept saved: a later activation-checkpoint region reads them"};
  Statistic in_place_saved{this, "in-place-saved",
                           "tagged nodes kept saved: they write an operand in place"};
  Statistic buffer_read_saved{this, "buffer-read-saved",
                              "tagged nodes kept saved: they read a buffer the graph writes"};
  Statistic written_storage_saved{
      this, "written-storage-saved",
      "tagged nodes kept saved: they make or read storage some op writes in place"};
};
const RematStatistics& rematStats() {
  static const RematStatistics s;
  return s;
}

// Whether `n` writes in place a value a random op drew (through views and in-place ops).
bool writesRandomDraw(const Node& n) {
  for (const Node* m : mutatedOperands(n))
    for (size_t hops = 0; m && hops < 1'000'000; ++hops) {
      if (m->isRandom()) return true;
      if (m->op() != OpKind::CallFunction || m->info().alias == AliasKind::None) break;
      m = m->input(0);
    }
  return false;
}

bool isRecomputeTag(Recompute r) {
  return r == Recompute::MustRecompute || r == Recompute::PreferRecompute;
}

// Visits the recomputable closure of `start` in post order (producers before users), each node
// at most once overall thanks to `done`. Iterative: SAC regions can make chains thousands deep.
// `stack` is scratch, reused from call to call (one call per backward operand).
template <typename Visit>
void postOrder(Node* start, const NodeMap<uint8_t>& recomputable, NodeMap<uint8_t>& done,
               std::vector<std::pair<Node*, bool>>& stack, Visit&& visit) {
  stack.assign(1, {start, false});
  while (!stack.empty()) {
    auto [n, expanded] = stack.back();
    if (done[n]) {
      stack.pop_back();
      continue;
    }
    if (!expanded) {
      stack.back().second = true;
      const auto& ins = n->inputs();
      for (size_t k = ins.size(); k-- > 0;)
        if (recomputable[ins[k]] && !done[ins[k]]) stack.push_back({ins[k], false});
      continue;
    }
    stack.pop_back();
    done[n] = 1;
    visit(n);
  }
}

// The pass's state: what the walk finds, what stays saved, what is cloned where.
class Remat {
 public:
  Remat(Graph& g, PassContext& ctx)
      : g_(g),
        ctx_(ctx),
        stats_(rematStats()),
        phases_(ctx.analyses.get<PhaseInfo>(g)),
        // Cached analyses this pass may keep (read before any edit: afterwards a request
        // recomputes).
        blocks_(ctx.analyses.isCached(AnalysisTraits<BlockAnalysis>::name)
                    ? &ctx.analyses.get<BlockAnalysis>(g)
                    : nullptr),
        written_(ctx.analyses.get<WrittenStorage>(g)),
        tagged_(g, 0),
        recomputable_(g, 0) {}
  bool run();

 private:
  void findTagged(Node* n);
  void keepWritersSaved();
  void dryRun();
  void cloneChains();
  bool eraseOriginals();

  Graph& g_;
  PassContext& ctx_;
  const RematStatistics& stats_;
  const PhaseInfo& phases_;
  const BlockAnalysis* blocks_;
  const WrittenStorage& written_;
  NodeMap<uint8_t> tagged_, recomputable_;
  std::vector<Node*> tagged_nodes_;  // program order
  std::vector<Node*> backward_;
  std::vector<std::pair<Node*, uint32_t>> sites_;  // (backward node, operand number)
  std::vector<std::pair<Node*, bool>> stack_;      // postOrder's scratch
  std::vector<Node*> originals_;
};

// One walk of the program: tagged forward nodes, where untagged getitems inherit from their
// producer (program order makes the producer's answer available first); the SAC boundary,
// checked from the later region's side: a value flowing into a later checkpoint region is that
// region's input, which PyTorch saves rather than recomputing across regions; and the backward
// nodes.
void Remat::findTagged(Node* n) {
  if (n->op() != OpKind::CallFunction) return;
  if (!phases_.isForwardOrLoss(n)) {
    if (phases_.isBackward(n)) backward_.push_back(n);
    return;
  }
  const Recompute r = n->meta().recompute;
  if (isRecomputeTag(r)) {
    tagged_[n] = 1;
  } else if (r == Recompute::Unset && n->info().category == OpCategory::Getitem && n->input(0)) {
    tagged_[n] = tagged_[n->input(0)];
  }
  if (!tagged_[n]) return;
  recomputable_[n] = 1;
  tagged_nodes_.push_back(n);
  const std::optional<int64_t> region = n->meta().ac_graph_id;
  if (!region) return;
  for (Node* p : n->inputs())
    if (recomputable_[p] && p->meta().ac_graph_id && *region > *p->meta().ac_graph_id) {
      recomputable_[p] = 0;
      ctx_.stat(stats_.sac_boundary_saved);
    }
}

// A node that writes an operand in place (BatchNorm's running statistics) runs exactly once: a
// backward copy would apply the update twice. One that reads a buffer the graph writes would
// read it after the write when copied into backward. Both stay saved; their pure users may
// still be recomputed from them. A random in-place op (bernoulli_ in a traced dropout), and an
// in-place op on a random draw (div_ scaling the dropout mask), are left to the dry run, which
// refuses them by name: tagging a random draw for recompute is an error, not a save. Nor is a
// pure node recomputed when it makes or reads storage some op writes in place: its copy would
// see that storage at another point of the writes. A traced dropout under SAC makes the mask
// with empty_like, fills it with bernoulli_ and scales it with div_, and backward reads the mask
// through an alias of the empty_like taken before either write; recomputed, the alias read a
// fresh, never written empty_like and the gradients were garbage. A graph that writes nothing
// in place writes no buffer: its walk is skipped (it reads every node's kwargs).
void Remat::keepWritersSaved() {
  const BufferMutations bufs = written_.any() ? analyzeBufferMutations(g_) : BufferMutations{};
  for (Node* n : tagged_nodes_) {
    if (!recomputable_[n]) continue;
    const bool writer = !mutatedOperands(*n).empty();
    if (writer && !n->isRandom() && !writesRandomDraw(*n)) {
      recomputable_[n] = 0;
      ctx_.stat(stats_.in_place_saved);
    } else if (bufs.readsWrittenBuffer(n)) {
      recomputable_[n] = 0;
      ctx_.stat(stats_.buffer_read_saved);
    } else if (!writer && !n->isRandom() && written_.touches(n)) {
      recomputable_[n] = 0;
      ctx_.stat(stats_.written_storage_saved);
    }
  }
}

// Dry run: finds everything to clone and refuses random ops before touching the graph. It also
// lists the backward operands to rewire, so the rewrite visits those alone: a second walk of
// every backward operand missed the cache on each (its producer's id) on large graphs.
void Remat::dryRun() {
  NodeMap<uint8_t> needed(g_, 0);
  for (Node* b : backward_) {
    for (uint32_t k = 0; k < b->inputs().size(); ++k) {
      Node* p = b->input(k);
      if (!recomputable_[p]) continue;
      sites_.emplace_back(b, k);
      postOrder(p, recomputable_, needed, stack_, [&](Node* x) {
        auto refuse = [&](std::string_view why) {
          ctx_.emitError(x) << "cannot recompute " << quoteForMessage(x->name()) << " ("
                            << x->target().str() << "): " << why << " (needed by backward node "
                            << quoteForMessage(b->name())
                            << "); tag it MUST_SAVE or drop its recompute tag";
        };
        // In-place random ops (bernoulli_ in a traced dropout) included: the op-info table
        // marks every Tag.nondeterministic_seeded overload.
        if (x->isRandom())
          refuse("it draws random numbers, so a backward copy would differ from the forward value");
        // Only in-place ops on a random draw get here (the others stay saved, above).
        if (!mutatedOperands(*x).empty())
          refuse(
              "it writes its argument in place, so a backward copy would write it a second time");
      });
    }
  }
}

// Clones each site's chain right before its backward node and points the site at the clone.
// Each site's operand is still its original here: only its own rewiring replaces it.
void Remat::cloneChains() {
  NodeMap<Node*> clone_of(g_, nullptr);
  NodeMap<uint8_t> cloned(g_, 0);
  std::string clone_name;
  auto remap = [&](Node* ref) -> Node* { return clone_of.get(ref); };
  for (const auto& [b, k] : sites_) {
    Node* p = b->input(k);
    Node* before = b;  // a plain variable: the clone lambda captures it
    postOrder(p, recomputable_, cloned, stack_, [&](Node* x) {
      clone_name.assign(x->name());
      clone_name += "_recomputed";
      Node* c = g_.cloneBefore(x, before, remap, clone_name);
      c->meta().phase = Phase::Backward;
      clone_of[x] = c;
      originals_.push_back(x);
      ctx_.stat(stats_.nodes_cloned);
    });
    g_.replaceInput(b, k, clone_of[p]);
    ctx_.stat(stats_.uses_rewired);
  }
}

// Erases the originals nothing reads any more, users before producers (sorted on positions read
// once). Returns whether the block analysis still holds: no erased
// original was a block's first user.
bool Remat::eraseOriginals() {
  std::vector<std::pair<uint64_t, Node*>> keyed;
  keyed.reserve(originals_.size());
  for (Node* x : originals_)
    keyed.emplace_back(x->position(), x);
  std::sort(keyed.begin(), keyed.end());
  const std::vector<uint32_t> first_users =
      blocks_ ? blocks_->firstUserIds() : std::vector<uint32_t>();
  bool blocks_hold = blocks_ != nullptr;
  for (size_t i = keyed.size(); i-- > 0;) {
    Node* x = keyed[i].second;
    if (x->hasUses()) continue;
    if (std::binary_search(first_users.begin(), first_users.end(), x->id())) blocks_hold = false;
    g_.erase(x);
    ctx_.stat(stats_.originals_erased);
  }
  return blocks_hold;
}

bool Remat::run() {
  sweep(g_, visitor([&](Node* n, uint32_t) { findTagged(n); }));
  keepWritersSaved();
  dryRun();
  cloneChains();
  const bool blocks_hold = eraseOriginals();
  // The block analysis still holds: forward nodes keep their operands, a clone sits in backward
  // after its original, and an erased original was read by nothing, so no walk of the analysis
  // reaches it; unless it was a block's first user. Written storage holds when nothing was
  // written: clones of nodes that write nothing write nothing.
  // The phases hold too (test_analysis_manager.cc checks them on every fixture, phases unset):
  // a clone answers with the Backward its meta says (PhaseInfo::of), and no surviving node
  // changes phase. Only backward nodes' operands changed, so the loss's ancestors are the same
  // nodes; a node a clone now reads fed the original, which was forward only by being a loss
  // ancestor (then so is the node) or by its own meta (then the node already fed backward
  // through it); and an erased original had no user left to give anything a phase.
  if (blocks_hold) ctx_.preserve<BlockAnalysis>();
  if (!written_.any()) ctx_.preserve<WrittenStorage>();
  ctx_.preserve<PhaseInfo>();
  return !originals_.empty();
}

}  // namespace

std::span<const Statistic* const> RematPass::statistics() const {
  return rematStats().all();
}

bool RematPass::run(Graph& g, PassContext& ctx) {
  return Remat(g, ctx).run();
}

}  // namespace jfx
