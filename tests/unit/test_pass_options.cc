// Options and statistics declared once, as members (passes/options.h): each declaration gives
// the name, default, range and meaning `jointfx passes NAME` lists, parses the pipeline's value,
// and is what the pass reads; defaults change nothing.
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

struct DeclaredStatistics : StatisticSet {
  Statistic done{this, "done", "things done"};
  Statistic per{this, "per.<kind>", "per kind"};
};
const DeclaredStatistics& declaredStats() {
  static const DeclaredStatistics s;
  return s;
}

// A pass with one option of each kind; run() reports what it read.
class DeclaredPass : public Pass {
 public:
  enum class Mode { A, B };
  DeclaredPass() : Pass("declared") {}
  std::span<const Statistic* const> statistics() const override { return declaredStats().all(); }
  bool run(Graph&, PassContext& ctx) override {
    ctx.stat(declaredStats().done, *n_);
    ctx.stat(declaredStats().per, *mode_ == Mode::A ? "a" : "b", 2);
    return false;
  }
  void initialize() override {
    if (*mode_ == Mode::B && !limit_.isSet()) throw JfxError({}, "mode=b needs limit");
  }

  Option<int64_t> n_{this, "n", 1, "a number", {0, 10}};
  EnumOption<Mode> mode_{this, "mode", {{"a", Mode::A}, {"b", Mode::B}}, Mode::A, "a choice"};
  BytesOption limit_{this, "limit", "input", "a size", {{"input", -1}}};
  Option<double> ratio_{this, "ratio", 0.5, "a fraction", {0.0, 1.0}};
  Option<bool> flag_{this, "flag", false, "a switch"};
  Option<std::vector<std::string>> kinds_{this, "kinds", {"x"}, "some kinds", {"x", "y"}, "kind"};
  Option<int64_t> k_{this, "k", std::nullopt, "a distance (unset: 3)", {0, 64}, {{"auto", -1}}};
};

std::string configureError(std::map<std::string, std::string> values) {
  return errorOf([&] { DeclaredPass().configure(PassOptions("declared", std::move(values))); });
}

}  // namespace

TEST_CASE("pass options: a declaration gives the type, default, range and meaning",
          "[pass-options]") {
  DeclaredPass p;
  std::vector<std::string> rows;
  for (const OptionBase* o : p.options())
    rows.push_back(std::string(o->name()) + " | " + o->type() + " | " + o->defaultText() + " | " +
                   o->range() + " | " + std::string(o->help()));
  CHECK(rows == std::vector<std::string>{
                    "n | int | 1 | [0, 10] | a number",
                    "mode | a|b | a |  | a choice",
                    "limit | bytes | input |  | a size",
                    "ratio | float | 0.5 | [0, 1] | a fraction",
                    "flag | bool | false |  | a switch",
                    "kinds | list | x |  | some kinds",
                    "k | int|auto |  | [0, 64] or auto | a distance (unset: 3)",
                });
  // Unset, the declared defaults.
  CHECK(*p.n_ == 1);
  CHECK(*p.mode_ == DeclaredPass::Mode::A);
  CHECK(*p.limit_ == -1);
  CHECK(*p.ratio_ == 0.5);
  CHECK(!*p.flag_);
  CHECK(*p.kinds_ == std::vector<std::string>{"x"});
  CHECK(p.k_.valueOr(3) == 3);
  CHECK(!p.n_.isSet());
  // Set, the values given.
  DeclaredPass q;
  q.configure(PassOptions("declared", {{"n", "7"},
                                       {"mode", "b"},
                                       {"limit", "2KiB"},
                                       {"ratio", "0.25"},
                                       {"flag", "on"},
                                       {"kinds", "y,x"},
                                       {"k", "auto"}}));
  CHECK(*q.n_ == 7);
  CHECK(q.n_.isSet());
  CHECK(*q.mode_ == DeclaredPass::Mode::B);
  CHECK(*q.limit_ == 2048);
  CHECK(*q.ratio_ == 0.25);
  CHECK(*q.flag_);
  CHECK(*q.kinds_ == std::vector<std::string>{"y", "x"});
  CHECK(*q.k_ == -1);
}

