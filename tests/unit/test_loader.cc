// The graph-construction layer's shared rules (ir/loader.h), each checked through both readers
// that build through it: the JSON reader and the text reader. Each case spells one graph in both
// formats and states the message and the place each reader reports it at; a rule the text
// syntax cannot break (an output node's target is always "output") is checked as the syntax
// error the text reader gives instead.
#include <algorithm>
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "ir/error.h"
#include "ir/graph.h"
#include "ir/json_format.h"
#include "ir/text_format.h"
#include "ir/verifier.h"
#include "tests/reordered_json.h"

using namespace jfx;

namespace {

// One node per entry, in the JSON writer's member order; the text form is given alongside.
std::string jsonDoc(const std::vector<std::string>& nodes) {
  std::string s = "{\"format\":\"jointfx.graph\",\"version\":1,\"nodes\":[\n";
  for (size_t i = 0; i < nodes.size(); ++i)
    s += nodes[i] + (i + 1 < nodes.size() ? ",\n" : "\n");
  return s + "]}\n";
}
std::string textDoc(const std::vector<std::string>& lines) {
  std::string s = "jointfx.graph 1\n";
  for (const std::string& l : lines)
    s += l + "\n";
  return s;
}

const std::string kJx = R"({"name":"x","op":"placeholder","target":"x"})";
std::string jsonNeg(const std::string& name, const std::string& operand) {
  return R"({"args":[{"node":")" + operand + R"("}],"name":")" + name +
         R"(","op":"call_function","target":"aten.neg.default"})";
}

enum class Format { Json, Text };

struct Case {
  std::vector<std::string> json;  // nodes
  std::vector<std::string> text;  // node lines (line 2 on)
  std::string json_error;         // the whole what() the JSON reader throws
  std::string text_error;         // and the text reader
};

std::string errorOf(Format f, const Case& c) {
  try {
    if (f == Format::Json)
      (void)readJsonGraph(jsonDoc(c.json), "g.json");
    else
      (void)parseTextGraph(textDoc(c.text), "g.jfx");
  } catch (const JfxError& e) {
    return e.what();
  }
  return "no error";
}

void checkRule(const Case& c) {
  const Format f = GENERATE(Format::Json, Format::Text);
  const std::string got = errorOf(f, c);
  CHECK(got == (f == Format::Json ? c.json_error : c.text_error));
  // The JSON reader reads members in the file's order but reports errors in the format's check
  // order: the same document with its keys in reverse order gets the same error.
  if (f == Format::Json) {
    const auto reversed = testing::reversedKeys(jsonDoc(c.json));
    REQUIRE(reversed.has_value());
    std::string got_reversed = "no error";
    try {
      (void)readJsonGraph(*reversed, "g.json");
    } catch (const JfxError& e) {
      got_reversed = e.what();
    }
    CHECK(got_reversed == c.json_error);
  }
}

}  // namespace

TEST_CASE("loader rule: a node name is not empty", "[loader]") {
  checkRule({{R"({"name":"","op":"placeholder","target":"x"})"},
             {"% = placeholder"},
             "g.json at /nodes/0/name: error: empty node name",
             "g.jfx:2:2: error: expected a node name, found ' '"});
}

TEST_CASE("loader rule: a node name is used once", "[loader]") {
  checkRule({{kJx, jsonNeg("y", "x"), jsonNeg("y", "x")},
             {"%x = placeholder", "%y = aten.neg.default(%x)", "%y = aten.neg.default(%x)"},
             "g.json at /nodes/2/name (node 'y'): error: duplicate node name 'y'",
             "g.jfx:4:2 (node 'y'): error: duplicate node name %y (first defined at line 3)"});
}

TEST_CASE("loader rule: a name claimed late is still used once", "[loader]") {
  // The JSON reader claims names eight nodes late: the duplicate is found at its own node.
  std::vector<std::string> json = {kJx}, text = {"%x = placeholder"};
  for (int i = 0; i < 12; ++i) {
    json.push_back(jsonNeg("n" + std::to_string(i), "x"));
    text.push_back("%n" + std::to_string(i) + " = aten.neg.default(%x)");
  }
  json.push_back(jsonNeg("n3", "x"));
  text.push_back("%n3 = aten.neg.default(%x)");
  checkRule({json, text, "g.json at /nodes/13/name (node 'n3'): error: duplicate node name 'n3'",
             "g.jfx:15:2 (node 'n3'): error: duplicate node name %n3 (first defined at line 6)"});
}

TEST_CASE("loader rule: the output node's target is \"output\"", "[loader]") {
  checkRule({{kJx, R"({"args":[[{"node":"x"}]],"name":"out","op":"output","target":"result"})"},
             {"%x = placeholder", "%out = output result([%x])"},
             "g.json at /nodes/1/target (node 'out'): error: the output node's target must be "
             "\"output\", got 'result'",
             "g.jfx:3:15 (node 'out'): error: expected '(', found 'r'"});
}

TEST_CASE("loader rule: a call_function's target is not empty", "[loader]") {
  checkRule({{kJx, R"({"args":[{"node":"x"}],"name":"y","op":"call_function","target":""})"},
             {"%x = placeholder", "%y = (%x)"},
             "g.json at /nodes/1/target (node 'y'): error: empty call_function target",
             "g.jfx:3:6 (node 'y'): error: expected placeholder, get_attr, output or an op "
             "target, found '('"});
}

