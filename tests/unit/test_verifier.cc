#include <algorithm>
#include <catch2/catch.hpp>

#include "ir/verifier.h"

using namespace jfx;

namespace {

ValueMeta tensor(std::vector<int64_t> shape, ScalarType dt = ScalarType::Float32) {
  return ValueMeta::ofTensor(TensorMeta::contiguous(dt, std::move(shape), Symbol::intern("cpu")));
}

Node* input(Graph& g, const char* name, InputKind kind, const char* fqn,
            std::vector<int64_t> shape) {
  Node* n = g.create(OpKind::Placeholder, Symbol::intern(name), {}, {}, name);
  n->setInputInfo(kind, fqn);
  n->val() = tensor(std::move(shape));
  return n;
}

Node* call(Graph& g, const char* target, std::vector<Arg> args, std::vector<int64_t> shape,
           Phase phase = Phase::Forward, const char* name = "") {
  Node* n = g.createCall(target, std::move(args), {}, nullptr, name);
  n->val() = tensor(std::move(shape));
  n->meta().phase = phase;
  return n;
}

Arg N(Node* n) {
  return Arg::ofNode(n);
}

constexpr const char* kAG = "_c10d_functional.all_gather_into_tensor.default";
constexpr const char* kRS = "_c10d_functional.reduce_scatter_tensor.default";
constexpr const char* kWait = "_c10d_functional.wait_tensor.default";

// One FSDP layer, world 2: w [4, 8] gathered to [8, 8], used by mm, its gradient reduce-scattered.
struct Fsdp {
  Graph g;
  Node *w, *x, *cast, *ag, *wait, *t, *mm, *loss, *gw, *rs, *grad, *out;
  Fsdp() {
    g.processGroups().push_back({"0", 2, {0, 1}});
    g.outputSpecs() = {{OutputKind::Loss, ""}, {OutputKind::Gradient, "w"}};
    w = input(g, "w", InputKind::Parameter, "w", {4, 8});
    x = input(g, "x", InputKind::UserInput, "", {2, 8});
    cast = call(g, "aten._to_copy.default", {N(w)}, {4, 8});
    ag = call(g, kAG, {N(cast), Arg::ofInt(2), Arg::ofStr("0")}, {8, 8});
    wait = call(g, kWait, {N(ag)}, {8, 8});
    t = call(g, "aten.t.default", {N(wait)}, {8, 8});
    mm = call(g, "aten.mm.default", {N(x), N(t)}, {2, 8});
    loss = call(g, "aten.sum.default", {N(mm)}, {}, Phase::Loss);
    gw = call(g, "aten.mm.default", {N(t), N(t)}, {8, 8}, Phase::Backward);
    rs = call(g, kRS, {N(gw), Arg::ofStr("sum"), Arg::ofInt(2), Arg::ofStr("0")}, {4, 8},
              Phase::Backward);
    grad = call(g, kWait, {N(rs)}, {4, 8}, Phase::Backward);
    out = g.create(OpKind::Output, Symbol::intern("output"), {Arg::ofList({N(loss), N(grad)})}, {},
                   "output");
  }
};

// The rules that fired, one entry per issue.
std::vector<std::string> rules(const std::vector<VerifyIssue>& issues) {
  std::vector<std::string> r;
  for (const auto& i : issues)
    r.push_back(i.rule);
  return r;
}

bool has(const std::vector<VerifyIssue>& issues, const std::string& node, const std::string& rule,
         const std::string& text = "") {
  for (const auto& i : issues)
    if (i.node == node && i.rule == rule && i.message.find(text) != std::string::npos) return true;
  return false;
}

std::string dump(const std::vector<VerifyIssue>& issues) {
  std::string s;
  for (const auto& i : issues)
    s += i.str() + "\n";
  return s;
}

}  // namespace

TEST_CASE("verifier: a well-formed FSDP graph has no issues", "[verifier]") {
  Fsdp f;
  auto issues = verifyGraph(f.g, {.one_gather_per_param_per_phase = true});
  INFO(dump(issues));
  CHECK(issues.empty());
}

TEST_CASE("verifier: issue text names node and rule", "[verifier]") {
  VerifyIssue a{"mm", "arity", "too many", ""};
  CHECK(a.str() == "node 'mm': [arity] too many");
  VerifyIssue b{"", "single-output", "none", ""};
  CHECK(b.str() == "[single-output] none");
  VerifyIssue c{"mm", "arity", "too many", "g.jfx:12"};  // a node read from a file
  CHECK(c.str() == "g.jfx:12: node 'mm': [arity] too many");
}

