#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "ir/error.h"
#include "ir/hash.h"
#include "ir/json_format.h"
#include "ir/text_format.h"
#include "tests/reordered_json.h"

using namespace jfx;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

ValueMeta tensor(ScalarType dt, std::vector<int64_t> shape, const char* device = "cpu",
                 std::vector<int64_t> stride = {}) {
  TensorMeta t;
  t.dtype = dt;
  t.stride = stride.empty() ? TensorMeta::contiguousStride(shape) : Dims(stride);
  t.shape = std::move(shape);
  t.device = Symbol::intern(device);
  return ValueMeta::ofTensor(std::move(t));
}

ValueMeta scalar(ValueMeta::Kind kind, int64_t i, double f = 0) {
  ValueMeta v;
  v.kind = kind;
  if (kind == ValueMeta::Kind::Float)
    v.f = f;  // i and f share their bytes
  else
    v.i = i;
  return v;
}

Node* input(Graph& g, const char* name, InputKind kind, const char* fqn, ValueMeta val) {
  Node* n = g.create(OpKind::Placeholder, Symbol::intern(name), {}, {}, name);
  n->setInputInfo(kind, fqn);
  n->val() = std::move(val);
  return n;
}

Kwargs kw(std::initializer_list<std::pair<const char*, Arg>> items) {
  Kwargs out;
  for (const auto& [k, v] : items)
    out.emplace_back(Symbol::intern(k), v);
  return out;
}

// Every Arg kind, every ValueMeta kind, every typed meta field, extras, custom with and without
// module_fqn, names and targets that need quoting, and a full header.
std::unique_ptr<Graph> richGraph() {
  auto g = std::make_unique<Graph>();
  g->processGroups().push_back({"0", 2, {0, 1}});
  g->processGroups().push_back({"tp group", 4, {0, 1, 2, 3}});
  g->outputSpecs() = {
      {OutputKind::Loss, ""}, {OutputKind::Gradient, "layers.0.w1"}, {OutputKind::Other, ""}};
  g->extraJson() = R"({"model":"llama","world_size":2})";

  Node* w = input(*g, "primals_1", InputKind::Parameter, "layers.0.w1",
                  tensor(ScalarType::Float32, {4, 8}));
  Node* x = g->create(OpKind::Placeholder, Symbol::intern("x_target"), {}, {}, "x");
  x->setInputInfo(InputKind::UserInput, "");
  x->val() = tensor(ScalarType::BFloat16, {2, 8}, "cuda:0");
  Node* buf =
      input(*g, "buf", InputKind::Buffer, "bn.running_mean", tensor(ScalarType::Float32, {8}, ""));
  Node* plain = input(*g, "plain", InputKind::None, "", ValueMeta{});
  (void)plain;
  Node* attr = g->create(OpKind::GetAttr, Symbol::intern("_tensor_constant0"), {}, {}, "c0");
  attr->val() = tensor(ScalarType::Int64, {}, "cpu");

  Node* cast = g->createCall("aten._to_copy.default", {Arg::ofNode(w)},
                             kw({{"dtype", Arg::ofDtype(ScalarType::BFloat16)}}));
  cast->val() = tensor(ScalarType::BFloat16, {4, 8});
  NodeMeta& m = cast->meta();
  m.phase = Phase::Forward;
  m.recompute = Recompute::MustRecompute;
  m.ac_graph_id = 1;
  m.seq_nr = -3;
  m.module_fqn = Symbol::intern("layers.0");
  m.stack_trace = "File \"model.py\", line 3, in forward\n    return \"x\" @ w\t# \\ ok";
  m.extra_json =
      R"({"custom":{"a":1,"z":[true,null]},"nn_module_stack":{"L__self__":["layers.0","Linear"]},"zz":1.5})";

  Node* ag = g->createCall("_c10d_functional.all_gather_into_tensor.default",
                           {Arg::ofNode(cast), Arg::ofInt(2), Arg::ofStr("0")});
  ag->val() = tensor(ScalarType::BFloat16, {8, 8}, "cuda:0");
  ag->meta().phase = Phase::Loss;
  ag->meta().recompute = Recompute::PreferSave;
  ag->meta().extra_json = R"({"custom":{"only":"custom"}})";  // custom without module_fqn
  Node* wait = g->createCall("_c10d_functional.wait_tensor.default", {Arg::ofNode(ag)});
  wait->val() = tensor(ScalarType::BFloat16, {8, 8});
  wait->meta().phase = Phase::Backward;
  wait->meta().recompute = Recompute::MustSave;
  wait->meta().module_fqn = Symbol::intern("layers.1.attention");  // module_fqn, no other custom
  Node* t = g->createCall("aten.t.default", {Arg::ofNode(wait)});
  t->val() = tensor(ScalarType::BFloat16, {8, 8}, "cpu", {1, 8});  // non-contiguous
  t->meta().recompute = Recompute::PreferRecompute;
  t->meta().extra_json = R"({"aa":null,"empty":{},"unicode":"é∑🚀","zzz":[1,-0.0,1e-06,1e+16]})";

  Node* sdpa = g->createCall("aten._scaled_dot_product_flash_attention_for_cpu.default",
                             {Arg::ofNode(x), Arg::ofNode(x), Arg::ofNode(x)});
  sdpa->val() = ValueMeta::ofList(
      {tensor(ScalarType::Float32, {2, 4, 8}), tensor(ScalarType::Float32, {2, 4}, "cuda:1"),
       scalar(ValueMeta::Kind::Int, -7), scalar(ValueMeta::Kind::Float, 0, kInf),
       scalar(ValueMeta::Kind::Float, 0, -0.0), scalar(ValueMeta::Kind::Bool, 1),
       scalar(ValueMeta::Kind::None, 0),
       ValueMeta::ofList(
           {tensor(ScalarType::Float8_e4m3fn, {1}), tensor(ScalarType::Float8_e4m3fnuz, {2}),
            tensor(ScalarType::Float8_e5m2fnuz, {2}), tensor(ScalarType::Float8_e8m0fnu, {4, 1}),
            tensor(ScalarType::Float4_e2m1fn_x2, {4, 8})}),
       ValueMeta::ofList({})});
  Node* gi = g->createCall("operator.getitem", {Arg::ofNode(sdpa), Arg::ofInt(0)});
  gi->val() = tensor(ScalarType::Float32, {2, 4, 8});
  gi->meta().seq_nr = 12;

  std::vector<Arg> consts = {
      Arg::none(),
      Arg::ofBool(true),
      Arg::ofBool(false),
      Arg::ofInt(0),
      Arg::ofInt(-1),
      Arg::ofInt(std::numeric_limits<int64_t>::max()),
      Arg::ofInt(std::numeric_limits<int64_t>::min()),
      Arg::ofFloat(1.0),
      Arg::ofFloat(-0.0),
      Arg::ofFloat(1e-06),
      Arg::ofFloat(0.0001),
      Arg::ofFloat(1e15),
      Arg::ofFloat(1e16),
      Arg::ofFloat(0.1),
      Arg::ofFloat(-2.5e-300),
      Arg::ofFloat(5e-324),
      Arg::ofFloat(std::numeric_limits<double>::max()),
      Arg::ofFloat(kInf),
      Arg::ofFloat(-kInf),
      Arg::ofFloat(std::nan("")),
      Arg::ofStr(""),
      Arg::ofStr("plain"),
      Arg::ofStr("unicode é ∑ 🚀 \u2028"),
      Arg::ofStr(std::string("esc \"q\" \\ / \n \t \b \f \r \x01 \x1f \x7f nul:") + '\0' + "."),
      Arg::ofDtype(ScalarType::BFloat16),
      Arg::ofDtype(ScalarType::Float8_e5m2),
      Arg::ofDtype(ScalarType::Float8_e8m0fnu),
      Arg::ofDtype(ScalarType::Float4_e2m1fn_x2),
      Arg::ofDtype(ScalarType::Complex32),
      Arg::ofDevice("cuda:1"),
      Arg::ofLayout("torch.strided"),
      Arg::ofLayout("torch.custom_layout"),
      Arg::ofMemoryFormat("torch.channels_last"),
      Arg::ofMemoryFormat("weird format"),
      Arg::ofList({Arg::ofList({Arg::ofInt(1), Arg::ofInt(2)}),
                   Arg::ofList({Arg::ofInt(3), Arg::ofTuple({Arg::ofInt(4)})})}),
      Arg::ofList({}),
      Arg::ofTuple({}),
      Arg::ofTuple({Arg::ofNode(gi)}),
      Arg::ofTuple({Arg::ofNode(gi), Arg::ofList({Arg::ofNode(t), Arg::none()})}),
      Arg::ofOpaque("slice", "slice(None, 2, None)"),
      Arg::ofOpaque("weird \"type\"", "a\nb"),
  };
  Node* all = g->createCall("aten.everything.default", std::move(consts),
                            kw({{"alpha", Arg::ofFloat(0.5)},
                                {"dim", Arg::ofInts({-1, 0})},
                                {"out", Arg::ofNode(gi)},
                                {"weird-key", Arg::ofStr("k")}}),
                            nullptr, "all");
  all->val() = scalar(ValueMeta::Kind::None, 0);

  // Names and targets that the text format must quote.
  Node* odd = g->createCall("my ops.odd op", {Arg::ofNode(all)}, {}, nullptr, "odd name");
  odd->val() = tensor(ScalarType::Complex64, {3}, "weird device/0");
  Node* fake = g->createCall("output", {Arg::ofNode(odd)}, {}, nullptr, "not_output");
  Node* loss = g->createCall("aten.sum.default", {Arg::ofNode(gi)}, {}, nullptr, "loss");
  loss->val() = tensor(ScalarType::Float32, {});
  g->create(OpKind::Output, Symbol::intern("output"),
            {Arg::ofList({Arg::ofNode(loss), Arg::ofNode(t), Arg::ofNode(fake), Arg::ofNode(buf),
                          Arg::ofNode(attr), Arg::none()})},
            {}, "output");
  return g;
}