TEST_CASE("loader rule: placeholders and get_attrs take no arguments", "[loader]") {
  checkRule({{kJx, R"({"args":[{"node":"x"}],"name":"p","op":"placeholder","target":"p"})"},
             {"%x = placeholder", "%p = placeholder(%x)"},
             "g.json at /nodes/1/args (node 'p'): error: a placeholder takes no arguments",
             "g.jfx:3:17 (node 'p'): error: expected end of line, found '('"});
  checkRule({{kJx, R"({"kwargs":{"a":1},"name":"c","op":"get_attr","target":"c"})"},
             {"%x = placeholder", "%c = get_attr \"c\"(a=1)"},
             "g.json at /nodes/1/kwargs (node 'c'): error: a get_attr takes no arguments",
             "g.jfx:3:18 (node 'c'): error: expected end of line, found '('"});
}

TEST_CASE("loader rule: a node that refers to itself is a cycle", "[loader]") {
  checkRule({{kJx, jsonNeg("y", "y")},
             {"%x = placeholder", "%y = aten.neg.default(%y)"},
             "g.json at /nodes/1/args/0/node (node 'y'): error: node 'y' refers to itself (a "
             "cycle)",
             "g.jfx:3:23 (node 'y'): error: %y refers to itself (a cycle)"});
}

TEST_CASE("loader rule: a reference to a later node is a forward reference", "[loader]") {
  checkRule({{kJx, jsonNeg("y", "z"), jsonNeg("z", "x")},
             {"%x = placeholder", "%y = aten.neg.default(%z)", "%z = aten.neg.default(%x)"},
             "g.json at /nodes/1/args/0/node (node 'y'): error: node 'z' is used before its "
             "definition at /nodes/2 (a forward reference or cycle: nodes must be in topological "
             "order)",
             "g.jfx:3:23 (node 'y'): error: %z is used before its definition at line 4 (a forward "
             "reference or cycle: nodes must be in topological order)"});
}

TEST_CASE("loader rule: a reference to no node is dangling", "[loader]") {
  checkRule({{kJx, jsonNeg("y", "nowhere")},
             {"%x = placeholder", "%y = aten.neg.default(%nowhere)"},
             "g.json at /nodes/1/args/0/node (node 'y'): error: dangling reference to undefined "
             "node 'nowhere'",
             "g.jfx:3:23 (node 'y'): error: undefined node %nowhere (dangling reference)"});
}

TEST_CASE("loader: each node remembers where it was read", "[loader]") {
  const Format f = GENERATE(Format::Json, Format::Text);
  std::unique_ptr<Graph> g =
      f == Format::Json
          ? readJsonGraph(jsonDoc({kJx, jsonNeg("y", "x"), jsonNeg("z", "y")}), "g.json")
          : parseTextGraph(textDoc({"%x = placeholder", "", "# a comment",
                                    "%y = aten.neg.default(%x)", "%z = aten.neg.default(%y)"}),
                           "g.jfx");
  Node* z = g->findNode("z");
  REQUIRE(z);
  CHECK(g->location(z).str() ==
        (f == Format::Json ? "g.json at /nodes/2 (node 'z')" : "g.jfx:6 (node 'z')"));
  // An exact copy keeps the places; a node a pass copies from a read one is at that one's
  // place; a node made in memory has only its name.
  auto c = g->copy();
  CHECK(c->location(c->findNode("y")).str() ==
        (f == Format::Json ? "g.json at /nodes/1 (node 'y')" : "g.jfx:5 (node 'y')"));
  Node* copied = g->cloneBefore(
      z, nullptr, [](Node* n) { return n; }, "z_again");
  CHECK(g->location(copied).str() ==
        (f == Format::Json ? "g.json at /nodes/2 (node 'z_again')" : "g.jfx:6 (node 'z_again')"));
  Node* made = g->createCall("aten.neg.default", {Arg::ofNode(g->findNode("x"))}, {}, z, "fresh");
  CHECK(g->location(made).str() == "(node 'fresh')");
}

TEST_CASE("loader: a verifier issue names the node's place", "[loader]") {
  const Format f = GENERATE(Format::Json, Format::Text);
  // aten.neg.default takes one tensor: two operands break the arity rule.
  std::unique_ptr<Graph> g =
      f == Format::Json
          ? readJsonGraph(jsonDoc({kJx, R"({"args":[{"node":"x"},{"node":"x"}],"name":"y","op":)"
                                        R"("call_function","target":"aten.neg.default"})"}),
                          "g.json")
          : parseTextGraph(textDoc({"%x = placeholder", "%y = aten.neg.default(%x, %x)"}), "g.jfx");
  std::vector<VerifyIssue> issues = verifyGraph(*g);
  auto y = std::find_if(issues.begin(), issues.end(),
                        [](const VerifyIssue& i) { return i.node == "y" && i.rule == "arity"; });
  REQUIRE(y != issues.end());
  CHECK(y->where == (f == Format::Json ? "g.json at /nodes/1" : "g.jfx:3"));
  CHECK(y->str().rfind(f == Format::Json ? "g.json at /nodes/1: node 'y': [arity] "
                                         : "g.jfx:3: node 'y': [arity] ",
                       0) == 0);
  // A graph-level issue (this graph has no output node) has no place.
  for (const VerifyIssue& i : issues)
    if (i.node.empty()) CHECK(i.where.empty());
}