TEST_CASE("verifier: topological-order", "[verifier]") {
  Fsdp f;
  f.g.moveBefore(f.t, f.wait);  // t now reads a wait defined after it
  auto issues = verifyGraph(f.g);
  INFO(dump(issues));
  CHECK(has(issues, "t", "topological-order", "'wait_tensor' is defined after its use"));
}

TEST_CASE("verifier: verifyNodes checks what the change journal recorded", "[verifier]") {
  Fsdp f;
  f.g.trackChanges(true);
  CHECK(f.g.takeTouched().empty());
  SECTION("a legal move: no issues, and the journal is cleared") {
    f.g.moveBefore(f.cast, f.ag);  // already there: only links are rewritten
    f.g.moveAfter(f.x, f.cast);
    auto touched = f.g.takeTouched();
    CHECK(!touched.empty());
    auto issues = verifyNodes(f.g, touched);
    INFO(dump(issues));
    CHECK(issues.empty());
    CHECK(f.g.takeTouched().empty());
  }
  SECTION("a move that breaks the order, seen from the moved node and from its producer") {
    f.g.moveBefore(f.t, f.wait);
    auto touched = f.g.takeTouched();
    auto issues = verifyNodes(f.g, touched);
    INFO(dump(issues));
    CHECK(has(issues, "t", "topological-order", "'wait_tensor' is defined after its use"));
    CHECK(issues.size() == verifyGraph(f.g).size());
  }
  SECTION("the report is the program-order one, whatever order the nodes come in") {
    // Two order breaks: t moved before the wait it reads, and a new node (the newest id) put
    // before t that reads mm, which comes later. The journal hands the nodes over in id order;
    // the report is the same as for the nodes in program order, and for them reversed.
    f.g.moveBefore(f.t, f.wait);
    f.g.createCall("aten.neg.default", {N(f.mm)}, {}, f.t, "early_neg");
    const std::vector<const Node*> touched = f.g.takeTouched();
    std::vector<const Node*> in_order = touched;
    std::sort(in_order.begin(), in_order.end(),
              [](const Node* a, const Node* b) { return a->isBefore(b); });
    REQUIRE(in_order != touched);  // early_neg is the newest id, before t in the program
    const std::vector<const Node*> reversed(in_order.rbegin(), in_order.rend());
    const auto expected = verifyNodes(f.g, in_order);
    REQUIRE(expected.size() >= 2);
    for (const auto& nodes : {touched, reversed}) {
      const auto got = verifyNodes(f.g, nodes);
      REQUIRE(got.size() == expected.size());
      for (size_t i = 0; i < got.size(); ++i) {
        CHECK(got[i].node == expected[i].node);
        CHECK(got[i].rule == expected[i].rule);
        CHECK(got[i].message == expected[i].message);
      }
    }
  }
  SECTION("a new wait on a non-collective, and a rewired use") {
    f.g.createCall(kWait, {N(f.x)}, {}, f.out, "bad_wait");
    f.g.replaceInput(f.mm, 1, f.wait);  // legal: mm reads the gathered weight untransposed
    auto issues = verifyNodes(f.g, f.g.takeTouched());
    INFO(dump(issues));
    CHECK(rules(issues) == std::vector<std::string>{"collective-wait-pairing"});
    CHECK(has(issues, "bad_wait", "collective-wait-pairing"));
  }
  SECTION("erased nodes leave the journal; their producers stay in it") {
    Node* dead = f.g.createCall("aten.neg.default", {N(f.mm)}, {}, f.out, "dead");
    f.g.takeTouched();
    f.g.erase(dead);
    auto touched = f.g.takeTouched();
    CHECK(std::find(touched.begin(), touched.end(), f.mm) != touched.end());
    for (const Node* n : touched)
      CHECK(!n->isDead());
    CHECK(verifyNodes(f.g, touched).empty());
  }
  SECTION("node rules report only when no operand rule fired, whichever node comes first") {
    // An arity problem early in the program (w's cast) and an order problem late (t moved
    // before the wait it reads): the order issue alone, as with the whole-graph check.
    f.g.setArgs(f.cast, {N(f.w), Arg::ofInt(1), Arg::ofInt(2), Arg::ofInt(3), Arg::ofInt(4),
                         Arg::ofInt(5), Arg::ofInt(6)});
    f.g.moveBefore(f.t, f.wait);
    const auto touched = f.g.takeTouched();
    auto issues = verifyNodes(f.g, touched);
    CHECK(rules(issues) == std::vector<std::string>{"topological-order"});
    // Order repaired, the same nodes checked: now the arity issue shows.
    f.g.moveAfter(f.t, f.wait);
    issues = verifyNodes(f.g, touched);
    INFO(dump(issues));
    CHECK(rules(issues) == std::vector<std::string>{"arity"});
    CHECK(has(issues, std::string(f.cast->name()), "arity"));
  }
  SECTION("off: nothing is recorded") {
    f.g.trackChanges(false);
    f.g.moveAfter(f.x, f.cast);
    CHECK(f.g.takeTouched().empty());
  }
}

