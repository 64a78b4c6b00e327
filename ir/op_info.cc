#include "ir/op_info.h"

#include <algorithm>
#include <deque>
#include <iterator>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

namespace jfx {
namespace {

constexpr uint8_t kRandomFlag = 1;
constexpr uint8_t kMutatesFlag = 2;
constexpr uint8_t kEffectFlag = 4;
constexpr uint8_t kMetadataFlag = 8;

// A row of ir/ops_generated.def.
// Plain data (a C string, enums, ints): the array is a constant image, with no code to build it.
struct SchemaRow {
  const char* target;
  OpCategory category;
  AliasKind alias;
  uint8_t flags;
  int8_t min_args, max_args;
  uint32_t written = 0;
  CollectiveKind collective = CollectiveKind::None;
  bool coalesced = false;
  int8_t reduce_op_arg = -1, group_size_arg = -1, group_name_arg = -1, dropout_p_arg = -1;
};

#define V(version)
#define S(t, cat, al, fl, mn, mx, wr) {t, OpCategory::cat, AliasKind::al, fl, mn, mx, wr},
#define D(t, cat, al, fl, mn, mx, wr, dp) \
  {t, OpCategory::cat, AliasKind::al, fl, mn, mx, wr, CollectiveKind::None, false, -1, -1, -1, dp},
#define C(t, kind, co, al, fl, mn, mx, ro, gs, gn) \
  {t,                                              \
   OpCategory::Collective,                         \
   AliasKind::al,                                  \
   fl,                                             \
   mn,                                             \
   mx,                                             \
   AliasKind::al == AliasKind::InPlace,            \
   CollectiveKind::kind,                           \
   co,                                             \
   ro,                                             \
   gs,                                             \
   gn},
#define W(t, fl, mn, mx) {t, OpCategory::Wait, AliasKind::View, fl, mn, mx},
constexpr SchemaRow kSchemaRows[] = {
#include "ir/ops_generated.def"
};
#undef V
#undef S
#undef D
#undef C
#undef W

#define V(version) version
#define S(...)
#define D(...)
#define C(...)
#define W(...)
constexpr std::string_view kTorchVersion =
#include "ir/ops_generated.def"
    ;
#undef V
#undef S
#undef D
#undef C
#undef W

// A row of ir/ops.def.
enum class HandKind : uint8_t { Op, Alias, Mutates, Extern };
struct HandRow {
  HandKind kind;
  const char* target;
  OpCategory category = OpCategory::Unknown;
  FlopFormula flops = FlopFormula::Zero;
  AliasKind alias = AliasKind::None;
  bool side_effect = false;
  int8_t min_args = 0, max_args = -1;
  uint32_t written_args = 0;
};

#define OP(t, cat, fl) {HandKind::Op, t, OpCategory::cat, FlopFormula::fl},
#define ALIAS(t, al) {HandKind::Alias, t, OpCategory::Unknown, FlopFormula::Zero, AliasKind::al},
#define MUTATES(t, args) \
  {HandKind::Mutates,    \
   t,                    \
   OpCategory::Unknown,  \
   FlopFormula::Zero,    \
   AliasKind::None,      \
   false,                \
   0,                    \
   -1,                   \
   args},
#define EXTERN(t, cat, al, eff, mn, mx) \
  {HandKind::Extern, t, OpCategory::cat, FlopFormula::Zero, AliasKind::al, eff, mn, mx},
constexpr HandRow kHandRows[] = {
#include "ir/ops.def"
};
#undef OP
#undef ALIAS
#undef MUTATES
#undef EXTERN

const OpInfo kUnknown{"",
                      OpCategory::Unknown,
                      AliasKind::None,
                      CollectiveKind::None,
                      false,
                      false,
                      false,
                      false,
                      FlopFormula::Zero,
                      0,
                      -1,
                      -1,
                      -1,
                      -1};

// The FLOP formula a category implies when no hand row names one.
FlopFormula defaultFlops(OpCategory c) {
  switch (c) {
    case OpCategory::Elementwise:
      return FlopFormula::OutNumel;
    case OpCategory::Reduction:
      return FlopFormula::InNumel;
    default:
      return FlopFormula::Zero;
  }
}

OpInfo fromSchema(const SchemaRow& s) {
  OpInfo r{
      s.target,
      s.category,
      s.alias,
      s.collective,
      s.coalesced,
      (s.flags & kRandomFlag) != 0,
      (s.flags & kEffectFlag) != 0,
      (s.flags & kMutatesFlag) != 0 || s.alias == AliasKind::InPlace || s.alias == AliasKind::Out,
      defaultFlops(s.category),
      s.min_args,
      s.max_args,
      s.reduce_op_arg,
      s.group_size_arg,
      s.group_name_arg};
  r.dropout_p_arg = s.dropout_p_arg;
  r.metadata_only = (s.flags & kMetadataFlag) != 0;
  r.written_args = s.written;
  r.in_registry = true;
  return r;
}

// "aten.add_.Scalar" -> "aten.add.Scalar"; empty when `target` is not `ns.op_.overload`
// (dunder ops such as "aten.__iand__.Tensor" are not in-place variants of anything here).
std::string functionalName(std::string_view target) {
  size_t dot1 = target.find('.');
  if (dot1 == std::string_view::npos) return {};
  size_t dot2 = target.find('.', dot1 + 1);
  if (dot2 == std::string_view::npos || dot2 < dot1 + 3 || target[dot2 - 1] != '_' ||
      target[dot2 - 2] == '_')
    return {};
  std::string out(target.substr(0, dot2 - 1));
  out += target.substr(dot2);
  return out;
}

void applyHandOp(OpInfo& r, const HandRow& h) {
  r.category = h.category;
  r.flops = h.flops;
  r.hand = true;
}

// The merged table, built once on first use and read-only afterwards; lookup by symbol id.
struct OpIndex {
  std::vector<OpInfo> rows;  // sorted by target
  // By symbol id: a vector, not a hash map, since every node's creation asks (a hash, a modulo
  // and a scattered bucket per node loaded; bench/README.md, "Figures behind the code"). Interning
  // the targets here gives them the next free ids, so the vector spans about the table, plus
  // whatever symbols the process interned before its first opInfo call.
  std::vector<const OpInfo*> by_id;

