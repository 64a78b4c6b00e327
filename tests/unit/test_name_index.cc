// The node-name index: lookups, inserts, insert-or-find and backward-shift erases agree with
// std::map through a long random sequence, and the Graph operations that use it keep names unique.
#include <catch2/catch.hpp>
#include <map>
#include <memory>
#include <random>
#include <string>

#include "ir/graph.h"
#include "ir/huge_pages.h"
#include "ir/name_index.h"
#include "ir/symbol.h"

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
      if (step % 2)
        index.insert(storage.back().get());
      else
        REQUIRE(index.insertOrFind(storage.back().get()) == nullptr);
      reference[name] = storage.back().get();
    } else if (rng() % 2) {
      index.erase(name);
      reference.erase(it);
    } else {
      // A second node of a taken name: insertOrFind gives the first back and adds nothing.
      Named twin{name};
      const size_t before = index.size();
      REQUIRE(index.insertOrFind(&twin) == it->second);
      REQUIRE(index.size() == before);
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

TEST_CASE("recent names: a hit is the node of that name, a miss asks the index", "[graph]") {
  // 5000 names through a 1024-slot cache: slots are shared, so a hit must compare the name.
  std::vector<std::unique_ptr<Named>> storage;
  std::map<std::string, Named*> index;
  for (int i = 0; i < 5000; ++i) {
    storage.push_back(std::make_unique<Named>(Named{"v" + std::to_string(i)}));
    index[storage.back()->n] = storage.back().get();
  }
  RecentNames<Named> recent;
  size_t lookups = 0;
  auto lookup = [&](std::string_view name) {
    ++lookups;
    auto it = index.find(std::string(name));
    return it == index.end() ? nullptr : it->second;
  };
  std::mt19937 rng(7);
  for (int step = 0; step < 50000; ++step) {
    const int i = static_cast<int>(rng() % 5200);  // some names are in no index
    const std::string name = "v" + std::to_string(i);
    Named* want = i < 5000 ? storage[static_cast<size_t>(i)].get() : nullptr;
    REQUIRE(recent.find(name, lookup) == want);
    if (step % 7 == 0 && want) recent.add(want);
  }
  // Found again right after: no second lookup.
  const size_t before = lookups;
  CHECK(recent.find("v42", lookup) == storage[42].get());
  CHECK(recent.find("v42", lookup) == storage[42].get());
  CHECK(lookups == before + 1);
  // What a miss found is kept; what it did not find is not.
  CHECK(recent.find("absent", lookup) == nullptr);
  CHECK(recent.find("absent", lookup) == nullptr);
  CHECK(lookups == before + 3);
}

TEST_CASE("symbol cache: gives the interned symbol of every string", "[graph]") {
  SymbolCache cache;
  std::mt19937 rng(11);
  // More distinct strings than slots, the empty one included, in a random order.
  for (int step = 0; step < 20000; ++step) {
    const unsigned k = rng() % 700;
    const std::string s = k == 0 ? std::string() : "sym." + std::to_string(k);
    const Symbol got = cache.intern(s);
    REQUIRE(got == Symbol::intern(s));
    REQUIRE(got.str() == s);
  }
  // One set of two slots: every hit in either way, every swap and every eviction.
  SymbolCache tiny(1);
  for (int step = 0; step < 3000; ++step) {
    const std::string s = "t." + std::to_string(rng() % 3);
    REQUIRE(tiny.intern(s) == Symbol::intern(s));
  }
}

TEST_CASE("huge page allocator: large tables are 2 MiB aligned, small ones plain", "[graph]") {
  std::vector<uint64_t, HugePageAllocator<uint64_t>> big(size_t{1} << 20, 7);  // 8 MiB
  CHECK(reinterpret_cast<uintptr_t>(big.data()) % HugePageAllocator<uint64_t>::kHuge == 0);
  CHECK(big.front() == 7);
  CHECK(big.back() == 7);
  std::vector<uint64_t, HugePageAllocator<uint64_t>> small(100, 3);
  CHECK(small[99] == 3);
  big.resize(size_t{3} << 20, 1);  // reallocated: the old block is freed as it was allocated
  CHECK(big[size_t{1} << 20] == 1);
  CHECK(big[0] == 7);
  big = std::move(small);
  CHECK(big.size() == 100);
}