TEST_CASE("verifier: single-output and output-last", "[verifier]") {
  SECTION("missing output") {
    Graph g;
    input(g, "a", InputKind::None, "", {1});
    auto issues = verifyGraph(g);
    CHECK(has(issues, "", "single-output", "no output node"));
  }
  SECTION("two outputs") {
    Fsdp f;
    f.g.create(OpKind::Output, Symbol::intern("output"), {Arg::ofList({})}, {}, "output");
    auto issues = verifyGraph(f.g);
    INFO(dump(issues));
    CHECK(has(issues, "output_1", "single-output"));
    CHECK(has(issues, "output", "output-last"));
  }
  SECTION("node after output") {
    Fsdp f;
    f.g.moveBefore(f.out, f.loss);
    auto issues = verifyGraph(f.g);
    CHECK(has(issues, "output", "output-last"));
  }
}

TEST_CASE("verifier: arity against the op-info table", "[verifier]") {
  Fsdp f;
  Node* bad = f.g.createCall("aten.mm.default", {N(f.x)}, {}, f.out, "bad_mm");
  Node* unknown = f.g.createCall("mylib.custom.default", {}, {}, f.out, "custom");
  auto issues = verifyGraph(f.g);
  INFO(dump(issues));
  CHECK(has(issues, std::string(bad->name()), "arity", "takes 2 positional arguments, got 1"));
  CHECK(!has(issues, std::string(unknown->name()), "arity"));  // unknown ops have no arity bounds
}

TEST_CASE("verifier: collective-wait-pairing", "[verifier]") {
  Fsdp f;
  SECTION("collective without a wait") {
    f.g.replaceAllUsesWith(f.wait, f.cast);
    f.g.erase(f.wait);
    auto issues = verifyGraph(f.g);
    INFO(dump(issues));
    CHECK(has(issues, "all_gather_into_tensor", "collective-wait-pairing", "no wait"));
  }
  SECTION("collective with two waits") {
    f.g.createCall(kWait, {N(f.ag)}, {}, f.t, "wait2");
    auto issues = verifyGraph(f.g);
    INFO(dump(issues));
    CHECK(has(issues, "all_gather_into_tensor", "collective-wait-pairing", "2 waits"));
  }
  SECTION("wait on something that is not a collective") {
    f.g.createCall(kWait, {N(f.mm)}, {}, f.loss, "stray_wait");
    auto issues = verifyGraph(f.g);
    CHECK(has(issues, "stray_wait", "collective-wait-pairing", "not a collective"));
  }
  SECTION("collective result read before its wait") {
    f.g.createCall("aten.neg.default", {N(f.ag)}, {}, f.wait, "early");
    auto issues = verifyGraph(f.g);
    CHECK(has(issues, "all_gather_into_tensor", "collective-wait-pairing",
              "read by 'early' without a wait"));
  }
}

