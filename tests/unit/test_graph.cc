#include <algorithm>
#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>

#include <random>
#include <sstream>
#include <stdexcept>

#include "ir/clone.h"
#include "ir/collectives.h"
#include "ir/graph.h"
#include "ir/hash.h"
#include "ir/io.h"
#include "ir/json_format.h"
#include "ir/page_blocks.h"
#include "ir/stable_vector.h"
#include "ir/text_format.h"
#include "ir/verifier.h"
#include "passes/pass_manager.h"

using namespace jfx;

namespace {

Node* placeholder(Graph& g, const char* name) {
  return g.create(OpKind::Placeholder, Symbol::intern(name), {}, {}, name);
}

}  // namespace

TEST_CASE("graph: create keeps use-lists and names", "[ir]") {
  Graph g;
  Node* x = placeholder(g, "x");
  Node* w = placeholder(g, "w");
  Node* mm = g.createCall("aten.mm.default", {Arg::ofNode(x), Arg::ofNode(w)});
  Node* mm2 = g.createCall("aten.mm.default", {Arg::ofNode(mm), Arg::ofNode(w)});
  CHECK(mm->name() == "mm");
  CHECK(mm2->name() == "mm_1");
  CHECK(mm->info().category == OpCategory::Matmul);
  REQUIRE(w->uses().size() == 2);
  CHECK(std::vector<Use>(w->uses().begin(), w->uses().end()) ==
        std::vector<Use>{{mm, 1}, {mm2, 1}});
  CHECK(x->isBefore(mm));
  CHECK(mm->isBefore(mm2));
  CHECK(g.size() == 4);
}

TEST_CASE("graph: replaceAllUsesWith and erase", "[ir]") {
  Graph g;
  Node* x = placeholder(g, "x");
  Node* y = placeholder(g, "y");
  Node* a = g.createCall("aten.neg.default", {Arg::ofNode(x)});
  Node* b = g.createCall("aten.add.Tensor", {Arg::ofNode(a), Arg::ofNode(a)});
  g.replaceAllUsesWith(a, y);
  CHECK(!a->hasUses());
  CHECK(b->input(0) == y);
  CHECK(b->input(1) == y);
  CHECK(b->arg(1).node() == y);
  CHECK(y->uses().size() == 2);
  g.erase(a);
  CHECK(a->isDead());
  CHECK(x->uses().empty());
  CHECK(g.findNode("neg") == nullptr);
  CHECK(g.size() == 3);
  CHECK_THROWS(g.erase(y));  // still used by b
}

TEST_CASE("graph: nested operands and kwargs are numbered depth first", "[ir]") {
  Graph g;
  Node* a = placeholder(g, "a");
  Node* b = placeholder(g, "b");
  Node* c = placeholder(g, "c");
  Node* cat = g.createCall("aten.cat.default", {Arg::ofList({Arg::ofNode(a), Arg::ofNode(b)})},
                           {{Symbol::intern("out"), Arg::ofNode(c)}});
  REQUIRE(cat->inputs().size() == 3);
  CHECK(cat->input(2) == c);
  g.replaceInput(cat, 1, c);
  CHECK(cat->arg(0).items()[1].node() == c);
  CHECK(b->uses().empty());
  CHECK(c->uses().size() == 2);
}

TEST_CASE("graph: insert before keeps O(1) order under many inserts at one spot", "[ir]") {
  Graph g;
  Node* x = placeholder(g, "x");
  Node* end = g.createCall("aten.neg.default", {Arg::ofNode(x)});
  Node* prev = x;
  for (int i = 0; i < 200; ++i) {
    Node* n = g.createCall("aten.neg.default", {Arg::ofNode(prev)}, {}, end);
    CHECK(prev->isBefore(n));
    CHECK(n->isBefore(end));
    prev = n;
  }
  // order is still the list order after renumbering
  Node* p = nullptr;
  for (Node* n = g.first(); n; n = n->next()) {
    if (p) CHECK(p->isBefore(n));
    p = n;
  }
  g.moveBefore(end, x);
  CHECK(end->isBefore(x));
  CHECK(g.first() == end);
}

