// The pass manager's instrumentation (passes/instrumentation.h), nested pipelines and forks whose
// analyses follow the copy (PassContext::runPipeline, PassContext::fork), and errors passes
// locate at a node (PassContext::emitError).
#include <catch2/catch.hpp>
#include <map>
#include <string>
#include <vector>

#include "ir/hash.h"
#include "ir/io.h"
#include "passes/analysis/fsdp.h"
#include "passes/analysis/phase.h"
#include "passes/pass_manager.h"
#include "tests/unit/test_util.h"

using namespace jfx;
using jfx::test::errorOf;
using jfx::test::LambdaPass;

namespace {

std::unique_ptr<Graph> traced(const std::string& name) {
  return loadGraph(std::string(JFX_SOURCE_DIR) + "/tests/data/traced/" + name);
}

// x -> neg -> (dead) exp -> (dead) abs; output(neg)
struct Small {
  Graph g;
  Small() {
    Node* x = g.create(OpKind::Placeholder, Symbol::intern("x"), {}, {}, "x");
    Node* neg = g.createCall("aten.neg.default", {Arg::ofNode(x)});
    Node* e = g.createCall("aten.exp.default", {Arg::ofNode(neg)});
    g.createCall("aten.abs.default", {Arg::ofNode(e)});
    g.create(OpKind::Output, Symbol::intern("output"), {Arg::ofList({Arg::ofNode(neg)})}, {},
             "output");
  }
};

// Writes down every hook call.
class Recorder : public PassInstrumentation {
 public:
  std::vector<std::string> events;
  bool sizes = true;
  void beforePipeline(const PipelineRun& p, Graph&) override {
    std::string names;
    for (std::string_view n : p.passes)
      names += (names.empty() ? "" : ",") + std::string(n);
    events.push_back(indent(p.depth) + "pipeline [" + names + "]");
  }
  void afterPipeline(const PipelineRun& p, Graph&) override {
    events.push_back(indent(p.depth) + "end");
  }
  void beforePass(const PassRun& r, Graph& g) override {
    events.push_back(indent(r.depth) + "before " + r.label() + size(g));
  }
  void afterPass(const PassRun& r, Graph& g) override {
    events.push_back(indent(r.depth) + "after " + r.label() + (r.changed ? " changed" : "") +
                     size(g));
  }
  std::string passFailed(const PassRun& r, const Graph&) override {
    events.push_back(indent(r.depth) + "failed " + r.label());
    return "\n(recorded)";
  }

 private:
  static std::string indent(int depth) { return std::string(2 * static_cast<size_t>(depth), ' '); }
  std::string size(const Graph& g) const {
    return sizes ? " size " + std::to_string(g.size()) : std::string();
  }
};

std::vector<ConfiguredPass> passes(
    std::vector<std::pair<std::string, std::function<bool(Graph&, PassContext&)>>> list) {
  std::vector<ConfiguredPass> out;
  for (auto& [name, body] : list)
    out.push_back({std::make_unique<LambdaPass>(name, std::move(body)), ""});
  return out;
}

}  // namespace

TEST_CASE("instrumentation: observes every pass, nested pipelines' too", "[instrumentation]") {
  Small s;
  Recorder rec;
  PassManagerOptions opts;
  opts.instrumentations.push_back(&rec);
  auto list = passes({
      {"keep", [](Graph&, PassContext&) { return false; }},
      {"outer",
       [](Graph& g, PassContext& ctx) {
         const PipelineResult r = ctx.runPipeline(g, "dce,tag-fsdp");
         return r.passes.front().changed;
       }},
  });
  runPasses(s.g, list, opts);
  CHECK(rec.events == std::vector<std::string>{
                          "pipeline [keep,outer]",
                          "before pass 'keep' (#1) size 5",
                          "after pass 'keep' (#1) size 5",
                          "before pass 'outer' (#2) size 5",
                          "  pipeline [dce,tag-fsdp]",
                          "  before pass 'dce' (#1) size 5",
                          "  after pass 'dce' (#1) changed size 3",
                          "  before pass 'tag-fsdp' (#2) size 3",
                          "  after pass 'tag-fsdp' (#2) size 3",
                          "  end",
                          "after pass 'outer' (#2) changed size 3",
                          "end",
                      });
}

