// The analysis manager: caching, invalidation by preservation and dependency, the pass manager
// handing the cache along a pipeline, and the --verify-full check of preservation promises.
#include <catch2/catch.hpp>
#include <filesystem>
#include <functional>
#include <sstream>

#include "ir/io.h"
#include "passes/analysis/blocks.h"
#include "passes/analysis/fsdp.h"
#include "passes/analysis/memory.h"
#include "passes/analysis/mutation.h"
#include "passes/analysis/phase.h"
#include "passes/pass_manager.h"
#include "tests/unit/test_util.h"

using namespace jfx;
using jfx::test::errorOf;
using jfx::test::LambdaPass;

namespace {

std::unique_ptr<Graph> traced(const std::string& name) {
  return loadGraph(std::string(JFX_SOURCE_DIR) + "/tests/data/traced/" + name + ".json");
}

PassManagerOptions quiet(std::ostream& sink) {
  PassManagerOptions o;
  o.out = &sink;
  return o;
}

}  // namespace

TEST_CASE("analysis manager: results are cached and equal the direct computation",
          "[analysis-manager]") {
  for (const char* name : {"fsdp_w2", "gpt2_w2", "moe_w2", "convbn_w2"}) {
    INFO(name);
    auto g = traced(name);
    AnalysisManager am;
    const FsdpAnalysis& fsdp = am.get<FsdpAnalysis>(*g);
    const BlockAnalysis& blocks = am.get<BlockAnalysis>(*g);
    const MemoryProfile& mem = am.get<MemoryProfile>(*g);
    // The same objects on a second request, computed once each (phases once, shared by three).
    CHECK(&am.get<FsdpAnalysis>(*g) == &fsdp);
    CHECK(&am.get<BlockAnalysis>(*g) == &blocks);
    CHECK(&am.get<MemoryProfile>(*g) == &mem);
    CHECK(am.counts().at("phases").computed == 1);
    CHECK(am.counts().at("phases").reused == 2);
    CHECK(am.counts().at("fsdp").computed == 1);
    CHECK(am.counts().at("fsdp").reused == 1);

    const PhaseInfo direct = computePhases(*g);
    CHECK(AnalysisTraits<PhaseInfo>::fingerprint(*g, am.get<PhaseInfo>(*g)) ==
          AnalysisTraits<PhaseInfo>::fingerprint(*g, direct));
    CHECK(AnalysisTraits<FsdpAnalysis>::fingerprint(*g, fsdp) ==
          AnalysisTraits<FsdpAnalysis>::fingerprint(*g, analyzeFsdp(*g, direct)));
    CHECK(AnalysisTraits<BlockAnalysis>::fingerprint(*g, blocks) ==
          AnalysisTraits<BlockAnalysis>::fingerprint(*g, analyzeBlocks(*g)));
    CHECK(AnalysisTraits<MemoryProfile>::fingerprint(*g, mem) ==
          AnalysisTraits<MemoryProfile>::fingerprint(*g, analyzeMemory(*g, direct)));
    CHECK_FALSE(fsdp.unshard.empty());
  }
}

TEST_CASE("analysis manager: invalidation keeps what is preserved, drops what depends on the rest",
          "[analysis-manager]") {
  auto g = traced("fsdp_w2");
  AnalysisManager am;
  auto fill = [&] {
    am.get<FsdpAnalysis>(*g);  // and phases, as its dependency
    am.get<BlockAnalysis>(*g);
    am.get<MemoryProfile>(*g);
  };
  using Names = std::vector<std::string_view>;
  fill();
  CHECK(am.cachedNames() == Names{"blocks", "fsdp", "memory", "phases"});

  am.invalidate(PreservedAnalyses());
  CHECK(am.cachedNames().empty());

  fill();
  am.invalidate(PreservedAnalyses().preserveAll());
  CHECK(am.cachedNames() == Names{"blocks", "fsdp", "memory", "phases"});

  // Phases kept: the others were dropped.
  am.invalidate(PreservedAnalyses().preserve<PhaseInfo>());
  CHECK(am.cachedNames() == Names{"phases"});

  // fsdp, blocks and memory were computed from phases. Dropping phases drops memory, which is
  // not preserved; fsdp and blocks are, and a result refers to no other result, so they stay.
  fill();
  am.invalidate(PreservedAnalyses().preserve<FsdpAnalysis>().preserve<BlockAnalysis>());
  CHECK(am.cachedNames() == Names{"blocks", "fsdp"});
  fill();  // phases and memory again; fsdp and blocks from the cache
  CHECK(am.counts().at("fsdp").computed == 3);
  CHECK(am.counts().at("blocks").computed == 3);

  am.invalidate(PreservedAnalyses().preserve<PhaseInfo>().preserve<FsdpAnalysis>());
  CHECK(am.cachedNames() == Names{"fsdp", "phases"});
  fill();
  CHECK(am.counts().at("fsdp").computed == 3);  // kept by each of the last two invalidations
  CHECK(am.counts().at("blocks").computed == 4);
}

