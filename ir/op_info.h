// The op-info table: one line per op in ir/ops.def. Analyses read categories, aliasing,
// collective kind and cost formulas from here instead of matching target strings.
#pragma once

#include <cstdint>
#include <string_view>

#include "ir/symbol.h"

namespace jfx {

enum class OpCategory : uint8_t {
  Unknown,  // not in the table: analyses must be conservative
  Placeholder,
  Output,
  GetAttr,
  Getitem,      // operator.getitem on a multi-output node
  View,         // output aliases input 0 (view, reshape, t, permute, expand, slice, split...)
  Copy,         // _to_copy, clone, convert_element_type: a new tensor, same values
  Elementwise,  // pointwise math and its backward
  Reduction,    // sum, mean, amax...
  Matmul,       // mm, addmm, bmm
  Attention,    // scaled-dot-product attention forward and backward
  Norm,         // fused norm kernels
  Softmax,      // softmax / log_softmax forward and backward
  Loss,         // nll_loss forward and backward
  Embedding,    // embedding forward and backward
  Index,        // gather / scatter / index / cat / stack (data movement that is not a view)
  Factory,      // new tensors from shapes: empty, zeros, ones, full, arange...
  Collective,   // _c10d_functional collectives
  Wait,         // wait_tensor
  Other,        // known, but none of the above (asserts, scalar ops)
};

enum class AliasKind : uint8_t {
  None,     // fresh output
  View,     // output shares storage with input 0
  InPlace,  // mutates input 0 and returns it
  Out,      // writes the `out` kwarg and returns it
};

enum class CollectiveKind : uint8_t {
  None,
  AllGather,
  ReduceScatter,
  AllReduce,
  AllToAll,
  Broadcast
};

// How to count FLOPs from input/output tensor meta (see passes/analysis/cost_model).
enum class FlopFormula : uint8_t {
  Zero,
  OutNumel,  // one op per output element
  InNumel,   // one op per element of input 0 (reductions)
  Mm,        // 2*M*N*K from in0 [M,K], in1 [K,N]
  Addmm,     // 2*M*N*K from in1 [M,K], in2 [K,N]
  Bmm,       // 2*B*M*N*K
  SdpaFwd,   // 4*B*H*Sq*Sk*D
  SdpaBwd,   // 2.5 x forward (dQ, dK, dV and the recomputed scores)
};

struct OpInfo {
  std::string_view target;  // "aten.mm.default"
  OpCategory category;
  AliasKind alias;
  CollectiveKind collective;
  bool coalesced;    // a collective over a list of tensors
  bool random;       // draws from the RNG: recomputing it changes results
  bool side_effect;  // must never be removed by dead-code elimination
  FlopFormula flops;
  int8_t min_args;  // positional-arity bounds; max -1 means unbounded
  int8_t max_args;
  int8_t reduce_op_arg;  // collectives: position of reduce_op, group_size, group_name (-1 = none)
  int8_t group_size_arg;
  int8_t group_name_arg;
};

// The row for a target; a shared "unknown" row (category Unknown) when the target is not listed.
const OpInfo& opInfo(Symbol target);
const OpInfo& opInfo(std::string_view target);
bool isKnownOp(Symbol target);
std::string_view categoryName(OpCategory c);
std::string_view collectiveKindName(CollectiveKind k);  // "all_gather", "reduce_scatter", ...
// Every row, in table order (for tests and documentation).
const OpInfo* opInfoTable(size_t* count);

}  // namespace jfx
