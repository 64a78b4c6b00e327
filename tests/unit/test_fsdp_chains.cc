// ir/fsdp_chains.h on traced graphs: every parameter placeholder of an FSDP graph reaches its
// unshard all-gather, and its gradient output comes from a reduce-scatter, before and after the
// default pipeline (whose bucketing puts a cat between the parameters and the gathers).
#include <catch2/catch.hpp>

#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "ir/collectives.h"
#include "ir/fsdp_chains.h"
#include "ir/io.h"
#include "ir/text_format.h"
#include "ir/verifier.h"
#include "passes/analysis/fsdp.h"
#include "passes/analysis/phase.h"
#include "passes/pass_manager.h"

namespace jfx {
namespace {

std::unique_ptr<Graph> traced(const std::string& name) {
  return loadGraph(std::string(JFX_SOURCE_DIR) + "/tests/data/traced/" + name + ".json");
}

void runDefaultPipeline(Graph& g) {
  std::ostringstream sink;
  PassManagerOptions opts;
  opts.out = &sink;
  runPipeline(g, resolvePipeline("default"), opts);
}

// What the checks below saw, so a test can also assert the walks were exercised.
struct ChainCounts {
  size_t params = 0;
  size_t gathered_through_cat = 0;  // gathers whose input chain holds a cat (bucketed)
  size_t accumulated = 0;           // gradients summed from two reduce-scatters (tied weights)
};

bool chainHasCat(const Node* gather) {
  for (const Node* n = gather->input(0); n && n->op() == OpKind::CallFunction;
       n = n->inputs().empty() ? nullptr : n->input(0))
    if (n->is("aten.cat.default")) return true;
  return false;
}

// The gradient output of parameter `fqn` (the header's output specs).
const Node* gradientOutput(const Graph& g, std::string_view fqn) {
  const auto& specs = g.outputSpecs();
  const auto& items = g.outputNode()->arg(0).items();
  for (size_t k = 0; k < specs.size() && k < items.size(); ++k)
    if (specs[k].kind == OutputKind::Gradient && specs[k].fqn == fqn) return items[k].node();
  return nullptr;
}

std::vector<int64_t> groupRanks(const Graph& g, const Node& collective) {
  for (const ProcessGroupInfo& pg : g.processGroups())
    if (pg.name == collectiveGroupName(collective)) return pg.ranks;
  FAIL("no process group named " << collectiveGroupName(collective));
  return {};
}

ChainCounts checkEveryParameter(const Graph& g) {
  ChainCounts counts;
  for (const Node* ph : g.placeholders()) {
    if (ph->inputKind() != InputKind::Parameter) continue;
    ++counts.params;
    INFO("parameter " << ph->name() << " (" << ph->inputFqn() << ")");
    const Node* gather = unshardGatherOf(*ph);
    REQUIRE(gather);
    CHECK(collectiveKind(*gather) == CollectiveKind::AllGather);
    if (chainHasCat(gather)) ++counts.gathered_through_cat;
    const Node* scatter = parameterGradientScatter(g, ph->inputFqn());
    if (!scatter) {
      // A tied weight used twice: its gradient is the sum of two reduce-scattered gradients,
      // which is no single reduce-scatter's output.
      const Node* grad = gradientOutput(g, ph->inputFqn());
      REQUIRE(grad);
      REQUIRE(grad->is("aten.add.Tensor"));
      for (const Node* part : grad->inputs()) {
        const Node* rs = gradientScatterOf(*part);
        REQUIRE(rs);
        CHECK(collectiveKind(*rs) == CollectiveKind::ReduceScatter);
      }
      ++counts.accumulated;
      continue;
    }
    CHECK(collectiveKind(*scatter) == CollectiveKind::ReduceScatter);
    // Gather and scatter run over the same ranks: the parameter's FSDP group (split-comm-groups
    // gives the reduce-scatters a copy of it under another name).
    CHECK(groupRanks(g, *gather) == groupRanks(g, *scatter));
  }
  return counts;
}

}  // namespace

TEST_CASE("fsdp chains: every parameter has its gather and gradient reduce-scatter", "[fsdp]") {
  struct Case {
    const char* fixture;
    size_t tied;  // parameters whose gradient sums two reduce-scatters
  };
  for (const Case& c :
       {Case{"fsdp_w2", 0}, Case{"fsdp_tp_w4", 0}, Case{"bf16_w2", 0}, Case{"gpt2_w2", 1}}) {
    INFO(c.fixture);
    auto g = traced(c.fixture);
    ChainCounts before = checkEveryParameter(*g);
    CHECK(before.params > 1);
    CHECK(before.accumulated == c.tied);
    runDefaultPipeline(*g);
    ChainCounts after = checkEveryParameter(*g);
    CHECK(after.params == before.params);
    CHECK(after.accumulated == c.tied);
    // The default pipeline buckets the gathers: the walks go through the bucket's cat.
    CHECK(after.gathered_through_cat > before.gathered_through_cat);
  }
}

TEST_CASE("fsdp chains: inputs and outputs outside FSDP have none", "[fsdp]") {
  auto g = traced("fsdp_w2");
  size_t users = 0;
  for (const Node* ph : g->placeholders())
    if (ph->inputKind() == InputKind::UserInput) {
      ++users;
      CHECK_FALSE(unshardGatherOf(*ph));
    }
  CHECK(users > 0);
  const auto& specs = g->outputSpecs();
  const auto& items = g->outputNode()->arg(0).items();
  size_t losses = 0;
  for (size_t k = 0; k < specs.size(); ++k)
    if (specs[k].kind == OutputKind::Loss) {
      ++losses;
      CHECK_FALSE(gradientScatterOf(*items[k].node()));
    }
  CHECK(losses == 1);
  CHECK_FALSE(parameterGradientScatter(*g, "no.such.parameter"));
}

// A shard padded to the gather's size (cat with zeros), then cast: the verifier's one-gather rule
// used to follow only single-input copies and views, so it missed the padded chain that
// FsdpAnalysis and the runtime follow. One definition (ir/fsdp_chains.h) for all three.
TEST_CASE("fsdp chains: a padded, cast shard is followed alike by every walk", "[fsdp]") {
  const char* text = R"(jointfx.graph 1
group "0" size=2 ranks=[0, 1]
outputs [loss]
%w : f32[3, 8] = placeholder {input=parameter, fqn="w"}
%x : f32[2, 8] = placeholder {input=user_input}
%pad : f32[1, 8] = aten.zeros.default([1, 8]) {phase=forward}
%padded : f32[4, 8] = aten.cat.default([%w, %pad]) {phase=forward}
%cast : bf16[4, 8] = aten._to_copy.default(%padded, dtype=torch.bfloat16) {phase=forward}
%ag : bf16[8, 8] = _c10d_functional.all_gather_into_tensor.default(%cast, 2, "0") {phase=forward}
%wait : bf16[8, 8] = _c10d_functional.wait_tensor.default(%ag) {phase=forward}
%up : f32[8, 8] = aten._to_copy.default(%wait, dtype=torch.float32) {phase=forward}
%mm : f32[2, 8] = aten.mm.default(%x, %up) {phase=forward}
%ag2 : bf16[8, 8] = _c10d_functional.all_gather_into_tensor.default(%cast, 2, "0") {phase=forward}
%wait2 : bf16[8, 8] = _c10d_functional.wait_tensor.default(%ag2) {phase=forward}
%up2 : f32[8, 8] = aten._to_copy.default(%wait2, dtype=torch.float32) {phase=forward}
%mm2 : f32[2, 8] = aten.mm.default(%mm, %up2) {phase=forward}
%loss : f32[] = aten.sum.default(%mm2) {phase=loss}
%output = output([%loss])
)";
  auto g = parseTextGraph(text, "padded.jfx");
  const Node* w = g->findNode("w");
  const Node* ag = g->findNode("ag");
  const Node* ag2 = g->findNode("ag2");
  REQUIRE((w && ag && ag2));
  // The runtime's query, forward from the parameter.
  CHECK(unshardGatherOf(*w) == ag);
  // The root-parameter query, back from each gather's input.
  CHECK(shardParameterOf(*ag->input(0)) == w);
  CHECK(unshardChainInput(*g->findNode("padded")) == w);  // the zeros are padding, not data
  // The passes' analysis: both gathers unshard w, through the cast and the pad.
  FsdpAnalysis fsdp = analyzeFsdp(*g, computePhases(*g));
  REQUIRE(fsdp.unshard.size() == 2);
  for (const auto& chain : fsdp.unshard) {
    CHECK(chain.param == w);
    CHECK(chain.pre.size() == 2);  // padded, cast
  }
  // The verifier's rule: w is gathered twice in forward.
  auto issues = verifyGraph(*g, {.one_gather_per_param_per_phase = true});
  REQUIRE(issues.size() == 1);
  CHECK(issues[0].node == "ag2");
  CHECK(issues[0].rule == "one-gather-per-param");
}

