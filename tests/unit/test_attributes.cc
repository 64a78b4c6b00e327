// Typed node attributes: the map, and the formats reading declared keys into it and writing them
// back byte-identically (Note [Attributes and the formats] in ir/attributes.h).
#include <catch2/catch.hpp>
#include <functional>
#include <sstream>

#include "ir/attributes.h"
#include "ir/io.h"
#include "ir/json_format.h"
#include "ir/text_format.h"
#include "passes/pass_manager.h"
#include "tests/unit/test_util.h"

using namespace jfx;
using jfx::test::errorOf;

namespace {

AttrValue bucketRecord(int64_t members) {
  return AttrValue{AttrValue::Dict{
      {"plan", std::string("blocks")}, {"kind", std::string("all_gather")}, {"members", members}}};
}

}  // namespace

TEST_CASE("attributes: typed map", "[attributes]") {
  AttrMap m;
  CHECK(m.empty());
  m.set(attr::fsdpBucket(), bucketRecord(3));
  m.set(attr::autogradBackward(), AttrValue{true});
  m.set(attr::bucket(), bucketRecord(1));
  // Sorted by name, whatever the insertion order; dict keys sorted too.
  REQUIRE(m.size() == 3);
  CHECK(m.entries()[0].first.str() == "autograd_backward");
  CHECK(m.entries()[1].first.str() == "bucket");
  CHECK(m.entries()[2].first.str() == "fsdp_bucket");
  const AttrValue::Dict* d = m.getDict(attr::fsdpBucket());
  REQUIRE(d);
  CHECK((*d)[0].first == "kind");
  CHECK(std::get<int64_t>((*d)[1].second) == 3);
  CHECK(m.getBool(attr::autogradBackward()) == true);
  // Typed getters answer only their own type.
  CHECK_FALSE(m.getBool(attr::fsdpBucket()).has_value());
  CHECK(m.getDict(attr::autogradBackward()) == nullptr);
  // Setting again replaces; erase removes.
  m.set(attr::autogradBackward(), AttrValue{false});
  CHECK(m.getBool(attr::autogradBackward()) == false);
  CHECK(m.erase(attr::bucket()));
  CHECK_FALSE(m.erase(attr::bucket()));
  CHECK(m.size() == 2);
  {  // Emptied by erases, a map equals one never set (and erasing from it finds nothing).
    AttrMap e = m;
    CHECK(e.erase(attr::fsdpBucket()));
    CHECK(e.erase(attr::autogradBackward()));
    CHECK(e.empty());
    CHECK(e == AttrMap());
    CHECK(e.entries().empty());
    CHECK_FALSE(e.erase(attr::fsdpBucket()));
    CHECK_FALSE(AttrMap().erase(attr::bucket()));
  }

  std::string json;
  m.entries()[1].second.appendJson(json);
  CHECK(json == R"({"kind":"all_gather","members":3,"plan":"blocks"})");

  // Only declared keys, with their declared type.
  CHECK_THAT(errorOf([&] { m.set(Symbol::intern("my_key"), AttrValue{true}); }),
             Catch::Contains("attribute 'my_key' is not declared"));
  CHECK_THAT(errorOf([&] { m.set(attr::autogradBackward(), AttrValue{int64_t{1}}); }),
             Catch::Contains("attribute 'autograd_backward' is a bool, set with a int"));
}