TEST_CASE("analysis manager: one graph per manager", "[analysis-manager]") {
  auto a = traced("fsdp_w2");
  auto b = traced("fsdp_w2");
  AnalysisManager am;
  am.get<PhaseInfo>(*a);
  CHECK_THAT(errorOf([&] { am.get<PhaseInfo>(*b); }),
             Catch::Contains("asked about a second graph"));
  am.clear();
  CHECK_NOTHROW(am.get<PhaseInfo>(*b));
}

TEST_CASE("analysis manager: the pass manager hands the cache along and invalidates on change",
          "[analysis-manager]") {
  auto g = traced("fsdp_w2");
  std::ostringstream sink;
  // tag-fsdp only sets recompute tags and preserves everything; remat then reuses its phases.
  PipelineResult r =
      runPipeline(*g, resolvePipeline("tag-fsdp{reshard=always},remat"), quiet(sink));
  REQUIRE(r.passes[0].changed);
  CHECK(r.analyses.at("phases").computed == 1);
  CHECK(r.analyses.at("phases").reused >= 2);  // fsdp and blocks in tag-fsdp, remat

  // A changing pass that preserves nothing: the next pass computes again.
  auto h = traced("fsdp_w2");
  int computed_in_second = -1;
  std::vector<ConfiguredPass> passes;
  passes.push_back({std::make_unique<LambdaPass>("touch",
                                                 [](Graph& graph, PassContext& ctx) {
                                                   ctx.analyses.get<PhaseInfo>(graph);
                                                   graph.rename(graph.first(), "touched_input");
                                                   return true;
                                                 }),
                    ""});
  passes.push_back({std::make_unique<LambdaPass>("look",
                                                 [&](Graph& graph, PassContext& ctx) {
                                                   ctx.analyses.get<PhaseInfo>(graph);
                                                   computed_in_second = static_cast<int>(
                                                       ctx.analyses.counts().at("phases").computed);
                                                   return false;
                                                 }),
                    ""});
  PassManagerOptions o = quiet(sink);
  o.verify_each = false;
  runPasses(*h, passes, o);
  CHECK(computed_in_second == 2);

  // The same, but the first pass declares phases preserved: no second computation.
  auto k = traced("fsdp_w2");
  passes[0] = {std::make_unique<LambdaPass>("touch",
                                            [](Graph& graph, PassContext& ctx) {
                                              ctx.analyses.get<PhaseInfo>(graph);
                                              ctx.preserve<PhaseInfo>();
                                              graph.rename(graph.first(), "renamed_input");
                                              return true;
                                            }),
               ""};
  runPasses(*k, passes, o);
  CHECK(computed_in_second == 1);
}

TEST_CASE("analysis manager: the in-place write analysis is shared by dedup, bucket and schedule",
          "[analysis-manager]") {
  // dedup changes nothing, so bucket reads dedup's result. The graph writes nothing in place and
  // bucket makes no writer, so bucket hands the answer on and schedule reads it too.
  auto g = traced("fsdp_w2");
  std::ostringstream sink;
  PassManagerOptions checked = quiet(sink);
  checked.verify_full_each = true;  // recomputes what a pass kept and compares: throws if broken
  PipelineResult r =
      runPipeline(*g, resolvePipeline("dedup-fsdp-unshard,bucket,schedule"), checked);
  REQUIRE_FALSE(r.passes[0].changed);
  REQUIRE(r.passes[1].changed);
  CHECK(r.analyses.at("written").computed == 1);
  CHECK(r.analyses.at("written").provided == 1);
  CHECK(r.analyses.at("written").reused >= 2);

  // A graph that writes in place (BatchNorm's running statistics): bucket's output has other
  // nodes, whose storages the analysis must root, so schedule computes it again.
  auto b = loadGraph(std::string(JFX_SOURCE_DIR) + "/tests/data/buffers/convbn_w1.json");
  AnalysisManager am;
  REQUIRE(am.get<WrittenStorage>(*b).any());
  PipelineResult rb =
      runPipeline(*b, resolvePipeline("dedup-fsdp-unshard,bucket,schedule"), checked);
  REQUIRE(rb.passes[1].changed);
  CHECK(rb.analyses.at("written").computed >= 2);
  CHECK(rb.analyses.at("written").provided == 0);

  // split-comm-groups keeps it: with --verify-full the pass manager recomputes it on the output
  // and compares (the "look" pass asks for it in between).
  auto look = [](std::string name) {
    return ConfiguredPass{std::make_unique<LambdaPass>(name,
                                                       [](Graph& graph, PassContext& ctx) {
                                                         ctx.analyses.get<WrittenStorage>(graph);
                                                         return false;
                                                       }),
                          ""};
  };
  auto h = traced("fsdp_w2");
  std::vector<ConfiguredPass> passes = buildPipeline(resolvePipeline("bucket"));
  passes.push_back(look("look"));
  for (auto& p : buildPipeline(resolvePipeline("split-comm-groups")))
    passes.push_back(std::move(p));
  passes.push_back(look("look-again"));
  PipelineResult split = runPasses(*h, passes, checked);
  REQUIRE(split.passes[2].changed);
  // bucket's input; bucket hands on its output's, which look and look-again read.
  CHECK(split.analyses.at("written").computed == 1);
  CHECK(split.analyses.at("written").provided == 1);
  CHECK(split.analyses.at("written").reused == 3);
}