  OpIndex() {
    std::unordered_map<std::string_view, size_t> at;  // target -> index in rows
    rows.reserve(std::size(kSchemaRows) + std::size(kHandRows));
    for (const SchemaRow& s : kSchemaRows) {
      at.emplace(s.target, rows.size());
      rows.push_back(fromSchema(s));
    }
    std::unordered_map<std::string_view, const HandRow*> op_rows;
    for (const HandRow& h : kHandRows) {
      auto it = at.find(h.target);
      switch (h.kind) {
        case HandKind::Op:
          // A row naming no registry op has no schema facts to refine: it stays out, and
          // tests/unit/test_op_info.cc fails on it.
          op_rows.emplace(h.target, &h);
          if (it != at.end()) applyHandOp(rows[it->second], h);
          break;
        case HandKind::Alias:
          if (it != at.end()) {
            OpInfo& r = rows[it->second];
            r.alias = h.alias;
            r.mutates = r.mutates || h.alias == AliasKind::InPlace || h.alias == AliasKind::Out;
          }
          break;
        case HandKind::Mutates:
          if (it != at.end()) {
            rows[it->second].mutates = true;
            rows[it->second].written_args |= h.written_args;
          }
          break;
        case HandKind::Extern:
          if (it == at.end()) {
            OpInfo r{h.target,
                     h.category,
                     h.alias,
                     CollectiveKind::None,
                     false,
                     false,
                     h.side_effect,
                     h.alias == AliasKind::InPlace || h.alias == AliasKind::Out,
                     h.flops,
                     h.min_args,
                     h.max_args,
                     -1,
                     -1,
                     -1};
            r.hand = true;
            at.emplace(h.target, rows.size());
            rows.push_back(r);
          }
          break;
      }
    }
    // In-place variants without their own row take the functional op's category and FLOPs.
    for (OpInfo& r : rows) {
      if (r.hand || r.alias != AliasKind::InPlace) continue;
      std::string base = functionalName(r.target);
      auto it = base.empty() ? op_rows.end() : op_rows.find(base);
      if (it != op_rows.end()) applyHandOp(r, *it->second);
    }
    std::sort(rows.begin(), rows.end(),
              [](const OpInfo& a, const OpInfo& b) { return a.target < b.target; });
    for (const OpInfo& r : rows) {
      const uint32_t id = Symbol::intern(r.target).id();
      if (id >= by_id.size()) by_id.resize(id + 1, nullptr);
      by_id[id] = &r;
    }
  }
};

OpIndex& index() {
  static OpIndex idx;
  return idx;
}

}  // namespace

// Rows registered from schemas (registerSchemaOp), by symbol id. Rows never move or die: a
// node's info() reference stays valid.
struct SchemaOps {
  std::shared_mutex mu;
  std::unordered_map<uint32_t, std::pair<std::string, std::unique_ptr<OpInfo>>> by_id;
  std::deque<std::string> targets;  // OpInfo::target views these
};

SchemaOps& schemaOps() {
  static SchemaOps ops;
  return ops;
}

const OpInfo& opInfo(Symbol target) {
  OpIndex& idx = index();
  const uint32_t id = target.id();  // by_id is never written after construction
  const OpInfo* info = id < idx.by_id.size() ? idx.by_id[id] : nullptr;
  if (info) return *info;
  SchemaOps& extra = schemaOps();
  std::shared_lock lock(extra.mu);
  auto it = extra.by_id.find(id);
  return it != extra.by_id.end() ? *it->second.second : kUnknown;
}

namespace {

// One argument or return of a schema: "Tensor(a!) self", "int[] dims=[]", "*", "Tensor".
struct SchemaItem {
  std::string alias;  // "a" of Tensor(a) / Tensor(a!), else empty
  bool written = false;
  bool has_default = false;
  bool kwarg_marker = false;  // the bare "*"
};

std::vector<std::string> splitTopLevel(std::string_view text) {
  std::vector<std::string> out;
  int depth = 0;
  std::string cur;
  for (char c : text) {
    if (c == '(' || c == '[') ++depth;
    if (c == ')' || c == ']') --depth;
    if (c == ',' && depth == 0) {
      out.push_back(cur);
      cur.clear();
      continue;
    }
    cur += c;
  }
  if (cur.find_first_not_of(' ') != std::string::npos) out.push_back(cur);
  return out;
}

SchemaItem parseItem(std::string_view text) {
  SchemaItem item;
  const size_t b = text.find_first_not_of(' ');
  text = b == std::string_view::npos ? std::string_view() : text.substr(b);
  if (text == "*") {
    item.kwarg_marker = true;
    return item;
  }
  item.has_default = text.find('=') != std::string_view::npos;
  const size_t open = text.find('(');
  const size_t space = text.find(' ');
  if (open != std::string_view::npos && (space == std::string_view::npos || open < space)) {
    const size_t close = text.find(')', open);
    if (close == std::string_view::npos) throw std::invalid_argument("unbalanced '('");
    std::string_view a = text.substr(open + 1, close - open - 1);
    item.written = !a.empty() && a.back() == '!';
    item.alias = std::string(item.written ? a.substr(0, a.size() - 1) : a);
  }
  return item;
}

}  // namespace

void registerSchemaOp(std::string_view target, std::string_view schema, bool random) {
  const Symbol sym = Symbol::intern(target);
  const OpIndex& idx = index();
  if (sym.id() < idx.by_id.size() && idx.by_id[sym.id()]) return;  // the table's row stands
  const size_t open = schema.find('(');
  const size_t arrow = schema.rfind(" -> ");
  const size_t close =
      arrow == std::string_view::npos ? std::string_view::npos : schema.rfind(')', arrow);
  if (open == std::string_view::npos || close == std::string_view::npos || close < open)
    throw std::invalid_argument("not a schema 'ns::name(ARGS) -> RETURNS'");
  std::vector<SchemaItem> args;
  for (const std::string& a : splitTopLevel(schema.substr(open + 1, close - open - 1)))
    args.push_back(parseItem(a));
  std::string_view rets = schema.substr(arrow + 4);
  if (!rets.empty() && rets.front() == '(' && rets.back() == ')')
    rets = rets.substr(1, rets.size() - 2);
  std::vector<SchemaItem> returns;
  for (const std::string& r : splitTopLevel(rets))
    returns.push_back(parseItem(r));

  auto info = std::make_unique<OpInfo>(kUnknown);
  info->category = OpCategory::Compute;
  info->random = random;
  info->side_effect = returns.empty();
  int positional = 0, required = 0;
  bool kwarg_only = false;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i].kwarg_marker) {
      kwarg_only = true;
      continue;
    }
    if (args[i].written) {
      info->mutates = true;
      if (!kwarg_only && positional < 32) info->written_args |= uint32_t{1} << positional;
    }
    if (!kwarg_only) {
      ++positional;
      if (!args[i].has_default) required = positional;
    }
  }
  info->min_args = static_cast<int8_t>(std::min(required, 127));
  info->max_args = static_cast<int8_t>(std::min(positional, 127));
  if (!args.empty() && !args[0].kwarg_marker && !args[0].alias.empty())
    for (const SchemaItem& r : returns)
      if (r.alias == args[0].alias)
        info->alias = args[0].written ? AliasKind::InPlace : AliasKind::View;
  info->flops = FlopFormula::Zero;

  SchemaOps& extra = schemaOps();
  std::unique_lock lock(extra.mu);
  auto it = extra.by_id.find(sym.id());
  if (it != extra.by_id.end()) {
    if (it->second.first != schema)
      throw std::invalid_argument("a different schema was registered before: " + it->second.first);
    return;
  }
  info->target = extra.targets.emplace_back(target);
  extra.by_id.emplace(sym.id(), std::make_pair(std::string(schema), std::move(info)));
}

const OpInfo& opInfo(std::string_view target) {
  return opInfo(Symbol::intern(target));
}

bool isKnownOp(Symbol target) {
  return &opInfo(target) != &kUnknown;
}

const OpInfo* opInfoTable(size_t* count) {
  const OpIndex& idx = index();
  *count = idx.rows.size();
  return idx.rows.data();
}

std::string_view opTableTorchVersion() {
  return kTorchVersion;
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
    case OpCategory::Conv:
      return "conv";
    case OpCategory::Pool:
      return "pool";
    case OpCategory::Compute:
      return "compute";
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
