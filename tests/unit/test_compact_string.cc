// CompactString (ir/compact_string.h): the one-pointer string of a node's cold fields.
#include <catch2/catch.hpp>
#include <string>
#include <string_view>
#include <utility>

#include "ir/compact_string.h"
#include "ir/graph.h"

using namespace jfx;

TEST_CASE("CompactString is one pointer and holds any text, empty without a block", "[ir]") {
  STATIC_REQUIRE(sizeof(CompactString) == sizeof(void*));
  CompactString s;
  CHECK(s.empty());
  CHECK(s.size() == 0);
  CHECK(s.view().empty());
  CHECK(s == std::string_view());

  const std::string text("File \"m.py\", line 3\n\tx = y\0z", 27);  // an embedded NUL too
  s = text;
  CHECK_FALSE(s.empty());
  CHECK(s.size() == text.size());
  CHECK(s.view() == text);
  CHECK(s.str() == text);
  CHECK(s == text);
  CHECK(text == s);  // the reversed form
  CHECK(s.find("line 3") == text.find("line 3"));
  CHECK(s.find("absent") == std::string_view::npos);

  s = "";  // assigning empty text frees the block
  CHECK(s.empty());
  s = "abc";
  s.clear();
  CHECK(s.empty());
}

TEST_CASE("CompactString copies own their text, moves and self-assignment keep it", "[ir]") {
  CompactString a(std::string_view("layers.0.attention.wq.weight"));
  CompactString b = a;
  CHECK(b == a);
  CHECK(b.data() != a.data());  // its own block
  a = "changed";
  CHECK(b == "layers.0.attention.wq.weight");

  CompactString c = std::move(b);
  CHECK(c == "layers.0.attention.wq.weight");
  CHECK(b.empty());  // NOLINT(bugprone-use-after-move): a moved-from string is empty

  CompactString& same = c;
  c = same;
  CHECK(c == "layers.0.attention.wq.weight");
  c = c.view().substr(7);  // assigned from a view of itself
  CHECK(c == "0.attention.wq.weight");
  CHECK(c != CompactString(std::string_view("other")));
}

TEST_CASE("a node's cold fields read back through the graph, and a node copy keeps them", "[ir]") {
  Graph g;
  Node* p = g.create(OpKind::Placeholder, Symbol::intern("w"), {}, {}, "w");
  p->setInputInfo(InputKind::Parameter, "layers.0.w");
  p->meta().stack_trace = "File \"m.py\", line 1";
  p->meta().extra_json = R"({"nn_module_stack":{}})";
  CHECK(p->inputFqn() == "layers.0.w");
  std::unique_ptr<Graph> copy = g.copy();
  const Node* q = copy->findNode("w");
  REQUIRE(q != nullptr);
  CHECK(q->inputFqn() == "layers.0.w");
  CHECK(q->meta() == p->meta());
  CHECK(q->meta().stack_trace.data() != p->meta().stack_trace.data());

  // The FQN lives in a table of the graph: a clone shares the entry, and setting either node's
  // FQN afterwards leaves the other's as it was.
  Node* c = g.cloneBefore(
      p, nullptr, [](Node*) { return nullptr; }, "w_clone");
  CHECK(c->inputKind() == InputKind::Parameter);
  CHECK(c->inputFqn() == "layers.0.w");
  c->setInputInfo(InputKind::Buffer, "bn.running_mean");
  CHECK(c->inputFqn() == "bn.running_mean");
  CHECK(p->inputFqn() == "layers.0.w");
  p->setInputInfo(InputKind::Parameter, "");
  CHECK(p->inputFqn().empty());
  CHECK(q->inputFqn() == "layers.0.w");  // the copy has its own table
  // A clone into another graph reads the FQN from its source's graph.
  Node* other = copy->cloneBefore(
      c, nullptr, [](Node*) { return nullptr; }, "from_g");
  CHECK(other->inputFqn() == "bn.running_mean");
  // Moving a graph's contents moves its table.
  Graph moved;
  moved.takeContents(std::move(*copy));
  CHECK(moved.findNode("w")->inputFqn() == "layers.0.w");
  CHECK(moved.findNode("from_g")->inputFqn() == "bn.running_mean");
  CHECK(copy->findNode("w") == nullptr);
}
