// Declared options and statistics (Pass::options(), Pass::statistics()): every registered pass
// declares exactly what configure() reads and run() reports, with defaults that change nothing.
#include <catch2/catch.hpp>
#include <set>
#include <string>

#include "ir/hash.h"
#include "ir/io.h"
#include "passes/pass_manager.h"
#include "passes/registry.h"
#include "tests/unit/test_util.h"

using namespace jfx;
using jfx::test::errorOf;

namespace {

std::unique_ptr<Graph> traced(const std::string& name) {
  return loadGraph(std::string(JFX_SOURCE_DIR) + "/tests/data/traced/" + name);
}

// A pass with a declared table whose configure() and run() the test supplies.
class DeclaredPass : public Pass {
 public:
  std::function<void(PassOptions&)> configure_body = [](PassOptions&) {};
  std::function<void(PassContext&)> run_body = [](PassContext&) {};
  std::string_view name() const override { return "declared"; }
  void configure(PassOptions& o) override { configure_body(o); }
  bool run(Graph&, PassContext& ctx) override {
    run_body(ctx);
    return false;
  }
  std::span<const OptionDecl> options() const override { return kOptions; }
  std::span<const StatisticDecl> statistics() const override { return kStats; }

  static constexpr OptionDecl kOptions[] = {
      {"n", "int", "1", "a number"},
      {"mode", "a|b", "a", "a choice"},
      {"limit", "bytes", "input", "a size"},
  };
  static constexpr StatisticDecl kStats[] = {{"done", "things done"}, {"per.<kind>", "per kind"}};
};

}  // namespace

TEST_CASE("pass options: every registered pass declares well-formed options and statistics",
          "[pass-options]") {
  const std::set<std::string> types = {"bool", "int", "float", "string", "bytes", "path", "list"};
  for (const auto& r : passRegistry()) {
    INFO("pass " << r.name);
    auto pass = createPass(r.name);
    std::set<std::string> names;
    for (const OptionDecl& d : pass->options()) {
      INFO("option " << d.name);
      CHECK(names.insert(std::string(d.name)).second);
      CHECK(!d.help.empty());
      CHECK((types.count(std::string(d.type)) ||
             std::string_view(d.type).find('|') != std::string_view::npos));
    }
    // configure() reads every declared option, and only those (the getters refuse the others).
    PassOptions none(std::string(r.name), {});
    none.declare(pass->options());
    pass->configure(none);
    CHECK(none.readKeys() == names);
    REQUIRE(!pass->statistics().empty());
    std::set<std::string> stats;
    for (const StatisticDecl& d : pass->statistics()) {
      CHECK(stats.insert(std::string(d.name)).second);
      CHECK(!d.help.empty());
    }
  }
}

TEST_CASE("pass options: each declared default is accepted, alone and all together",
          "[pass-options]") {
  for (const auto& r : passRegistry()) {
    auto pass = createPass(r.name);
    std::map<std::string, std::string> all;
    for (const OptionDecl& d : pass->options()) {
      if (d.dflt.empty()) continue;  // unset by default: nothing to spell out
      INFO("pass " << r.name << " option " << d.name << "=" << d.dflt);
      std::map<std::string, std::string> one = {{std::string(d.name), std::string(d.dflt)}};
      CHECK_NOTHROW(buildPipeline({{std::string(r.name), PassOptions(std::string(r.name), one)}}));
      all.insert(one.begin(), one.end());
    }
    INFO("pass " << r.name);
    CHECK_NOTHROW(buildPipeline({{std::string(r.name), PassOptions(std::string(r.name), all)}}));
  }
}

TEST_CASE("pass options: the declared defaults change nothing", "[pass-options]") {
  // The whole registry in the default pipeline's order, once with no options and once with every
  // declared option set to its declared default: the same graph and statistics.
  std::vector<PipelineEntry> bare, spelled;
  for (const char* name : {"dce", "tag-fsdp", "remat", "dedup-fsdp-unshard", "bucket",
                           "split-comm-groups", "schedule"}) {
    auto pass = createPass(name);
    std::map<std::string, std::string> all;
    for (const OptionDecl& d : pass->options())
      if (!d.dflt.empty()) all[std::string(d.name)] = std::string(d.dflt);
    bare.push_back({name, PassOptions(name, {})});
    spelled.push_back({name, PassOptions(name, all)});
  }
  REQUIRE(bare.size() == passRegistry().size());
  for (const char* fixture : {"fsdp_w4.json", "tied_w4.json", "sac_w2.json", "fsdp_tp_w4.json"}) {
    INFO(fixture);
    auto a = traced(fixture);
    auto b = traced(fixture);
    PipelineResult ra = runPipeline(*a, bare, {});
    PipelineResult rb = runPipeline(*b, spelled, {});
    CHECK(structuralHash(*a) == structuralHash(*b));
    REQUIRE(ra.passes.size() == rb.passes.size());
    for (size_t i = 0; i < ra.passes.size(); ++i)
      CHECK(ra.passes[i].stats == rb.passes[i].stats);
  }
}

