#include "passes/fsdp/tag_fsdp.h"

#include <algorithm>
#include <map>
#include <set>

#include "ir/error.h"
#include "passes/analysis/blocks.h"
#include "passes/analysis/fsdp.h"
#include "passes/analysis/phase.h"

namespace jfx {
namespace {

bool isUserDecision(Recompute r) {
  return r == Recompute::MustSave || r == Recompute::MustRecompute;
}

// The FQN that places a chain in a block: the parameter's, else the gather's module FQN, else the
// placeholder name (each such parameter is then its own block).
std::string chainFqn(const FsdpUnshardChain& c) {
  if (!c.param->inputFqn().empty()) return c.param->inputFqn();
  if (!c.all_gather->meta().module_fqn.empty())
    return std::string(c.all_gather->meta().module_fqn.str());
  return c.param->name();
}

std::string topLevelModule(const std::string& fqn) {
  return fqn.substr(0, fqn.find('.'));
}

// reshard=default: which chains keep their unsharded value (true) instead of resharding.
std::vector<bool> keepDecisions(const Graph& g, const std::vector<const FsdpUnshardChain*>& chains,
                                int64_t k, PassContext& ctx) {
  std::vector<bool> keep(chains.size(), false);
  const BlockAnalysis blocks = analyzeBlocks(g);
  std::vector<int32_t> block(chains.size(), -1);
  std::set<int32_t> gathered;
  const Node* last_block_gather = nullptr;
  for (size_t i = 0; i < chains.size(); ++i) {
    block[i] = blocks.blockOf(chains[i]->param);
    if (block[i] < 0) continue;
    gathered.insert(block[i]);
    if (!last_block_gather || last_block_gather->isBefore(chains[i]->all_gather))
      last_block_gather = chains[i]->all_gather;
  }
  if (!gathered.empty()) {
    // The last K blocks in forward order (blocks are ordered by first use).
    std::set<int32_t> kept;
    for (auto it = gathered.rbegin();
         it != gathered.rend() && static_cast<int64_t>(kept.size()) < k; ++it)
      kept.insert(*it);
    // Parameters outside blocks: the tail (gathered after the last block's gathers) counts with
    // the last block, the head (everything else, embeddings first) as one block before the first.
    const bool keep_head = k > static_cast<int64_t>(gathered.size());
    int64_t tail = 0;
    for (size_t i = 0; i < chains.size(); ++i) {
      if (block[i] >= 0) {
        keep[i] = kept.count(block[i]) > 0;
      } else if (last_block_gather->isBefore(chains[i]->all_gather)) {
        keep[i] = k >= 1;
        tail += keep[i];
      } else {
        keep[i] = keep_head;
      }
    }
    std::string msg = "tag-fsdp: " + blocks.summary() + "; keeping " + std::to_string(kept.size()) +
                      " of " + std::to_string(gathered.size()) + " gathered blocks";
    if (!kept.empty())
      msg += " (" + blocks.blocks[static_cast<size_t>(*kept.begin())].name + " to " +
             blocks.blocks[static_cast<size_t>(*kept.rbegin())].name + ")";
    ctx.remark(msg + " and " + std::to_string(tail) + " parameter gathers after the last block");
    ctx.stat("blocks", static_cast<int64_t>(gathered.size()));
    return keep;
  }
  // No blocks: top-level modules in order of their first gather. Said loudly: this is rarely
  // what a model with repeated layers wants, and it used to pass unnoticed.
  std::vector<std::string> order;
  std::map<std::string, size_t> rank;
  for (const auto* c : chains) {
    std::string key = topLevelModule(chainFqn(*c));
    if (rank.emplace(key, order.size()).second) order.push_back(key);
  }
  const size_t first_kept = order.size() - std::min<size_t>(order.size(), static_cast<size_t>(k));
  for (size_t i = 0; i < chains.size(); ++i)
    keep[i] = rank.at(topLevelModule(chainFqn(*chains[i]))) >= first_kept;
  if (!chains.empty())
    ctx.warn(blocks.noBlocksMessage("tag-fsdp") + "; reshard=default keeps the last " +
             std::to_string(order.size() - first_kept) + " of " + std::to_string(order.size()) +
             " top-level modules instead");
  return keep;
}

}  // namespace

void TagFsdpPass::configure(PassOptions& options) {
  std::string r = options.getEnum("reshard", {"always", "never", "default"}, "default");
  reshard_ = r == "always" ? Reshard::Always : r == "never" ? Reshard::Never : Reshard::Default;
  keep_last_ = options.getInt("keep-last", 1, 0, 1000000);
}

bool TagFsdpPass::run(Graph& g, PassContext& ctx) {
  PhaseInfo phases = computePhases(g);
  FsdpAnalysis fsdp = analyzeFsdp(g, phases);
  ctx.stat("non-fsdp-collectives", static_cast<int64_t>(fsdp.other_collectives.size()));

  std::vector<const FsdpUnshardChain*> chains;
  for (const auto& c : fsdp.unshard)
    if (phases.isForwardOrLoss(c.all_gather)) chains.push_back(&c);

  std::vector<bool> keep(chains.size(), reshard_ == Reshard::Never);
  if (reshard_ == Reshard::Default) keep = keepDecisions(g, chains, keep_last_, ctx);

  bool changed = false;
  auto tag = [&](Node* n, Recompute r) {
    Recompute cur = n->meta().recompute;
    if (cur == r) return;
    if (isUserDecision(cur)) {
      ctx.stat("user-tags-kept");
      return;
    }
    if (cur != Recompute::Unset) ctx.stat("prefer-tags-overridden");
    n->meta().recompute = r;
    ctx.stat("nodes-tagged");
    changed = true;
  };
  for (size_t i = 0; i < chains.size(); ++i) {
    const FsdpUnshardChain& c = *chains[i];
    if (keep[i]) {
      ctx.stat("chains-kept");
      for (Node* n : c.save_points)
        tag(n, Recompute::MustSave);
    } else {
      ctx.stat("chains-resharded");
      for (Node* n : c.nodes())
        tag(n, Recompute::MustRecompute);
    }
  }
  return changed;
}

}  // namespace jfx
