// Node names in the graph's arena (Note [Name arena] in ir/name_arena.h).
#include <catch2/catch.hpp>

#include <memory>
#include <string>

#include "ir/graph.h"
#include "ir/name_arena.h"
#include "ir/text_format.h"

using namespace jfx;

namespace {

Node* placeholder(Graph& g, const std::string& name) {
  return g.create(OpKind::Placeholder, Symbol::intern("x"), {}, {}, name);
}

}  // namespace

TEST_CASE("name arena: stores any length, the empty name included", "[ir][names]") {
  NameArena a;
  const std::string big(100000, 'q');  // larger than a chunk: a block of its own
  const char* e = a.add("");
  const char* s1 = a.add("add_tensor_17");
  const char* b = a.add(big);
  const char* s2 = a.add("mm");
  CHECK(NameArena::view(nullptr).empty());
  CHECK(NameArena::view(e).empty());
  CHECK(NameArena::view(s1) == "add_tensor_17");
  CHECK(NameArena::view(b) == big);
  CHECK(NameArena::view(s2) == "mm");
  CHECK(s1[13] == '\0');
  // The big name did not end the chunk in use: the next short one follows the first.
  CHECK(s2 == s1 + 13 + 1 + sizeof(uint32_t));
  // A string with a NUL inside keeps its length.
  const std::string with_nul("a\0b", 3);
  CHECK(NameArena::view(a.add(with_nul)) == with_nul);
}

TEST_CASE("name arena: names outlive the graph they were copied from", "[ir][names]") {
  auto g = std::make_unique<Graph>();
  for (int i = 0; i < 5000; ++i)  // several chunks
    placeholder(*g, "model_layers_" + std::to_string(i) + "_attention_wq_weight");
  const std::string text = printTextGraph(*g);
  std::unique_ptr<Graph> c = g->copy();
  Node* renamed = c->findNode("model_layers_7_attention_wq_weight");
  REQUIRE(renamed != nullptr);
  c->rename(renamed, "w7");
  CHECK(g->findNode("model_layers_7_attention_wq_weight") != nullptr);  // the original keeps it
  placeholder(*g, "only_in_the_original");
  g.reset();
  CHECK(c->findNode("w7") == renamed);
  c->rename(renamed, "model_layers_7_attention_wq_weight");
  CHECK(printTextGraph(*c) == text);
  CHECK(c->findNode("only_in_the_original") == nullptr);
  CHECK(c->nodes().back()->name() == "model_layers_4999_attention_wq_weight");
}

TEST_CASE("name arena: takeContents and rollback keep names", "[ir][names][undo]") {
  Graph g;
  placeholder(g, "a_long_parameter_name_replaced_by_takecontents");
  {
    Graph other;
    placeholder(other, "from_the_other_graph_with_a_long_name");
    g.takeContents(std::move(other));
  }
  CHECK(g.nodes().front()->name() == "from_the_other_graph_with_a_long_name");
  Node* n = g.nodes().front();
  g.beginUndo();
  g.rename(n, "short");
  g.rename(n, "another_name_that_does_not_fit_inline");
  placeholder(g, "made_while_recording");
  g.rollback();
  CHECK(n->name() == "from_the_other_graph_with_a_long_name");
  CHECK(g.findNode("from_the_other_graph_with_a_long_name") == n);
  CHECK(g.findNode("short") == nullptr);
  CHECK(g.findNode("made_while_recording") == nullptr);
  CHECK(g.size() == 1);
}

TEST_CASE("name arena: counts the names that are not Python identifiers", "[ir][names]") {
  NameArena a;
  a.add("mm_3");
  a.add("primals_1");
  CHECK(a.nonIdentifiers() == 0);
  a.add("x=__import__('os')");
  a.add("lambda");
  a.add("");
  CHECK(a.nonIdentifiers() == 3);
  NameArena copy(a);  // shares the names, so the count too
  CHECK(copy.nonIdentifiers() == 3);
  NameArena other;
  other.swap(copy);
  CHECK(other.nonIdentifiers() == 3);
  CHECK(copy.nonIdentifiers() == 0);

  // The graph: every name it ever stored, so a rename back keeps the verifier reading names.
  Graph g;
  Node* x = placeholder(g, "x");
  CHECK_FALSE(g.mayHaveNonIdentifierNames());
  g.rename(x, "not an identifier");
  CHECK(g.mayHaveNonIdentifierNames());
  g.rename(x, "x");
  CHECK(g.mayHaveNonIdentifierNames());
  Graph fresh;
  placeholder(fresh, "y");
  CHECK_FALSE(fresh.copy()->mayHaveNonIdentifierNames());
  CHECK(g.copy()->mayHaveNonIdentifierNames());
}