TEST_CASE("analysis manager: remat and bucket keep the block analysis", "[analysis-manager]") {
  // tag-fsdp computes it; remat's re-gathers sit in backward and bucket's copy-ins read a block's
  // parameters and no activation, so both keep it and schedule reads the same answer. gpt2 and
  // vit take bucket's memory rounds (a rollback, then the rewrite again).
  for (const char* name : {"fsdp_w2", "gpt2_w2", "moe_w2", "vit_w2"}) {
    INFO(name);
    auto g = traced(name);
    std::ostringstream sink;
    PassManagerOptions checked = quiet(sink);
    checked.verify_full_each = true;
    PipelineResult r = runPipeline(
        *g, resolvePipeline(std::string(JFX_SOURCE_DIR) + "/configs/pipelines/default.json"),
        checked);
    CHECK(r.analyses.at("blocks").computed == 1);
    CHECK(r.analyses.at("blocks").reused >= 2);
  }
  // Buckets of several blocks (group=2) merge what the analysis reads as each block's first
  // user: bucket keeps nothing, and schedule computes it again.
  auto g = traced("fsdp_w2");
  std::ostringstream sink;
  PassManagerOptions checked = quiet(sink);
  checked.verify_full_each = true;
  PipelineResult r = runPipeline(
      *g, resolvePipeline("tag-fsdp,remat,bucket{group=2,memory-limit=none},schedule"), checked);
  CHECK(r.analyses.at("blocks").computed == 2);
}

TEST_CASE("analysis manager: remat and bucket hand the phases on, on every traced fixture",
          "[analysis-manager]") {
  // --verify-full compares the kept result with a fresh analysis after each pass (every live
  // node's answer and the loss), so a clone, a bucket's node or a rewired user whose phase the
  // kept result gets wrong fails here; the passes after remat read the kept phases instead of
  // computing them again (bucket profiles its output with them).
  std::vector<std::filesystem::path> files;
  for (const auto& e :
       std::filesystem::directory_iterator(std::string(JFX_SOURCE_DIR) + "/tests/data/traced"))
    if (e.path().extension() == ".json") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  REQUIRE(files.size() >= 20);
  int rematerialized = 0, bucketed = 0;
  for (const auto& file : files) {
    INFO(file.stem().string());
    auto g = loadGraph(file.string());
    // The exporter writes every node's phase, which a clone copies; without it the structure
    // rules decide, and they are what the promise is about.
    g->forEach([](Node* n) { n->meta().phase = Phase::Unknown; });
    std::ostringstream sink;
    PassManagerOptions checked = quiet(sink);
    checked.verify_full_each = true;
    auto copy = g->copy();
    PipelineResult r =
        runPipeline(*g, resolvePipeline("dce,tag-fsdp,remat,dedup-fsdp-unshard"), checked);
    CHECK(r.analyses.at("phases").computed == 1);
    for (const PassRecord& rec : r.passes)
      if (rec.name == "remat" && rec.changed) ++rematerialized;
    // The whole default pipeline: bucket keeps the phases (it profiles its output with them and
    // hands them on) unless its memory bound rolled the rewrite back.
    PipelineResult all = runPipeline(
        *copy, resolvePipeline(std::string(JFX_SOURCE_DIR) + "/configs/pipelines/default.json"),
        checked);
    for (const PassRecord& rec : all.passes)
      if (rec.name == "bucket" && rec.changed && !rec.stats.count("memory-rounds")) ++bucketed;
  }
  // Most fixtures reshard after forward and have buckets to form within the bound, so remat and
  // bucket rewrote them (the promises were tested).
  CHECK(rematerialized >= 15);
  CHECK(bucketed >= 15);
}

