#include <unistd.h>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <stdexcept>

#include "ir/hash.h"
#include "ir/io.h"
#include "ir/text_format.h"
#include "passes/pass_manager.h"
#include "passes/registry.h"
#include "tests/unit/test_util.h"

using namespace jfx;
using jfx::test::errorOf;
using jfx::test::LambdaPass;

namespace {

std::vector<ConfiguredPass> one(std::string name, std::function<bool(Graph&, PassContext&)> body) {
  std::vector<ConfiguredPass> v;
  v.push_back({std::make_unique<LambdaPass>(std::move(name), std::move(body)), ""});
  return v;
}

// x -> neg -> (dead) exp -> (dead) abs; output(neg)
struct Small {
  Graph g;
  Node *x, *neg, *out;
  Small() {
    x = g.create(OpKind::Placeholder, Symbol::intern("x"), {}, {}, "x");
    neg = g.createCall("aten.neg.default", {Arg::ofNode(x)});
    Node* e = g.createCall("aten.exp.default", {Arg::ofNode(neg)});
    g.createCall("aten.abs.default", {Arg::ofNode(e)});
    out = g.create(OpKind::Output, Symbol::intern("output"), {Arg::ofList({Arg::ofNode(neg)})}, {},
                   "output");
  }
};

std::string tempFile(const std::string& name, const std::string& contents) {
  auto path = std::filesystem::temp_directory_path() /
              ("jfx_pm_" + std::to_string(::getpid()) + "_" + name);
  std::ofstream(path) << contents;
  return path.string();
}

}  // namespace

TEST_CASE("pipeline: parse names and options", "[pass-manager]") {
  auto p = parsePipeline(" dce , dce{remove-random=true} ,dce{ kinds=ag,rs , cap-mb = 64 }");
  REQUIRE(p.size() == 3);
  CHECK(p[0].name == "dce");
  CHECK(p[0].options.values().empty());
  CHECK(p[1].options.values().at("remove-random") == "true");
  CHECK(p[2].options.values().at("kinds") == "ag,rs");
  CHECK(p[2].options.values().at("cap-mb") == "64");
  CHECK(p[2].options.str() == "{cap-mb=64, kinds=ag,rs}");
  CHECK(parsePipeline("dce{}")[0].options.values().empty());
  CHECK(parsePipeline("").empty());
  CHECK(parsePipeline("  ").empty());
}

TEST_CASE("pipeline: syntax errors name the column", "[pass-manager]") {
  CHECK(errorOf([] { parsePipeline("dce,"); }) == "pipeline:1:5: error: expected a pass name");
  CHECK(errorOf([] { parsePipeline("dce dce"); }) ==
        "pipeline:1:5: error: expected ',' between passes or the end of the pipeline");
  CHECK(errorOf([] { parsePipeline("dce{a=1"); }) ==
        "pipeline:1:4: error: unterminated '{' for the options of 'dce'");
  CHECK(errorOf([] { parsePipeline("dce{flag}"); }) ==
        "pipeline:1:5: error: expected key=value in the options of 'dce'");
  CHECK(errorOf([] { parsePipeline("dce{a=1, a=2}"); }) ==
        "pipeline:1:10: error: option 'a' given twice for 'dce'");
  CHECK(errorOf([] { parsePipeline("dce{a=1,,b=2}"); }) ==
        "pipeline:1:9: error: empty option in the options of 'dce'");
  CHECK(errorOf([] { parsePipeline("dce{=1}"); }) ==
        "pipeline:1:5: error: bad option name '' for 'dce'");
  CHECK(errorOf([] { parsePipeline("dce{a={b}}"); }) ==
        "pipeline:1:7: error: unexpected '{' inside the options of 'dce'");
  std::string unknown = errorOf([] { parsePipeline("dce,bogus-pass{x=1}"); });
  CHECK(unknown.rfind("pipeline:1:5: error: unknown pass 'bogus-pass' (known passes: ", 0) == 0);
  CHECK(unknown.find("dce") != std::string::npos);
}

