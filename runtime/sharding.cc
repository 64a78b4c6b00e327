#include "runtime/sharding.h"

#include <ATen/ops/zeros.h>

#include <algorithm>

#include "ir/error.h"
#include "runtime/rank_error.h"

namespace jfx::rt {

at::Tensor shard(const at::Tensor& full, const std::string& fqn, const ShardLayout& l,
                 const ProcessGroups& pgs, const std::string& tp_group) {
  const int64_t G = l.group_size;
  auto mismatch = [&] {
    inputError(quoteForMessage(fqn) + ": full shape " + c10::str(full.sizes()) +
               " does not shard to the graph's " + c10::str(l.local_shape) + " over " +
               std::to_string(G) + " FSDP rank(s)" +
               (tp_group.empty() ? "" : " and group " + quoteForMessage(tp_group)));
  };
  if (full.dim() != static_cast<int64_t>(l.local_shape.size())) mismatch();
  at::Tensor t = full;
  auto tpPiece = [&](int64_t d, int64_t want) {
    auto tp_rank = pgs.rankIn(tp_group);
    auto tp_size = pgs.sizeOf(tp_group);
    if (tp_group.empty() || !tp_rank || !tp_size || want * *tp_size != t.size(d)) mismatch();
    t = t.narrow(d, *tp_rank * want, want);
  };
  for (int64_t d = 1; d < t.dim(); ++d)
    if (t.size(d) != l.local_shape[static_cast<size_t>(d)])
      tpPiece(d, l.local_shape[static_cast<size_t>(d)]);
  if (t.dim() == 0) return t.clone();
  const int64_t s = l.local_shape[0];
  auto fits = [&](int64_t rows) { return G == 1 ? rows == s : (rows + G - 1) / G == s; };
  if (!fits(t.size(0))) {
    // Larger than FSDP padding explains: TP-sharded on dim 0 too.
    auto tp_size = pgs.sizeOf(tp_group);
    if (!tp_size || t.size(0) % *tp_size || !fits(t.size(0) / *tp_size)) mismatch();
    tpPiece(0, t.size(0) / *tp_size);
  }
  if (G == 1) return t.contiguous().clone();
  at::Tensor out = at::zeros(l.local_shape, t.options());
  int64_t begin = std::min<int64_t>(l.group_rank * s, t.size(0));
  int64_t end = std::min<int64_t>(begin + s, t.size(0));
  if (end > begin) out.narrow(0, 0, end - begin).copy_(t.narrow(0, begin, end - begin));
  return out;
}

}  // namespace jfx::rt