// The three walks agree on traced graphs of several families (TP, bf16 casts, padded shards,
// tied weights, MoE, a vision transformer, torchtitan's own tracer), before and after the default
// pipeline: every chain FsdpAnalysis matches has the root shardParameterOf finds, and the gather
// the runtime finds for a parameter is one of that parameter's chains.
TEST_CASE("fsdp chains: analysis, verifier and runtime walks agree on traced graphs", "[fsdp]") {
  for (const char* fixture : {"fsdp_tp_w4", "bf16_w2", "padding_w2", "gpt2_w2", "hf_qwen3_moe_w2",
                              "timm_vit_w2", "titan_qwen3_w2"}) {
    INFO(fixture);
    auto g = traced(fixture);
    for (bool optimized : {false, true}) {
      INFO("after the default pipeline: " << optimized);
      if (optimized) runDefaultPipeline(*g);
      FsdpAnalysis fsdp = analyzeFsdp(*g, computePhases(*g));
      // After the pipeline a bucketed gather (a cat of several shards) is no single
      // parameter's chain: a graph may have none left.
      if (!optimized) REQUIRE(!fsdp.unshard.empty());
      std::vector<const Node*> gathers_of_param(g->maxId(), nullptr);
      for (const auto& chain : fsdp.unshard) {
        const Node* in = chain.all_gather->input(0);
        CHECK(shardParameterOf(*in) == chain.param);
        if (!gathers_of_param[chain.param->id()] ||
            chain.all_gather->isBefore(gathers_of_param[chain.param->id()]))
          gathers_of_param[chain.param->id()] = chain.all_gather;
      }
      size_t checked = 0;
      for (const Node* ph : g->placeholders()) {
        const Node* first = gathers_of_param[ph->id()];
        if (!first) continue;
        const Node* found = unshardGatherOf(*ph);
        REQUIRE(found);
        // Unbucketed, the runtime's gather is the analysis's first chain of the parameter; a
        // bucketed gather (a cat of several shards) is no single parameter's chain.
        if (shardParameterOf(*found->input(0))) CHECK(found == first);
        ++checked;
      }
      CHECK((checked > 0) == !fsdp.unshard.empty());
    }
  }
}

}  // namespace jfx
