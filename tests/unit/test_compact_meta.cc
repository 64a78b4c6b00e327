// The compact fields of a node's meta: OptionalInt64 (seq_nr, ac_graph_id in 8 bytes each) and
// ValueMeta's scalar, one union for an int and a float.
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <optional>
#include <string>

#include "ir/error.h"
#include "ir/graph.h"
#include "ir/json_format.h"
#include "ir/text_format.h"
#include "tests/unit/test_util.h"

using namespace jfx;
using jfx::test::errorOf;

TEST_CASE("OptionalInt64 behaves as std::optional<int64_t> for every value but INT64_MIN",
          "[compact-meta]") {
  STATIC_REQUIRE(sizeof(OptionalInt64) == 8);
  STATIC_REQUIRE(sizeof(NodeMeta) <= 48);
  STATIC_REQUIRE(sizeof(ValueMeta) <= 40);
  OptionalInt64 none;
  CHECK_FALSE(none.has_value());
  CHECK_FALSE(static_cast<bool>(none));
  CHECK(none == std::nullopt);
  CHECK(none.value_or(5) == 5);
  CHECK_THROWS_AS(none.value(), std::bad_optional_access);
  CHECK(std::optional<int64_t>(none) == std::nullopt);

  for (int64_t v : {int64_t{0}, int64_t{-1}, std::numeric_limits<int64_t>::max(),
                    std::numeric_limits<int64_t>::min() + 1}) {
    INFO(v);
    OptionalInt64 o = v;
    CHECK(o.has_value());
    CHECK(*o == v);
    CHECK(o.value() == v);
    CHECK(o == OptionalInt64(v));
    CHECK(o != none);
    CHECK(std::optional<int64_t>(o) == v);
    o.reset();
    CHECK(o == none);
  }
  CHECK(OptionalInt64(std::optional<int64_t>()) == none);
  CHECK(*OptionalInt64(std::optional<int64_t>(7)) == 7);
}

TEST_CASE("seq_nr and ac_graph_id keep their extreme values through both formats",
          "[compact-meta]") {
  const std::string json =
      R"({"format": "jointfx.graph", "version": 1, "nodes": [)"
      R"({"args": [], "kwargs": {}, "meta": {"ac_graph_id": 9223372036854775807, "seq_nr": )"
      R"(-9223372036854775807, "val": {"dtype": "float32", "shape": [2]}}, "name": "x", )"
      R"("op": "placeholder", "target": "x"},)"
      R"({"args": [[{"node": "x"}]], "kwargs": {}, "meta": {}, "name": "output", "op": "output", )"
      R"("target": "output"}]})";
  auto g = readJsonGraph(json, "extreme.json");
  const NodeMeta& m = g->findNode("x")->meta();
  CHECK(*m.ac_graph_id == std::numeric_limits<int64_t>::max());
  CHECK(*m.seq_nr == std::numeric_limits<int64_t>::min() + 1);
  auto back = parseTextGraph(printTextGraph(*g), "extreme.jfx");
  CHECK(back->findNode("x")->meta() == m);
  CHECK(writeJsonGraph(*readJsonGraph(writeJsonGraph(*g), "again.json")) == writeJsonGraph(*g));

  // The one value an OptionalInt64 cannot hold is not typed: the JSON reader carries it verbatim
  // as extra meta, so it comes back unchanged, never "absent"; the text format's typed seq_nr=
  // cannot spell it.
  std::string reserved = json;
  reserved.replace(reserved.find("-9223372036854775807"), 20, "-9223372036854775808");
  {
    auto r = readJsonGraph(reserved, "r.json");
    const NodeMeta& rm = r->findNode("x")->meta();
    CHECK(!rm.seq_nr);
    CHECK(rm.extra_json == R"({"seq_nr":-9223372036854775808})");
    CHECK(writeJsonGraph(*r).find(R"("seq_nr":-9223372036854775808)") != std::string::npos);
  }
  CHECK_THAT(errorOf([&] {
               parseTextGraph(
                   "jointfx.graph 1\n%x : f32[2] = placeholder {seq_nr=-9223372036854775808}\n"
                   "%output = output([%x])\n",
                   "r.jfx");
             }),
             Catch::Contains("r.jfx:2:") && Catch::Contains("INT64_MIN is reserved"));
}

TEST_CASE("ValueMeta keeps an int and a float in one place and compares by kind",
          "[compact-meta]") {
  ValueMeta i;
  i.kind = ValueMeta::Kind::Int;
  i.i = -7;
  ValueMeta f;
  f.kind = ValueMeta::Kind::Float;
  f.f = 2.5;
  CHECK(i.i == -7);
  CHECK(f.f == 2.5);
  CHECK_FALSE(i == f);
  ValueMeta f2 = f;
  CHECK(f2 == f);
  f2.f = -0.0;
  ValueMeta zero = f;
  zero.f = 0.0;
  CHECK(f2 == zero);  // compared as doubles: -0.0 == 0.0, as the field did before
  ValueMeta nan = f;
  nan.f = std::nan("");
  CHECK_FALSE(nan == nan);
  ValueMeta b;
  b.kind = ValueMeta::Kind::Bool;
  b.i = 1;
  ValueMeta one = i;
  one.i = 1;
  CHECK_FALSE(b == one);  // same bits, other kind
}