TEST_CASE("pipeline: JSON files", "[pass-manager]") {
  std::string good = tempFile("good.json", R"({"passes": [{"name": "dce"},
      {"name": "dce", "options": {"remove-random": true, "kinds": ["ag", "rs"], "cap": 64}}]})");
  auto p = loadPipelineFile(good);
  REQUIRE(p.size() == 2);
  CHECK(p[1].options.values().at("remove-random") == "true");
  CHECK(p[1].options.values().at("kinds") == "ag,rs");
  CHECK(p[1].options.values().at("cap") == "64");
  CHECK(resolvePipeline(good).size() == 2);
  CHECK(resolvePipeline("dce").size() == 1);

  std::string missing = errorOf([] { resolvePipeline("/nonexistent/p.json"); });
  CHECK(missing.find("pipeline file not found") != std::string::npos);
  CHECK(errorOf([] { resolvePipeline("/nonexistent/p"); }).find("pipeline file not found") !=
        std::string::npos);
  // A path in an option's value leaves the spec a pass list.
  auto with_path = resolvePipeline("dce,schedule{prefetch=auto, hardware=/no/such/h100.json}");
  REQUIRE(with_path.size() == 2);
  CHECK(with_path[1].options.values().at("hardware") == "/no/such/h100.json");

  std::string bad_key = tempFile("badkey.json", R"({"passes": [{"name": "dce", "opts": {}}]})");
  CHECK(errorOf([&] { loadPipelineFile(bad_key); }).find("at /passes/0/opts") != std::string::npos);
  std::string bad_pass = tempFile("badpass.json", R"({"passes": [{"name": "nope"}]})");
  CHECK(errorOf([&] { loadPipelineFile(bad_pass); }).find("unknown pass 'nope'") !=
        std::string::npos);
  std::string bad_json = tempFile("badjson.json", R"({"passes": [)");
  CHECK(errorOf([&] { loadPipelineFile(bad_json); }).find("JSON syntax error") !=
        std::string::npos);
  std::string bad_value =
      tempFile("badvalue.json", R"({"passes": [{"name": "dce", "options": {"a": {"b": 1}}}]})");
  CHECK(errorOf([&] { loadPipelineFile(bad_value); }).find("at /passes/0/options/a") !=
        std::string::npos);
  for (const auto& f : {good, bad_key, bad_pass, bad_json, bad_value})
    std::filesystem::remove(f);
}

TEST_CASE("pipeline: a path option in a file is found from the file's folder", "[pass-manager]") {
  // configs/pipelines/auto.json names ../hardware/h100.json: it works from any working directory.
  auto pipeline = loadPipelineFile(std::string(JFX_SOURCE_DIR) + "/configs/pipelines/auto.json");
  const std::string h100 =
      (std::filesystem::path(JFX_SOURCE_DIR) / "configs/hardware/h100.json").lexically_normal();
  int with_hardware = 0;
  for (const PipelineEntry& e : pipeline)
    if (e.options.has("hardware")) {
      CHECK(e.options.values().at("hardware") == h100);
      ++with_hardware;
    }
  CHECK(with_hardware == 2);
  // Relative to a file elsewhere; an absolute path and other string options stay as written.
  std::string rel = tempFile("rel.json", R"({"passes": [
      {"name": "bucket", "options": {"plan": "auto", "hardware": "hw/x.json"}},
      {"name": "schedule", "options": {"hardware": "/abs/y.json", "prefetch": "2"}}]})");
  auto p = loadPipelineFile(rel);
  CHECK(p[0].options.values().at("hardware") ==
        (std::filesystem::path(rel).parent_path() / "hw/x.json").string());
  CHECK(p[0].options.values().at("plan") == "auto");
  CHECK(p[1].options.values().at("hardware") == "/abs/y.json");
  CHECK(p[1].options.values().at("prefetch") == "2");
  // On the command line a path is the user's, relative to the working directory.
  CHECK(parsePipeline("bucket{hardware=hw/x.json}")[0].options.values().at("hardware") ==
        "hw/x.json");
  applyOptionOverrides(p, {"hardware=hw/z.json"});
  CHECK(p[0].options.values().at("hardware") == "hw/z.json");
  std::filesystem::remove(rel);
}