std::string errorOf(const std::string& text) {
  try {
    readJsonGraph(text, "g.json");
  } catch (const JfxError& e) {
    return e.what();
  }
  return "<no error>";
}

// A node line for error tests.
std::string doc(const std::string& nodes, const std::string& extra_header = "") {
  return "{\"format\":\"jointfx.graph\",\"version\":1," + extra_header + "\"nodes\":[\n" + nodes +
         "\n]}";
}

const char* kX =
    R"({"name":"x","op":"placeholder","target":"x","meta":{"val":{"dtype":"float32","shape":[2],"stride":[1]}}})";

}  // namespace

TEST_CASE("json: appendFloat matches Python repr", "[format]") {
  auto f = [](double v) {
    std::string s;
    appendFloat(s, v);
    return s;
  };
  CHECK(f(1.0) == "1.0");
  CHECK(f(-0.0) == "-0.0");
  CHECK(f(0.0) == "0.0");
  CHECK(f(1e-06) == "1e-06");
  CHECK(f(0.0001) == "0.0001");
  CHECK(f(1e-05) == "1e-05");
  CHECK(f(0.1) == "0.1");
  CHECK(f(1e15) == "1000000000000000.0");
  CHECK(f(1e16) == "1e+16");
  CHECK(f(123456789.125) == "123456789.125");
  CHECK(f(1.5e300) == "1.5e+300");
  CHECK(f(5e-324) == "5e-324");
  CHECK(f(std::numeric_limits<double>::max()) == "1.7976931348623157e+308");
  CHECK(f(kInf) == "inf");
  CHECK(f(-kInf) == "-inf");
  CHECK(f(std::nan("")) == "nan");
}

TEST_CASE("json: appendJsonString escapes like json.dumps(ensure_ascii=False)", "[format]") {
  std::string s;
  appendJsonString(s, std::string("a\"b\\c/\n\t\x01\x7f é") + '\0');
  CHECK(s == "\"a\\\"b\\\\c/\\n\\t\\u0001\x7f é\\u0000\"");
  // The writer skips eight bytes at a time: each byte that needs an escape, and bytes that do
  // not (0x7f, UTF-8, 0x20), at every offset of the first words.
  auto naive = [](std::string_view in) {
    std::string out = "\"";
    for (unsigned char c : in) {
      if (c == '"' || c == '\\') {
        out += '\\';
        out += static_cast<char>(c);
      } else if (c == '\n') {
        out += "\\n";
      } else if (c == '\t') {
        out += "\\t";
      } else if (c < 0x20) {
        char buf[8];
        std::snprintf(buf, sizeof buf, "\\u%04x", c);
        out += buf;
      } else {
        out += static_cast<char>(c);
      }
    }
    return out + "\"";
  };
  // Through the graph writer too (into its own buffer; a clean string is copied at once):
  // strings of every length from 0 to 31, clean or with the byte at each place, the overlapping
  // last word included.
  Graph g;
  Node* x = g.create(OpKind::Placeholder, Symbol::intern("x"), {}, {}, "x");
  for (const std::string& special :
       {std::string("\""), std::string("\\"), std::string("\n"), std::string("\t"),
        std::string("\x01"), std::string(1, '\0'), std::string("\x1f"), std::string("\x7f"),
        std::string(" "), std::string("\xc3\xa9"), std::string("\xff")}) {
    for (size_t at = 0; at <= 20; ++at) {
      const std::string in = std::string(at, 'a') + special + std::string(at % 11, 'b');
      std::string out;
      appendJsonString(out, in);
      INFO(at);
      CHECK(out == naive(in));
    }
    for (size_t len = 0; len < 32; ++len)
      for (size_t at = 0; at <= len; ++at) {
        std::string in(len, 'c');
        if (at < len) in.replace(at, 1, special);
        Node* n =
            g.createCall("aten.foo.default", {Arg::ofNode(x), Arg::ofStr(Symbol::intern(in))});
        const std::string json = writeJsonNode(*n);
        INFO(len << " " << at);
        CHECK(json.find("\"args\":[{\"node\":\"x\"}," + naive(in) + "]") != std::string::npos);
      }
  }
}

TEST_CASE("json: canonical layout", "[format]") {
  const std::string canonical =
      "{\n"
      "\"format\":\"jointfx.graph\",\n"
      "\"version\":1,\n"
      "\"process_groups\":[\n"
      "{\"name\":\"0\",\"ranks\":[0,1],\"size\":2}\n"
      "],\n"
      "\"inputs\":[\n"
      "{\"fqn\":\"layers.0.w1\",\"kind\":\"parameter\",\"name\":\"primals_1\"}\n"
      "],\n"
      "\"outputs\":[\n"
      "{\"kind\":\"loss\"},\n"
      "{\"fqn\":\"layers.0.w1\",\"kind\":\"gradient\"}\n"
      "],\n"
      "\"meta\":{\"world_size\":2},\n"
      "\"nodes\":[\n"
      "{\"args\":[],\"kwargs\":{},\"meta\":{\"val\":{\"device\":\"cpu\",\"dtype\":\"float32\","
      "\"shape\":[4,8],\"stride\":[8,1]}},\"name\":\"primals_1\",\"op\":\"placeholder\","
      "\"target\":\"primals_1\"},\n"
      "{\"args\":[{\"node\":\"primals_1\"}],\"kwargs\":{\"dtype\":{\"dtype\":\"bfloat16\"}},"
      "\"meta\":{\"custom\":{\"module_fqn\":\"layers.0\"},\"phase\":\"forward\",\"recompute\":2,"
      "\"seq_nr\":4},\"name\":\"_to_copy\",\"op\":\"call_function\","
      "\"target\":\"aten._to_copy.default\"},\n"
      "{\"args\":[[{\"node\":\"_to_copy\"},{\"node\":\"primals_1\"}]],\"kwargs\":{},\"meta\":{},"
      "\"name\":\"output\",\"op\":\"output\",\"target\":\"output\"}\n"
      "]\n"
      "}\n";
  auto g = readJsonGraph(canonical, "c.json");
  CHECK(writeJsonGraph(*g) == canonical);
  Node* w = g->findNode("primals_1");
  REQUIRE(w);
  CHECK(w->inputKind() == InputKind::Parameter);
  CHECK(w->inputFqn() == "layers.0.w1");
  Node* cast = g->findNode("_to_copy");
  REQUIRE(cast);
  CHECK(cast->meta().module_fqn.str() == "layers.0");
  CHECK(cast->meta().extra_json.empty());
  CHECK(cast->meta().recompute == Recompute::MustRecompute);
  CHECK(cast->input(0) == w);
  CHECK(g->outputSpecs().size() == 2);
  CHECK(g->extraJson() == R"({"world_size":2})");
  CHECK(printTextGraph(*g) ==
        "jointfx.graph 1\n"
        "group \"0\" size=2 ranks=[0, 1]\n"
        "outputs [loss, gradient \"layers.0.w1\"]\n"
        "meta {\"world_size\":2}\n"
        "default_device \"cpu\"\n"
        "\n"
        "%primals_1 : f32[4, 8] = placeholder {input=parameter, fqn=\"layers.0.w1\"}\n"
        "%_to_copy = aten._to_copy.default(%primals_1, dtype=torch.bfloat16) {phase=forward, "
        "recompute=MUST_RECOMPUTE, seq_nr=4, module=\"layers.0\"}\n"
        "%output = output([%_to_copy, %primals_1])\n");
}