TEST_CASE("analysis manager: --verify-full catches a broken preservation promise",
          "[analysis-manager]") {
  // The pass moves a forward node's phase to backward, which the phase analysis reads, and
  // claims phases preserved.
  auto lying = [](Graph& g, PassContext& ctx) {
    const PhaseInfo& phases = ctx.analyses.get<PhaseInfo>(g);
    for (Node* n = g.first(); n; n = n->next())
      if (n->op() == OpKind::CallFunction && phases.isForwardOrLoss(n)) {
        n->meta().phase = Phase::Backward;
        break;
      }
    ctx.preserve<PhaseInfo>();
    return true;
  };
  std::ostringstream sink;
  PassManagerOptions o = quiet(sink);
  o.verify_full_each = true;
  {
    auto g = traced("fsdp_w2");
    std::vector<ConfiguredPass> passes;
    passes.push_back({std::make_unique<LambdaPass>("lying", lying), ""});
    CHECK_THAT(errorOf([&] { runPasses(*g, passes, o); }),
               Catch::Contains("pass 'lying' (#1) failed: internal error: it declares the "
                               "analyses {phases} preserved"));
  }
  // The real passes keep their promises on traced graphs of several families.
  for (const char* name : {"fsdp_w2", "gpt2_w2", "moe_w2", "vit_w2", "sac_w2"}) {
    INFO(name);
    auto g = traced(name);
    CHECK_NOTHROW(runPipeline(
        *g, resolvePipeline(std::string(JFX_SOURCE_DIR) + "/configs/pipelines/default.json"), o));
  }
}

TEST_CASE("analysis manager: a cached result of a graph that changed since is computed afresh",
          "[analysis-manager]") {
  auto g = traced("fsdp_w2");
  AnalysisManager am;
  const PhaseInfo& before = am.get<PhaseInfo>(*g);
  const std::vector<Phase> by_id = before.byId();
  // A node made after the analysis ran: the old result does not know it, a fresh one does.
  Node* extra = g->createCall("aten.neg.default", {Arg::ofNode(g->first())}, {}, g->outputNode(),
                              "extra_neg");
  const PhaseInfo& after = am.get<PhaseInfo>(*g);
  CHECK(am.counts().at("phases").computed == 2);
  CHECK(am.counts().at("phases").stale == 1);
  CHECK(after.byId().size() > extra->id());
  // The stale result is still alive for a pass that held on to it.
  CHECK(before.byId() == by_id);
  // Restamped (the pass manager's word that it still holds), the cache answers again.
  g->rename(extra, "renamed_extra");
  am.restamp(*g);
  CHECK(&am.get<PhaseInfo>(*g) == &after);
  CHECK(am.counts().at("phases").computed == 2);
}

TEST_CASE("analysis manager: a provided result is served until the graph changes",
          "[analysis-manager]") {
  auto g = traced("fsdp_w2");
  AnalysisManager am;
  const PhaseInfo& held = am.get<PhaseInfo>(*g);
  const std::string fp = AnalysisTraits<PhaseInfo>::fingerprint(*g, held);
  am.provide<PhaseInfo>(*g, computePhases(*g));
  CHECK(am.counts().at("phases").computed == 1);
  CHECK(am.counts().at("phases").provided == 1);
  // The replaced result stays alive for whoever still holds it.
  CHECK(AnalysisTraits<PhaseInfo>::fingerprint(*g, held) == fp);
  const PhaseInfo& got = am.get<PhaseInfo>(*g);
  CHECK(&got != &held);
  CHECK(am.counts().at("phases").computed == 1);
  CHECK(am.counts().at("phases").reused == 1);
  g->createCall("aten.neg.default", {Arg::ofNode(g->first())}, {}, g->outputNode(), "extra_neg");
  am.get<PhaseInfo>(*g);
  CHECK(am.counts().at("phases").computed == 2);
}

TEST_CASE("analysis manager: schedule reuses the memory profile bucket checked its bound on",
          "[analysis-manager]") {
  // Graphs whose buckets all fit the default bound (where some do not, bucket settles the plan
  // on copies and has no profile of its own output).
  for (const char* name : {"fsdp_w2", "moe_w2"}) {
    INFO(name);
    auto g = traced(name);
    std::ostringstream sink;
    PipelineResult r = runPipeline(
        *g, resolvePipeline(std::string(JFX_SOURCE_DIR) + "/configs/pipelines/default.json"),
        quiet(sink));
    // bucket computes the profile of its input and hands over that of its output, which
    // split-comm-groups preserves and schedule reads twice (memory-limit=reference: the input's
    // peak, the floor of the bound; then the scheduler its curve).
    CHECK(r.analyses.at("memory").computed == 1);
    CHECK(r.analyses.at("memory").provided == 1);
    CHECK(r.analyses.at("memory").reused == 2);
  }
}