TEST_CASE("pass manager: options a pass does not read are errors", "[pass-manager]") {
  CHECK(errorOf([] { buildPipeline(parsePipeline("dce{remove-randum=true}")); }) ==
        "error: pass 'dce' has no option 'remove-randum' (it takes: remove-random)");
  CHECK(errorOf([] {
          buildPipeline(parsePipeline("dce{remove-random=maybe}"));
        }).find("expected true or false") != std::string::npos);
  auto built = buildPipeline(parsePipeline("dce{remove-random=1}"));
  REQUIRE(built.size() == 1);
  CHECK(built[0].options == "{remove-random=1}");
}

TEST_CASE("pass manager: verify after a changing pass names the pass", "[pass-manager]") {
  Small s;
  auto passes = one("breaker", [](Graph& g, PassContext&) {
    g.createCall("_c10d_functional.wait_tensor.default", {Arg::ofNode(g.findNode("x"))}, {},
                 g.outputNode(), "bad_wait");
    return true;
  });
  std::ostringstream out;
  PassManagerOptions opts;
  opts.out = &out;
  try {
    runPasses(s.g, passes, opts);
    FAIL("expected a verification error");
  } catch (const PipelineVerifyError& e) {
    CHECK(e.pass() == "breaker");
    REQUIRE(!e.issues().empty());
    CHECK(e.issues()[0].node == "bad_wait");
    std::string msg = e.what();
    CHECK(msg.find("verification failed after pass 'breaker' (#1):") != std::string::npos);
    CHECK(msg.find("node 'bad_wait': [collective-wait-pairing]") != std::string::npos);
  }

  // With verification off the same pass goes through.
  Small s2;
  auto passes2 = one("breaker", [](Graph& g, PassContext&) {
    g.createCall("_c10d_functional.wait_tensor.default", {Arg::ofNode(g.findNode("x"))}, {},
                 g.outputNode(), "bad_wait");
    return true;
  });
  opts.verify_each = false;
  CHECK_NOTHROW(runPasses(s2.g, passes2, opts));
}

TEST_CASE("pass manager: graph-level rules are checked on the output, or after each pass",
          "[pass-manager]") {
  // A parameter without an FQN breaks input-info, a rule of the whole graph. Between passes a
  // pass that touched a sixth of the graph or more gets the whole graph's check, which finds it
  // right away (here: 1 of 5 nodes); one that touched less only a touched-node check, so the
  // output's full check finds it (the next test case, on a traced graph); --verify-full finds it
  // right after the pass that did it.
  auto drop_spec = [](Graph& g, PassContext&) {
    g.findNode("x")->setInputInfo(InputKind::Parameter, "");
    g.rename(g.findNode("neg"), "neg2");
    return true;
  };
  auto passes = [&] {
    std::vector<ConfiguredPass> v = one("breaker", drop_spec);
    v.push_back(
        {std::make_unique<LambdaPass>("noop", [](Graph&, PassContext&) { return false; }), ""});
    return v;
  };
  Small s;
  s.g.outputSpecs() = {{OutputKind::Loss, ""}};
  PassManagerOptions opts;
  std::ostringstream out;
  opts.out = &out;
  auto p1 = passes();
  std::string msg = errorOf([&] { runPasses(s.g, p1, opts); });
  CHECK(msg.find("verification failed after pass 'breaker' (#1)") != std::string::npos);
  CHECK(msg.find("[input-info]") != std::string::npos);

  // Breaking it in the last pass: the output's full check runs right after that pass (instead
  // of a touched-node check, which would miss a graph-level rule) and names it.
  Small s3;
  s3.g.outputSpecs() = {{OutputKind::Loss, ""}};
  auto p3 = one("breaker", drop_spec);
  msg = errorOf([&] { runPasses(s3.g, p3, opts); });
  CHECK(msg.find("verification failed after pass 'breaker' (#1)") != std::string::npos);
  CHECK(msg.find("[input-info]") != std::string::npos);

  Small s2;
  s2.g.outputSpecs() = {{OutputKind::Loss, ""}};
  opts.verify_full_each = true;
  auto p2 = passes();
  msg = errorOf([&] { runPasses(s2.g, p2, opts); });
  CHECK(msg.find("verification failed after pass 'breaker' (#1)") != std::string::npos);
  CHECK(msg.find("[input-info]") != std::string::npos);
}

