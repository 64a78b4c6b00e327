// Operand slots and intrusive use lists (Note [Use lists] in ir/graph.h).
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "ir/clone.h"
#include "ir/graph.h"
#include "ir/io.h"
#include "ir/json_format.h"
#include "ir/verifier.h"
#include "test_util.h"

namespace jfx {

// Breaks use lists behind the Graph's back, so the verifier has something to find.
struct UseListSurgery {
  static Operand* slot(Node* user, uint32_t k) { return &user->ops_[k]; }
  // Takes `s` out of its producer's links but leaves the producer's count alone.
  static void dropLinksOnly(Operand* s) {
    Node* p = s->value;
    if (s->prev_use)
      s->prev_use->next_use = s->next_use;
    else
      p->use_head_ = s->next_use;
    if (s->next_use)
      s->next_use->prev_use = s->prev_use;
    else
      p->use_tail_ = s->prev_use;
    s->prev_use = s->next_use = nullptr;
  }
  // Appends `s` to `other`'s links (and count) while the slot still reads its old producer.
  static void linkInto(Node* other, Operand* s) {
    s->prev_use = other->use_tail_;
    s->next_use = nullptr;
    if (other->use_tail_)
      other->use_tail_->next_use = s;
    else
      other->use_head_ = s;
    other->use_tail_ = s;
    ++other->num_uses_;
  }
  static void setCount(Node* n, uint32_t count) { n->num_uses_ = count; }
  // Node-list corruption, for the verifier's list rules.
  static void setPos(Node* n, uint64_t pos) { n->pos_ = pos; }
  static void setPrev(Node* n, Node* prev) { n->prev_ = prev; }
  static void setNext(Node* n, Node* next) { n->next_ = next; }
};

}  // namespace jfx

using namespace jfx;

namespace {

Node* placeholder(Graph& g, const std::string& name) {
  return g.create(OpKind::Placeholder, Symbol::intern(name), {}, {}, name);
}
Arg N(Node* n) {
  return Arg::ofNode(n);
}
std::vector<Use> usesOf(const Node* n) {
  return std::vector<Use>(n->uses().begin(), n->uses().end());
}
std::vector<Node*> inputsOf(const Node* n) {
  return std::vector<Node*>(n->inputs().begin(), n->inputs().end());
}
// The use-list and topological-order issues of the whole graph, as text.
std::vector<std::string> edgeIssues(const Graph& g) {
  std::vector<std::string> out;
  for (const VerifyIssue& i : verifyGraph(g))
    if (i.rule == "use-list" || i.rule == "topological-order") out.push_back(i.str());
  return out;
}

}  // namespace

TEST_CASE("use-lists: ranges are views with O(1) size, indexing and front", "[use-lists]") {
  Graph g;
  Node* x = placeholder(g, "x");
  Node* y = placeholder(g, "y");
  Node* a = g.createCall("aten.add.Tensor", {N(x), N(y)}, {}, nullptr, "a");
  Node* b = g.createCall("aten.mul.Tensor", {N(a), N(x)}, {}, nullptr, "b");
  CHECK(a->inputs().size() == 2);
  CHECK(a->numInputs() == 2);
  CHECK(a->inputs()[0] == x);
  CHECK(a->inputs()[1] == y);
  CHECK(a->inputs().front() == x);
  CHECK(a->inputs().back() == y);
  CHECK(a->inputs().end() - a->inputs().begin() == 2);
  CHECK(x->inputs().empty());
  CHECK(x->numUses() == 2);
  CHECK(x->uses().front() == Use{a, 0});
  CHECK(usesOf(x) == std::vector<Use>{{a, 0}, {b, 1}});
  CHECK(!b->hasUses());
  CHECK(b->uses().empty());
  CHECK(b->uses().begin() == b->uses().end());
}