TEST_CASE("json: IR -> JSON -> IR -> JSON is byte-identical on a graph using every feature",
          "[format]") {
  auto g = richGraph();
  std::string first = writeJsonGraph(*g);
  auto back = readJsonGraph(first, "rich.json");
  std::string second = writeJsonGraph(*back);
  CHECK(second == first);
  CHECK(structuralHash(*back) == structuralHash(*g));
  CHECK(printTextGraph(*back) == printTextGraph(*g));

  // Spot checks that the typed fields came back typed.
  Node* cast = back->findNode("_to_copy");
  REQUIRE(cast);
  CHECK(cast->meta().phase == Phase::Forward);
  CHECK(cast->meta().recompute == Recompute::MustRecompute);
  CHECK(cast->meta().ac_graph_id == 1);
  CHECK(cast->meta().seq_nr == -3);
  CHECK(cast->meta().module_fqn.str() == "layers.0");
  CHECK(cast->meta().stack_trace == g->findNode("_to_copy")->meta().stack_trace);
  CHECK(cast->meta().extra_json == g->findNode("_to_copy")->meta().extra_json);
  CHECK(first.find(R"("custom":{"a":1,"module_fqn":"layers.0","z":[true,null]})") !=
        std::string::npos);
  Node* wait = back->findNode("wait_tensor");
  REQUIRE(wait);
  CHECK(wait->meta().extra_json.empty());
  CHECK(wait->meta().module_fqn.str() == "layers.1.attention");
  Node* all = back->findNode("all");
  REQUIRE(all);
  CHECK(all->args().size() == g->findNode("all")->args().size());
  CHECK(all->args()[5].toInt() == std::numeric_limits<int64_t>::max());
  CHECK(all->args()[6].toInt() == std::numeric_limits<int64_t>::min());
  CHECK(std::signbit(all->args()[8].toFloat()));
  CHECK(std::isnan(all->args()[19].toFloat()));
  CHECK(all->args()[23].str() == g->findNode("all")->args()[23].str());
  CHECK(all->kwarg("out")->node() == back->findNode("getitem"));
  CHECK(all->inputs().size() == g->findNode("all")->inputs().size());
  CHECK(back->findNode("x")->target().str() == "x_target");
  CHECK(back->findNode("x")->val().tensor.device.str() == "cuda:0");
  CHECK(back->findNode("buf")->val().tensor.device.empty());
  CHECK(back->findNode("t")->val().tensor.stride == std::vector<int64_t>{1, 8});
  CHECK(back->findNode("plain")->val().kind == ValueMeta::Kind::Absent);
  CHECK(back->findNode("all")->val().kind == ValueMeta::Kind::None);
  CHECK(back->findNode("odd name")->target().str() == "my ops.odd op");
  CHECK(back->findNode("not_output")->op() == OpKind::CallFunction);
  CHECK(back->processGroups() == g->processGroups());
  CHECK(back->outputSpecs() == g->outputSpecs());
}

TEST_CASE("json: JSON -> text -> JSON is byte-identical", "[format]") {
  auto g = richGraph();
  std::string json1 = writeJsonGraph(*g);
  std::string text = printTextGraph(*readJsonGraph(json1, "rich.json"));
  auto from_text = parseTextGraph(text, "rich.jfx");
  CHECK(writeJsonGraph(*from_text) == json1);
  CHECK(printTextGraph(*from_text) == text);
}

TEST_CASE("json: readers accept non-canonical JSON with the same content", "[format]") {
  std::string loose = R"(  {
    "nodes": [
      {"target": "x", "op": "placeholder", "name": "x",
       "meta": {"val": {"shape": [2, 3], "dtype": "torch.float32"}, "custom": {"module_fqn": ""}}},
      {"name": "y", "op": "call_function", "target": "aten.neg.default",
       "args": [{"node": "x"}, 1E2, {"float": "-inf"}], "kwargs": {"b": 1, "a": 2},
       "meta": {"stack_trace": "", "custom": {}}}
    ],
    "version": 1, "format": "jointfx.graph",
    "inputs": [{"name": "x", "kind": "user_input"}]
  })";
  auto g = readJsonGraph(loose, "loose.json");
  Node* x = g->findNode("x");
  Node* y = g->findNode("y");
  REQUIRE(x);
  REQUIRE(y);
  CHECK(x->val().tensor.stride == std::vector<int64_t>{3, 1});  // contiguous by default
  CHECK(x->val().tensor.device.empty());
  CHECK(x->meta().module_fqn.empty());
  CHECK(x->meta().extra_json == R"({"custom":{"module_fqn":""}})");
  CHECK(y->args()[1].kind() == Arg::Kind::Float);
  CHECK(y->args()[1].toFloat() == 100.0);
  CHECK(y->kwargs()[0].first.str() == "a");  // kwargs come back sorted
  CHECK(y->meta().stack_trace.empty());
  CHECK(y->meta().extra_json == R"({"custom":{}})");
  CHECK(x->inputKind() == InputKind::UserInput);
  // And what we write reads back to the same bytes.
  std::string canonical = writeJsonGraph(*g);
  CHECK(writeJsonGraph(*readJsonGraph(canonical, "c.json")) == canonical);
}