TEST_CASE("pass options: an undeclared option is rejected, naming the declared ones",
          "[pass-options]") {
  for (const auto& r : passRegistry()) {
    auto pass = createPass(r.name);
    std::string known;
    std::set<std::string> names;
    for (const OptionDecl& d : pass->options())
      names.insert(std::string(d.name));
    for (const std::string& n : names)
      known += (known.empty() ? "" : ", ") + n;
    std::string err = errorOf([&] {
      buildPipeline({{std::string(r.name), PassOptions(std::string(r.name), {{"no-such", "1"}})}});
    });
    CHECK(err == "error: pass '" + std::string(r.name) + "' has no option 'no-such'" +
                     (known.empty() ? " (it takes none)" : " (it takes: " + known + ")"));
  }
}

TEST_CASE("pass options: getters refuse keys and types the declarations lack", "[pass-options]") {
  auto build = [](std::function<void(PassOptions&)> body,
                  std::map<std::string, std::string> values = {}) {
    std::vector<ConfiguredPass> out;
    auto p = std::make_unique<DeclaredPass>();
    p->configure_body = std::move(body);
    PassOptions o("declared", std::move(values));
    o.declare(p->options());
    p->configure(o);
    return o.readKeys();
  };
  CHECK(build([](PassOptions& o) {
          o.getInt("n", 1);
          o.getEnum("mode", {"a", "b"}, "a");
          o.getString("limit", "input");
        }) == std::set<std::string>{"limit", "mode", "n"});
  CHECK(errorOf([&] { build([](PassOptions& o) { o.getInt("m", 1); }); }) ==
        "error: internal error: pass 'declared' reads option 'm' that its options() does not "
        "declare");
  CHECK(errorOf([&] { build([](PassOptions& o) { o.getBool("n", true); }); }) ==
        "error: internal error: pass 'declared' reads option 'n' as another type than its "
        "declared 'int'");
  // An enum's choices are its declared type: a new choice must be declared too.
  CHECK(errorOf([&] {
          build([](PassOptions& o) { o.getEnum("mode", {"a", "b", "c"}, "a"); });
        }).find("as another type than its declared 'a|b'") != std::string::npos);
  // Without declare() (a single pass's unit test) anything goes.
  PassOptions loose("declared", {});
  CHECK_NOTHROW(loose.getBool("anything", false));
}

TEST_CASE("pass statistics: patterns, and an undeclared statistic is an error", "[pass-options]") {
  CHECK(statisticMatches("done", "done"));
  CHECK(!statisticMatches("done", "done2"));
  CHECK(statisticMatches("per.<kind>", "per.all_gather"));
  CHECK(!statisticMatches("per.<kind>", "per."));
  CHECK(!statisticMatches("per.<kind>", "per.a.b"));
  CHECK(statisticMatches("a.<x>.b", "a.yy.b"));
  CHECK(!statisticMatches("a.<x>.b", "a.yy.c"));

  Graph g;
  Node* x = g.create(OpKind::Placeholder, Symbol::intern("x"), {}, {}, "x");
  g.create(OpKind::Output, Symbol::intern("output"), {Arg::ofList({Arg::ofNode(x)})}, {}, "output");
  auto run = [&](std::function<void(PassContext&)> body) {
    std::vector<ConfiguredPass> passes;
    auto p = std::make_unique<DeclaredPass>();
    p->run_body = std::move(body);
    passes.push_back({std::move(p), ""});
    return errorOf([&] { runPasses(g, passes, {}); });
  };
  CHECK(run([](PassContext& ctx) {
          ctx.stat("done");
          ctx.stat("per.x");
        }) == "<no error>");
  CHECK(run([](PassContext& ctx) { ctx.stat("undone"); }) ==
        "error: pass 'declared' (#1) failed: internal error: it reports statistic 'undone', which "
        "its statistics() does not declare");
}

TEST_CASE("pass statistics: the registered passes report only declared statistics",
          "[pass-options]") {
  // The pass manager refuses an undeclared statistic, so running pipelines that reach most of
  // them is the check: the default pipeline, size plans, budgets and tight memory limits.
  for (const char* spec : {
           "dce{remove-random=true},tag-fsdp,remat,dedup-fsdp-unshard,bucket,"
           "split-comm-groups{kinds=rs,ar},schedule{prefetch=2}",
           "tag-fsdp{reshard=budget, memory-limit=70000},remat,bucket{plan=size, cap-mb=1, "
           "memory-limit=1},schedule{memory-limit=1}",
           "tag-fsdp{reshard=never},remat,bucket{memory-limit=none, exact-rs-order=false},"
           "schedule{memory-limit=none, defer-rs=false}",
       }) {
    for (const char* fixture : {"fsdp_w2.json", "tied_w4.json", "fsdp_tp_w4.json", "sac_w4.json"}) {
      INFO(spec << " on " << fixture);
      auto g = traced(fixture);
      std::ostringstream sink;
      PassManagerOptions opts;
      opts.out = &sink;
      std::string err = errorOf([&] { runPipeline(*g, parsePipeline(spec), opts); });
      CHECK(err.find("does not declare") == std::string::npos);
    }
  }
}
