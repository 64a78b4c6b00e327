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
  std::string_view name() const override { return "split-comm-groups"; }
  std::span<const OptionDecl> options() const override;
  std::span<const StatisticDecl> statistics() const override;
  void configure(PassOptions& options) override;
  bool run(Graph& g, PassContext& ctx) override;

 private:
  std::string suffix_ = "_rs";
  bool move_all_reduce_ = false;
};

}  // namespace jfx