TEST_CASE("json: meta integers past int64 round-trip through JSON and text unchanged", "[format]") {
  // seq_nr 2^64-1 is what autograd leaves on a chunked loss's backward nodes; ac_graph_id
  // INT64_MIN is the value OptionalInt64 reserves; the others are plain extra meta, including
  // integers past 64 bits (Python writes any int), nested ones and their negative forms.
  std::string text = R"({"format":"jointfx.graph","version":1,
    "inputs":[{"name":"x","kind":"user_input"}],
    "nodes":[
      {"name":"x","op":"placeholder","target":"x","meta":{"val":{"shape":[2],"dtype":"torch.float32"}}},
      {"name":"y","op":"call_function","target":"aten.neg.default","args":[{"node":"x"}],
       "meta":{"seq_nr":18446744073709551615,"ac_graph_id":-9223372036854775808,
               "big":1180591620717411303424,"neg_big":-36893488147419103232,
               "u":9223372036854775808,"nested":{"a":[1,18446744073709551621,"s"],"t":1.5}}},
      {"name":"z","op":"call_function","target":"aten.neg.default","args":[{"node":"y"}],
       "meta":{"seq_nr":7,"ac_graph_id":-3}},
      {"name":"output","op":"output","target":"output","args":[[{"node":"z"}]]}]})";
  auto g = readJsonGraph(text, "wide.json");
  Node* y = g->findNode("y");
  Node* z = g->findNode("z");
  REQUIRE(y);
  REQUIRE(z);
  CHECK(!y->meta().seq_nr);  // not typed: carried in extra meta
  CHECK(!y->meta().ac_graph_id);
  CHECK(*z->meta().seq_nr == 7);  // in range: typed as before
  CHECK(*z->meta().ac_graph_id == -3);
  const std::string json = writeJsonGraph(*g);
  for (std::string_view v :
       {R"("seq_nr":18446744073709551615)", R"("ac_graph_id":-9223372036854775808)",
        R"("big":1180591620717411303424)", R"("neg_big":-36893488147419103232)",
        R"("u":9223372036854775808)", R"("a":[1,18446744073709551621,"s"])", R"("seq_nr":7)"}) {
    INFO(v);
    CHECK(json.find(v) != std::string::npos);
  }
  CHECK(writeJsonGraph(*readJsonGraph(json, "again.json")) == json);
  const std::string jfx = printTextGraph(*g);
  auto from_text = parseTextGraph(jfx, "wide.jfx");
  CHECK(writeJsonGraph(*from_text) == json);
  CHECK(printTextGraph(*from_text) == jfx);
  // The text format's extra={...} holds a typed key only when the typed field cannot.
  CHECK(canonicalExtraMeta(R"({"seq_nr":18446744073709551615})", false) ==
        R"({"seq_nr":18446744073709551615})");
  CHECK_THROWS_WITH(canonicalExtraMeta(R"({"seq_nr":5})", false),
                    Catch::Contains("must not hold the typed key 'seq_nr'"));
  CHECK_THROWS_WITH(canonicalExtraMeta(R"({"recompute":1})", false),
                    Catch::Contains("must not hold the typed key 'recompute'"));
  // Arguments are not meta: an integer argument past int64 is an error as before, one past 64
  // bits reads as the double it always read as (no op takes such an integer).
  std::string bad_arg = text;
  bad_arg.replace(bad_arg.find(R"("args":[{"node":"x"}])"), 21,
                  R"("args":[{"node":"x"},18446744073709551615])");
  CHECK_THROWS_WITH(readJsonGraph(bad_arg, "arg.json"),
                    Catch::Contains("integer 18446744073709551615 is out of the int64 range"));
  std::string wide_arg = text;
  wide_arg.replace(wide_arg.find(R"("args":[{"node":"x"}])"), 21,
                   R"("args":[{"node":"x"},1180591620717411303424])");
  // Past 64 bits: refused with its place, never read as a rounded double.
  CHECK_THROWS_WITH(
      readJsonGraph(wide_arg, "wide_arg.json"),
      Catch::Contains("at /nodes/1/args/1 (node 'y'): error: integer 1180591620717411303424 is "
                      "out of the int64 range"));
}

TEST_CASE("json: syntax errors give line, column and byte offset", "[format]") {
  std::string text = "{\"format\":\"jointfx.graph\",\n\"version\":1,\n\"nodes\":[}\n";
  std::string e = errorOf(text);
  INFO(e);
  CHECK(e.find("g.json:3:10") != std::string::npos);
  CHECK(e.find("byte 49") != std::string::npos);
  CHECK(e.find("syntax error") != std::string::npos);

  e = errorOf("");
  INFO(e);
  CHECK(e.find("g.json:1:1") != std::string::npos);

  e = errorOf(doc(kX).substr(0, 60));  // truncated
  INFO(e);
  CHECK(e.find("syntax error") != std::string::npos);
}

TEST_CASE("json: malformed documents name the pointer and the node", "[format]") {
  struct Case {
    std::string text;
    std::vector<std::string> expect;
  };
  const std::string y_head = R"({"name":"y","op":"call_function","target":"aten.neg.default",)";
  std::vector<Case> cases = {
      {R"({"format":"jointfx.graph","version":2,"nodes":[]})", {"at /version", "version 2"}},
      {R"({"format":"other","version":1,"nodes":[]})", {"at /format", "jointfx.graph"}},
      {R"({"format":"jointfx.graph","version":1})", {"missing key 'nodes'"}},
      {R"({"format":"jointfx.graph","nodes":[]})", {"missing key 'version'"}},
      {R"({"format":"jointfx.graph","version":"1","nodes":[]})", {"at /version", "integer"}},
      {R"([1,2])", {"top level"}},
      {doc("", R"("extra":1,)"), {"at /extra", "unexpected header key 'extra'"}},
      {doc(R"({"op":"placeholder","target":"x"})"), {"at /nodes/0/name", "missing key 'name'"}},
      {doc(R"({"name":7,"op":"placeholder","target":"x"})"), {"at /nodes/0/name", "a string"}},
      {doc(R"({"name":"","op":"placeholder","target":"x"})"), {"at /nodes/0/name", "empty"}},
      {doc(std::string(kX) + ",\n" + R"({"name":"y","op":"call_method","target":"neg"})"),
       {"at /nodes/1/op", "node 'y'", "unknown op kind 'call_method'"}},
      {doc(std::string(kX) + ",\n" + R"({"name":"y","op":"call_function"})"),
       {"at /nodes/1/target", "node 'y'", "missing key 'target'"}},
      {doc(std::string(kX) + ",\n" + kX), {"at /nodes/1/name", "node 'x'", "duplicate node name"}},
      {doc(std::string(kX) + ",\n" + y_head + R"("args":{"node":"x"}})"),
       {"at /nodes/1/args", "node 'y'", "array"}},
      {doc(std::string(kX) + ",\n" + y_head + R"("kwargs":[]})"),
       {"at /nodes/1/kwargs", "node 'y'", "object"}},
      {doc(std::string(kX) + ",\n" + y_head + R"("args":[{"node":"x"},{"dtype":"float33"}]})"),
       {"at /nodes/1/args/1/dtype", "node 'y'", "unknown dtype 'float33'"}},
      {doc(std::string(kX) + ",\n" + y_head + R"("args":[{"nodes":"x"}]})"),
       {"at /nodes/1/args/0/nodes", "node 'y'", "unknown argument object key 'nodes'"}},
      {doc(std::string(kX) + ",\n" + y_head + R"("args":[{"node":"x","float":"inf"}]})"),
       {"at /nodes/1/args/0", "node 'y'", "exactly one key"}},
      {doc(std::string(kX) + ",\n" + y_head + R"("kwargs":{"dims":{"tuple":3}}})"),
       {"at /nodes/1/kwargs/dims/tuple", "node 'y'", "array"}},
      {doc(std::string(kX) + ",\n" + y_head + R"("args":[{"float":"infinity"}]})"),
       {"at /nodes/1/args/0/float", "node 'y'", "\"inf\""}},
      {doc(std::string(kX) + ",\n" + y_head + R"("args":[18446744073709551615]})"),
       {"at /nodes/1/args/0", "node 'y'", "out of the int64 range"}},
      {doc(std::string(kX) + ",\n" + y_head + R"("args":[{"opaque":{"type":"slice"}}]})"),
       {"at /nodes/1/args/0/opaque", "node 'y'", "missing key 'repr'"}},
      {doc(std::string(kX) + ",\n" + y_head + R"("args":[{"node":"nowhere"}]})"),
       {"at /nodes/1/args/0/node", "node 'y'", "dangling reference", "'nowhere'"}},
      {doc(y_head + R"("args":[{"node":"x"}]},)" + "\n" + kX),
       {"at /nodes/0/args/0/node", "node 'y'", "used before its definition at /nodes/1"}},
      {doc(std::string(kX) + ",\n" + y_head + R"("meta":{"recompute":7}})"),
       {"at /nodes/1/meta/recompute", "node 'y'", "0..5"}},
      {doc(std::string(kX) + ",\n" + y_head + R"("meta":{"phase":"sideways"}})"),
       {"at /nodes/1/meta/phase", "node 'y'", "forward, loss or backward"}},
      {doc(std::string(kX) + ",\n" + y_head + R"("meta":{"seq_nr":1.5}})"),
       {"at /nodes/1/meta/seq_nr", "node 'y'", "integer"}},
      {doc(std::string(kX) + ",\n" + y_head + R"("meta":{"custom":{"module_fqn":3}}})"),
       {"at /nodes/1/meta/custom/module_fqn", "node 'y'", "string"}},
      {doc(std::string(kX) + ",\n" + y_head +
           R"("meta":{"val":{"dtype":"f32","shape":[2],"stride":[1]}}})"),
       {"at /nodes/1/meta/val/dtype", "node 'y'", "unknown dtype 'f32'"}},
      {doc(std::string(kX) + ",\n" + y_head +
           R"("meta":{"val":[{"dtype":"float32","shape":[2,3],"stride":[1]}]}})"),
       {"at /nodes/1/meta/val/0/stride", "node 'y'", "dimensions"}},
      {doc(std::string(kX) + ",\n" + y_head +
           R"("meta":{"val":{"dtype":"float32","shape":[2],"layout":"strided"}}})"),
       {"at /nodes/1/meta/val/layout", "node 'y'", "unexpected key 'layout'"}},
      {doc(std::string(kX) + ",\n" + y_head + R"("users":[]})"),
       {"at /nodes/1/users", "node 'y'", "unexpected key 'users'"}},
      {doc(std::string(kX) + ",\n" + R"({"name":"o","op":"output","target":"out","args":[]})"),
       {"at /nodes/1/target", "node 'o'", "\"output\""}},
      {doc(R"({"name":"p","op":"placeholder","target":"p","args":[1]})"),
       {"at /nodes/0/args", "node 'p'", "no arguments"}},
      {doc(std::string(kX) + ",\n42"), {"at /nodes/1", "node object"}},
      {doc(kX, R"("inputs":[{"name":"nope","kind":"parameter"}],)"),
       {"at /inputs/0/name", "'nope' names no node"}},
      {doc(kX, R"("inputs":[{"name":"x","kind":"weight"}],)"),
       {"at /inputs/0/kind", "unknown input kind 'weight'"}},
      {doc(kX, R"("outputs":[{"kind":"grad"}],)"), {"at /outputs/0/kind", "unknown output kind"}},
      {doc(kX, R"("process_groups":[{"name":"0","size":"2"}],)"),
       {"at /process_groups/0/size", "integer"}},
      {doc(kX, R"("meta":[1],)"), {"at /meta", "object"}},
      {doc(std::string(kX) + ",\n" + y_head + R"("name":"z"})"),
       {"at /nodes/1/name", "node 'y'", "duplicate key 'name'"}},
      {doc(std::string(kX) + ",\n" + y_head + R"("kwargs":{"a":1,"a":2}})"),
       {"at /nodes/1/kwargs/a", "node 'y'", "duplicate key 'a'"}},
      {doc(std::string(kX) + ",\n" + y_head + R"("meta":{"k":{"b":1,"b":2}}})"),
       {"at /nodes/1/meta/k", "node 'y'", "duplicate key 'b'"}},
  };
  for (const auto& c : cases) {
    std::string e = errorOf(c.text);
    INFO(c.text);
    INFO(e);
    CHECK(e.rfind("g.json", 0) == 0);
    for (const auto& piece : c.expect)
      CHECK(e.find(piece) != std::string::npos);
  }
  CHECK(cases.size() >= 12);
}