TEST_CASE("use-lists: replaceInput moves one slot in O(1), keeping both lists' order",
          "[use-lists]") {
  Graph g;
  Node* x = placeholder(g, "x");
  Node* y = placeholder(g, "y");
  std::vector<Node*> users;
  for (int i = 0; i < 5; ++i)
    users.push_back(g.createCall("aten.neg.default", {N(x)}, {}, nullptr, "u" + std::to_string(i)));
  Node* z = g.createCall("aten.neg.default", {N(y)}, {}, nullptr, "z");
  g.replaceInput(users[2], 0, y);
  CHECK(users[2]->input(0) == y);
  CHECK(users[2]->arg(0).node() == y);  // the Arg tree follows the slot
  CHECK(usesOf(x) == std::vector<Use>{{users[0], 0}, {users[1], 0}, {users[3], 0}, {users[4], 0}});
  CHECK(usesOf(y) == std::vector<Use>{{z, 0}, {users[2], 0}});  // appended at the tail
  // Head and tail removals keep the rest in order.
  g.replaceInput(users[0], 0, y);
  g.replaceInput(users[4], 0, y);
  CHECK(usesOf(x) == std::vector<Use>{{users[1], 0}, {users[3], 0}});
  CHECK(usesOf(y) == std::vector<Use>{{z, 0}, {users[2], 0}, {users[0], 0}, {users[4], 0}});
  // Same value: nothing moves.
  g.replaceInput(users[1], 0, x);
  CHECK(usesOf(x) == std::vector<Use>{{users[1], 0}, {users[3], 0}});
  CHECK_THROWS_AS(g.replaceInput(users[1], 1, y), std::out_of_range);
  CHECK(edgeIssues(g).empty());
}

TEST_CASE("use-lists: replaceInput on nested list and kwarg operands", "[use-lists]") {
  Graph g;
  Node* x = placeholder(g, "x");
  Node* a = placeholder(g, "a");
  Node* b = placeholder(g, "b");
  Node* c = placeholder(g, "c");
  Node* d = placeholder(g, "d");
  Node* e = placeholder(g, "e");
  // Operands, depth first over args then kwargs: x, a, b, c, d.
  Node* n = g.createCall(
      "custom.nested.default",
      {N(x), Arg::ofList({N(a), Arg::ofInt(3), Arg::ofTuple({N(b), Arg::ofList({N(c)})})})},
      {{Symbol::intern("other"), N(d)}}, nullptr, "n");
  REQUIRE(inputsOf(n) == std::vector<Node*>{x, a, b, c, d});
  g.replaceInput(n, 3, e);  // c, two lists deep
  CHECK(n->arg(1).items()[2].items()[1].items()[0].node() == e);
  g.replaceInput(n, 4, b);  // the kwarg
  CHECK(n->kwarg("other")->node() == b);
  g.replaceInput(n, 2, a);  // b inside the tuple
  CHECK(n->arg(1).items()[2].items()[0].node() == a);
  CHECK(inputsOf(n) == std::vector<Node*>{x, a, a, e, b});
  CHECK(usesOf(a) == std::vector<Use>{{n, 1}, {n, 2}});
  CHECK(usesOf(b) == std::vector<Use>{{n, 4}});
  CHECK(c->uses().empty());
  CHECK(d->uses().empty());
  CHECK(usesOf(e) == std::vector<Use>{{n, 3}});
  CHECK(a->users() == std::vector<Node*>{n});  // distinct users
  CHECK(edgeIssues(g).empty());
}

TEST_CASE("use-lists: setArgs rebuilds the slots, growing and shrinking", "[use-lists]") {
  Graph g;
  Node* x = placeholder(g, "x");
  Node* y = placeholder(g, "y");
  Node* z = placeholder(g, "z");
  Node* first = g.createCall("aten.neg.default", {N(y)}, {}, nullptr, "first");
  Node* n = g.createCall("aten.add.Tensor", {N(x), N(y)}, {}, nullptr, "n");
  Node* last = g.createCall("aten.neg.default", {N(y)}, {}, nullptr, "last");
  // Grow past the slot array's room: three operands, y listed again at the tail.
  g.setArgs(n, {Arg::ofList({N(z), N(y), N(x)})});
  CHECK(inputsOf(n) == std::vector<Node*>{z, y, x});
  CHECK(usesOf(x) == std::vector<Use>{{n, 2}});
  CHECK(usesOf(y) == std::vector<Use>{{first, 0}, {last, 0}, {n, 1}});
  CHECK(usesOf(z) == std::vector<Use>{{n, 0}});
  // Shrink to one operand (the slot array is reused).
  g.setArgs(n, {N(z)});
  CHECK(inputsOf(n) == std::vector<Node*>{z});
  CHECK(x->uses().empty());
  CHECK(usesOf(y) == std::vector<Use>{{first, 0}, {last, 0}});
  CHECK(usesOf(z) == std::vector<Use>{{n, 0}});
  // The rebuilt slots point into the new Arg tree.
  g.replaceInput(n, 0, x);
  CHECK(n->arg(0).node() == x);
  // A foreign operand throws and changes nothing.
  Graph other;
  Node* alien = placeholder(other, "alien");
  CHECK_THROWS(g.setArgs(n, {N(alien), N(y)}));
  CHECK(inputsOf(n) == std::vector<Node*>{x});
  CHECK(n->arg(0).node() == x);
  CHECK(usesOf(x) == std::vector<Use>{{n, 0}});
  CHECK(alien->uses().empty());
  const size_t before = g.size();
  CHECK_THROWS(g.createCall("aten.neg.default", {N(alien)}));
  CHECK(g.size() == before);
  CHECK(edgeIssues(g).empty());
}