TEST_CASE("instrumentation: a failure is reported once, with what every instrumentation adds",
          "[instrumentation]") {
  auto g = traced("fsdp_w2.json");
  Recorder rec;
  rec.sizes = false;
  PassManagerOptions opts;
  opts.instrumentations.push_back(&rec);
  auto list = passes({{"outer", [](Graph& g, PassContext& ctx) {
                         ctx.runPipeline(g, "tag-fsdp{reshard=budget, memory-limit=1}");
                         return true;
                       }}});
  const std::string err = errorOf([&] { runPasses(*g, list, opts); });
  // The nested pass's failure names it; the pass that ran the nested pipeline names itself.
  CHECK(err ==
        "error: pass 'outer' (#1) failed: pass 'tag-fsdp' (#1) failed: reshard=budget: "
        "memory-limit 1 B is below the smallest estimated peak of any keep-last (55.35 KiB, "
        "56676 bytes, keeping the last 0 units); the smallest feasible limit is 56676 bytes\n"
        "(recorded)\n(recorded)");
  CHECK(rec.events == std::vector<std::string>{
                          "pipeline [outer]",
                          "before pass 'outer' (#1)",
                          "  pipeline [tag-fsdp]",
                          "  before pass 'tag-fsdp' (#1)",
                          "  failed pass 'tag-fsdp' (#1)",
                          "failed pass 'outer' (#1)",
                      });
}

TEST_CASE("instrumentation: the planners' nested pipelines are observed", "[instrumentation]") {
  auto g = traced("fsdp_w2.json");
  Recorder rec;
  PassManagerOptions opts;
  opts.instrumentations.push_back(&rec);
  const std::string h100 = std::string(JFX_SOURCE_DIR) + "/configs/hardware/h100.json";
  runPipeline(*g,
              parsePipeline(
                  "tag-fsdp,remat,bucket{plan=auto, hardware=" + h100 +
                  ", threads=2},split-comm-groups,schedule{prefetch=auto, hardware=" + h100 + "}"),
              opts);
  std::map<std::string, int> nested;
  for (const std::string& e : rec.events)
    if (e.starts_with("  before ")) ++nested[e.substr(9, e.find(" (#") - 9)];
  // Eight bucket candidates, each scored by split-comm-groups and schedule{prefetch=1}; four
  // prefetch distances and the chosen one's run.
  CHECK(nested == std::map<std::string, int>{{"pass 'schedule'", 8 + 4 + 1},
                                             {"pass 'split-comm-groups'", 8}});
}

TEST_CASE("nested pipelines: a fork's passes are served the parent's analyses until they drop",
          "[instrumentation]") {
  auto g = traced("fsdp_w2.json");
  PassContext ctx;
  ctx.analyses.get<FsdpAnalysis>(*g);  // computes the phases too
  REQUIRE(ctx.analyses.counts().at("fsdp").computed == 1);
  REQUIRE(ctx.analyses.counts().at("phases").computed == 1);

  ForkedGraph f = ctx.fork(*g);
  const PipelineResult r =
      f.ctx->runPipeline(*f.graph, "tag-fsdp{reshard=always},remat,split-comm-groups");
  const auto& counts = r.analyses;
  // tag-fsdp reads the parent's phases and FSDP chains, translated to the copy; it preserves
  // everything, so remat reads the same phases. remat changes the graph and keeps the phases but
  // not the FSDP chains, which split-comm-groups then computes afresh.
  CHECK(counts.at("phases").followed == 1);
  CHECK(counts.at("phases").computed == 0);
  CHECK(counts.at("phases").reused >= 1);
  CHECK(counts.at("fsdp").followed == 1);
  CHECK(counts.at("fsdp").computed == 1);
  // The parent computed nothing more, and its graph is untouched.
  CHECK(ctx.analyses.counts().at("fsdp").computed == 1);
  auto fresh = traced("fsdp_w2.json");
  CHECK(structuralHash(*g) == structuralHash(*fresh));
  // The copy came out as the same pipeline leaves a fresh graph with fresh analyses.
  runPipeline(*fresh, parsePipeline("tag-fsdp{reshard=always},remat,split-comm-groups"), {});
  CHECK(structuralHash(*f.graph) == structuralHash(*fresh));
  // What the nested run left valid describes the copy now: the fork's context serves it.
  f.ctx->analyses.get<FsdpAnalysis>(*f.graph);
  CHECK(f.ctx->analyses.counts().at("fsdp").computed == 0);
  CHECK(f.ctx->analyses.counts().at("fsdp").reused == 1);
}