TEST_CASE("json: forward references and cycles are rejected", "[format]") {
  const std::string a =
      R"({"name":"a","op":"call_function","target":"aten.neg.default","args":[{"node":"b"}]})";
  const std::string b =
      R"({"name":"b","op":"call_function","target":"aten.neg.default","args":[{"node":"a"}]})";
  std::string e = errorOf(doc(a + ",\n" + b));
  INFO(e);
  CHECK(e.find("at /nodes/0/args/0/node") != std::string::npos);
  CHECK(e.find("node 'a'") != std::string::npos);
  CHECK(e.find("'b' is used before its definition at /nodes/1") != std::string::npos);
  CHECK(e.find("cycle") != std::string::npos);

  e = errorOf(doc(
      R"({"name":"s","op":"call_function","target":"aten.neg.default","args":[[{"node":"s"}]]})"));
  INFO(e);
  CHECK(e.find("at /nodes/0/args/0/0/node") != std::string::npos);
  CHECK(e.find("refers to itself") != std::string::npos);
}

TEST_CASE("json: a node's first error is the format's first check, not the file's first key",
          "[format][tokenizer]") {
  // Members are read in the file's order; errors are raised in the order the format checks them
  // (name, keys, op, target, args, kwargs, meta) and name the node, whose name the file may give
  // after the bad member.
  const std::string x = kX;
  auto errorAt = [&](const std::string& node) { return errorOf(doc(x + ",\n" + node)); };
  std::string e = errorAt(R"({"args":5,"meta":{"phase":"sideways"},"name":3,"op":"?"})");
  INFO(e);
  CHECK(e.find("at /nodes/1/name") != std::string::npos);
  CHECK(e.find("expected the node name (a string), got an integer") != std::string::npos);
  e = errorAt(R"({"args":5,"meta":{"phase":"sideways"},"name":"y","op":"?","target":"f"})");
  CHECK(e.find("at /nodes/1/op") != std::string::npos);
  CHECK(e.find("node 'y'") != std::string::npos);
  e = errorAt(R"({"args":[1,{"dtype":"float33"}],"name":"y","op":"call_function","target":"f"})");
  CHECK(e.find("at /nodes/1/args/1/dtype") != std::string::npos);
  CHECK(e.find("node 'y'") != std::string::npos);  // read after the args
  CHECK(e.find("unknown dtype 'float33'") != std::string::npos);
  // An unexpected key is raised after the name, before the op, wherever it is.
  e = errorAt(R"({"zz":1,"op":"?","name":"y","target":"f"})");
  CHECK(e.find("at /nodes/1/zz") != std::string::npos);
  CHECK(e.find("unexpected key 'zz' in a node") != std::string::npos);
  // kwargs and meta: a repeated key first, then the first error by key.
  e = errorAt(
      R"({"kwargs":{"b":{"dtype":"no"},"a":{"float":"x"}},"name":"y","op":"call_function","target":"f"})");
  CHECK(e.find("at /nodes/1/kwargs/a/float") != std::string::npos);
  e = errorAt(
      R"({"kwargs":{"b":{"dtype":"no"},"a":1,"b":2},"name":"y","op":"call_function","target":"f"})");
  CHECK(e.find("at /nodes/1/kwargs/b") != std::string::npos);
  CHECK(e.find("duplicate key 'b'") != std::string::npos);
  e = errorAt(
      R"({"meta":{"seq_nr":"1","phase":"up"},"name":"y","op":"call_function","target":"f"})");
  CHECK(e.find("at /nodes/1/meta/phase") != std::string::npos);
  // A tensor meta: dtype before shape, whatever the order.
  e = errorAt(
      R"({"meta":{"val":{"shape":[1.5],"dtype":"no"}},"name":"y","op":"call_function","target":"f"})");
  CHECK(e.find("at /nodes/1/meta/val/dtype") != std::string::npos);
  // A reference not defined yet: the first in args, then kwargs by key, wherever they are.
  e = errorAt(
      R"({"kwargs":{"k":{"node":"q"}},"args":[{"node":"x"},{"node":"r"}],"name":"y","op":"call_function","target":"f"})");
  CHECK(e.find("at /nodes/1/args/1/node") != std::string::npos);
  CHECK(e.find("node 'y'") != std::string::npos);
  CHECK(e.find("'r'") != std::string::npos);
  // Malformed JSON inside a node is nlohmann's error, even after a bad member; nesting past the
  // limit is the tree's.
  e = errorAt(R"({"args":5,"name":3,"op":"?" "target":"f"})");
  CHECK(e.find("JSON syntax error at byte") != std::string::npos);
  e = errorAt(R"({"name":"y","op":"call_function","target":"f","args":[)" + std::string(300, '[') +
              std::string(300, ']') + "]}");
  CHECK(e.find("JSON nested more than 200 levels deep") != std::string::npos);
  // An integer past 64 bits is refused as an argument (no op takes one, and a double would
  // round it) and kept digit for digit in extra meta.
  e = errorAt(
      R"({"args":[123456789012345678901234567890],"name":"y","op":"call_function","target":"f"})");
  CHECK(e.find("at /nodes/1/args/0 (node 'y'): error: integer 123456789012345678901234567890 is "
               "out of the int64 range") != std::string::npos);
  const auto g = readJsonGraph(
      doc(x + ",\n" +
          R"({"args":[1],"meta":{"seq_nr":123456789012345678901234567890},"name":"y","op":"call_function","target":"f"})"),
      "g.json");
  const Node* y = g->findNode("y");
  REQUIRE(y != nullptr);
  CHECK(y->meta().extra_json == R"({"seq_nr":123456789012345678901234567890})");
}

