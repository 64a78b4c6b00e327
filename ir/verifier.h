// Structural verifier. Each failure names the node and the rule it breaks.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "ir/graph.h"
#include "ir/identifier.h"

namespace jfx {

struct VerifyIssue {
  std::string node;  // node name ("" for graph-level problems)
  std::string rule;  // e.g. "topological-order", "collective-wait-pairing"
  std::string message;
  // Where the node was read (Graph::location without the node): "g.jfx:12", "g.json at
  // /nodes/3", "torch.fx graph"; "" for a node made in memory and for graph-level problems.
  std::string where;
  std::string str() const;  // "g.jfx:12: node 'x': [rule] message"
};

struct VerifyOptions {
  // At most one all-gather per parameter per phase (holds after remat / dedup-fsdp-unshard).
  bool one_gather_per_param_per_phase = false;
  // The Graph's own bookkeeping over the whole graph: the name index maps every name back to its
  // node (names are unique), the use lists match the operands and every node's operand slots
  // match the node references in its args and kwargs. Only a bug in the Graph API or a pass
  // breaks it (the API renames or rejects a taken name and alone writes args and operand slots),
  // so the in-process path leaves it to its expensive checks, as it does the unchanged-graph
  // hash: a large part of a full verification (bench/README.md, "Figures behind the code").
  // verifyNodes checks the use lists of the nodes it is given either way (a slot's links are next
  // to it: cheap), and their names only with it (a probe of a name index as large as the graph per
  // node: a cache miss each on large graphs).
  bool ir_invariants = true;
  size_t max_issues = 100;
};

// Rules: identifier (node names, placeholder targets and kwargs keys are Python identifiers,
// get_attr targets attribute paths (isAttributePath): torch.fx writes them into Python source, so a
// graph file must not hold code there), topological-order (operands defined earlier), use-list
// (both directions consistent), unique-name, single-output / output-last, arity (against the
// op-info table where the op is known), collective-wait-pairing (each collective has exactly one
// wait user, each wait reads a collective), collective-shape (all-gather out dim0 = in dim0 x
// group_size; reduce-scatter in dim0 = out dim0 x group_size), group-size (equals the header's size
// for the group), unknown-group, input-info (header inputs vs placeholders), output-info,
// buffer-mutation (buffer_mutation outputs name a buffer input once, match its dtype and shape, and
// are not combined with in-place writes of the same buffer), tensor-size (no negative dimension or
// stride; element count, strides and bytes fit int64: TensorMeta::sizeProblem).
std::vector<VerifyIssue> verifyGraph(const Graph& g, const VerifyOptions& opts = {});

// The per-node rules on `nodes` only, each with its edges both ways: node-list links,
// unique-name, operands (use-list, topological-order) and their use-list entries, the node's own
// uses, identifier, output-last, tensor-size, arity, collective-wait-pairing, collective-shape,
// group-size. With `nodes` = what a pass touched (Graph::takeTouched) this finds what verifyGraph
// would find in those rules, at a cost proportional to the change; the graph-level rules
// (single-output, process groups, input-info, output-info, buffer-mutation, one-gather-per-param)
// need verifyGraph.
std::vector<VerifyIssue> verifyNodes(const Graph& g, const std::vector<const Node*>& nodes,
                                     const VerifyOptions& opts = {});

// The identifier rule alone, over every node: what the commands that do not verify (convert,
// `opt --no-verify`) still check, so that no command writes out a graph whose names are code.
std::vector<VerifyIssue> verifyIdentifiers(const Graph& g, const VerifyOptions& opts = {});

// The rules that read the graph's header, for a pass that edited it (the node check above cannot
// see an edit there break a node nobody touched): process-group, unknown-group and group-size on
// every collective, collective-wait-pairing and collective-shape with them, and output-info.
// O(N) in a walk of the node list, but only collectives are checked. Without `collectives`, the
// header's own rules only: for a pass that kept every process group as it was (added groups, as
// split-comm-groups does), whose collectives that it did not touch still name the same groups.
std::vector<VerifyIssue> verifyHeader(const Graph& g, const VerifyOptions& opts = {},
                                      bool collectives = true);

}  // namespace jfx