TEST_CASE("pass manager: a pass that touched a sixth of the graph gets the whole graph's check",
          "[pass-manager]") {
  // Renaming records the renamed node only. One node of a traced graph: a touched-node check;
  // every node: the whole graph's check (cheaper per node, as it walks no use lists), which also
  // sees a graph-level rule broken by a pass that is not the last.
  const std::string path = std::string(JFX_SOURCE_DIR) + "/tests/data/traced/fsdp_w2.json";
  auto rename = [](bool all, bool drop_fqn) {
    return [all, drop_fqn](Graph& g, PassContext&) {
      std::vector<Node*> nodes;
      for (Node* n = g.first(); n; n = n->next())
        if (n->op() == OpKind::CallFunction) nodes.push_back(n);
      if (!all) nodes.resize(1);
      for (Node* n : nodes)
        g.rename(n, std::string(n->name()) + "_r");
      if (drop_fqn)
        for (Node* n = g.first(); n; n = n->next())
          if (n->inputKind() == InputKind::Parameter) {
            n->setInputInfo(InputKind::Parameter, "");
            break;
          }
      return true;
    };
  };
  auto run = [&](bool all, bool drop_fqn) {
    auto g = loadGraph(path);
    std::vector<ConfiguredPass> v = one("renamer", rename(all, drop_fqn));
    v.push_back(
        {std::make_unique<LambdaPass>("noop", [](Graph&, PassContext&) { return false; }), ""});
    std::ostringstream out;
    PassManagerOptions opts;
    opts.out = &out;
    return runPasses(*g, v, opts);
  };
  PipelineResult one_node = run(false, false);
  CHECK(one_node.verify_node_runs == 1);
  CHECK(one_node.verify_runs == 2);  // the input's, and the output's after the unchecked change
  PipelineResult every_node = run(true, false);
  CHECK(every_node.verify_node_runs == 0);
  CHECK(every_node.verify_between_runs == 1);
  CHECK(every_node.verify_runs == 2);  // the input's and the between check; the output unchanged
  std::string msg = errorOf([&] { run(true, true); });
  CHECK(msg.find("verification failed after pass 'renamer' (#1)") != std::string::npos);
  CHECK(msg.find("[input-info]") != std::string::npos);
  // Touching one node, the same break is left to the output's check.
  msg = errorOf([&] { run(false, true); });
  CHECK(msg.find("verification failed on the pipeline's output") != std::string::npos);
}