TEST_CASE("verifier: coalesced collectives pair through getitems", "[verifier]") {
  Graph g;
  Node* a = input(g, "a", InputKind::None, "", {2, 4});
  Node* b = input(g, "b", InputKind::None, "", {3});
  Node* ag = g.createCall("_c10d_functional.all_gather_into_tensor_coalesced.default",
                          {Arg::ofList({N(a), N(b)}), Arg::ofInt(2), Arg::ofStr("0")});
  ag->val() = ValueMeta::ofList({tensor({4, 4}), tensor({6})});
  Node* g0 = g.createCall("operator.getitem", {N(ag), Arg::ofInt(0)});
  Node* g1 = g.createCall("operator.getitem", {N(ag), Arg::ofInt(1)});
  Node* w0 = g.createCall(kWait, {N(g0)});
  Node* w1 = g.createCall(kWait, {N(g1)});
  g.create(OpKind::Output, Symbol::intern("output"), {Arg::ofList({N(w0), N(w1)})}, {}, "output");
  CHECK(verifyGraph(g).empty());

  SECTION("an element without a wait") {
    Node* out = g.outputNode();
    g.setArgs(out, {Arg::ofList({N(w0), N(g1)})});
    g.erase(w1);
    auto issues = verifyGraph(g);
    INFO(dump(issues));
    CHECK(has(issues, std::string(g1->name()), "collective-wait-pairing", "without a wait"));
    CHECK(has(issues, std::string(g1->name()), "collective-wait-pairing", "has no wait"));
  }
  SECTION("a wait straight on the coalesced result") {
    g.createCall(kWait, {N(ag)}, {}, g.outputNode(), "direct");
    auto issues = verifyGraph(g);
    INFO(dump(issues));
    CHECK(has(issues, "direct", "collective-wait-pairing", "needs a getitem"));
  }
  SECTION("element shapes") {
    ag->val() = ValueMeta::ofList({tensor({4, 4}), tensor({5})});
    auto issues = verifyGraph(g);
    CHECK(has(issues, std::string(ag->name()), "collective-shape", "(element 1)"));
  }
}

TEST_CASE("verifier: collective-shape", "[verifier]") {
  Fsdp f;
  SECTION("all-gather") {
    f.ag->val() = tensor({6, 8});
    auto issues = verifyGraph(f.g);
    INFO(dump(issues));
    CHECK(has(issues, "all_gather_into_tensor", "collective-shape",
              "all-gather output dim 0 must be input dim 0 x group_size 2"));
  }
  SECTION("all-gather trailing dims") {
    f.ag->val() = tensor({8, 9});
    CHECK(has(verifyGraph(f.g), "all_gather_into_tensor", "collective-shape", "dim 1 differs"));
  }
  SECTION("all-gather dtype") {
    f.ag->val() = tensor({8, 8}, ScalarType::BFloat16);
    CHECK(has(verifyGraph(f.g), "all_gather_into_tensor", "collective-shape", "dtype"));
  }
  SECTION("reduce-scatter") {
    f.rs->val() = tensor({8, 8});
    auto issues = verifyGraph(f.g);
    INFO(dump(issues));
    CHECK(has(issues, "reduce_scatter_tensor", "collective-shape",
              "reduce-scatter input dim 0 must be output dim 0 x group_size 2"));
  }
  SECTION("no value meta: nothing to check") {
    f.ag->val() = ValueMeta{};
    CHECK(verifyGraph(f.g).empty());
  }
}

TEST_CASE("verifier: group-size and unknown-group", "[verifier]") {
  Fsdp f;
  SECTION("group size differs from the header") {
    f.g.setArgs(f.ag, {N(f.cast), Arg::ofInt(4), Arg::ofStr("0")});
    f.ag->val() = tensor({16, 8});
    auto issues = verifyGraph(f.g);
    INFO(dump(issues));
    CHECK(rules(issues) == std::vector<std::string>{"group-size"});
    CHECK(has(issues, "all_gather_into_tensor", "group-size",
              "group_size 4 but process group \"0\" has size 2"));
  }
  SECTION("group not in the header") {
    f.g.setArgs(f.rs, {N(f.gw), Arg::ofStr("sum"), Arg::ofInt(2), Arg::ofStr("7")});
    auto issues = verifyGraph(f.g);
    CHECK(rules(issues) == std::vector<std::string>{"unknown-group"});
  }
  SECTION("no groups in the header: names are not checked") {
    f.g.processGroups().clear();
    f.g.setArgs(f.rs, {N(f.gw), Arg::ofStr("sum"), Arg::ofInt(2), Arg::ofStr("7")});
    CHECK(verifyGraph(f.g).empty());
  }
  SECTION("header group whose ranks disagree with its size") {
    f.g.processGroups()[0].ranks = {0, 1, 2};
    CHECK(has(verifyGraph(f.g), "", "process-group", "3 ranks"));
  }
}

