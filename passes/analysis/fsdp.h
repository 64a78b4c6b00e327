// FSDP structure of a joint graph: which collectives belong to FSDP (SimpleFSDP-style parameter
// unshard and gradient reduction) and which do not (TP, EP, anything else: left alone).
//
// Unshard chain of a parameter (one per all-gather that matches):
//   placeholder(input=parameter) -> pre: single-input ops (dtype cast, view, padding)
//     -> all_gather_into_tensor -> wait_tensor
//     -> post: the wait's view/copy users, transitively, including split -> getitems -> cat
// An op is "single-input" when it has exactly one distinct node operand apart from input-free
// factory nodes (the zeros of cat(param, zeros) padding), and is a View, Copy or Index op that
// is neither random nor side-effecting. Anything else on the way back (a matmul, an activation,
// another collective, a user input) makes the all-gather non-FSDP: TP collectives consume
// activations, whose ancestry has several inputs. Post nodes must share the wait's phase class
// (forward/loss vs backward), so a backward view of a forward chain is not part of it.
//
// Gradient-reduction chain (one per reduce-scatter that matches):
//   gradient -> pre: single-use single-input ops (cast to fp32) -> reduce_scatter_tensor -> wait
//     -> post: single-use single-input ops, optionally all_reduce -> wait (HSDP) -> graph output,
//     or -> a sum of such reductions (aten.add.Tensor, then views/copies) -> a gradient output:
//     a parameter read k times (tied embedding, ALBERT's shared layer) has k reduce-scatters
//     that autograd adds up; the adds belong to no chain's `post`.
//
// Replica gradient chain (one per all-reduce that matches and belongs to no reduce-scatter's
// chain): data parallelism without sharding, as DDP (SimpleFSDP's `replicate` mode) or a mesh
// dimension that replicates parameters:
//   gradient -> all_reduce -> wait -> post as above (unary ops, a sum of reads) -> gradient output.
// Its all-reduce has role FsdpGradAllReduce, like HSDP's: bucket and schedule treat both alike.
//
// Every search walks single-input chains and is memoized by node id: O(N + E) in all.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "passes/analysis/phase.h"

namespace jfx {

struct FsdpUnshardChain {
  Node* param = nullptr;   // the parameter placeholder
  std::vector<Node*> pre;  // param -> all-gather, program order (may be shared by chains)
  Node* all_gather = nullptr;
  Node* wait = nullptr;
  std::vector<Node*> post;  // the wait's view/copy descendants, program order
  // What reshard=never saves: the last non-view nodes of wait+post (no other non-view chain node
  // downstream of them). One node for a plain chain: the wait, a cast after it, or the cat.
  std::vector<Node*> save_points;
  Phase phase = Phase::Unknown;  // of the all-gather

  // pre, all-gather, wait, post: the nodes reshard-after-forward recomputes.
  std::vector<Node*> nodes() const;
};

struct FsdpGradChain {
  std::vector<Node*> pre;  // gradient -> reduce-scatter, program order (includes an HSDP
                           // all-reduce and its wait that come before the reduce-scatter)
  Node* reduce_scatter = nullptr;
  Node* wait = nullptr;
  std::vector<Node*> post;     // wait -> graph output (includes the HSDP all-reduce and its wait)
  Node* all_reduce = nullptr;  // HSDP replicate-axis all-reduce, when present (before or after)
  size_t output_index = 0;     // position in the output list
  std::string param_fqn;       // from the output spec, when it names a gradient
};

struct ReplicaGradChain {
  Node* all_reduce = nullptr;
  Node* wait = nullptr;
  std::vector<Node*> post;  // wait -> graph output
  size_t output_index = 0;  // position in the output list
  std::string param_fqn;    // from the output spec, when it names a gradient
};

enum class CollectiveRole : uint8_t {
  None,               // not a collective
  FsdpUnshard,        // all-gather of an unshard chain
  FsdpReduceGrad,     // reduce-scatter of a gradient chain
  FsdpGradAllReduce,  // HSDP all-reduce inside a gradient chain, or a replica gradient chain's
  Other,              // TP / EP / anything unmatched: passes leave it alone
};

std::string_view collectiveRoleName(CollectiveRole r);

class FsdpAnalysis {
 public:
  std::vector<FsdpUnshardChain> unshard;        // in all-gather program order
  std::vector<FsdpGradChain> grads;             // in reduce-scatter program order
  std::vector<ReplicaGradChain> replica_grads;  // in all-reduce program order
  std::vector<Node*> other_collectives;         // in program order

  // The unshard chain whose all-gather, wait or post contains `n` (pre nodes can be shared, so
  // they map to the first chain that uses them); nullptr otherwise.
  const FsdpUnshardChain* unshardChainOf(const Node* n) const;
  CollectiveRole roleOf(const Node* collective) const;

 private:
  friend FsdpAnalysis analyzeFsdp(const Graph& g, const PhaseInfo& phases);
  friend class FsdpMatcher;
  friend struct AnalysisTraits<FsdpAnalysis>;
  std::vector<int32_t> chain_of_;     // node id -> index in `unshard`, or -1
  std::vector<CollectiveRole> role_;  // node id -> role
};

FsdpAnalysis analyzeFsdp(const Graph& g, const PhaseInfo& phases);

// The single-input root of `n`: walks back through single-input ops (as defined above) and
// returns the placeholder it reaches, or nullptr. Exposed for tests and for other passes.
Node* singleInputRoot(Node* n);

template <>
struct AnalysisTraits<FsdpAnalysis> {
  static constexpr std::string_view name = "fsdp";
  static FsdpAnalysis compute(const Graph& g, AnalysisManager& am) {
    return analyzeFsdp(g, am.get<PhaseInfo>(g));
  }
  static std::string fingerprint(const Graph& g, const FsdpAnalysis& a);
  static FsdpAnalysis follow(const FsdpAnalysis& a, const NodeTranslation& to);
};

// True for a collective `bucket` made from FSDP members: it carries the fsdp_bucket attribute
// ({"kind", "plan", "members"}; ir/attributes.h), which schedule and split-comm-groups read, since
// a bucketed all-gather no longer has the single-parameter shape this analysis matches.
bool hasFsdpBucketMeta(const Node& n);

}  // namespace jfx