TEST_CASE("graph: placeBefore moves a run of nodes in front of an anchor, in order", "[ir]") {
  Graph g;
  Node* x = placeholder(g, "x");
  Node* anchor = g.createCall("aten.neg.default", {Arg::ofNode(x)});
  Node* stay = g.createCall("aten.neg.default", {Arg::ofNode(x)});
  std::vector<Node*> run;
  for (int i = 0; i < 37; ++i)  // odd, so both halves of the bisection differ in size
    run.push_back(g.createCall("aten.neg.default", {Arg::ofNode(x)}));
  // Listed out of graph order: the list's order is what placeBefore keeps.
  std::swap(run[3], run[20]);
  g.placeBefore(run, anchor);
  std::vector<Node*> want{x};
  want.insert(want.end(), run.begin(), run.end());
  want.push_back(anchor);
  want.push_back(stay);
  std::vector<Node*> got;
  for (Node* n = g.first(); n; n = n->next())
    got.push_back(n);
  CHECK(got == want);
  for (size_t i = 1; i < got.size(); ++i)
    CHECK(got[i - 1]->isBefore(got[i]));
  g.placeBefore({}, anchor);  // nothing to move
  CHECK(g.size() == want.size());
}

TEST_CASE("collectives: kind, group name and group size", "[ir]") {
  Graph g;
  g.processGroups().push_back(ProcessGroupInfo{"0", 4, {0, 1, 2, 3}});
  Node* x = placeholder(g, "x");
  Node* ag = g.createCall("_c10d_functional.all_gather_into_tensor.default",
                          {Arg::ofNode(x), Arg::ofInt(2), Arg::ofStr("0")});
  Node* neg = g.createCall("aten.neg.default", {Arg::ofNode(x)});
  // No group_size argument (all_reduce takes none): the header's size for the group.
  Node* ar = g.createCall("_c10d_functional.all_reduce.default",
                          {Arg::ofNode(x), Arg::ofStr("sum"), Arg::ofStr("0")});
  // The group as a keyword: no positional group name, so no group (and size 1).
  Node* kw =
      g.createCall("_c10d_functional.all_reduce.default", {Arg::ofNode(x), Arg::ofStr("sum")},
                   {{Symbol::intern("group_name"), Arg::ofStr("0")}});
  CHECK(collectiveKind(*ag) == CollectiveKind::AllGather);
  CHECK(collectiveKind(*ar) == CollectiveKind::AllReduce);
  CHECK(collectiveKind(*neg) == CollectiveKind::None);
  CHECK(collectiveKind(*x) == CollectiveKind::None);
  CHECK(collectiveGroupName(*ag) == "0");
  CHECK(collectiveGroupSize(*ag, g) == 2);  // the argument wins over the header
  CHECK(collectiveGroupSize(*ar, g) == 4);
  CHECK(collectiveGroupName(*neg).empty());
  CHECK(collectiveGroupSize(*neg, g) == 1);
  CHECK(collectiveGroupName(*kw).empty());
  CHECK(collectiveGroupSize(*kw, g) == 1);
}