TEST_CASE("pass manager: a pass that edits the header gets the header's rules checked",
          "[pass-manager]") {
  // The node check sees only touched nodes, but a header edit can break nodes nobody touched:
  // here a process group added to a headerless graph makes the untouched all-gather's group
  // unknown, and an output spec too many breaks output-info. Either is reported after the pass
  // that did it, not by a later pass that happens to touch the node (or the output check).
  auto graph = [] {
    return parseTextGraph(
        "jointfx.graph 1\n"
        "outputs [loss]\n"
        "%w : f32[2, 4] = placeholder\n"
        "%ag : f32[4, 4] = _c10d_functional.all_gather_into_tensor.default(%w, 2, \"0\")\n"
        "%W : f32[4, 4] = _c10d_functional.wait_tensor.default(%ag)\n"
        "%loss : f32[] = aten.sum.default(%W)\n"
        "%output = output([%loss])\n",
        "headerless.jfx");
  };
  auto run = [&](std::function<void(Graph&)> edit) {
    std::unique_ptr<Graph> g = graph();
    std::vector<ConfiguredPass> v = one("header-editor", [edit](Graph& g, PassContext&) {
      edit(g);
      return true;
    });
    v.push_back({std::make_unique<LambdaPass>("mover",
                                              [](Graph& g, PassContext&) {
                                                g.moveBefore(g.findNode("W"), g.findNode("loss"));
                                                g.moveBefore(g.findNode("ag"), g.findNode("W"));
                                                return true;
                                              }),
                 ""});
    PassManagerOptions opts;
    std::ostringstream out;
    opts.out = &out;
    return errorOf([&] { runPasses(*g, v, opts); });
  };
  std::string msg = run([](Graph& g) { g.processGroups().push_back({"1", 2, {0, 1}}); });
  CHECK(msg.find("verification failed after pass 'header-editor' (#1)") != std::string::npos);
  CHECK(msg.find("node 'ag': [unknown-group]") != std::string::npos);
  msg = run([](Graph& g) { g.outputSpecs().push_back({OutputKind::Other, ""}); });
  CHECK(msg.find("verification failed after pass 'header-editor' (#1)") != std::string::npos);
  CHECK(msg.find("[output-info]") != std::string::npos);
  // A pass that leaves the header alone still gets only the node check: this graph is fine.
  CHECK(run([](Graph&) {}) == "<no error>");

  // With a header: resizing a group breaks the untouched all-gather; adding a group (as
  // split-comm-groups does) leaves every collective's group as it was, so only the header's own
  // rules run (a second group of the same name is one of them).
  auto with_header = [&](std::function<void(Graph&)> edit) {
    std::unique_ptr<Graph> g = graph();
    g->processGroups().push_back({"0", 2, {0, 1}});
    std::vector<ConfiguredPass> v = one("header-editor", [edit](Graph& g, PassContext&) {
      edit(g);
      return true;
    });
    PassManagerOptions opts;
    std::ostringstream out;
    opts.out = &out;
    return errorOf([&] { runPasses(*g, v, opts); });
  };
  CHECK(with_header([](Graph&) {}) == "<no error>");
  msg = with_header([](Graph& g) { g.processGroups()[0].size = 4; });
  CHECK(msg.find("verification failed after pass 'header-editor' (#1)") != std::string::npos);
  CHECK(msg.find("node 'ag': [group-size]") != std::string::npos);
  CHECK(with_header([](Graph& g) {
          g.processGroups().push_back({"0_rs", 2, {0, 1}});
        }) == "<no error>");
  msg = with_header([](Graph& g) { g.processGroups().push_back({"0", 2, {0, 1}}); });
  CHECK(msg.find("[process-group]") != std::string::npos);
}

TEST_CASE("pass manager: the default pipeline gives the same graph with either verification",
          "[pass-manager]") {
  for (const char* name : {"fsdp_w2.json", "gpt2_w2.json", "convbn_w2.json", "moe_w2.json"}) {
    INFO(name);
    std::string path = std::string(JFX_SOURCE_DIR) + "/tests/data/traced/" + name;
    auto a = loadGraph(path);
    auto b = loadGraph(path);
    auto pipeline =
        resolvePipeline(std::string(JFX_SOURCE_DIR) + "/configs/pipelines/default.json");
    std::ostringstream sink;
    PassManagerOptions opts;
    opts.out = &sink;
    auto ra = runPipeline(*a, pipeline, opts);
    opts.verify_full_each = true;
    auto rb = runPipeline(*b, pipeline, opts);
    CHECK(structuralHash(*a) == structuralHash(*b));
    size_t changing = 0;
    for (const auto& p : ra.passes)
      changing += p.changed ? 1 : 0;
    // A changing last pass gets the output's full check instead of a between-passes check.
    const size_t last = ra.passes.back().changed ? 1 : 0;
    CHECK(ra.verify_between_runs == changing - last);
    // Between passes a touched-node check, or the whole graph's where the pass touched a
    // sixth of it or more; plus the input's and the output's.
    CHECK(ra.verify_node_runs > 0);
    CHECK(ra.verify_node_runs <= ra.verify_between_runs);
    CHECK(ra.verify_runs == 2 + ra.verify_between_runs - ra.verify_node_runs);
    CHECK(rb.verify_node_runs == 0);
    CHECK(rb.verify_runs == 1 + changing);
    CHECK(rb.verify_between_runs == changing);
    CHECK(rb.verify_between_seconds <= rb.verify_seconds);
  }
}

TEST_CASE("pass manager: a broken input is reported before any pass runs", "[pass-manager]") {
  Small s;
  s.g.createCall("aten.neg.default", {}, {}, s.out, "no_args");
  bool ran = false;
  auto passes = one("p", [&](Graph&, PassContext&) { return ran = true; });
  PassManagerOptions opts;
  try {
    runPasses(s.g, passes, opts);
    FAIL("expected a verification error");
  } catch (const PipelineVerifyError& e) {
    CHECK(e.pass().empty());
    CHECK(std::string(e.what()).find("input graph fails verification") != std::string::npos);
  }
  CHECK(!ran);
}

