#include "passes/fsdp/remat.h"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ir/error.h"
#include "ir/mutation.h"
#include "passes/analysis/blocks.h"
#include "passes/analysis/mutation.h"
#include "passes/analysis/phase.h"

namespace jfx {
namespace {

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
void postOrder(Node* start, const std::vector<uint8_t>& recomputable, std::vector<uint8_t>& done,
               std::vector<std::pair<Node*, bool>>& stack, Visit&& visit) {
  stack.assign(1, {start, false});
  while (!stack.empty()) {
    auto [n, expanded] = stack.back();
    if (done[n->id()]) {
      stack.pop_back();
      continue;
    }
    if (!expanded) {
      stack.back().second = true;
      const auto& ins = n->inputs();
      for (size_t k = ins.size(); k-- > 0;)
        if (recomputable[ins[k]->id()] && !done[ins[k]->id()]) stack.push_back({ins[k], false});
      continue;
    }
    stack.pop_back();
    done[n->id()] = 1;
    visit(n);
  }
}

}  // namespace

namespace {

constexpr StatisticDecl kRematStatistics[] = {
    {"nodes-cloned", "forward nodes cloned into backward"},
    {"uses-rewired", "backward uses pointed at a clone"},
    {"originals-erased", "forward originals erased once nothing read them"},
    {"sac-boundary-saved",
     "tagged nodes kept saved: a later activation-checkpoint region reads them"},
    {"in-place-saved", "tagged nodes kept saved: they write an operand in place"},
    {"buffer-read-saved", "tagged nodes kept saved: they read a buffer the graph writes"},
    {"written-storage-saved",
     "tagged nodes kept saved: they make or read storage some op writes in place"},
};

}  // namespace

std::span<const OptionDecl> RematPass::options() const {
  return {};
}
std::span<const StatisticDecl> RematPass::statistics() const {
  return kRematStatistics;
}

bool RematPass::run(Graph& g, PassContext& ctx) {
  const PhaseInfo& phases = ctx.analyses.get<PhaseInfo>(g);
  const size_t n_ids = g.maxId();
  // Cached analyses this pass may keep (read before any edit: afterwards a request recomputes).
  const BlockAnalysis* blocks = ctx.analyses.isCached(AnalysisTraits<BlockAnalysis>::name)
                                    ? &ctx.analyses.get<BlockAnalysis>(g)
                                    : nullptr;
  const WrittenStorage& written = ctx.analyses.get<WrittenStorage>(g);
  const bool writes = written.any();

  // One walk of the program (at 10^6 nodes each walk costs a cache miss per node): tagged
  // forward nodes, where untagged getitems inherit from their producer (program order makes the
  // producer's answer available first); the SAC boundary, checked from the later region's side:
  // a value flowing into a later checkpoint region is that region's input, which PyTorch saves
  // rather than recomputing across regions; and the backward nodes.
  std::vector<uint8_t> tagged(n_ids, 0);
  std::vector<uint8_t> recomputable(n_ids, 0);
  std::vector<Node*> tagged_nodes;  // program order
  std::vector<Node*> backward;
  for (Node* n = g.first(); n; n = n->next()) {
    if (n->op() != OpKind::CallFunction) continue;
    if (!phases.isForwardOrLoss(n)) {
      if (phases.isBackward(n)) backward.push_back(n);
      continue;
    }
    Recompute r = n->meta().recompute;
    if (isRecomputeTag(r)) {
      tagged[n->id()] = 1;
    } else if (r == Recompute::Unset && n->info().category == OpCategory::Getitem && n->input(0)) {
      tagged[n->id()] = tagged[n->input(0)->id()];
    }
    if (!tagged[n->id()]) continue;
    recomputable[n->id()] = 1;
    tagged_nodes.push_back(n);
    const std::optional<int64_t> region = n->meta().ac_graph_id;
    if (!region) continue;
    for (Node* p : n->inputs())
      if (recomputable[p->id()] && p->meta().ac_graph_id && *region > *p->meta().ac_graph_id) {
        recomputable[p->id()] = 0;
        ctx.stat("sac-boundary-saved");
      }
  }

  // A node that writes an operand in place (BatchNorm's running statistics) runs exactly once: a
  // backward copy would apply the update twice. One that reads a buffer the graph writes would
  // read it after the write when copied into backward. Both stay saved; their pure users may
  // still be recomputed from them. A random in-place op (bernoulli_ in a traced dropout), and an
  // in-place op on a random draw (div_ scaling the dropout mask), are left to the dry run below,
  // which refuses them by name: tagging a random draw for recompute is an error, not a save.
  // Nor is a pure node recomputed when it makes or reads storage some op writes in place: its
  // copy would see that storage at another point of the writes. A traced dropout under SAC makes
  // the mask with empty_like, fills it with bernoulli_ and scales it with div_, and backward reads
  // the mask through an alias of the empty_like taken before either write; recomputed, the alias
  // read a fresh, never written empty_like and the gradients were garbage.
  // A graph that writes nothing in place writes no buffer: its walk is skipped (it read every
  // node's kwargs, about 1% of `opt` at 10^6 nodes).
  const BufferMutations bufs = writes ? analyzeBufferMutations(g) : BufferMutations{};
  for (Node* n : tagged_nodes) {
    if (!recomputable[n->id()]) continue;
    const bool writer = !mutatedOperands(*n).empty();
    if (writer && !n->isRandom() && !writesRandomDraw(*n)) {
      recomputable[n->id()] = 0;
      ctx.stat("in-place-saved");
    } else if (bufs.readsWrittenBuffer(n)) {
      recomputable[n->id()] = 0;
      ctx.stat("buffer-read-saved");
    } else if (!writer && !n->isRandom() && written.touches(n)) {
      recomputable[n->id()] = 0;
      ctx.stat("written-storage-saved");
    }
  }

  // Dry run: find everything to clone and reject random ops before touching the graph. It also
  // lists the backward operands to rewire, so the rewrite below visits those alone: a second
  // walk of every backward operand missed the cache on each (its producer's id) at 10^6 nodes.
  std::vector<uint8_t> needed(n_ids, 0);
  std::vector<std::pair<Node*, bool>> stack;
  std::vector<std::pair<Node*, uint32_t>> sites;  // (backward node, operand number)
  for (Node* b : backward) {
    for (uint32_t k = 0; k < b->inputs().size(); ++k) {
      Node* p = b->input(k);
      if (!recomputable[p->id()]) continue;
      sites.emplace_back(b, k);
      postOrder(p, recomputable, needed, stack, [&](Node* x) {
        auto refuse = [&](std::string_view why) {
          throw JfxError(SourceLocation::atNode(std::string(x->name())),
                         "cannot recompute " + quoteForMessage(x->name()) + " (" +
                             std::string(x->target().str()) + "): " + std::string(why) +
                             " (needed by backward node " + quoteForMessage(b->name()) +
                             "); tag it MUST_SAVE or drop its recompute tag");
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

  std::vector<Node*> clone_of(n_ids, nullptr);
  std::vector<uint8_t> cloned(n_ids, 0);
  std::vector<Node*> originals;
  std::string clone_name;
  auto remap = [&](Node* ref) -> Node* {
    return ref->id() < n_ids ? clone_of[ref->id()] : nullptr;
  };
  // Each site's operand is still its original here: only its own rewiring replaces it.
  for (const auto& site : sites) {
    Node* b = site.first;  // a plain variable: the clone lambda captures it
    const uint32_t k = site.second;
    Node* p = b->input(k);
    postOrder(p, recomputable, cloned, stack, [&](Node* x) {
      clone_name.assign(x->name());
      clone_name += "_recomputed";
      Node* c = g.cloneBefore(x, b, remap, clone_name);
      c->meta().phase = Phase::Backward;
      clone_of[x->id()] = c;
      originals.push_back(x);
      ctx.stat("nodes-cloned");
    });
    g.replaceInput(b, k, clone_of[p->id()]);
    ctx.stat("uses-rewired");
  }

  // Erase originals nothing reads any more, users before producers (sorted on positions read
  // once: 92K originals at 10^6 nodes).
  {
    std::vector<std::pair<uint64_t, Node*>> keyed;
    keyed.reserve(originals.size());
    for (Node* x : originals)
      keyed.emplace_back(x->position(), x);
    std::sort(keyed.begin(), keyed.end());
    for (size_t i = 0; i < keyed.size(); ++i)
      originals[i] = keyed[i].second;
  }
  const std::vector<uint32_t> first_users =
      blocks ? blocks->firstUserIds() : std::vector<uint32_t>();
  bool blocks_hold = blocks != nullptr;
  for (size_t i = originals.size(); i-- > 0;) {
    if (originals[i]->hasUses()) continue;
    if (std::binary_search(first_users.begin(), first_users.end(), originals[i]->id()))
      blocks_hold = false;
    g.erase(originals[i]);
    ctx.stat("originals-erased");
  }
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
  if (blocks_hold) ctx.preserve<BlockAnalysis>();
  if (!writes) ctx.preserve<WrittenStorage>();
  ctx.preserve<PhaseInfo>();
  return !originals.empty();
}

}  // namespace jfx
