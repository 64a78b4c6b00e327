// split-comm-groups: puts FSDP reduce-scatters on their own process group, so they can run at the
// same time as the all-gathers. One process group is one NCCL communicator and one stream, whose
// collectives run one after another; a second group over the same ranks gets a second stream
// (torchtitan's enable_fsdp_ag_rs_overlap; separate streams on one communicator are not enough).
//
// Does: for each process group that carries both an FSDP all-gather and an FSDP reduce-scatter
// (roles from passes/analysis/fsdp.h, or buckets that `bucket` marked fsdp_bucket), adds a header
// group "<name><suffix>" (default suffix "_rs"; "_rs_1", ... if taken) with the same size and
// ranks, and rewrites the group name of those reduce-scatters (and of all-reduces with
// kinds=rs,ar). All-gathers, TP and other collectives keep their group. The executor creates one
// communicator per header group. Cost: NCCL workspace memory for the extra communicator. O(N).
// Options: suffix=_rs, kinds=rs (rs, ar: which gradient collectives move).
#pragma once

#include <string>

#include "passes/pass.h"

namespace jfx {

class SplitCommGroupsPass : public Pass {
 public:
  std::span<const Statistic* const> statistics() const override;
  bool run(Graph& g, PassContext& ctx) override;

 private:
  void initialize() override;
  Option<std::string> suffix_{this, "suffix", "_rs",
                              "appended to a group's name to name its new group (never empty)"};
  Option<std::vector<std::string>> kinds_{
      this,         "kinds",
      {"rs"},       "what moves: rs (FSDP reduce-scatters), ar (FSDP gradient all-reduces)",
      {"rs", "ar"}, "kind"};
};

}  // namespace jfx