TEST_CASE("graph: placeholders() and collectives() list their live nodes in program order",
          "[ir]") {
  Graph g;
  Node* x = placeholder(g, "x");
  auto gather = [&](const char* name, Node* before = nullptr) {
    return g.createCall("_c10d_functional.all_gather_into_tensor.default",
                        {Arg::ofNode(x), Arg::ofInt(2), Arg::ofStr("0")}, {}, before, name);
  };
  Node* a = gather("a");
  Node* neg = g.createCall("aten.neg.default", {Arg::ofNode(x)});
  Node* b = gather("b");
  Node* c = gather("c", a);  // created last, placed first
  auto names = [](const std::vector<Node*>& v) {
    std::vector<std::string> out;
    for (const Node* n : v)
      out.emplace_back(n->name());
    return out;
  };
  CHECK(names(g.collectives()) == std::vector<std::string>{"c", "a", "b"});
  Node* y = g.create(OpKind::Placeholder, Symbol::intern("y"), {}, {}, "y", x);
  CHECK(names(g.placeholders()) == std::vector<std::string>{"y", "x"});
  g.erase(y);
  CHECK(names(g.placeholders()) == std::vector<std::string>{"x"});
  g.moveAfter(c, b);
  g.erase(a);
  CHECK(names(g.collectives()) == std::vector<std::string>{"b", "c"});
  SECTION(
      "a rolled-back creation is gone, and its id reused by another collective is listed "
      "once") {
    g.beginUndo();
    gather("d");
    g.rollback();
    CHECK(names(g.collectives()) == std::vector<std::string>{"b", "c"});
    g.createCall("aten.neg.default", {Arg::ofNode(neg)}, {}, nullptr, "not_one");
    CHECK(names(g.collectives()) == std::vector<std::string>{"b", "c"});
    g.beginUndo();
    gather("e");
    g.rollback();
    gather("f");
    CHECK(names(g.collectives()) == std::vector<std::string>{"b", "c", "f"});
  }
  SECTION("a copy lists its own nodes; takeContents hands the list over") {
    std::unique_ptr<Graph> copy = g.copy();
    const std::vector<Node*> listed = copy->collectives();
    REQUIRE(listed.size() == 2);
    CHECK(listed[0]->graph() == copy.get());
    CHECK(names(listed) == std::vector<std::string>{"b", "c"});
    Graph other;
    other.takeContents(std::move(*copy));
    CHECK(names(other.collectives()) == std::vector<std::string>{"b", "c"});
    CHECK(copy->collectives().empty());
  }
}

TEST_CASE("graph: cloneBefore remaps operands and copies meta", "[ir]") {
  Graph g;
  Node* x = placeholder(g, "x");
  Node* y = placeholder(g, "y");
  Node* a = g.createCall("aten.neg.default", {Arg::ofNode(x)});
  a->meta().phase = Phase::Forward;
  a->meta().recompute = Recompute::MustRecompute;
  Node* c = g.cloneBefore(
      a, nullptr, [&](Node* n) { return n == x ? y : nullptr; }, "neg_re");
  CHECK(c->name() == "neg_re");
  CHECK(c->input(0) == y);
  CHECK(c->meta().recompute == Recompute::MustRecompute);
  CHECK(a->input(0) == x);
}

TEST_CASE("cloneGraph: a deep copy that writes byte-identically and is independent",
          "[graph][clone]") {
  namespace fs = std::filesystem;
  size_t fixtures = 0;
  for (const char* dir : {"/tests/data/traced", "/tests/data/buffers"}) {
    for (const auto& e : fs::directory_iterator(std::string(JFX_SOURCE_DIR) + dir)) {
      if (e.path().extension() != ".json") continue;
      INFO(e.path().string());
      auto g = loadGraph(e.path().string());
      auto c = cloneGraph(*g);
      CHECK(writeJsonGraph(*c) == writeJsonGraph(*g));
      CHECK(c->size() == g->size());
      // Editing the copy leaves the original alone.
      const std::string before = writeJsonGraph(*g);
      Node* last = c->outputNode()->prev();
      c->rename(last, std::string(last->name()) + "_copy");
      CHECK(writeJsonGraph(*g) == before);
      CHECK(g->findNode(last->name()) == nullptr);
      ++fixtures;
    }
  }
  CHECK(fixtures >= 20);
}

