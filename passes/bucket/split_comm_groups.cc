#include "passes/bucket/split_comm_groups.h"

#include <map>
#include <set>
#include <string>
#include <vector>

#include "ir/collectives.h"
#include "ir/error.h"
#include "passes/analysis/blocks.h"
#include "passes/analysis/fsdp.h"
#include "passes/analysis/memory.h"
#include "passes/analysis/mutation.h"
#include "passes/analysis/phase.h"

namespace jfx {

namespace {

constexpr OptionDecl kSplitOptions[] = {
    {"suffix", "string", "_rs", "appended to a group's name to name its new group (never empty)"},
    {"kinds", "list", "rs",
     "what moves: rs (FSDP reduce-scatters), ar (FSDP gradient all-reduces)"},
};
constexpr StatisticDecl kSplitStatistics[] = {
    {"groups-added", "process groups created"},
    {"collectives-moved", "collectives moved to a new group"},
};

}  // namespace

std::span<const OptionDecl> SplitCommGroupsPass::options() const {
  return kSplitOptions;
}
std::span<const StatisticDecl> SplitCommGroupsPass::statistics() const {
  return kSplitStatistics;
}

void SplitCommGroupsPass::configure(PassOptions& options) {
  suffix_ = options.getString("suffix", "_rs");
  if (suffix_.empty())
    throw JfxError({}, "pass 'split-comm-groups': option 'suffix' must not be empty");
  move_all_reduce_ = false;
  for (const std::string& k : options.getList("kinds", {"rs"})) {
    if (k == "ar")
      move_all_reduce_ = true;
    else if (k != "rs")
      throw JfxError({}, "pass 'split-comm-groups': option 'kinds': unknown kind " +
                             quoteForMessage(k) + " (expected rs, ar)");
  }
}

bool SplitCommGroupsPass::run(Graph& g, PassContext& ctx) {
  const FsdpAnalysis& fsdp = ctx.analyses.get<FsdpAnalysis>(g);

  struct Use {
    bool gather = false;
    std::vector<Node*> moving;  // program order
    int64_t size = 0;
  };
  // A graph without a process-group header declares its groups only by the names its
  // collectives use (the verifier checks names against a header only when there is one). It
  // stays that way: a header listing just the new group would make every other group unknown.
  const bool headerless = g.processGroups().empty();
  std::set<std::string, std::less<>> taken;  // names a new group must not reuse
  for (const ProcessGroupInfo& pg : g.processGroups())
    taken.insert(pg.name);

  // Keyed by group name for lookups; new groups are created in header order below.
  std::map<std::string, Use> groups;
  for (Node* n : g.collectives()) {
    CollectiveRole role = fsdp.roleOf(n);
    CollectiveKind kind = collectiveKind(*n);
    bool bucket = hasFsdpBucketMeta(*n);
    std::string name(collectiveGroupName(*n));
    if (name.empty()) continue;
    if (headerless) taken.insert(name);
    if (kind == CollectiveKind::AllGather && (role == CollectiveRole::FsdpUnshard || bucket)) {
      groups[name].gather = true;
    } else if ((kind == CollectiveKind::ReduceScatter &&
                (role == CollectiveRole::FsdpReduceGrad || bucket)) ||
               (move_all_reduce_ && kind == CollectiveKind::AllReduce &&
                (role == CollectiveRole::FsdpGradAllReduce || bucket))) {
      Use& u = groups[name];
      u.moving.push_back(n);
      u.size = collectiveGroupSize(*n, g);
    }
  }

  // Header order first, then groups the header lacks, by name.
  std::vector<std::string> order;
  for (const ProcessGroupInfo& pg : g.processGroups())
    order.push_back(pg.name);
  for (const auto& [name, u] : groups)
    if (!g.findProcessGroup(name)) order.push_back(name);

  bool changed = false;
  for (const std::string& name : order) {
    auto it = groups.find(name);
    if (it == groups.end() || !it->second.gather || it->second.moving.empty()) continue;
    std::string fresh = name + suffix_;
    for (int k = 1; taken.count(fresh); ++k)
      fresh = name + suffix_ + "_" + std::to_string(k);
    taken.insert(fresh);
    if (!headerless) {
      ProcessGroupInfo info;
      if (const ProcessGroupInfo* pg = g.findProcessGroup(name))
        info = *pg;
      else
        info.size = it->second.size;
      info.name = fresh;
      g.processGroups().push_back(info);
    }
    for (Node* n : it->second.moving) {
      std::vector<Arg> args = n->args();
      args[static_cast<size_t>(n->info().group_name_arg)] = Arg::ofStr(fresh);
      g.setArgs(n, std::move(args));
    }
    ctx.stat("groups-added");
    ctx.stat("collectives-moved", static_cast<int64_t>(it->second.moving.size()));
    ctx.remark("split-comm-groups: " + std::to_string(it->second.moving.size()) +
               " collective(s) moved from group " + quoteForMessage(name) + " to new group " +
               quoteForMessage(fresh));
    changed = true;
  }
  // Only group names changed: no node, operand, tensor or phase did, and none of these analyses
  // reads a group name (--verify-full checks the promise).
  ctx.preserve<FsdpAnalysis>();
  ctx.preserve<PhaseInfo>();
  ctx.preserve<BlockAnalysis>();
  ctx.preserve<MemoryProfile>();
  ctx.preserve<WrittenStorage>();
  return changed;
}

}  // namespace jfx
