#include "passes/registry.h"

#include "passes/bucket/bucket.h"
#include "passes/bucket/schedule.h"
#include "passes/bucket/split_comm_groups.h"
#include "passes/fsdp/dedup_fsdp_unshard.h"
#include "passes/fsdp/remat.h"
#include "passes/fsdp/tag_fsdp.h"
#include "passes/transforms/dce.h"

namespace jfx {

// One line per pass: its name as written in pipelines (the pass's only name), a one-line summary,
// its factory.
const std::vector<PassRegistration>& passRegistry() {
  static const std::vector<PassRegistration> kPasses = {
      {"dce", "remove unused nodes that have no effects", [] { return std::make_unique<Dce>(); }},
      {"dedup-fsdp-unshard", "one FSDP unshard chain per parameter per phase (tied weights)",
       [] { return std::make_unique<DedupFsdpUnshardPass>(); }},
      {"tag-fsdp", "tag FSDP unshard chains MUST_RECOMPUTE / MUST_SAVE from the reshard policy",
       [] { return std::make_unique<TagFsdpPass>(); }},
      {"remat", "clone recompute-tagged forward chains before their first backward use",
       [] { return std::make_unique<RematPass>(); }},
      {"bucket", "merge FSDP collectives per block or by size (rank-agnostic)",
       [] { return std::make_unique<BucketPass>(); }},
      {"split-comm-groups", "move FSDP reduce-scatters to their own process group",
       [] { return std::make_unique<SplitCommGroupsPass>(); }},
      {"schedule", "prefetch all-gathers, defer reduce-scatter waits, under a memory limit",
       [] { return std::make_unique<SchedulePass>(); }},
  };
  return kPasses;
}

std::unique_ptr<Pass> createPass(std::string_view name) {
  for (const PassRegistration& r : passRegistry())
    if (r.name == name) {
      std::unique_ptr<Pass> pass = r.make();
      pass->name_ = std::string(r.name);
      return pass;
    }
  return nullptr;
}

std::string knownPassNames() {
  std::string s;
  for (const auto& r : passRegistry())
    s += (s.empty() ? "" : ", ") + std::string(r.name);
  return s.empty() ? "none" : s;
}

}  // namespace jfx