TEST_CASE("verifier: input-info and output-info", "[verifier]") {
  Fsdp f;
  SECTION("parameter without fqn") {
    f.w->setInputInfo(InputKind::Parameter, "");
    CHECK(has(verifyGraph(f.g), "w", "input-info", "parameter has no fqn"));
  }
  SECTION("some placeholders without a kind") {
    f.x->setInputInfo(InputKind::None, "");
    CHECK(has(verifyGraph(f.g), "x", "input-info", "1 of 2 placeholders"));
  }
  SECTION("two inputs with one fqn") {
    Node* w2 = input(f.g, "w2", InputKind::Parameter, "w", {4, 8});
    f.g.moveBefore(w2, f.cast);
    CHECK(has(verifyGraph(f.g), "w2", "input-info", "also the input 'w'"));
  }
  SECTION("input info on a non-placeholder") {
    f.mm->setInputInfo(InputKind::Buffer, "b");
    CHECK(has(verifyGraph(f.g), "mm", "input-info", "only placeholders"));
  }
  SECTION("header output count") {
    f.g.outputSpecs().push_back({OutputKind::Other, ""});
    CHECK(has(verifyGraph(f.g), "output", "output-info", "header lists 3 outputs"));
  }
  SECTION("gradient of a non-parameter") {
    f.g.outputSpecs()[1].fqn = "nope";
    CHECK(has(verifyGraph(f.g), "output", "output-info", "\"nope\""));
  }
}

TEST_CASE("verifier: one gather per parameter per phase", "[verifier]") {
  Fsdp f;
  // A second forward gather of w through a view chain: legal by default, an issue with the option.
  Node* v = f.g.createCall("aten.view.default", {N(f.w), Arg::ofInts({32})}, {}, f.out);
  v->val() = tensor({32});
  Node* v2 = f.g.createCall("aten.view.default", {N(v), Arg::ofInts({4, 8})}, {}, f.out);
  v2->val() = tensor({4, 8});
  Node* ag2 = f.g.createCall(kAG, {N(v2), Arg::ofInt(2), Arg::ofStr("0")}, {}, f.out, "ag2");
  ag2->val() = tensor({8, 8});
  ag2->meta().phase = Phase::Forward;
  f.g.createCall(kWait, {N(ag2)}, {}, f.out);
  CHECK(verifyGraph(f.g).empty());
  auto issues = verifyGraph(f.g, {.one_gather_per_param_per_phase = true});
  INFO(dump(issues));
  CHECK(rules(issues) == std::vector<std::string>{"one-gather-per-param"});
  CHECK(has(issues, "ag2", "one-gather-per-param", "first by 'all_gather_into_tensor'"));

  // The same gather in backward (what remat produces) is fine.
  ag2->meta().phase = Phase::Backward;
  CHECK(verifyGraph(f.g, {.one_gather_per_param_per_phase = true}).empty());
}

TEST_CASE("verifier: max_issues bounds the report", "[verifier]") {
  Fsdp f;
  for (int i = 0; i < 20; ++i)
    f.g.createCall("aten.mm.default", {N(f.x)}, {}, f.out);
  CHECK(verifyGraph(f.g).size() == 20);
  CHECK(verifyGraph(f.g, {.max_issues = 5}).size() == 5);
  CHECK(verifyGraph(f.g, {.max_issues = 0}).empty());
}

TEST_CASE("verifier: what counts as a Python identifier", "[verifier][identifier]") {
  for (const char* ok : {"x", "_", "X9", "mm_3", "primals_1", "_0_weight", "match", "case", "type",
                         "print", "self", "__init__", "nonlocal_", "Class", "none"})
    CHECK(isPythonIdentifier(ok));
  for (const char* bad :
       {"",         "0",           "9x",    "a-b",   "a b",  "a.b",   "x=1",    "x\n",
        "é",        "caf\xc3\xa9", "class", "None",  "True", "False", "lambda", "import",
        "nonlocal", "if",          "await", "yield", "x\"",  "(x)",   "\x01"})
    CHECK_FALSE(isPythonIdentifier(bad));
  CHECK(isPythonIdentifier(std::string(100000, 'a')));  // no length limit in Python either
  CHECK_FALSE(isPythonIdentifier(std::string_view("a\0b", 3)));

  for (const char* ok :
       {"a", "_tensor_constant0", "true_graph_0", "layers.0.weight", "a.b.c", "m.10", "0"})
    CHECK(isAttributePath(ok));
  for (const char* bad : {"", ".", ".a", "a.", "a..b", "a.class", "a.b c", "x\")", "a.0x", "a.-1",
                          "x\") if getattr(__import__(\"os\"), \"system\")(\"true\") else (\""})
    CHECK_FALSE(isAttributePath(bad));
}