TEST_CASE("json: hostile input is an error, not a crash", "[format]") {
  std::string deep(100000, '[');
  std::string e =
      errorOf(doc(std::string(kX) + R"(,{"name":"y","op":"call_function","target":"t","args":)" +
                  deep + std::string(100000, ']') + "}"));
  CHECK(e.find("g.json: error: JSON nested more than 200 levels deep") != std::string::npos);
  e = errorOf(doc(std::string(kX) +
                  R"(,{"name":"y","op":"call_function","target":"t","meta":{"k":)" + deep +
                  std::string(100000, ']') + "}}"));
  CHECK(e.find("g.json: error: JSON nested more than 200 levels deep") != std::string::npos);
  CHECK(errorOf("\xff\xfe") != "<no error>");
  CHECK(errorOf(doc(R"({"name":"\ud800","op":"placeholder","target":"x"})")) != "<no error>");
  static const char kNul[] = "{\"format\":\"jointfx.graph\"\0";
  CHECK(errorOf(std::string(kNul, sizeof kNul - 1)) != "<no error>");
}

TEST_CASE("json: writer rejects a hand-built extra_json that is not an object", "[format]") {
  Graph g;
  Node* x = g.create(OpKind::Placeholder, Symbol::intern("x"), {}, {}, "x");
  x->meta().extra_json = "[1]";
  CHECK_THROWS_AS(writeJsonGraph(g), JfxError);
  x->meta().extra_json = "{not json";
  CHECK_THROWS_AS(writeJsonGraph(g), JfxError);
  // Whitespace and unsorted keys are fine: the writer canonicalizes.
  x->meta().extra_json = R"({ "b": 1, "a": [1, 2] })";
  x->meta().phase = Phase::Forward;
  CHECK(writeJsonGraph(g).find(R"("meta":{"a":[1,2],"b":1,"phase":"forward"})") !=
        std::string::npos);
}

namespace {

// Calls fn(path, text) on each traced fixture; returns how many there were.
template <typename Fn>
size_t forEachTracedFixture(Fn&& fn) {
  namespace fs = std::filesystem;
  fs::path dir = fs::path(JFX_SOURCE_DIR) / "tests" / "data" / "traced";
  size_t files = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() != ".json") continue;
    ++files;
    std::ifstream in(entry.path(), std::ios::binary);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    INFO(entry.path().string());
    fn(entry.path().string(), text);
  }
  return files;
}

}  // namespace

TEST_CASE("json: traced fixtures round-trip byte-identically through both formats", "[format]") {
  const size_t files = forEachTracedFixture([](const std::string& path, const std::string& text) {
    auto g = readJsonGraph(text, path);
    CHECK(writeJsonGraph(*g) == text);
    std::string printed = printTextGraph(*g);
    auto from_text = parseTextGraph(printed, "traced.jfx");
    CHECK(printTextGraph(*from_text) == printed);
    CHECK(writeJsonGraph(*from_text) == text);
  });
  CHECK(files > 0);
}

TEST_CASE("json: readJsonInto appends to a graph built already and applies the header to it",
          "[format]") {
  const size_t files = forEachTracedFixture([](const std::string&, const std::string& text) {
    // The first half of the nodes alone, then the rest with the header, then the header alone.
    nlohmann::json doc = nlohmann::json::parse(text);
    nlohmann::json nodes = doc["nodes"];
    const size_t half = nodes.size() / 2;
    nlohmann::json first = {{"format", doc["format"]}, {"version", doc["version"]}};
    first["nodes"] = nlohmann::json(nodes.begin(), nodes.begin() + static_cast<long>(half));
    nlohmann::json rest = doc;
    rest["nodes"] = nlohmann::json(nodes.begin() + static_cast<long>(half), nodes.end());
    nlohmann::json head = doc;
    head["nodes"] = nlohmann::json::array();

    auto g = readJsonGraph(first.dump(), "first.json");
    g = readJsonInto(rest.dump(), "rest.json", std::move(g));
    CHECK(writeJsonGraph(*g) == text);

    auto nodes_only = doc;
    nodes_only.erase("process_groups");
    nodes_only.erase("inputs");
    nodes_only.erase("outputs");
    nodes_only.erase("meta");
    nodes_only.erase("constants");
    auto h = readJsonInto(head.dump(), "head.json", readJsonGraph(nodes_only.dump(), "n.json"));
    CHECK(writeJsonGraph(*h) == text);
  });
  CHECK(files > 0);

  // The header's references resolve against the nodes given, and are checked as always.
  auto g = readJsonGraph(R"({"format":"jointfx.graph","version":1,"nodes":[)"
                         R"({"name":"x","op":"placeholder","target":"x"}]})",
                         "g.json");
  CHECK_THROWS_WITH(
      readJsonInto(R"({"format":"jointfx.graph","version":1,"nodes":[],)"
                   R"("inputs":[{"name":"y","kind":"parameter"}]})",
                   "head.json", std::move(g)),
      Catch::Contains("head.json at /inputs/0/name") && Catch::Contains("input 'y' names no node"));
}

namespace {

// What reading `text` gives: the graph printed, or the error message.
// `reversed`: the same document with every object's keys in reverse order, where nlohmann reads
// it as the same document (testing::reversedKeys); else `text` itself.
std::string outcome(const std::string& text, bool reversed) {
  try {
    const auto other = reversed ? testing::reversedKeys(text) : std::nullopt;
    auto g = readJsonGraph(other ? *other : text, "g.json");
    return "ok\n" + printTextGraph(*g) + writeJsonGraph(*g);
  } catch (const JfxError& e) {
    return std::string("error: ") + e.what();
  }
}

// Every traced JSON fixture: its path and its text.
std::vector<std::pair<std::string, std::string>> tracedFixtures() {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& entry : std::filesystem::directory_iterator(
           std::filesystem::path(JFX_SOURCE_DIR) / "tests/data/traced")) {
    if (entry.path().extension() != ".json") continue;
    std::ifstream in(entry.path(), std::ios::binary);
    out.emplace_back(entry.path().string(), std::string((std::istreambuf_iterator<char>(in)),
                                                        std::istreambuf_iterator<char>()));
  }
  return out;
}

}  // namespace