TEST_CASE("attributes: declared keys are lifted from extra meta only when lossless",
          "[attributes]") {
  struct Case {
    std::string extra;
    std::string rest;  // extra_json after lifting
    size_t lifted;
  };
  const Case cases[] = {
      {R"({"a":1,"autograd_backward":true,"z":"x"})", R"({"a":1,"z":"x"})", 1},
      {R"({"autograd_backward":true})", "", 1},
      {R"({"fsdp_bucket":{"kind":"all_gather","members":2,"plan":"blocks"},"q":[1.5,2]})",
       R"({"q":[1.5,2]})", 1},
      // Another type than declared: stays verbatim.
      {R"({"autograd_backward":1})", R"({"autograd_backward":1})", 0},
      {R"({"bucket":"yes"})", R"({"bucket":"yes"})", 0},
      // A float or a nested value in a dict is not a dict of scalars.
      {R"({"fsdp_bucket":{"kind":"all_gather","members":2.0}})",
       R"({"fsdp_bucket":{"kind":"all_gather","members":2.0}})", 0},
      {R"({"fsdp_bucket":{"kind":{"a":1}}})", R"({"fsdp_bucket":{"kind":{"a":1}}})", 0},
      // The key nested elsewhere is not the attribute.
      {R"({"custom":{"autograd_backward":true}})", R"({"custom":{"autograd_backward":true}})", 0},
      {R"({"s":"\"autograd_backward\""})", R"({"s":"\"autograd_backward\""})", 0},
  };
  for (const Case& c : cases) {
    INFO(c.extra);
    std::string extra = c.extra;
    AttrMap attrs;
    liftAttrs(extra, attrs);
    CHECK(extra == c.rest);
    CHECK(attrs.size() == c.lifted);
    // Merging back gives the original text.
    CHECK(mergeAttrs(extra, attrs) == c.extra);
  }
  // An attribute wins over an extra key of the same name (only hand-built meta can have both).
  AttrMap attrs;
  attrs.set(attr::autogradBackward(), AttrValue{true});
  CHECK(mergeAttrs(R"({"autograd_backward":false,"b":1})", attrs) ==
        R"({"autograd_backward":true,"b":1})");
  CHECK(mergeAttrs("", attrs) == R"({"autograd_backward":true})");
}

TEST_CASE("attributes: the formats read them typed and write them back byte-identically",
          "[attributes]") {
  // A traced fixture bucketed by the default pipeline: its collectives carry fsdp_bucket.
  auto g = loadGraph(std::string(JFX_SOURCE_DIR) + "/tests/data/traced/fsdp_w2.json");
  std::ostringstream sink;
  PassManagerOptions o;
  o.out = &sink;
  runPipeline(*g, resolvePipeline(std::string(JFX_SOURCE_DIR) + "/configs/pipelines/default.json"),
              o);
  // Give a few nodes the autograd flag, as make_fx under preserve_node_meta does.
  int flagged = 0;
  for (Node* n = g->first(); n && flagged < 3; n = n->next())
    if (n->op() == OpKind::CallFunction) {
      n->meta().attrs.set(attr::autogradBackward(), AttrValue{true});
      ++flagged;
    }
  int buckets = 0;
  for (Node* n = g->first(); n; n = n->next())
    buckets += n->meta().attrs.has(attr::fsdpBucket());
  REQUIRE(buckets > 0);

  const std::string json = writeJsonGraph(*g);
  CHECK(json.find(R"("fsdp_bucket":{"kind":"all_gather","members":)") != std::string::npos);
  auto back = readJsonGraph(json, "<json>");
  int read_buckets = 0, read_flags = 0;
  for (Node* n = back->first(); n; n = n->next()) {
    read_buckets += n->meta().attrs.has(attr::fsdpBucket());
    read_flags += n->meta().attrs.getBool(attr::autogradBackward()).value_or(false);
    // Declared keys never stay in the extra JSON.
    CHECK(n->meta().extra_json.find("fsdp_bucket") == std::string::npos);
    CHECK(n->meta().extra_json.find("autograd_backward") == std::string::npos);
  }
  CHECK(read_buckets == buckets);
  CHECK(read_flags == 3);
  CHECK(writeJsonGraph(*back) == json);

  // The text format carries them in extra={...} and round-trips the same way.
  const std::string text = printTextGraph(*g);
  CHECK(text.find(R"("fsdp_bucket":{)") != std::string::npos);
  auto from_text = parseTextGraph(text, "<text>");
  CHECK(printTextGraph(*from_text) == text);
  CHECK(writeJsonGraph(*from_text) == json);
}