TEST_CASE("pass manager: a pass that lies about a structural change is caught without the hash",
          "[pass-manager]") {
  auto lie = [](Graph& g, PassContext&) {
    g.rename(g.findNode("neg"), "renamed");
    return false;
  };
  for (bool hash : {true, false}) {
    Small s;
    auto passes = one("liar", lie);
    PassManagerOptions opts;
    opts.check_unchanged_hash = hash;
    CHECK(errorOf([&] { runPasses(s.g, passes, opts); }) ==
          "error: pass 'liar' (#1) reported no change, but the graph changed");
  }
}

TEST_CASE("pass manager: the hash check catches a pass that lies about a meta change",
          "[pass-manager]") {
  // Meta edits do not move Graph::generation(): only the structural hash sees them.
  auto lie = [](Graph& g, PassContext&) {
    g.findNode("neg")->meta().recompute = Recompute::MustRecompute;
    return false;
  };
  Small s;
  auto passes = one("liar", lie);
  PassManagerOptions opts;
  CHECK(errorOf([&] { runPasses(s.g, passes, opts); }) ==
        "error: pass 'liar' (#1) reported no change, but the graph changed");
  Small s2;
  auto passes2 = one("liar", lie);
  opts.check_unchanged_hash = false;
  PipelineResult r = runPasses(s2.g, passes2, opts);
  CHECK(r.hash_runs == 0);
  CHECK(s2.g.findNode("neg")->meta().recompute == Recompute::MustRecompute);
}

TEST_CASE("pass manager: failures inside a pass are reported with its name", "[pass-manager]") {
  Small s;
  auto passes =
      one("thrower", [](Graph&, PassContext&) -> bool { throw std::out_of_range("vector::at"); });
  CHECK(errorOf([&] { runPasses(s.g, passes, {}); }) ==
        "error: pass 'thrower' (#1) failed: internal error: vector::at");
  auto passes2 = one("jfx", [](Graph&, PassContext&) -> bool {
    throw JfxError(SourceLocation::atNode("neg"), "cannot recompute a random op");
  });
  CHECK(errorOf([&] { runPasses(s.g, passes2, {}); }) ==
        "(node 'neg'): error: pass 'jfx' (#1) failed: cannot recompute a random op");
}

TEST_CASE("pass manager: dce through the registry, stats, timing, stop-after", "[pass-manager]") {
  Small s;
  std::ostringstream out;
  PassManagerOptions opts;
  opts.out = &out;
  opts.stats = true;
  opts.timing = true;
  auto r = runPipeline(s.g, parsePipeline("dce,dce"), opts);
  REQUIRE(r.passes.size() == 2);
  CHECK(r.passes[0].changed);
  CHECK(!r.passes[1].changed);
  CHECK(r.passes[0].stats.at("nodes-removed") == 2);
  CHECK(s.g.size() == 3);
  std::string text = out.str();
  CHECK(text.find("===== statistics =====\ndce.nodes-removed = 2\n") != std::string::npos);
  CHECK(text.find("===== pass timing") != std::string::npos);
  // Verification (the whole input; after the one changing pass, the whole graph, as it touched
  // more than a sixth of it, which leaves the unchanged output nothing to check) and the
  // unchanged-graph hashes (before each pass whose input hash is unknown, and after the
  // unchanged one) have rows too.
  CHECK(r.verify_runs == 2);
  CHECK(r.verify_node_runs == 0);
  CHECK(r.hash_runs == 3);
  CHECK(r.verify_between_runs == 1);
  CHECK(r.verify_between_seconds <= r.verify_seconds);
  CHECK(text.find("(verify in/out)") != std::string::npos);
  CHECK(text.find("(verify between)") != std::string::npos);
  CHECK(text.find("  1 full\n") != std::string::npos);
  CHECK(text.find("touched-node") == std::string::npos);
  CHECK(text.find("3 runs\n") != std::string::npos);
  double sum = r.verify_seconds + r.hash_seconds;
  for (const auto& p : r.passes)
    sum += p.seconds;
  CHECK(sum <= r.total_seconds);

  Small s2;
  std::ostringstream out2;
  opts.out = &out2;
  opts.stats = false;
  opts.timing = false;
  opts.stop_after = 0;
  auto r2 = runPipeline(s2.g, parsePipeline("dce"), opts);
  CHECK(r2.passes.empty());
  CHECK(s2.g.size() == 5);
  CHECK(out2.str() == "# stop-after=0: skipped 1 of 1 passes, starting at 'dce'\n");
}

