// Error messages quote at most kQuoteLimit bytes of a value that came from the user
// (ir/error.h): a 100 MB option value, key or name must come back as a short message that says
// how long the value was.
#include <catch2/catch.hpp>

#include <functional>
#include <string>
#include <vector>

#include "ir/error.h"
#include "ir/json_format.h"
#include "passes/analysis/cost_model.h"
#include "passes/pass_manager.h"
#include "test_util.h"

using namespace jfx;

namespace {

using test::errorOf;

}  // namespace

TEST_CASE("error messages: values are clipped to kQuoteLimit bytes", "[errors]") {
  CHECK(quoteForMessage("abc") == "'abc'");
  CHECK(clipForMessage("abc") == "abc");
  const std::string at_limit(kQuoteLimit, 'x');
  CHECK(quoteForMessage(at_limit) == "'" + at_limit + "'");
  const std::string long_value(kQuoteLimit + 1, 'y');
  CHECK(quoteForMessage(long_value) == "'" + std::string(kQuoteLimit, 'y') + "...' (" +
                                           std::to_string(kQuoteLimit + 1) + " bytes)");
  CHECK(clipForMessage(long_value) ==
        std::string(kQuoteLimit, 'y') + "... (" + std::to_string(kQuoteLimit + 1) + " bytes)");
  // A cut never splits a UTF-8 sequence: 100 three-byte euro signs cut at 198 bytes, not 200.
  std::string euros;
  for (int i = 0; i < 100; ++i)
    euros += "\xE2\x82\xAC";
  std::string clipped = clipForMessage(euros);
  CHECK(clipped.starts_with(euros.substr(0, 198) + "..."));
  CHECK(clipped.find("(300 bytes)") != std::string::npos);
}

TEST_CASE("error messages: locations clip node names and JSON pointers", "[errors]") {
  SourceLocation loc;
  loc.file = "g.json";
  loc.json_pointer = "/nodes/0/" + std::string(1 << 20, 'k');
  loc.node = std::string(1 << 20, 'n');
  std::string s = loc.str();
  CHECK(s.size() < 3 * kQuoteLimit);
  CHECK(s.find("(1048585 bytes)") != std::string::npos);  // the pointer
  CHECK(s.find("(1048576 bytes)") != std::string::npos);  // the node name
  // A file path is shown whole up to PATH_MAX.
  loc = {};
  loc.file = std::string(1000, 'p');
  CHECK(loc.str() == loc.file);
}

TEST_CASE("error messages: a 100 MB option value gives a short message", "[errors]") {
  const std::string huge(100 << 20, '9');
  // Through a pipeline entry (a pipeline file, --set or the Python API all end here).
  std::vector<PipelineEntry> pipeline = parsePipeline("bucket");
  applyOptionOverrides(pipeline, {"bucket.memory-limit=" + huge + "x"});
  std::string e = errorOf([&] { buildPipeline(pipeline); });
  INFO(e.substr(0, 1000));
  CHECK(e.size() < 1000);
  CHECK(e.find("memory-limit") != std::string::npos);
  CHECK(e.find("(104857601 bytes)") != std::string::npos);
  // A pass option of another type, an unknown pass and a --set that matches nothing.
  pipeline = parsePipeline("schedule");
  applyOptionOverrides(pipeline, {"schedule.prefetch=" + huge});
  e = errorOf([&] { buildPipeline(pipeline); });
  CHECK(e.size() < 1000);
  CHECK(e.find("bytes)") != std::string::npos);
  pipeline = parsePipeline("bucket");
  applyOptionOverrides(pipeline, {"bucket.cap-mb=" + huge});
  e = errorOf([&] { buildPipeline(pipeline); });
  CHECK(e.size() < 1000);
  e = errorOf([&] { parsePipeline(huge + "{}"); });  // not a name character: a short message
  CHECK(e.size() < 1000);
  e = errorOf([&] { parsePipeline("a" + std::string(100 << 20, 'b')); });
  CHECK(e.size() < 1000);
  CHECK(e.find("unknown pass 'abbb") != std::string::npos);
  e = errorOf([&] { applyOptionOverrides(pipeline, {"no-such-key=" + huge}); });
  CHECK(e.size() < 1000);
}

TEST_CASE("error messages: JSON readers clip what nlohmann quotes", "[errors]") {
  // An unterminated string of 10 MB: nlohmann's "last read: '...'" holds all of it.
  const std::string text = "{\"name\": \"" + std::string(10 << 20, 'a');
  std::string e = errorOf([&] { parseHardwareProfile(text, "p.json"); });
  INFO(e.substr(0, 1000));
  CHECK(e.size() < 1000);
  CHECK(e.find("p.json:1:") != std::string::npos);
  CHECK(e.find("bytes)") != std::string::npos);
  // Every digit of an overflowing number.
  const std::string number =
      "{\"name\": \"x\", \"gpus_per_node\": 1" + std::string(1 << 20, '0') + "}";
  e = errorOf([&] { parseHardwareProfile(number, "n.json"); });
  CHECK(e.size() < 1000);
  CHECK(e.find("number overflow") != std::string::npos);
  // An unknown key of 1 MB, in the message and in the JSON pointer.
  const std::string key = "{\"" + std::string(1 << 20, 'k') + "\": 1}";
  e = errorOf([&] { parseHardwareProfile(key, "k.json"); });
  CHECK(e.size() < 1000);
  CHECK(e.find("unknown key 'kkk") != std::string::npos);
  // The graph reader: an unknown dtype and a node name of 1 MB.
  const std::string name(1 << 20, 'n');
  const std::string graph = R"({"format": "jointfx.graph", "version": 1, "nodes": [{"name": ")" +
                            name + R"(", "op": "placeholder", "target": "x", "args": [],
                            "kwargs": {}, "meta": {"val": {"dtype": ")" +
                            std::string(1 << 20, 'd') + R"(", "shape": [1]}}}]})";
  e = errorOf([&] { readJsonGraph(graph, "g.json"); });
  INFO(e.substr(0, 1000));
  CHECK(e.size() < 1000);
  CHECK(e.find("unknown dtype 'ddd") != std::string::npos);
}