TEST_CASE("use-lists: replaceUsesWith keeps the order of moved and kept uses", "[use-lists]") {
  Graph g;
  Node* x = placeholder(g, "x");
  Node* y = placeholder(g, "y");
  Node* y_user = g.createCall("aten.neg.default", {N(y)}, {}, nullptr, "y_user");
  std::vector<Node*> u;
  for (int i = 0; i < 6; ++i)
    u.push_back(g.createCall("aten.neg.default", {N(x)}, {}, nullptr, "u" + std::to_string(i)));
  g.replaceUsesWith(x, y, [&](const Use& use) { return use.user == u[1] || use.user == u[4]; });
  CHECK(usesOf(x) == std::vector<Use>{{u[0], 0}, {u[2], 0}, {u[3], 0}, {u[5], 0}});
  CHECK(usesOf(y) == std::vector<Use>{{y_user, 0}, {u[1], 0}, {u[4], 0}});
  g.replaceAllUsesWith(x, y);
  CHECK(x->uses().empty());
  CHECK(usesOf(y) ==
        std::vector<Use>{
            {y_user, 0}, {u[1], 0}, {u[4], 0}, {u[0], 0}, {u[2], 0}, {u[3], 0}, {u[5], 0}});
  for (Node* n : u)
    CHECK(n->arg(0).node() == y);
}

TEST_CASE("use-lists: erasing 10^5 users of one node one by one", "[use-lists]") {
  // Each erase unlinks one slot: the whole loop is linear in the users. The list is checked
  // along the way for what the old vector erase gave: the survivors in their original order.
  constexpr int kUsers = 100000;
  Graph g;
  Node* x = placeholder(g, "x");
  std::vector<Node*> users;
  users.reserve(kUsers);
  for (int i = 0; i < kUsers; ++i)
    users.push_back(g.createCall("aten.neg.default", {N(x)}));
  REQUIRE(x->numUses() == kUsers);
  // Erase from the middle outwards: every removal is an inner unlink except the last two.
  std::vector<bool> erased(kUsers, false);
  int lo = kUsers / 2 - 1, hi = kUsers / 2;
  size_t left = kUsers;
  while (lo >= 0 || hi < kUsers) {
    for (int i : {lo, hi}) {
      if (i < 0 || i >= kUsers) continue;
      g.erase(users[static_cast<size_t>(i)]);
      erased[static_cast<size_t>(i)] = true;
      --left;
      REQUIRE(x->numUses() == left);
    }
    --lo;
    ++hi;
    if (left % 20000 == 0 && left > 0) {
      size_t k = 0;
      bool in_order = true;
      for (const Use& use : x->uses()) {
        while (erased[k])
          ++k;
        in_order = in_order && use.user == users[k] && use.index == 0;
        ++k;
      }
      CHECK(in_order);
      CHECK(x->uses().front().user == users[0]);
    }
  }
  CHECK(x->uses().empty());
  CHECK(g.size() == 1);
  for (Node* n : users) {
    CHECK(n->isDead());
    CHECK(n->inputs().empty());
  }
}

TEST_CASE("use-lists: eraseAll drops the doomed nodes' slots, survivors keep their order",
          "[use-lists]") {
  Graph g;
  Node* x = placeholder(g, "x");
  std::vector<Node*> u;
  for (int i = 0; i < 6; ++i)
    u.push_back(g.createCall("aten.neg.default", {N(x)}, {}, nullptr, "u" + std::to_string(i)));
  Node* pair = g.createCall("aten.add.Tensor", {N(u[0]), N(u[1])}, {}, nullptr, "pair");
  CHECK_THROWS(g.eraseAll({u[0], u[2]}));  // pair still reads u[0]
  CHECK(x->numUses() == 6);
  g.eraseAll({u[4], pair, u[0], u[2], u[2]});
  CHECK(usesOf(x) == std::vector<Use>{{u[1], 0}, {u[3], 0}, {u[5], 0}});
  CHECK(u[1]->uses().empty());
  CHECK(edgeIssues(g).empty());
}