namespace {

// Everything a copy must keep, id by id: liveness, name, origin, the use lists in their order,
// and the operands; plus the program order, the name-suffix counters and the printed graph.
void checkSameGraph(const Graph& a, const Graph& b) {
  REQUIRE(a.maxId() == b.maxId());
  CHECK(a.size() == b.size());
  for (uint32_t id = 0; id < a.maxId(); ++id) {
    const Node* x = a.nodeById(id);
    const Node* y = b.nodeById(id);
    INFO(x->name());
    REQUIRE(x->isDead() == y->isDead());
    CHECK(x->name() == y->name());
    CHECK(x->origin() == y->origin());
    CHECK(y->graph() == &b);
    REQUIRE(x->uses().size() == y->uses().size());
    for (auto ux = x->uses().begin(), uy = y->uses().begin(); ux != x->uses().end(); ++ux, ++uy) {
      CHECK((*ux).user->id() == (*uy).user->id());
      CHECK((*ux).index == (*uy).index);
    }
    REQUIRE(x->inputs().size() == y->inputs().size());
    for (size_t k = 0; k < x->inputs().size(); ++k)
      CHECK(x->inputs()[k]->id() == y->inputs()[k]->id());
  }
  std::vector<uint32_t> order_a, order_b;
  a.forEach([&](const Node* n) { order_a.push_back(n->id()); });
  b.forEach([&](const Node* n) { order_b.push_back(n->id()); });
  CHECK(order_a == order_b);
  for (const char* hint : {"mm", "all_gather_into_tensor", "wait_tensor", "getitem"})
    CHECK(a.uniqueName(hint) == b.uniqueName(hint));
  CHECK(printTextGraph(a) == printTextGraph(b));
  CHECK(structuralHash(a) == structuralHash(b));
  CHECK(verifyGraph(b).empty());
}

}  // namespace

TEST_CASE("graph: copy is exact and takeContents goes back to it", "[ir][copy]") {
  // A traced graph after the default pipeline: dead nodes, moved nodes, remat clones with
  // origins, and use lists in edit order rather than program order.
  for (const char* name : {"fsdp_w2.json", "moe_w2.json"}) {
    INFO(name);
    auto g = loadGraph(std::string(JFX_SOURCE_DIR) + "/tests/data/traced/" + name);
    std::ostringstream sink;
    PassManagerOptions opts;
    opts.out = &sink;
    runPipeline(
        *g, resolvePipeline(std::string(JFX_SOURCE_DIR) + "/configs/pipelines/default.json"), opts);
    REQUIRE(g->maxId() > g->size());  // the pipeline erased nodes: their ids stay taken

    std::unique_ptr<Graph> c = g->copy();
    checkSameGraph(*g, *c);
    const std::string text = printTextGraph(*g);

    // Edit the graph (every collective's wait goes), then go back to the copy.
    const uint64_t generation = g->generation();
    g->trackChanges(true);
    Node* out = g->outputNode();
    g->forEach([&](Node* n) {
      if (n->isWait() && n->next() != out) g->moveBefore(n, out);
    });
    REQUIRE(printTextGraph(*g) != text);
    g->takeContents(std::move(*c));
    CHECK(c->size() == 0);
    CHECK(c->first() == nullptr);
    CHECK(g->generation() > generation);
    CHECK(printTextGraph(*g) == text);
    // The journal names every live node: the discarded edits cannot be told apart.
    CHECK(g->takeTouched().size() == g->size());
    g->trackChanges(false);
    checkSameGraph(*g->copy(), *g);
    // The graph goes on as before: a new node takes the name the original would have taken.
    std::unique_ptr<Graph> again =
        loadGraph(std::string(JFX_SOURCE_DIR) + "/tests/data/traced/" + name);
    runPipeline(*again,
                resolvePipeline(std::string(JFX_SOURCE_DIR) + "/configs/pipelines/default.json"),
                opts);
    Node* x = g->createCall("aten.relu.default", {Arg::ofNode(g->first())});
    Node* y = again->createCall("aten.relu.default", {Arg::ofNode(again->first())});
    CHECK(x->name() == y->name());
    CHECK(x->id() == y->id());
  }
}