TEST_CASE("pass manager: stop-after runs only the first N passes", "[pass-manager]") {
  std::vector<std::string> ran;
  std::vector<ConfiguredPass> passes;
  for (const char* name : {"a", "b", "c"})
    passes.push_back({std::make_unique<LambdaPass>(name,
                                                   [&ran, name](Graph&, PassContext& ctx) {
                                                     ran.push_back(name);
                                                     ctx.stats["runs"] += 1;
                                                     return false;
                                                   }),
                      ""});
  Small s;
  std::ostringstream out;
  PassManagerOptions opts;
  opts.out = &out;
  opts.stop_after = 2;
  opts.stats = true;
  auto r = runPasses(s.g, passes, opts);
  CHECK(ran == std::vector<std::string>{"a", "b"});
  CHECK(r.passes.size() == 2);
  CHECK(out.str() ==
        "# stop-after=2: skipped 1 of 3 passes, starting at 'c'\n"
        "===== statistics =====\na.runs = 1\nb.runs = 1\n");
}

TEST_CASE("pass manager: print IR after a pass", "[pass-manager]") {
  Small s;
  std::ostringstream out;
  PassManagerOptions opts;
  opts.out = &out;
  opts.print_ir_after = {"dce"};
  runPipeline(s.g, parsePipeline("dce"), opts);
  std::string text = out.str();
  CHECK(text.rfind("# ---- IR after pass 'dce' (#1) ----\n", 0) == 0);
  CHECK(text.find("aten.neg.default") != std::string::npos);
  CHECK(text.find("aten.exp.default") == std::string::npos);

  opts.print_ir_after = {"remat"};
  CHECK(errorOf([&] { runPipeline(s.g, parsePipeline("dce"), opts); }) ==
        "error: print-ir-after: no pass 'remat' in the pipeline");
}

TEST_CASE("registry: every pass is creatable under its own name", "[pass-manager]") {
  REQUIRE(!passRegistry().empty());
  for (const auto& r : passRegistry()) {
    auto p = createPass(r.name);
    REQUIRE(p);
    CHECK(p->name() == r.name);
    CHECK(!r.summary.empty());
  }
  CHECK(createPass("no-such-pass") == nullptr);
}

TEST_CASE("pass manager: before and after hooks see each pass", "[pass-manager]") {
  std::vector<std::string> events;
  std::vector<ConfiguredPass> passes;
  passes.push_back(
      {std::make_unique<LambdaPass>("keep", [](Graph&, PassContext&) { return false; }), ""});
  passes.push_back({std::make_unique<LambdaPass>("drop",
                                                 [](Graph& g, PassContext&) {
                                                   g.erase(g.findNode("abs"));
                                                   return true;
                                                 }),
                    ""});
  Small s;
  PassManagerOptions opts;
  opts.before_pass.push_back([&](std::string_view name, size_t index, const Graph& g) {
    events.push_back("before " + std::string(name) + " " + std::to_string(index) + " " +
                     std::to_string(g.size()));
  });
  opts.after_pass.push_back([&](std::string_view name, size_t index, const Graph& g, bool changed) {
    events.push_back("after " + std::string(name) + " " + std::to_string(index) + " " +
                     std::to_string(g.size()) + (changed ? " changed" : " unchanged"));
  });
  // print-ir-after is a hook too, and runs before the caller's.
  std::ostringstream out;
  opts.out = &out;
  opts.print_ir_after = {"drop"};
  opts.after_pass.push_back([&](std::string_view, size_t, const Graph&, bool) {
    events.push_back(out.str().empty() ? "not printed" : "printed");
  });
  runPasses(s.g, passes, opts);
  CHECK(events == std::vector<std::string>{"before keep 0 5", "after keep 0 5 unchanged",
                                           "not printed", "before drop 1 5",
                                           "after drop 1 4 changed", "printed"});
}

