#include "ir/collectives.h"

#include <algorithm>

namespace jfx {

CollectiveKind collectiveKind(const Node& n) {
  return n.isCollective() ? n.info().collective : CollectiveKind::None;
}

std::string_view collectiveGroupName(const Node& n) {
  int idx = n.info().group_name_arg;
  if (idx < 0 || static_cast<size_t>(idx) >= n.numArgs() || !n.arg(idx).isStr()) return {};
  return n.arg(idx).str();
}

int64_t collectiveGroupSize(const Node& n, const Graph& g) {
  int idx = n.info().group_size_arg;
  if (idx >= 0 && static_cast<size_t>(idx) < n.numArgs() && n.arg(idx).isInt())
    return std::max<int64_t>(1, n.arg(idx).toInt());
  if (const ProcessGroupInfo* pg = g.findProcessGroup(collectiveGroupName(n)))
    return std::max<int64_t>(1, pg->size);
  return 1;
}

}  // namespace jfx