TEST_CASE("use-lists: a copied graph has the same use lists, in the same order", "[use-lists]") {
  auto g = loadGraph(std::string(JFX_SOURCE_DIR) + "/tests/data/traced/gpt2_w2.json");
  auto c = cloneGraph(*g);
  auto names = [](const Node* n) {
    std::vector<std::string> out;
    for (const Use& u : n->uses())
      out.push_back(std::string(u.user->name()) + "#" + std::to_string(u.index));
    return out;
  };
  size_t checked = 0;
  for (Node *n = g->first(), *m = c->first(); n && m; n = n->next(), m = m->next()) {
    REQUIRE(n->name() == m->name());
    CHECK(names(n) == names(m));
    REQUIRE(m->numInputs() == n->numInputs());
    for (size_t k = 0; k < n->numInputs(); ++k)
      CHECK(m->inputs()[k]->name() == n->inputs()[k]->name());
    ++checked;
  }
  CHECK(checked == g->size());
  // cloneBefore: the copy's operands are new uses at the tails of the (remapped) producers.
  Node* hub = nullptr;
  c->forEach([&](Node* n) {
    if (n->op() == OpKind::CallFunction && (!hub || n->numUses() > hub->numUses())) hub = n;
  });
  REQUIRE(hub != nullptr);
  Node* src = hub->uses().front().user;
  Node* copy = c->cloneBefore(src, src->next(), [](Node*) { return nullptr; });
  REQUIRE(inputsOf(copy) == inputsOf(src));
  for (uint32_t k = 0; k < copy->numInputs(); ++k) {
    Node* p = copy->inputs()[k];
    uint32_t last_k = k;  // a producer read twice ends with the copy's later slot
    for (uint32_t j = k; j < copy->numInputs(); ++j)
      if (copy->inputs()[j] == p) last_k = j;
    Use tail{nullptr, 0};
    for (const Use& u : p->uses())
      tail = u;
    CHECK(tail == Use{copy, last_k});
  }
  CHECK(edgeIssues(*c).empty());
}

TEST_CASE("use-lists: rewiring a traced graph's busiest node and back writes it unchanged",
          "[use-lists]") {
  auto g = loadGraph(std::string(JFX_SOURCE_DIR) + "/tests/data/traced/fsdp_w2.json");
  const std::string before = writeJsonGraph(*g);
  Node* hub = nullptr;
  g->forEach([&](Node* n) {
    if (n->op() == OpKind::CallFunction && (!hub || n->numUses() > hub->numUses())) hub = n;
  });
  REQUIRE(hub != nullptr);
  REQUIRE(hub->numUses() >= 3);
  const std::vector<Use> uses = usesOf(hub);
  Node* copy = g->createCall("aten.alias.default", {N(hub)}, {}, hub->next(), "hub_alias");
  g->replaceUsesWith(hub, copy, [&](const Use& u) { return u.user != copy; });
  CHECK(usesOf(hub) == std::vector<Use>{{copy, 0}});
  CHECK(usesOf(copy) == uses);
  CHECK(edgeIssues(*g).empty());
  g->replaceAllUsesWith(copy, hub);
  g->erase(copy);
  CHECK(usesOf(hub) == uses);
  CHECK(writeJsonGraph(*g) == before);
}