TEST_CASE("pass manager: hooks do not run after a pass the manager rejects", "[pass-manager]") {
  Small s;
  int after = 0;
  auto passes = one("breaker", [](Graph& g, PassContext&) {
    g.createCall("aten.neg.default", {}, {}, g.findNode("output"), "no_args");
    return true;
  });
  PassManagerOptions opts;
  opts.after_pass.push_back([&](std::string_view, size_t, const Graph&, bool) { ++after; });
  CHECK_THROWS_AS(runPasses(s.g, passes, opts), PipelineVerifyError);
  CHECK(after == 0);
}

namespace {

std::string reproDir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() /
             ("jfx_pm_repro_" + std::to_string(::getpid()) + "_" + name);
  std::filesystem::remove_all(dir);
  return dir.string();
}

}  // namespace

TEST_CASE("pass manager: a failing pass's input is written as a reproducer", "[pass-manager]") {
  const uint64_t input_hash = structuralHash(Small().g);
  auto breaker = [](Graph& g, PassContext&) {
    g.erase(g.findNode("abs"));  // the reproducer is the input, not this half-changed graph
    g.createCall("aten.neg.default", {}, {}, g.findNode("output"), "no_args");
    return true;
  };
  auto thrower = [](Graph& g, PassContext&) -> bool {
    g.erase(g.findNode("abs"));
    throw JfxError({}, "gave up");
  };
  auto liar = [](Graph& g, PassContext&) {
    g.rename(g.findNode("neg"), "renamed");
    return false;
  };
  struct Case {
    std::string pass;
    std::function<bool(Graph&, PassContext&)> body;
    std::string error;
  };
  for (const Case& c : {Case{"breaker", breaker, "verification failed after pass 'breaker'"},
                        Case{"thrower", thrower, "pass 'thrower' (#2) failed: gave up"},
                        Case{"liar", liar, "reported no change, but the graph changed"}}) {
    SECTION(c.pass) {
      std::string dir = reproDir(c.pass);
      std::vector<ConfiguredPass> passes;
      passes.push_back(
          {std::make_unique<LambdaPass>("noop", [](Graph&, PassContext&) { return false; }), ""});
      passes.push_back({std::make_unique<LambdaPass>(c.pass, c.body), "{k=v}"});
      Small s;
      PassManagerOptions opts;
      opts.reproducer_dir = dir;
      opts.reproducer_stem = "small";
      std::string err = errorOf([&] { runPasses(s.g, passes, opts); });
      std::string path = (std::filesystem::path(dir) / ("small." + c.pass + ".repro.jfx")).string();
      CHECK(err.find(c.error) != std::string::npos);
      CHECK(err.find("\nreproducer: " + path + " (jointfx opt " + path + " -o - -p '" + c.pass +
                     "{k=v}' reproduces)") != std::string::npos);
      REQUIRE(std::filesystem::exists(path));
      CHECK(structuralHash(*loadGraph(path)) == input_hash);
      std::filesystem::remove_all(dir);
    }
  }
}

TEST_CASE("pass manager: no reproducer without a directory, or when nothing fails",
          "[pass-manager]") {
  Small s;
  auto passes = one("thrower", [](Graph&, PassContext&) -> bool { throw JfxError({}, "no"); });
  CHECK(errorOf([&] { runPasses(s.g, passes, {}); }) == "error: pass 'thrower' (#1) failed: no");

  std::string dir = reproDir("ok");
  PassManagerOptions opts;
  opts.reproducer_dir = dir;
  Small s2;
  runPipeline(s2.g, parsePipeline("dce"), opts);
  CHECK(!std::filesystem::exists(dir));

  // A directory that cannot be made: the failure is still reported, with why no reproducer.
  std::string file = tempFile("not_a_dir", "x");
  opts.reproducer_dir = file;
  Small s3;
  std::string err = errorOf([&] { runPasses(s3.g, passes, opts); });
  CHECK(err.rfind("error: pass 'thrower' (#1) failed: no\nreproducer: not written: ", 0) == 0);
  std::filesystem::remove(file);
}