TEST_CASE(
    "nested pipelines: on the pass's own graph, kept analyses come back, and a rollback "
    "makes the dropped ones current again",
    "[instrumentation]") {
  auto g = traced("fsdp_w2.json");
  PassContext ctx;
  const FsdpAnalysis& before = ctx.analyses.get<FsdpAnalysis>(*g);
  // split-comm-groups preserves the FSDP chains: served to it, and handed back.
  ctx.runPipeline(*g, "split-comm-groups");
  CHECK(&ctx.analyses.get<FsdpAnalysis>(*g) == &before);
  CHECK(ctx.analyses.counts().at("fsdp").computed == 1);
  // dce drops them (on a SAC graph it erases the dead aliases of the gathers); undone, the graph
  // is the one they describe again.
  auto sac = traced("sac_w2.json");
  PassContext sctx;
  const FsdpAnalysis& kept = sctx.analyses.get<FsdpAnalysis>(*sac);
  sac->beginUndo();
  CHECK(sctx.runPipeline(*sac, "dce").passes.front().changed);
  sac->rollback();
  CHECK(&sctx.analyses.get<FsdpAnalysis>(*sac) == &kept);
  CHECK(sctx.analyses.counts().at("fsdp").computed == 1);
  // Not undone, they are computed afresh.
  sctx.runPipeline(*sac, "dce");
  sctx.analyses.get<FsdpAnalysis>(*sac);
  CHECK(sctx.analyses.counts().at("fsdp").computed == 2);
}

TEST_CASE("errors: a pass locates its error at a node and the pass manager names the pass",
          "[instrumentation]") {
  Small s;
  auto at_node = passes({{"checker", [](Graph& g, PassContext& ctx) {
                            ctx.emitError(g.findNode("neg")) << "cannot handle '"
                                                             << "neg"
                                                             << "': " << 2 << " reasons";
                            return false;
                          }}});
  try {
    runPasses(s.g, at_node, {});
    FAIL("no error");
  } catch (const JfxError& e) {
    CHECK(e.location().node == "neg");
    CHECK(std::string(e.what()) ==
          "(node 'neg'): error: pass 'checker' (#1) failed: cannot handle 'neg': 2 reasons");
  }
  // About the graph: no location.
  auto graph_level = passes({{"checker", [](Graph&, PassContext& ctx) {
                                ctx.emitError() << "nothing to do";
                                return false;
                              }}});
  CHECK(errorOf([&] { runPasses(s.g, graph_level, {}); }) ==
        "error: pass 'checker' (#1) failed: nothing to do");
  // Misuse of the API is an internal error, named the same way.
  auto misuse = passes({{"confused", [](Graph& g, PassContext& ctx) {
                           Graph other;
                           ctx.analyses.get<PhaseInfo>(g);
                           ctx.analyses.get<PhaseInfo>(other);
                           return false;
                         }}});
  CHECK(errorOf([&] { runPasses(s.g, misuse, {}); }) ==
        "error: pass 'confused' (#1) failed: internal error: an analysis manager (PassContext) "
        "asked about a second graph; a pass working on a copy needs a PassContext of its own "
        "(PassContext::fork)");
}

TEST_CASE("errors: a registered pass's error names the pass and the node", "[instrumentation]") {
  // A dropout tagged for recompute: remat refuses to copy a random draw into backward.
  auto g = loadGraph(std::string(JFX_SOURCE_DIR) + "/tests/golden/remat/random_error.jfx");
  try {
    runPipeline(*g, parsePipeline("remat"), {});
    FAIL("no error");
  } catch (const JfxError& e) {
    CHECK(e.location().node == "drop");
    CHECK(
        e.message().starts_with("pass 'remat' (#1) failed: cannot recompute 'drop' "
                                "(aten.native_dropout.default): it draws random numbers"));
    // The node's place in the file it was read from (Graph::location).
    CHECK(e.location().file.ends_with("/tests/golden/remat/random_error.jfx"));
    CHECK(e.location().line == 10);
    CHECK(std::string(e.what()).find("random_error.jfx:10 (node 'drop'): error: pass 'remat'") !=
          std::string::npos);
  }
}
