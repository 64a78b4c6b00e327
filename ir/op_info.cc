#include "ir/op_info.h"

#include <unordered_map>
#include <vector>

namespace jfx {
namespace {

#define OP(t, cat, alias, flops, mn, mx) \
  {t,                                    \
   OpCategory::cat,                      \
   AliasKind::alias,                     \
   CollectiveKind::None,                 \
   false,                                \
   false,                                \
   false,                                \
   FlopFormula::flops,                   \
   mn,                                   \
   mx,                                   \
   -1,                                   \
   -1,                                   \
   -1},
#define RANDOM(t, cat, flops, mn, mx) \
  {t,                                 \
   OpCategory::cat,                   \
   AliasKind::None,                   \
   CollectiveKind::None,              \
   false,                             \
   true,                              \
   false,                             \
   FlopFormula::flops,                \
   mn,                                \
   mx,                                \
   -1,                                \
   -1,                                \
   -1},
#define EFFECT(t, cat, mn, mx) \
  {t,                          \
   OpCategory::cat,            \
   AliasKind::None,            \
   CollectiveKind::None,       \
   false,                      \
   false,                      \
   true,                       \
   FlopFormula::Zero,          \
   mn,                         \
   mx,                         \
   -1,                         \
   -1,                         \
   -1},
#define COLL(t, kind, coalesced, alias, mn, mx, ro, gs, gn) \
  {t,                                                       \
   OpCategory::Collective,                                  \
   AliasKind::alias,                                        \
   CollectiveKind::kind,                                    \
   coalesced,                                               \
   false,                                                   \
   true,                                                    \
   FlopFormula::Zero,                                       \
   mn,                                                      \
   mx,                                                      \
   ro,                                                      \
   gs,                                                      \
   gn},
#define WAIT(t)          \
  {t,                    \
   OpCategory::Wait,     \
   AliasKind::View,      \
   CollectiveKind::None, \
   false,                \
   false,                \
   true,                 \
   FlopFormula::Zero,    \
   1,                    \
   1,                    \
   -1,                   \
   -1,                   \
   -1},

const OpInfo kTable[] = {
#include "ir/ops.def"
};

#undef OP
#undef RANDOM
#undef EFFECT
#undef COLL
#undef WAIT

const OpInfo kUnknown{"",
                      OpCategory::Unknown,
                      AliasKind::None,
                      CollectiveKind::None,
                      false,
                      false,
                      false,
                      FlopFormula::Zero,
                      0,
                      -1,
                      -1,
                      -1,
                      -1};

// Lookup by symbol id: a registry filled on first use and append-only afterwards.
struct OpIndex {
  std::unordered_map<uint32_t, const OpInfo*> by_symbol;
  OpIndex() {
    for (const OpInfo& row : kTable)
      by_symbol.emplace(Symbol::intern(row.target).id(), &row);
  }
};

OpIndex& index() {
  static OpIndex idx;
  return idx;
}

}  // namespace

const OpInfo& opInfo(Symbol target) {
  OpIndex& idx = index();
  auto it = idx.by_symbol.find(target.id());  // never written after construction
  return it == idx.by_symbol.end() ? kUnknown : *it->second;
}

const OpInfo& opInfo(std::string_view target) {
  return opInfo(Symbol::intern(target));
}

bool isKnownOp(Symbol target) {
  return &opInfo(target) != &kUnknown;
}

const OpInfo* opInfoTable(size_t* count) {
  *count = sizeof(kTable) / sizeof(kTable[0]);
  return kTable;
}

std::string_view categoryName(OpCategory c) {
  switch (c) {
    case OpCategory::Unknown:
      return "unknown";
    case OpCategory::Placeholder:
      return "placeholder";
    case OpCategory::Output:
      return "output";
    case OpCategory::GetAttr:
      return "get_attr";
    case OpCategory::Getitem:
      return "getitem";
    case OpCategory::View:
      return "view";
    case OpCategory::Copy:
      return "copy";
    case OpCategory::Elementwise:
      return "elementwise";
    case OpCategory::Reduction:
      return "reduction";
    case OpCategory::Matmul:
      return "matmul";
    case OpCategory::Attention:
      return "attention";
    case OpCategory::Norm:
      return "norm";
    case OpCategory::Softmax:
      return "softmax";
    case OpCategory::Loss:
      return "loss";
    case OpCategory::Embedding:
      return "embedding";
    case OpCategory::Index:
      return "index";
    case OpCategory::Factory:
      return "factory";
    case OpCategory::Collective:
      return "collective";
    case OpCategory::Wait:
      return "wait";
    case OpCategory::Other:
      return "other";
  }
  return "unknown";
}

std::string_view collectiveKindName(CollectiveKind k) {
  switch (k) {
    case CollectiveKind::None:
      return "none";
    case CollectiveKind::AllGather:
      return "all_gather";
    case CollectiveKind::ReduceScatter:
      return "reduce_scatter";
    case CollectiveKind::AllReduce:
      return "all_reduce";
    case CollectiveKind::AllToAll:
      return "all_to_all";
    case CollectiveKind::Broadcast:
      return "broadcast";
  }
  return "none";
}

}  // namespace jfx
