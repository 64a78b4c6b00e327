#include "passes/plan/reference_plan.h"

#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "ir/clone.h"
#include "ir/collectives.h"
#include "passes/analysis/phase.h"
#include "passes/analysis/simulator.h"
#include "passes/bucket/bucket.h"
#include "passes/bucket/schedule.h"
#include "passes/pass_manager.h"

namespace jfx {

namespace {

constexpr std::string_view kReferenceHead =
    "dce,tag-fsdp{reshard=default},remat,dedup-fsdp-unshard";
constexpr std::string_view kReferenceTail =
    "bucket{plan=blocks, kinds=ag,rs, memory-limit=none},schedule{prefetch=1, memory-limit=none}";

void finish(ReferencePlan& plan, const MemoryOptions& memory) {
  PhaseInfo phases = computePhases(*plan.graph);
  MemoryOptions mo = memory;
  mo.top_k = 0;
  plan.peak_bytes = analyzeMemory(*plan.graph, phases, mo).peak_bytes;
  countPlanCollectives(*plan.graph, phases, plan);
}

// FSDP2 issues all-gathers and reduce-scatters on one communicator: a group that
// split-comm-groups added ("<name>_rs" or "<name>_rs_<k>", the same ranks as <name>) goes back
// into <name> on the reference plan's copy. Other groups (TP, EP) keep theirs.
void mergeSplitGroups(Graph& g) {
  std::map<std::string, std::string, std::less<>> back;  // added group -> its origin
  for (const ProcessGroupInfo& pg : g.processGroups()) {
    const size_t at = pg.name.rfind("_rs");
    if (at == std::string::npos || at == 0) continue;
    const std::string tail = pg.name.substr(at + 3);
    if (!tail.empty() && (tail[0] != '_' || tail.size() == 1 ||
                          tail.find_first_not_of("0123456789", 1) != std::string::npos))
      continue;
    const ProcessGroupInfo* origin = g.findProcessGroup(pg.name.substr(0, at));
    if (origin && origin->size == pg.size && origin->ranks == pg.ranks)
      back.emplace(pg.name, origin->name);
  }
  if (back.empty()) return;
  for (Node* n : g.collectives()) {
    auto it = back.find(collectiveGroupName(*n));
    if (it == back.end() || n->info().group_name_arg < 0) continue;
    std::vector<Arg> args = n->args();
    args[static_cast<size_t>(n->info().group_name_arg)] = Arg::ofStr(it->second);
    g.setArgs(n, std::move(args));
  }
  std::erase_if(g.processGroups(),
                [&](const ProcessGroupInfo& pg) { return back.count(pg.name) > 0; });
}

}  // namespace

std::string referencePipelineSpec() {
  return std::string(kReferenceHead) + "," + std::string(kReferenceTail);
}

void countPlanCollectives(const Graph& g, const PhaseInfo& phases, ReferencePlan& counts) {
  counts.forward_all_gathers = counts.backward_all_gathers = counts.reduce_scatters = 0;
  g.forEach([&](const Node* n) {
    switch (collectiveKind(*n)) {
      case CollectiveKind::AllGather:
        ++(phases.isBackward(n) ? counts.backward_all_gathers : counts.forward_all_gathers);
        break;
      case CollectiveKind::ReduceScatter:
        ++counts.reduce_scatters;
        break;
      default:
        break;
    }
  });
}

ReferencePlan buildReferencePlan(const Graph& g, const MemoryOptions& memory) {
  ReferencePlan plan;
  plan.graph = cloneGraph(g);
  mergeSplitGroups(*plan.graph);  // a graph the default pipeline made: FSDP2 has one group
  PassManagerOptions pm;
  // The caller checked the input; the passes' own checks between them stay on.
  pm.verify_each = false;
  pm.check_unchanged_hash = false;
  std::ostringstream sink;  // remarks and warnings of the plan's passes are not the caller's
  pm.out = &sink;
  runPipeline(*plan.graph, parsePipeline(referencePipelineSpec()), pm);
  finish(plan, memory);
  return plan;
}

void applyReferenceTail(Graph& g, PassContext& ctx) {
  mergeSplitGroups(g);
  ctx.runPipeline(g, kReferenceTail);
}

namespace {

ReferenceEstimate measureAppliedTail(Graph& g, PassContext& ctx, const CostModel* cost) {
  applyReferenceTail(g, ctx);
  ReferenceEstimate out;
  PhaseInfo phases = computePhases(g);
  MemoryOptions mo;
  mo.top_k = 0;
  out.peak_bytes = analyzeMemory(g, phases, mo).peak_bytes;
  if (cost) {
    SimOptions so;
    so.memory = false;
    out.step = simulate(g, *cost, so).step;
  }
  return out;
}

}  // namespace

ReferenceEstimate estimateReferenceTail(Graph& g, PassContext& ctx, const CostModel* cost) {
  if (g.recordingUndo()) {
    ForkedGraph copy = ctx.fork(g);
    return measureAppliedTail(*copy.graph, *copy.ctx, cost);
  }
  g.beginUndo();
  ReferenceEstimate out;
  try {
    out = measureAppliedTail(g, ctx, cost);
  } catch (...) {
    g.rollback();
    throw;
  }
  g.rollback();
  return out;
}

}  // namespace jfx