TEST_CASE("stable vector: elements keep their addresses through growth, pop and swap", "[graph]") {
  // Counts live elements, so the test sees every construction matched by a destruction.
  struct Item {
    int value;
    int* live;
    Item(int v, int* l) : value(v), live(l) { ++*live; }
    Item(const Item& o) : value(o.value), live(o.live) { ++*live; }
    ~Item() { --*live; }
  };
  int live = 0;
  {
    StableVector<Item, 4> v;
    std::vector<const Item*> where;
    for (int i = 0; i < 10; ++i)
      where.push_back(&v.emplace_back(i, &live));  // three chunks: 4 + 4 + 2
    CHECK(v.size() == 10);
    CHECK(live == 10);
    for (int i = 0; i < 10; ++i) {
      CHECK(&v[static_cast<size_t>(i)] == where[static_cast<size_t>(i)]);
      CHECK(v[static_cast<size_t>(i)].value == i);
    }
    v.pop_back();
    CHECK(live == 9);
    CHECK(&v.emplace_back(42, &live) == where[9]);  // the slot is reused
    int sum = 0, count = 0;
    for (const Item& x : v) {
      sum += x.value;
      ++count;
    }
    CHECK(count == 10);
    CHECK(sum == 0 + 1 + 2 + 3 + 4 + 5 + 6 + 7 + 8 + 42);

    // Past the heap's chunks the chunks come from mapped blocks (PageBlocks): 4000 items of 4
    // per chunk are 16 heap chunks and 984 carved from blocks.
    StableVector<Item, 4> big;
    std::vector<const Item*> big_at;
    for (int i = 0; i < 4000; ++i)
      big_at.push_back(&big.emplace_back(i, &live));
    CHECK(live == 4010);
    bool kept = true;
    for (size_t i = 0; i < big_at.size(); ++i)
      kept = kept && &big[i] == big_at[i] && big[i].value == static_cast<int>(i);
    CHECK(kept);
    big.clear();
    CHECK(live == 10);
    CHECK(big.emplace_back(5, &live).value == 5);  // usable again after clear

    StableVector<Item, 4> w;
    w.push_back(Item(7, &live));
    v.swap(w);
    CHECK(v.size() == 1);
    CHECK(w.size() == 10);
    CHECK(&w[3] == where[3]);  // the chunks moved over, not the elements
    w.clear();
    CHECK(w.empty());
    CHECK(live == 2);
  }
  CHECK(live == 0);
}

TEST_CASE("page blocks: aligned pieces, a new block when one is full, swap and release",
          "[graph]") {
  PageBlocks a;
  auto* p = static_cast<std::byte*>(a.take(3, 1));
  auto* q = static_cast<std::byte*>(a.take(8, 8));
  CHECK(q == p + 8);  // rounded up to the alignment, in the same block
  std::memset(p, 1, 3);
  std::memset(q, 2, 8);
  // What does not fit the rest of a block starts a new one; the first block stays valid.
  auto* r = static_cast<std::byte*>(a.take(PageBlocks::kBlockBytes - 8, 4096));
  CHECK(reinterpret_cast<uintptr_t>(r) % 4096 == 0);
  std::memset(r, 3, PageBlocks::kBlockBytes - 8);
  CHECK(p[2] == std::byte{1});
  CHECK(q[7] == std::byte{2});
  PageBlocks b;
  b.swap(a);  // b owns the blocks now
  CHECK(r[PageBlocks::kBlockBytes - 9] == std::byte{3});
  b.release();
  auto* s = static_cast<std::byte*>(b.take(16, 16));  // usable after release
  std::memset(s, 4, 16);
  CHECK(s[15] == std::byte{4});
}

TEST_CASE("graph: nodes keep their addresses as the graph grows past many chunks", "[graph]") {
  Graph g;
  Node* x = g.create(OpKind::Placeholder, Symbol::intern("x"), {}, {}, "x");
  std::vector<Node*> made{x};
  for (int i = 0; i < 3000; ++i)  // past the 1024 nodes of the heap's chunks
    made.push_back(g.createCall("aten.neg.default", {Arg::ofNode(made.back())}));
  for (uint32_t id = 0; id < made.size(); ++id) {
    CHECK(g.nodeById(id) == made[id]);
    CHECK(made[id]->id() == id);
  }
  CHECK(made.back()->input(0) == made[made.size() - 2]);
  CHECK(verifyGraph(g).size() == 1);  // no output node: the one issue
}

