// The node-name index: lookups, inserts and backward-shift erases agree with std::map through a
// long random sequence, and the Graph operations that use it keep names unique.
#include <catch2/catch.hpp>
#include <map>
#include <memory>
#include <random>
#include <string>

#include "ir/graph.h"
#include "ir/name_index.h"

using namespace jfx;

namespace {
struct Named {
  std::string n;
  const std::string& name() const { return n; }
};
}  // namespace

TEST_CASE("name index: agrees with std::map through random inserts and erases", "[graph]") {
  NameIndex<Named> index;
  std::map<std::string, Named*> reference;
  std::vector<std::unique_ptr<Named>> storage;
  std::mt19937 rng(12345);
  // Few distinct names, so probe runs are long and erases shift entries often.
  for (int step = 0; step < 200000; ++step) {
    std::string name = "n" + std::to_string(rng() % 3000);
    auto it = reference.find(name);
    if (it == reference.end()) {
      storage.push_back(std::make_unique<Named>(Named{name}));
      index.insert(storage.back().get());
      reference[name] = storage.back().get();
    } else if (rng() % 2) {
      index.erase(name);
      reference.erase(it);
    }
    if (step % 997 == 0) {
      REQUIRE(index.size() == reference.size());
      for (int k = 0; k < 3000; ++k) {
        std::string q = "n" + std::to_string(k);
        auto r = reference.find(q);
        REQUIRE(index.find(q) == (r == reference.end() ? nullptr : r->second));
      }
    }
  }
  index.erase("absent");  // no-op
  CHECK(index.size() == reference.size());
}

TEST_CASE("name index: graph names stay unique across erase, rename and reuse", "[graph]") {
  Graph g;
  Node* x = g.create(OpKind::Placeholder, Symbol::intern("x"), {}, {}, "x");
  std::vector<Node*> made;
  for (int i = 0; i < 1000; ++i)
    made.push_back(g.createCall("aten.neg.default", {Arg::ofNode(x)}, {}, nullptr, "neg"));
  CHECK(made[0]->name() == "neg");
  CHECK(made[999]->name() == "neg_999");
  for (int i = 0; i < 1000; i += 2)
    g.erase(made[i]);
  CHECK(g.findNode("neg") == nullptr);
  CHECK(g.findNode("neg_1") == made[1]);
  // A freed name can be taken again, and rename moves a node's entry.
  Node* again = g.createCall("aten.neg.default", {Arg::ofNode(x)}, {}, nullptr, "neg");
  CHECK(again->name() == "neg");
  g.rename(made[1], "renamed");
  CHECK(g.findNode("neg_1") == nullptr);
  CHECK(g.findNode("renamed") == made[1]);
  for (int i = 3; i < 1000; i += 2)
    CHECK(g.findNode(made[i]->name()) == made[i]);
}
