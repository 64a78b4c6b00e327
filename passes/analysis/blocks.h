// Block analysis: the repeated indexed submodules of the model, the unit that tag-fsdp reshards,
// bucket{plan=blocks} buckets, schedule prefetches and `jointfx analyze` prints. One answer for
// every pass.
//
// Rule, on parameter FQNs (the placeholder's FQN; without one the module FQN of its first user;
// without that its name):
//  - a *container* is a dotted prefix P such that `P.<int>` starts at least two parameter FQNs
//    with two distinct integers ("layers", "transformer.h", "model.layers", "encoder.layer",
//    "stages.0.blocks", "stages"); a module name `<stem>_<int>` is such an index too, after the
//    container `P.<stem>_` (torchvision's `encoder.layers.encoder_layer_3`), but a parameter's
//    own name never is (`weight_ih_l0`); a prefix with a single index inside an indexed entry is
//    one when a sibling of the same pattern is (`stages.0.blocks` beside `stages.1.blocks`:
//    both `stages.#.blocks`, a stack one deep);
//  - parameters an entry holds beside an inner container's blocks (a stage's downsample) are in
//    no block, and where some blocks are modules with parts, a list of single layers with no
//    container around it (a stem of Conv2d and norm) names none: the units a user would wrap;
//  - a parameter's block is `P.<int>` for the innermost container P on its FQN, so
//    `stages.0.blocks.3.conv.weight` is in block `stages.0.blocks.3`, not `stages.0`;
//  - the root module is a container too when FQNs start with two or more integers (a model that
//    is an nn.Sequential: `1.fc1.weight` is in block `1`) and its entries repeat (below); being
//    outermost, it names blocks only where no other container does;
//  - except that a container whose blocks run side by side rather than one after another (the
//    experts of an MoE layer: each expert reads the layer's input, not the previous expert's
//    output) gives way to the next container out, when there is one. "One after another" is read
//    off the graph: the first compute node that reads block k's parameters depends on block
//    k-1's parameters for at least half of the consecutive pairs;
//  - so does a container whose entries are not repeats of one submodule (T5's block.N.layer.M:
//    self-attention, cross-attention, feed-forward): entries repeat when, for some two
//    consecutive indices, the parameter names below one entry include the other's;
//  - and so does a list of single layers, a container whose every parameter sits directly in an
//    entry (`P.<int>.weight`: an nn.Sequential of Linear, activation, Linear inside a Mixer or
//    transformer layer, a GroupNorm-SiLU-Conv stack inside a residual block), when an outer
//    container would name a block: that layer, not each Linear, is the unit;
//  - blocks are ordered by first use in forward (the first compute node reading one of their
//    parameters; views, casts and collectives on the parameter itself are not compute, nor is a
//    node that reads several parameters and no activation, up to 1024 of them: a bucket's
//    copy-in, its gather and the pieces split from it, so bucketing leaves the answer as it was).
// Parameters outside every block are listed apart; each pass attaches them by its own documented
// rule (tag-fsdp: head and tail of the model; bucket: top-level modules and the head group).
//
// Cost: the FQN scan is O(total FQN length x log); the sequential test walks back from each
// block's first compute node, never past the previous block's first compute node, so each
// container costs about one pass over the graph: O(N + E) per nesting level.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "ir/graph.h"
#include "passes/analysis/phase.h"

namespace jfx {

// The most parameters a value may be computed from, with no activation, and still count as
// their value rather than compute reading them (a bucket's copy-in of a block's parameters).
inline constexpr size_t kMaxParamsPerValue = 1024;

struct Block {
  std::string name;           // "layers.3", "transformer.h.0", "stages.0.blocks.3"
  std::string container;      // "layers", "transformer.h", "stages.0.blocks"; "" for the root
  int64_t index = 0;          // the integer after the container
  std::vector<Node*> params;  // placeholder order
  // The first forward compute node reading the block's parameters (of any node, when none is in
  // forward); null when nothing reads them. A node, not a step, so that passes which insert
  // nodes elsewhere (remat's backward re-gathers) leave it as it was.
  const Node* first_user = nullptr;
};

class BlockAnalysis {
 public:
  std::vector<Block> blocks;            // by first use in forward, then name
  std::vector<std::string> containers;  // the containers that name blocks, sorted
  // Containers dropped because their blocks run side by side inside an outer block (MoE experts).
  std::vector<std::string> parallel_containers;
  // Containers dropped because their entries are different modules, not repeats (T5's
  // encoder.block.0.layer); only those that gave way to an outer container.
  std::vector<std::string> heterogeneous_containers;
  int64_t parameters = 0;            // parameter placeholders in the graph
  int64_t parameters_in_blocks = 0;  // of which inside a block

  // Index into `blocks` of a parameter placeholder's block, or -1.
  int32_t blockOf(const Node* param) const;
  // Ids of the blocks' first users, sorted: a pass that erases one of them cannot keep this
  // analysis.
  std::vector<uint32_t> firstUserIds() const;
  // Index into `blocks` of the block a dotted FQN lies in ("layers.3.attention.wq.weight" or the
  // module "layers.3.attention"), or -1.
  int32_t blockOfFqn(std::string_view fqn) const;
  // One line for remarks: "12 blocks in layers (layers.0 .. layers.11), 130 of 147 parameters".
  std::string summary() const;
  // The remark a pass gives when there is no block: names what was looked for and what was found.
  std::string noBlocksMessage(std::string_view pass) const;

 private:
  friend BlockAnalysis analyzeBlocks(const Graph& g, const PhaseInfo& phases);
  std::vector<int32_t> of_param_;  // by node id
  std::unordered_map<std::string, int32_t> by_name_;
};

BlockAnalysis analyzeBlocks(const Graph& g, const PhaseInfo& phases);
BlockAnalysis analyzeBlocks(const Graph& g);  // computes the phases itself

// The naming rule alone, on a set of FQNs (for tests and tools): which containers name blocks and
// each FQN's block ("" when none). `parallel(container)` marks containers whose blocks run side
// by side; such a container is used only where no other container encloses the FQN.
struct BlockNaming {
  std::vector<std::string> containers;     // sorted
  std::vector<std::string> block_of;       // per input FQN
  std::vector<std::string> heterogeneous;  // candidates whose entries are not repeats, sorted
};
BlockNaming nameBlocks(const std::vector<std::string>& fqns,
                       const std::function<bool(const std::string&)>& parallel = {});

// The block an FQN lies in among `containers` (innermost), "" when none.
std::string blockNameOf(std::string_view fqn, const std::vector<std::string>& containers);

// A container as messages name it: "the root module" for "".
std::string containerLabel(const std::string& container);

template <>
struct AnalysisTraits<BlockAnalysis> {
  static constexpr std::string_view name = "blocks";
  static BlockAnalysis compute(const Graph& g, AnalysisManager& am) {
    return analyzeBlocks(g, am.get<PhaseInfo>(g));
  }
  static std::string fingerprint(const Graph& g, const BlockAnalysis& a);
  static BlockAnalysis follow(const BlockAnalysis& a, const NodeTranslation& to) {
    BlockAnalysis b = a;
    for (Block& block : b.blocks) {
      to.all(block.params);
      block.first_user = to(block.first_user);
    }
    return b;
  }
};

}  // namespace jfx