TEST_CASE("graph: rollback undoes every kind of edit exactly", "[ir][undo]") {
  // Traced graphs after the default pipeline (dead nodes, moved nodes, use lists in edit order),
  // then a seeded mix of every edit the Graph offers, then rollback: the graph must be what an
  // exact copy taken before says it was, ids, use-list order and name counters included.
  for (const char* name : {"fsdp_w2.json", "moe_w2.json", "convbn_w2.json"}) {
    for (uint32_t seed : {1u, 2u, 3u}) {
      INFO(name << " seed " << seed);
      auto g = loadGraph(std::string(JFX_SOURCE_DIR) + "/tests/data/traced/" + name);
      std::ostringstream sink;
      PassManagerOptions opts;
      opts.out = &sink;
      runPipeline(*g,
                  resolvePipeline(std::string(JFX_SOURCE_DIR) + "/configs/pipelines/default.json"),
                  opts);
      const std::unique_ptr<Graph> before = g->copy();
      const std::string text = printTextGraph(*g);
      g->trackChanges(true);
      g->beginUndo();
      std::mt19937 rng(seed);
      auto pick = [&]() {
        std::vector<Node*> live = g->nodes();
        return live[rng() % (live.size() - 1)];  // never the output node
      };
      Node* out = g->outputNode();
      for (int step = 0; step < 400; ++step) {
        Node* a = pick();
        Node* b = pick();
        if (b->isBefore(a)) std::swap(a, b);  // a comes first
        switch (rng() % 11) {
          case 0:  // a new node reading a nested list and a kwarg
            g->createCall("aten.cat.default", {Arg::ofList({Arg::ofNode(a), Arg::ofNode(a)})},
                          {{Symbol::intern("dim"), Arg::ofNode(a)}}, b);
            break;
          case 1:
            g->cloneBefore(b, b, [](Node* n) { return n; });
            break;
          case 2:
            if (!b->hasUses() && b->op() == OpKind::CallFunction) g->erase(b);
            break;
          case 3:
            if (b->numInputs() > 0) g->replaceInput(b, rng() % b->numInputs(), a);
            break;
          case 4:
            g->replaceUsesWith(a, b,
                               [&](const Use& u) { return b->isBefore(u.user) && rng() % 2; });
            break;
          case 5:  // grow or shrink an operand list
            g->setArgs(b, rng() % 2 ? std::vector<Arg>{Arg::ofNode(a)}
                                    : std::vector<Arg>{Arg::ofNode(a), Arg::ofNode(a),
                                                       Arg::ofList({Arg::ofNode(a)})});
            break;
          case 6:
            if (b != out) g->moveBefore(b, a);
            break;
          case 7:
            g->placeBefore({a, b}, out);
            break;
          case 8:
            g->rename(b, g->uniqueName(std::string(b->name()) + "_renamed"));
            break;
          case 9: {  // a dead-end chain, erased at once
            Node* x = g->createCall("aten.neg.default", {Arg::ofNode(a)}, {}, b);
            Node* y = g->createCall("aten.abs.default", {Arg::ofNode(x)}, {}, b);
            g->eraseAll({y, x});
            break;
          }
          case 10: {  // two readers of one producer erased at once, one listed twice
            Node* x = g->createCall("aten.neg.default", {Arg::ofNode(a)}, {}, b);
            Node* y = g->createCall("aten.abs.default", {Arg::ofNode(a), Arg::ofNode(a)}, {}, b);
            g->eraseAll(rng() % 2 ? std::vector<Node*>{y, x, y} : std::vector<Node*>{x, y, x});
            break;
          }
        }
      }
      g->processGroups().push_back({"extra", 2, {0, 1}});
      g->extraJson() = "{\"edited\":true}";
      REQUIRE(printTextGraph(*g) != text);
      g->rollback();
      CHECK(!g->recordingUndo());
      checkSameGraph(*before, *g);
      CHECK(printTextGraph(*g) == text);
      CHECK(g->processGroups() == before->processGroups());
      CHECK(g->extraJson() == before->extraJson());
      // The journal still works: the nodes that a rollback removed are not reported.
      for (const Node* n : g->takeTouched())
        CHECK(n->id() < g->maxId());
      g->trackChanges(false);
    }
  }
}