namespace {
// What torch.fx would paste into generated Python source as code.
constexpr const char* kCode = "x=__import__('os').system('touch /tmp/jfx-pwned')";
}  // namespace

TEST_CASE("verifier: identifier rule on node names, targets and kwargs keys",
          "[verifier][identifier]") {
  SECTION("a placeholder target") {
    Fsdp f;
    Node* p = f.g.create(OpKind::Placeholder, Symbol::intern(kCode), {}, {}, "p", f.cast);
    p->setInputInfo(InputKind::UserInput, "");
    auto issues = verifyGraph(f.g);
    INFO(dump(issues));
    REQUIRE(issues.size() == 1);
    CHECK(has(issues, "p", "identifier", "placeholder target \"x=__import__('os')"));
    CHECK(has(issues, "p", "identifier", "is not a Python identifier"));
  }
  SECTION("a node name") {
    Fsdp f;
    f.g.rename(f.mm, kCode);
    auto issues = verifyGraph(f.g);
    INFO(dump(issues));
    REQUIRE(issues.size() == 1);
    CHECK(has(issues, kCode, "identifier", "node name \"x=__import__"));
    // The name is shown escaped: it holds a quote.
    CHECK(issues[0].str().starts_with("node \"x=__import__('os')"));
  }
  SECTION("a keyword as a node name") {
    Fsdp f;
    f.g.rename(f.t, "lambda");
    CHECK(has(verifyGraph(f.g), "lambda", "identifier", "node name \"lambda\""));
  }
  SECTION("a kwargs key") {
    Fsdp f;
    Node* c = f.g.createCall("aten.add.Tensor", {N(f.mm), N(f.mm)},
                             {{Symbol::intern(std::string("alpha=1, ") + kCode), Arg::ofInt(1)}},
                             f.out, "c");
    c->val() = tensor({2, 8});
    auto issues = verifyGraph(f.g);
    INFO(dump(issues));
    REQUIRE(issues.size() == 1);
    CHECK(has(issues, "c", "identifier", "kwargs key \"alpha=1, x=__import__"));
  }
  SECTION("a get_attr target") {
    Fsdp f;
    Node* a = f.g.create(OpKind::GetAttr, Symbol::intern("x\") or exec(\"1\") or (\""), {}, {}, "a",
                         f.out);
    a->meta().phase = Phase::Forward;
    auto issues = verifyGraph(f.g);
    INFO(dump(issues));
    REQUIRE(issues.size() == 1);
    CHECK(has(issues, "a", "identifier", "get_attr target \"x\\\") or exec("));
    CHECK(has(issues, "a", "identifier", "is not an attribute path"));
  }
  SECTION("the value quoted is cut and escaped") {
    Fsdp f;
    f.g.rename(f.t, std::string("a\nb\x01") + std::string(500, 'z'));
    auto issues = verifyGraph(f.g);
    INFO(dump(issues));
    REQUIRE(issues.size() == 1);
    CHECK(issues[0].message.starts_with("node name \"a\\u000ab\\u0001zzz"));
    CHECK(issues[0].message.find("\"... (504 bytes) is not a Python identifier") !=
          std::string::npos);
    CHECK(issues[0].str().find('\n') == std::string::npos);
  }
}

TEST_CASE("verifier: the identifier rule in every verification", "[verifier][identifier]") {
  Fsdp f;
  CHECK(verifyIdentifiers(f.g).empty());
  f.g.trackChanges(true);
  f.g.takeTouched();
  f.g.rename(f.t, "t-1");
  // The whole-graph walks, with and without the IR invariants, the rule alone, and the check of
  // the nodes a pass touched all see it.
  CHECK(has(verifyGraph(f.g), "t-1", "identifier"));
  CHECK(has(verifyGraph(f.g, {.ir_invariants = false}), "t-1", "identifier"));
  CHECK(has(verifyIdentifiers(f.g), "t-1", "identifier"));
  CHECK(has(verifyNodes(f.g, f.g.takeTouched()), "t-1", "identifier"));
  f.g.rename(f.t, "t_1");
  CHECK(verifyGraph(f.g).empty());
}
