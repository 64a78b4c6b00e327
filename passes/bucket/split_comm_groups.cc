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

struct SplitStatistics : StatisticSet {
  Statistic groups_added{this, "groups-added", "process groups created"};
  Statistic collectives_moved{this, "collectives-moved", "collectives moved to a new group"};
};
const SplitStatistics& splitStats() {
  static const SplitStatistics s;
  return s;
}

}  // namespace

std::span<const Statistic* const> SplitCommGroupsPass::statistics() const {
  return splitStats().all();
}

void SplitCommGroupsPass::initialize() {
  if (suffix_->empty()) throw JfxError({}, "option 'suffix' must not be empty");
}

namespace {

// What a process group carries: an FSDP all-gather, and the gradient collectives that move.
struct GroupUse {
  bool gather = false;
  std::vector<Node*> moving;  // program order
  int64_t size = 0;
};

// Per group name. A headerless graph's group names go into `taken` too.
std::map<std::string, GroupUse> groupUses(const Graph& g, const FsdpAnalysis& fsdp,
                                          bool move_all_reduce,
                                          std::set<std::string, std::less<>>& taken) {
  const bool headerless = g.processGroups().empty();
  std::map<std::string, GroupUse> groups;
  for (Node* n : g.collectives()) {
    const CollectiveRole role = fsdp.roleOf(n);
    const CollectiveKind kind = collectiveKind(*n);
    const bool bucket = hasFsdpBucketMeta(*n);
    std::string name(collectiveGroupName(*n));
    if (name.empty()) continue;
    if (headerless) taken.insert(name);
    if (kind == CollectiveKind::AllGather && (role == CollectiveRole::FsdpUnshard || bucket)) {
      groups[name].gather = true;
    } else if ((kind == CollectiveKind::ReduceScatter &&
                (role == CollectiveRole::FsdpReduceGrad || bucket)) ||
               (move_all_reduce && kind == CollectiveKind::AllReduce &&
                (role == CollectiveRole::FsdpGradAllReduce || bucket))) {
      GroupUse& u = groups[name];
      u.moving.push_back(n);
      u.size = collectiveGroupSize(*n, g);
    }
  }
  return groups;
}

// Adds group `fresh` (the same size and ranks as `name`) to the header, unless there is none,
// and moves `use`'s collectives onto it.
void moveToNewGroup(Graph& g, const std::string& name, const GroupUse& use,
                    const std::string& fresh) {
  if (!g.processGroups().empty()) {
    ProcessGroupInfo info;
    if (const ProcessGroupInfo* pg = g.findProcessGroup(name))
      info = *pg;
    else
      info.size = use.size;
    info.name = fresh;
    g.processGroups().push_back(info);
  }
  for (Node* n : use.moving) {
    std::vector<Arg> args = n->args();
    args[static_cast<size_t>(n->info().group_name_arg)] = Arg::ofStr(fresh);
    g.setArgs(n, std::move(args));
  }
}

}  // namespace

bool SplitCommGroupsPass::run(Graph& g, PassContext& ctx) {
  // A graph without a process-group header declares its groups only by the names its
  // collectives use (the verifier checks names against a header only when there is one). It
  // stays that way: a header listing just the new group would make every other group unknown.
  std::set<std::string, std::less<>> taken;  // names a new group must not reuse
  for (const ProcessGroupInfo& pg : g.processGroups())
    taken.insert(pg.name);
  // Keyed by group name for lookups; new groups are created in header order below.
  const std::map<std::string, GroupUse> groups =
      groupUses(g, ctx.analyses.get<FsdpAnalysis>(g), kinds_.contains("ar"), taken);

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
    std::string fresh = name + *suffix_;
    for (int k = 1; taken.count(fresh); ++k)
      fresh = name + *suffix_ + "_" + std::to_string(k);
    taken.insert(fresh);
    moveToNewGroup(g, name, it->second, fresh);
    ctx.stat(splitStats().groups_added);
    ctx.stat(splitStats().collectives_moved, static_cast<int64_t>(it->second.moving.size()));
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
