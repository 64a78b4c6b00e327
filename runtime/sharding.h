// How a parameter or buffer is laid out across ranks, and this rank's shard of its full tensor.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/process_groups.h"

namespace jfx::rt {

// How one parameter or buffer is laid out across ranks.
struct ShardLayout {
  std::vector<int64_t> local_shape;  // the placeholder: this rank's padded shard
  std::string group;                 // FSDP group ("" when not sharded)
  int group_rank = 0;
  int group_size = 1;
};

// This rank's shard of a full tensor: first its TP piece (torch.chunk) of any dim the graph's
// local tensor is smaller in, then rows [i*s, (i+1)*s) of dim 0 zero-padded to s*G rows, as the
// tracer shards (python/jointfx/trace.py: shard_param). Throws RankError (runtime/rank_error.h)
// naming `fqn` when `full` cannot shard to the placeholder's shape on this mesh.
at::Tensor shard(const at::Tensor& full, const std::string& fqn, const ShardLayout& l,
                 const ProcessGroups& pgs, const std::string& tp_group);

}  // namespace jfx::rt
