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

}  // namespace jfx