TEST_CASE("json: a node reads the same, and fails the same, with its keys in any order",
          "[format][tokenizer]") {
  // x and y are placeholders (read directly); z is the node under test.
  const std::string head = std::string(kX) + ",\n" +
                           R"({"meta":{"val":{"dtype":"bfloat16","shape":[2,3]}},)"
                           R"("name":"y","op":"placeholder","target":"y"},)"
                           "\n";
  const std::string full =
      R"({"args":[{"node":"x"},1,-2,0.5,-0.0,1e-3,true,false,null,"s",[{"node":"x"},{"node":"y"}],)"
      R"({"dtype":"bfloat16"},{"device":"cuda:1"},{"tuple":[1,{"node":"y"},[[]]]},[]],)"
      R"("kwargs":{"a":1,"b":{"dtype":"torch.float32"},"c":[{"node":"x"}]},)"
      R"("meta":{"ac_graph_id":3,"custom":{"module_fqn":"layers.0"},"phase":"backward",)"
      R"("recompute":2,"seq_nr":-7,"stack_trace":"File \"a.py\"\n  x",)"
      R"("val":[{"dtype":"float32","shape":[2],"stride":[1]},null,3,1.5,true,[],)"
      R"({"device":"cpu","dtype":"int64","shape":[2,0,3]}]},)"
      R"("name":"z","op":"call_function","target":"aten.add.Tensor"})";
  struct Case {
    std::string node;
    int nodes;  // nodes read: 3, or -1 for an error
  };
  const std::vector<Case> cases = {
      // Every kind of value, keys in any order, spaces.
      {full, 3},
      {R"({"target":"aten.neg.default","op":"call_function","name":"z","args":[{"node":"x"}]})", 3},
      {" { \"name\" : \"z\" , \"op\" :\"call_function\",\"target\":\"f\",\"args\": [ { \"node\" : "
       "\"x\" } , "
       "[ 1 , 2 ] ] , \"kwargs\" : { } , \"meta\" : { } } ",
       3},
      {R"({"meta":{"val":{"float":"inf"}},"name":"z","op":"call_function","target":"f"})", 3},
      // dtype aliases and names, devices, one after another (the reader keeps the last of each).
      {R"({"meta":{"val":[{"dtype":"torch.float32","shape":[1]},{"dtype":"half","shape":[1]},)"
       R"({"dtype":"half","shape":[1]},{"dtype":"float16","shape":[1]},)"
       R"({"device":"cuda:0","dtype":"float16","shape":[1]},{"device":"cpu","dtype":"bfloat16",)"
       R"("shape":[1]},{"device":"cuda:0","dtype":"float","shape":[1]}]},)"
       R"("name":"z","op":"call_function","target":"f"})",
       3},
      {R"({"meta":{"val":[{"dtype":"bfloat16","shape":[1]},{"dtype":"","shape":[1]}]},"name":"z","op":"call_function","target":"f"})",
       -1},
      {R"({"args":[],"kwargs":{},"meta":{},"name":"z","op":"output","target":"output"})", 3},
      {R"({"name":"z","op":"get_attr","target":"w"})", 3},
      // Valid, read by the tree: kwargs out of order, extra meta, boxed floats, layouts, opaque
      // values, escaped or non-ASCII names and operands, deep nesting.
      {R"({"kwargs":{"b":1,"a":2},"name":"z","op":"call_function","target":"f"})", 3},
      {R"({"meta":{"custom":{"module_fqn":"m","k":1}},"name":"z","op":"call_function","target":"f"})",
       3},
      {R"({"meta":{"custom":{"module_fqn":""}},"name":"z","op":"call_function","target":"f"})", 3},
      {R"({"meta":{"custom":{}},"name":"z","op":"call_function","target":"f"})", 3},
      {R"({"meta":{"q":1},"name":"z","op":"call_function","target":"f"})", 3},
      {R"({"args":[{"float":"-inf"},{"float":"nan"},{"layout":"torch.strided"}],"name":"z","op":"call_function","target":"f"})",
       3},
      {R"({"kwargs":{"memory_format":{"memory_format":"torch.channels_last"}},"name":"z","op":"call_function","target":"f"})",
       3},
      {R"({"args":[{"float":"NaN"}],"name":"z","op":"call_function","target":"f"})", -1},
      {R"({"args":[{"opaque":{"repr":"r","type":"t"}}],"name":"z","op":"call_function","target":"f"})",
       3},
      {R"({"args":[{"node":"\u0078"}],"name":"z","op":"call_function","target":"f"})", 3},
      {R"({"name":"\u007a","op":"call_function","target":"f\u00e9"})", 3},
      {R"({"args":[)" + std::string(20, '[') + std::string(20, ']') +
           R"(],"name":"z","op":"call_function","target":"f"})",
       3},
      {R"({"meta":{"val":)" + std::string(20, '[') + std::string(20, ']') +
           R"(},"name":"z","op":"call_function","target":"f"})",
       3},
      // Errors: each must be the tree path's own message.
      {R"({"name":"z","name":"z","op":"call_function","target":"f"})", -1},
      {R"({"name":"z","op":"call_function","target":"f","extra":1})", -1},
      {R"({"name":"","op":"call_function","target":"f"})", -1},
      {R"({"name":"z","op":"call_method","target":"f"})", -1},
      {R"({"name":"z","op":"output","target":"f"})", -1},
      {R"({"name":"z","op":"call_function","target":""})", -1},
      {R"({"args":[1],"name":"z","op":"placeholder","target":"z"})", -1},
      {R"({"kwargs":{"a":1},"name":"z","op":"get_attr","target":"z"})", -1},
      {R"({"args":[{"node":"nowhere"}],"name":"z","op":"call_function","target":"f"})", -1},
      {R"({"args":[{"node":"z"}],"name":"z","op":"call_function","target":"f"})", -1},
      {R"({"args":[{"node":"w"}],"name":"z","op":"call_function","target":"f"},)"
       R"({"name":"w","op":"placeholder","target":"w"})",
       -1},
      {R"({"name":"x","op":"call_function","target":"f"})", -1},
      {R"({"args":[{"node":"x","float":"inf"}],"name":"z","op":"call_function","target":"f"})", -1},
      {R"({"args":[{"dtype":"float99"}],"name":"z","op":"call_function","target":"f"})", -1},
      {R"({"args":[18446744073709551615],"name":"z","op":"call_function","target":"f"})", -1},
      {R"({"kwargs":{"a":1,"a":2},"name":"z","op":"call_function","target":"f"})", -1},
      {R"({"meta":{"phase":"sideways"},"name":"z","op":"call_function","target":"f"})", -1},
      {R"({"meta":{"phase":"forward","phase":"loss"},"name":"z","op":"call_function","target":"f"})",
       -1},
      {R"({"meta":{"recompute":6},"name":"z","op":"call_function","target":"f"})", -1},
      {R"({"meta":{"seq_nr":1.0},"name":"z","op":"call_function","target":"f"})", -1},
      {R"({"meta":{"ac_graph_id":"1"},"name":"z","op":"call_function","target":"f"})", -1},
      {R"({"meta":{"val":"t"},"name":"z","op":"call_function","target":"f"})", -1},
      {R"({"meta":{"val":{"shape":[2]}},"name":"z","op":"call_function","target":"f"})", -1},
      {R"({"meta":{"val":{"dtype":"float32"}},"name":"z","op":"call_function","target":"f"})", -1},
      {R"({"meta":{"val":{"dtype":"float32","shape":[-1]}},"name":"z","op":"call_function","target":"f"})",
       -1},
      {R"({"meta":{"val":{"dtype":"float32","shape":[2],"stride":[1,1]}},"name":"z","op":"call_function","target":"f"})",
       -1},
      {R"({"meta":{"val":{"dtype":"float32","shape":[2.0]}},"name":"z","op":"call_function","target":"f"})",
       -1},
      {R"({"meta":{"val":{"dtype":"float32","shape":[2],"size":1}},"name":"z","op":"call_function","target":"f"})",
       -1},
      {R"({"meta":[],"name":"z","op":"call_function","target":"f"})", -1},
      {R"({"args":{},"name":"z","op":"call_function","target":"f"})", -1},
      // Malformed JSON inside a node.
      {R"({"name":"z" "op":"call_function","target":"f"})", -1},
      {R"({"name":"z","op":"call_function","target":"f",})", -1},
      {R"({"args":[1,],"name":"z","op":"call_function","target":"f"})", -1},
      {R"({"args":[01],"name":"z","op":"call_function","target":"f"})", -1},
      {R"({"name":"z","op":"call_function","target":"f)", -1},
  };
  for (const Case& c : cases) {
    const std::string text = doc(head + c.node);
    INFO(c.node);
    const std::string fast = outcome(text, false);
    CHECK(fast == outcome(text, true));
    CHECK((fast.rfind("ok\n", 0) == 0) == (c.nodes >= 0));
    if (c.nodes >= 0) CHECK(readJsonGraph(text, "g.json")->size() == static_cast<size_t>(c.nodes));
  }
}