TEST_CASE("use-lists: the verifier catches corrupted use lists", "[use-lists][verifier]") {
  auto build = [](Graph& g) {
    Node* x = placeholder(g, "x");
    Node* y = placeholder(g, "y");
    Node* a = g.createCall("aten.neg.default", {N(x)}, {}, nullptr, "a");
    Node* b = g.createCall("aten.add.Tensor", {N(x), N(y)}, {}, nullptr, "b");
    Node* c = g.createCall("aten.neg.default", {N(x)}, {}, nullptr, "c");
    g.create(OpKind::Output, Symbol::intern("output"), {Arg::ofList({N(a), N(b), N(c)})}, {},
             "output");
  };
  auto has = [](const std::vector<std::string>& issues, const std::string& what) {
    for (const auto& i : issues)
      if (i.find(what) != std::string::npos) return true;
    return false;
  };
  SECTION("intact") {
    Graph g;
    build(g);
    CHECK(edgeIssues(g).empty());
  }
  SECTION("a slot missing from its producer's list, count left alone") {
    Graph g;
    build(g);
    UseListSurgery::dropLinksOnly(UseListSurgery::slot(g.findNode("b"), 0));
    auto issues = edgeIssues(g);
    INFO(issues.size());
    CHECK(has(issues, "node 'x': [use-list]"));
  }
  SECTION("a slot missing from its producer's list and its count") {
    Graph g;
    build(g);
    Node* x = g.findNode("x");
    UseListSurgery::dropLinksOnly(UseListSurgery::slot(g.findNode("c"), 0));
    UseListSurgery::setCount(x, 2);
    CHECK(has(edgeIssues(g), "node 'x': [use-list] use list has 2 entries but 3 operands"));
  }
  SECTION("a slot linked into the wrong producer's list") {
    Graph g;
    build(g);
    Node* y = g.findNode("y");
    Operand* s = UseListSurgery::slot(g.findNode("a"), 0);
    UseListSurgery::dropLinksOnly(s);
    UseListSurgery::setCount(g.findNode("x"), 2);
    UseListSurgery::linkInto(y, s);
    auto issues = edgeIssues(g);
    CHECK(has(issues, "node 'y': [use-list] use list says 'a' reads it as operand 0"));
    CHECK(has(issues, "node 'x': [use-list] use list has 2 entries but 3 operands"));
  }
  SECTION("ir_invariants off: the whole-graph check leaves the use lists to verifyNodes") {
    Graph g;
    build(g);
    Node* x = g.findNode("x");
    Node* c = g.findNode("c");
    UseListSurgery::dropLinksOnly(UseListSurgery::slot(c, 0));
    UseListSurgery::setCount(x, 2);
    VerifyOptions cheap;
    cheap.ir_invariants = false;
    for (const VerifyIssue& i : verifyGraph(g, cheap))
      CHECK(i.rule != "use-list");
    bool found = false;  // the nodes a pass touched still get the check
    for (const VerifyIssue& i : verifyNodes(g, {x, c}, cheap))
      found = found || i.rule == "use-list";
    CHECK(found);
    CHECK(has(edgeIssues(g), "node 'x': [use-list] use list has 2 entries but 3 operands"));
  }
  SECTION("a slot that is not its user's") {
    Graph g;
    build(g);
    Node* y = g.findNode("y");
    Operand* s = UseListSurgery::slot(g.findNode("b"), 1);
    // y's list: [b#1, twin], the twin a copy of b's slot outside b's slot array.
    Operand twin = *s;
    UseListSurgery::linkInto(y, &twin);
    CHECK(has(edgeIssues(g), "node 'y': [use-list] use list names a slot outside 'b''s operands"));
  }
}

TEST_CASE("use-lists: a broken node list is reported alone, and stops the verifier",
          "[use-lists][verifier]") {
  // Both ways of checking the whole graph: the one walk (the default) and the separate walks
  // with the IR invariants.
  const bool invariants = GENERATE(false, true);
  INFO("ir_invariants " << invariants);
  VerifyOptions opts;
  opts.ir_invariants = invariants;
  Graph g;
  Node* x = placeholder(g, "x");
  Node* a = g.createCall("aten.neg.default", {N(x)}, {}, nullptr, "a");
  // An arity issue the list issue must hide: mm with one argument.
  Node* bad = g.createCall("aten.mm.default", {N(a)}, {}, nullptr, "bad");
  Node* c = g.createCall("aten.neg.default", {N(bad)}, {}, nullptr, "c");
  g.create(OpKind::Output, Symbol::intern("output"), {Arg::ofList({N(c)})}, {}, "output");
  REQUIRE(verifyGraph(g, opts).size() == 1);  // the arity issue
  SECTION("a position out of order, after the arity issue in the list") {
    UseListSurgery::setPos(c, 0);
    auto issues = verifyGraph(g, opts);
    REQUIRE(!issues.empty());
    for (const VerifyIssue& i : issues)
      CHECK(i.rule == "node-list");
    CHECK(issues.front().str() ==
          "node 'c': [node-list] position is not after the previous node's 'bad'");
  }
  SECTION("a wrong prev link") {
    UseListSurgery::setPrev(c, a);
    auto issues = verifyGraph(g, opts);
    REQUIRE(issues.size() == 1);
    CHECK(issues.front().str() ==
          "node 'c': [node-list] prev link does not point at the previous node");
  }
  SECTION("a loop: the walk stops") {
    Node* out = g.outputNode();
    UseListSurgery::setNext(out, x);
    auto issues = verifyGraph(g, opts);
    REQUIRE(!issues.empty());
    CHECK(issues.back().str() ==
          "[node-list] the node list is longer than the number of nodes ever made");
    UseListSurgery::setNext(out, nullptr);
  }
}