TEST_CASE("graph: a log longer than one of its chunks rolls back and commits", "[ir][undo]") {
  // 70,000 nodes made in one recording: one entry each (a creation covers its operand's use),
  // past the 65,536 entries of one 2 MiB chunk, so rollback pops entries across chunk boundaries.
  for (bool commit : {false, true}) {
    INFO("commit " << commit);
    Graph g;
    Node* x = placeholder(g, "x");
    Node* neg = g.createCall("aten.neg.default", {Arg::ofNode(x)});
    g.create(OpKind::Output, Symbol::intern("output"), {Arg::ofList({Arg::ofNode(neg)})}, {},
             "output");
    const std::unique_ptr<Graph> before = g.copy();
    const std::string text = printTextGraph(g);
    g.beginUndo();
    Node* last = neg;
    for (int i = 0; i < 70000; ++i)
      last = g.createCall("aten.abs.default", {Arg::ofNode(last)}, {}, g.outputNode());
    g.replaceInput(g.outputNode(), 0, last);
    REQUIRE(g.size() == 70003);
    if (commit) {
      g.commitUndo();
      CHECK(g.size() == 70003);
      CHECK(g.outputNode()->input(0) == last);
      CHECK(verifyGraph(g).empty());
    } else {
      g.rollback();
      checkSameGraph(*before, g);
      CHECK(printTextGraph(g) == text);
    }
    CHECK(!g.recordingUndo());
  }
}

TEST_CASE("graph: an erase keeps the node's trees for a rollback until commitUndo", "[ir][undo]") {
  // 70,000 erased nodes: their entries span two chunks of the log, and commitUndo frees the trees
  // of every one; a rollback gives every node its arguments back.
  for (bool commit : {false, true}) {
    INFO("commit " << commit);
    Graph g;
    Node* x = placeholder(g, "x");
    Node* neg = g.createCall("aten.neg.default", {Arg::ofNode(x)});
    Node* last = neg;
    std::vector<Node*> chain;
    for (int i = 0; i < 70000; ++i)
      chain.push_back(last = g.createCall("aten.add.Tensor", {Arg::ofNode(last), Arg::ofNode(x)},
                                          {{Symbol::intern("alpha"), Arg::ofInt(2)}}));
    g.create(OpKind::Output, Symbol::intern("output"), {Arg::ofList({Arg::ofNode(last)})}, {},
             "output");
    const std::string text = printTextGraph(g);
    g.beginUndo();
    g.replaceInput(g.outputNode(), 0, neg);
    std::reverse(chain.begin(), chain.end());  // users first
    g.eraseAll(chain);
    CHECK(chain.back()->isDead());
    CHECK(chain.back()->args().size() == 2);  // still there: the rollback needs them
    {
      // A copy cannot undo the erases: its erased nodes have no trees and no operands.
      const std::unique_ptr<Graph> c = g.copy();
      const Node* dead = c->nodeById(chain.back()->id());
      CHECK((dead->isDead() && dead->args().empty() && dead->numInputs() == 0));
      CHECK(printTextGraph(*c) == printTextGraph(g));
      CHECK(verifyGraph(*c).empty());
    }
    if (commit) {
      g.commitUndo();
      for (const Node* n : chain)
        REQUIRE((n->isDead() && n->args().empty() && n->kwargs().empty()));
      CHECK(g.size() == 3);
      CHECK(verifyGraph(g).empty());
    } else {
      g.rollback();
      CHECK(printTextGraph(g) == text);
      CHECK(chain.front()->kwarg("alpha")->toInt() == 2);
      CHECK(verifyGraph(g).empty());
    }
  }
}

TEST_CASE("graph: commitUndo keeps the edits, recording refuses takeContents", "[ir][undo]") {
  Graph g;
  Node* x = placeholder(g, "x");
  Node* neg = g.createCall("aten.neg.default", {Arg::ofNode(x)});
  g.create(OpKind::Output, Symbol::intern("output"), {Arg::ofList({Arg::ofNode(neg)})}, {},
           "output");
  g.beginUndo();
  CHECK_THROWS_AS(g.beginUndo(), std::logic_error);
  Node* abs = g.createCall("aten.abs.default", {Arg::ofNode(neg)}, {}, g.outputNode());
  Graph other;
  CHECK_THROWS_AS(g.takeContents(std::move(other)), std::logic_error);
  g.commitUndo();
  CHECK(!g.recordingUndo());
  CHECK(g.findNode("abs") == abs);
  CHECK(g.size() == 4);
  CHECK_THROWS_AS(g.rollback(), std::logic_error);
}