TEST_CASE("json: names claimed late by the direct reader still find duplicates at their node",
          "[format][tokenizer]") {
  // The direct reader claims a node's name in the index several nodes after making the node.
  // A chain of 40 negations, each reading the one before and the first: any node's name may be
  // repeated, near its first use or far from it, or followed by another error.
  auto chain = [](const std::function<std::string(size_t)>& name_of) {
    std::string nodes =
        R"({"args":[],"kwargs":{},"meta":{},"name":"p","op":"placeholder","target":"p"})";
    for (size_t i = 1; i < 40; ++i) {
      const std::string prev = i == 1 ? "p" : name_of(i - 1);
      nodes += ",\n{\"args\":[{\"node\":\"" + prev +
               "\"},{\"node\":\"p\"}],\"kwargs\":{},"
               "\"meta\":{},\"name\":\"" +
               name_of(i) + "\",\"op\":\"call_function\",\"target\":\"aten.add.Tensor\"}";
    }
    return doc(nodes);
  };
  auto plain = [](size_t i) { return "n" + std::to_string(i); };
  const std::string ok = chain(plain);
  const auto g = readJsonGraph(ok, "g.json");
  for (size_t i = 1; i < 40; ++i) {
    const Node* n = g->findNode(plain(i));
    REQUIRE(n != nullptr);
    CHECK(n->input(0)->name() == (i == 1 ? "p" : plain(i - 1)));
  }
  CHECK(g->size() == 40);
  for (const Node* n : g->nodes())
    CHECK(g->findNode(n->name()) == n);  // every name claimed, the last lag's too
  // Node `dup` takes the name of node `orig` (1 node back, within the lag, and 30 back).
  for (auto pair : {std::pair<size_t, size_t>{20, 21}, {22, 27}, {3, 33}, {38, 39}}) {
    const size_t orig = pair.first, dup = pair.second;  // named: a lambda captures these
    auto named = [&](size_t i) { return plain(i == dup ? orig : i); };
    const std::string e = errorOf(chain(named));
    INFO(orig << " " << dup << ": " << e);
    CHECK(e.find("at /nodes/" + std::to_string(dup) + "/name (node '" + plain(orig) +
                 "'): error: duplicate node name") != std::string::npos);
  }
  // A duplicate, then an error the direct path leaves to the tree path two nodes on: the
  // duplicate is reported, as it comes first.
  std::string text = chain([](size_t i) { return "n" + std::to_string(i == 11 ? 10 : i); });
  const size_t bad = text.find("\"name\":\"n13\"");
  REQUIRE(bad != std::string::npos);
  text.replace(bad, 12, "\"name\":\"\"");
  const std::string e = errorOf(text);
  INFO(e);
  CHECK(e.find("at /nodes/11/name (node 'n10'): error: duplicate node name") != std::string::npos);
}

TEST_CASE("json: repeated tensor metas read as the tree reads them, a '}' in a string too",
          "[format][tokenizer]") {
  // The direct reader keeps the meta of each tensor text it read, keyed by the text up to its
  // first '}'. A device holding '}' makes that a prefix: it must miss, and later tensors that
  // share the prefix must not take the first one's meta.
  auto node = [](const std::string& name, const std::string& val) {
    return R"({"name":")" + name + R"(","op":"placeholder","target":")" + name +
           R"(","meta":{"val":)" + val + "}}";
  };
  const std::string a = R"({"device":"cpu","dtype":"float32","shape":[2,3],"stride":[3,1]})";
  const std::string b = R"({"device":"c}x","dtype":"float32","shape":[2,3],"stride":[3,1]})";
  const std::string c = R"({"device":"c}x","dtype":"int64","shape":[4],"stride":[1]})";
  const std::string text =
      doc(node("a", a) + ",\n" + node("b", b) + ",\n" + node("c", c) + ",\n" + node("d", a) +
          ",\n" + node("e", c) + ",\n" + node("f", "[" + a + "," + b + "," + a + "]"));
  const std::string direct = outcome(text, false);
  REQUIRE(direct.rfind("ok\n", 0) == 0);
  CHECK(direct == outcome(text, true));
  auto g = readJsonGraph(text, "g.json");
  CHECK(g->findNode("b")->val().tensor.device.str() == "c}x");
  CHECK(g->findNode("c")->val().tensor.dtype == ScalarType::Int64);
  CHECK(g->findNode("e")->val().tensor.shape == std::vector<int64_t>{4});
  CHECK(g->findNode("d")->val().tensor.device.str() == "cpu");
  CHECK(g->findNode("f")->val().items[1].tensor.device.str() == "c}x");
}

TEST_CASE("json: the fast tokenizer reads every document as nlohmann does", "[format][tokenizer]") {
  // A value in a node's extra meta, which the reader keeps (canonically) whatever it holds.
  auto withExtra = [](const std::string& value) {
    return doc(std::string(R"({"name":"x","op":"placeholder","target":"x","meta":{"q":)") + value +
               R"(,"val":{"dtype":"float32","shape":[2],"stride":[1]}}})");
  };
  const std::vector<std::string> values = {
      // well formed: escapes, surrogate pairs, raw UTF-8 of every length, numbers at the edges
      R"("plain")", R"("tab\tquote\"back\\slash\/u\u00e9\u4e2d\ud83d\ude80")",
      "\"raw \xc3\xa9 \xe4\xb8\xad \xf0\x9f\x9a\x80 \x7f\"", R"("\u0000 nul")", "0", "-0", "-0.0",
      "1.5e300", "1e-400", "2.2250738585072014e-308", "9223372036854775807", "9223372036854775808",
      "18446744073709551615", "18446744073709551616", "-9223372036854775808",
      "-9223372036854775809", "123456789012345678901234567890", "1E+2", "1e-2", "[]", "{}",
      R"([1,[2,[3,{"a":{}}]],{"b":[]}])", " \t\r\n true \n", "false", "null",
      R"({"dup":1,"dup":2})",
      // malformed: each must fail with nlohmann's own message
      "01", "1.", ".5", "-", "+1", "1e", "1e+", "--1", "0x10", "1e400", "-1e400", "tru", "nul",
      "[1,]", "[1 2]", R"({"a" 1})", R"({"a":1,})", R"({1:2})", "[", "{", R"("unterminated)",
      R"("bad \x escape")", R"("\u12")", R"("\ud83d alone")", R"("\ude80 low")",
      R"("\ud83d\u0041")", "\"raw \x01 control\"", "\"overlong \xc0\x80\"",
      "\"surrogate \xed\xa0\x80\"", "\"past max \xf4\x90\x80\x80\"", "\"bad lead \xf5\x80\"",
      "\"cut \xe4\xb8\"", "\"lone cont \x80\""};
  // The fast tokenizer takes every well-formed value and none of the malformed ones; the reader
  // reports those with nlohmann's message.
  // Well-formed JSON that the reader rejects (a repeated key): the tokenizer takes it.
  const std::string json_not_graph = R"({"dup":1,"dup":2})";
  size_t fast = 0;
  for (const std::string& v : values) {
    const std::string text = withExtra(v);
    INFO(v);
    const std::string expected = outcome(text, true);
    CHECK(outcome(text, false) == expected);
    const bool well_formed = expected.rfind("ok\n", 0) == 0 || v == json_not_graph;
    CHECK(fastJsonTokenizerAccepts(text) == well_formed);
    CHECK(fastJsonTokenizerAccepts(text) == nlohmann::json::accept(text));
    if (!well_formed)
      CHECK_THAT(expected, Catch::Contains("JSON syntax error at byte") ||
                               Catch::Contains("JSON number out of range at byte"));
    fast += fastJsonTokenizerAccepts(text);
  }
  CHECK(fast == 26);  // the well-formed values
  // The string scanner reads eight bytes at a time: put each kind of byte that ends a plain run
  // (an escape, a control character, UTF-8 good and bad, the closing quote) at every offset of
  // the first two words, with plain bytes around it.
  for (const std::string& special :
       {std::string("\\n"), std::string("\\\""), std::string("\x01"), std::string("\x1f"),
        std::string("\xc3\xa9"), std::string("\xff"), std::string("\x7f"), std::string(" ")}) {
    for (size_t at = 0; at <= 17; ++at) {
      const std::string v = "\"" + std::string(at, 'a') + special + std::string(at % 9, 'b') + "\"";
      const std::string text = withExtra(v);
      INFO(v);
      const std::string expected = outcome(text, true);
      CHECK(outcome(text, false) == expected);
      CHECK(fastJsonTokenizerAccepts(text) == (expected.rfind("ok\n", 0) == 0));
    }
  }
  // Around the document: a BOM, trailing text, nothing at all, and nesting past the limit.
  const std::string good = doc(kX);
  for (const std::string& text :
       {"\xEF\xBB\xBF" + good, "\xEF\xBB" + good, good + " x", good + "\n\n", std::string(),
        std::string("   "), good.substr(0, good.size() / 2),
        withExtra(std::string(300, '[') + std::string(300, ']'))}) {
    INFO(text.substr(0, 80));
    CHECK(outcome(text, false) == outcome(text, true));
  }
  // And every traced fixture.
  const auto fixtures = tracedFixtures();
  CHECK(!fixtures.empty());
  for (const auto& [path, text] : fixtures) {
    INFO(path);
    const std::string fast = outcome(text, false);
    CHECK(fast.rfind("ok\n", 0) == 0);
    CHECK(fast == outcome(text, true));
  }
}
