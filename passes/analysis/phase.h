// Phase analysis: forward, loss or backward for every node of a joint fwd+loss+bwd graph.
//
// Assumes the make_fx convention for outputs: [loss, *gradients]. The output specs say which
// output is the loss and which are gradients; without specs, output 0 is the loss and the others
// are gradients. Phases come from the first rule that applies:
//   1. meta.phase, when set (the exporter wrote it, or a pass that created the node did);
//   2. extra meta "autograd_backward": true -> backward (make_fx under preserve_node_meta);
//   3. structure:
//      - ancestors of the loss value (the loss included) are forward; among them the loss value
//        itself and nodes whose module FQN is "loss" or "loss.*" are loss;
//      - a getitem takes its producer's phase: a projection of a forward op (a dropout mask, an
//        attention logsumexp) is a forward value even when only backward reads it;
//      - any other node that depends on the loss or feeds a gradient output is backward;
//      - what is left (dead or auxiliary values that neither reach the loss nor feed a gradient)
//        is forward.
// Placeholders, get_attr nodes and the output node have no phase (Unknown).
// Cost: O(N + E), two linear sweeps over the program order.
#pragma once

#include <cstdint>
#include <vector>

#include "ir/graph.h"
#include "passes/analysis_manager.h"

namespace jfx {

class PhaseInfo {
 public:
  // A node created after the analysis ran answers with its own meta.phase.
  Phase of(const Node* n) const {
    return n->id() < phases_.size() ? phases_[n->id()] : n->meta().phase;
  }
  bool isBackward(const Node* n) const { return of(n) == Phase::Backward; }
  // Forward or loss: the part of the step that runs before the gradients.
  bool isForwardOrLoss(const Node* n) const {
    Phase p = of(n);
    return p == Phase::Forward || p == Phase::Loss;
  }
  // The loss value (nullptr when the graph has no output).
  Node* lossNode() const { return loss_; }
  // How many nodes got their phase from each rule (for statistics and tests).
  int64_t fromMeta() const { return from_meta_; }
  int64_t fromAutogradFlag() const { return from_flag_; }
  int64_t fromStructure() const { return from_structure_; }
  // Phase by node id, for the nodes that existed when the analysis ran.
  const std::vector<Phase>& byId() const { return phases_; }

 private:
  friend PhaseInfo computePhases(const Graph& g);
  friend struct AnalysisTraits<PhaseInfo>;
  std::vector<Phase> phases_;  // by node id
  Node* loss_ = nullptr;
  int64_t from_meta_ = 0;
  int64_t from_flag_ = 0;
  int64_t from_structure_ = 0;
};

PhaseInfo computePhases(const Graph& g);

// True when the node's extra meta carries "autograd_backward": true.
bool hasAutogradBackwardFlag(const Node& n);

template <>
struct AnalysisTraits<PhaseInfo> {
  static constexpr std::string_view name = "phases";
  static PhaseInfo compute(const Graph& g, AnalysisManager&) { return computePhases(g); }
  static std::string fingerprint(const Graph& g, const PhaseInfo& p);
  static PhaseInfo follow(const PhaseInfo& p, const NodeTranslation& to) {
    PhaseInfo q = p;
    q.loss_ = to(p.loss_);
    return q;
  }
};

}  // namespace jfx