TEST_CASE("pass options: a bad value's error names the pass, the option and what it takes",
          "[pass-options]") {
  CHECK(configureError({{"n", "11"}}) ==
        "error: pass 'declared': option 'n=11': expected an integer in [0, 10]");
  CHECK(configureError({{"n", "x"}}) ==
        "error: pass 'declared': option 'n=x': expected an integer");
  CHECK(configureError({{"mode", "c"}}) ==
        "error: pass 'declared': option 'mode=c': expected one of a, b");
  CHECK(configureError({{"limit", "lots"}}) ==
        "error: pass 'declared': option 'limit': bad byte size 'lots' (expected e.g. 80GiB, "
        "512M, 1000000)");
  CHECK(configureError({{"ratio", "2"}}) ==
        "error: pass 'declared': option 'ratio=2': expected a number in [0, 1]");
  CHECK(configureError({{"flag", "maybe"}}) ==
        "error: pass 'declared': option 'flag=maybe': expected true or false");
  CHECK(configureError({{"kinds", "x,z"}}) ==
        "error: pass 'declared': option 'kinds': unknown kind 'z' (expected x, y)");
  CHECK(configureError({{"k", "65"}}) ==
        "error: pass 'declared': option 'k=65': expected an integer in [0, 64] or auto");
  // A rule between options (initialize) is named the same way; so is an undeclared option.
  CHECK(configureError({{"mode", "b"}}) == "error: pass 'declared': mode=b needs limit");
  CHECK(configureError({{"m", "1"}}) ==
        "error: pass 'declared' has no option 'm' (it takes: flag, k, kinds, limit, mode, n, "
        "ratio)");
}

TEST_CASE("pass options: every registered pass declares well-formed options and statistics",
          "[pass-options]") {
  const std::set<std::string> types = {"bool", "int", "float", "string", "bytes", "path", "list"};
  for (const auto& r : passRegistry()) {
    INFO("pass " << r.name);
    auto pass = createPass(r.name);
    CHECK(pass->name() == r.name);
    std::set<std::string> names;
    for (const OptionBase* o : pass->options()) {
      INFO("option " << o->name());
      CHECK(names.insert(std::string(o->name())).second);
      CHECK(!o->help().empty());
      CHECK((types.count(o->type()) || o->type().find('|') != std::string::npos));
    }
    REQUIRE(!pass->statistics().empty());
    std::set<std::string> stats;
    for (const Statistic* s : pass->statistics()) {
      CHECK(stats.insert(std::string(s->name())).second);
      CHECK(!s->help().empty());
    }
  }
}

TEST_CASE("pass options: each declared default is accepted, alone and all together",
          "[pass-options]") {
  for (const auto& r : passRegistry()) {
    auto pass = createPass(r.name);
    std::map<std::string, std::string> all;
    for (const OptionBase* o : pass->options()) {
      if (o->defaultText().empty()) continue;  // unset by default: nothing to spell out
      INFO("pass " << r.name << " option " << o->name() << "=" << o->defaultText());
      std::map<std::string, std::string> one = {{std::string(o->name()), o->defaultText()}};
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
    for (const OptionBase* o : pass->options())
      if (!o->defaultText().empty()) all[std::string(o->name())] = o->defaultText();
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
    std::set<std::string> names;
    for (const OptionBase* o : pass->options())
      names.insert(std::string(o->name()));
    std::string known;
    for (const std::string& n : names)
      known += (known.empty() ? "" : ", ") + n;
    std::string err = errorOf([&] {
      buildPipeline({{std::string(r.name), PassOptions(std::string(r.name), {{"no-such", "1"}})}});
    });
    CHECK(err == "error: pass '" + std::string(r.name) + "' has no option 'no-such'" +
                     (known.empty() ? " (it takes none)" : " (it takes: " + known + ")"));
  }
}

TEST_CASE("pass statistics: declared members, counted by name and part", "[pass-options]") {
  CHECK(declaredStats().per.instance("all_gather") == "per.all_gather");
  CHECK(declaredStats().done.instance("x") == "done");
  Graph g;
  Node* x = g.create(OpKind::Placeholder, Symbol::intern("x"), {}, {}, "x");
  g.create(OpKind::Output, Symbol::intern("output"), {Arg::ofList({Arg::ofNode(x)})}, {}, "output");
  std::vector<ConfiguredPass> passes;
  auto p = std::make_unique<DeclaredPass>();
  p->configure(PassOptions("declared", {{"n", "3"}, {"mode", "b"}, {"limit", "1"}}));
  passes.push_back({std::move(p), ""});
  PipelineResult r = runPasses(g, passes, {});
  CHECK(r.passes.at(0).stats == Statistics{{"done", 3}, {"per.b", 2}});
}
