// Sizes that cannot overflow: checked arithmetic, TensorMeta's size rules in both readers and the
// verifier, saturated figures in the analyses, range-checked pass options.
#include <catch2/catch.hpp>
#include <string>

#include "ir/checked.h"
#include "ir/error.h"
#include "ir/json_format.h"
#include "ir/text_format.h"
#include "ir/types.h"
#include "ir/verifier.h"
#include "passes/analysis/memory.h"
#include "passes/analysis/phase.h"
#include "passes/pass.h"
#include "passes/pass_manager.h"
#include "test_util.h"

using namespace jfx;

namespace {

using test::errorOf;

TensorMeta meta(ScalarType t, std::vector<int64_t> shape) {
  TensorMeta m;
  m.dtype = t;
  m.stride = TensorMeta::contiguousStride(shape);
  m.shape = std::move(shape);
  return m;
}

}  // namespace

TEST_CASE("sizes: checked and saturating arithmetic", "[sizes]") {
  CHECK(checkedMul(kInt64Max, 2) == std::nullopt);
  CHECK(checkedMul(int64_t{1} << 31, int64_t{1} << 31) == int64_t{1} << 62);
  CHECK(checkedMul(-1, kInt64Min) == std::nullopt);
  CHECK(checkedAdd(kInt64Max, 1) == std::nullopt);
  CHECK(saturatingMul(kInt64Max, 2) == kInt64Max);
  CHECK(saturatingMul(kInt64Max, -2) == kInt64Min);
  CHECK(saturatingAdd(kInt64Max, 5) == kInt64Max);
  CHECK(saturatingAdd(kInt64Min, -5) == kInt64Min);
  CHECK(saturatingSub(kInt64Min, 1) == kInt64Min);
  CHECK(saturatingFromDouble(1e300) == kInt64Max);
  CHECK(saturatingFromDouble(-1e300) == kInt64Min);
  CHECK(saturatingFromDouble(0.0 / 0.0) == 0);
  CHECK(clampToInt64(WideInt(kInt64Max) * 4) == kInt64Max);
}

TEST_CASE("sizes: TensorMeta saturates and names what cannot be a tensor", "[sizes]") {
  // The issue's reproducer: numel and the contiguous strides overflow.
  TensorMeta big = meta(ScalarType::Float32, {kInt64Max, 2});
  CHECK(big.numel() == kInt64Max);
  CHECK(big.bytes() == kInt64Max);
  CHECK(big.stride == std::vector<int64_t>{2, 1});
  CHECK(big.sizeProblem() ==
        "shape [9223372036854775807, 2]: the number of elements overflows int64");

  // A negative dimension counts as none and is reported.
  TensorMeta neg = meta(ScalarType::Float32, {-4, 8});
  CHECK(neg.numel() == 0);
  CHECK(neg.bytes() == 0);
  CHECK(neg.sizeProblem() == "dimension 0 of shape [-4, 8] is negative");

  // Elements fit, bytes do not.
  TensorMeta bytes = meta(ScalarType::Float64, {int64_t{1} << 60});
  CHECK(bytes.sizeProblem().find("the size in bytes overflows int64") != std::string::npos);
  CHECK(bytes.bytes() == kInt64Max);

  // No elements, yet the row-major strides overflow (PyTorch rejects it too).
  TensorMeta strides = meta(ScalarType::Float32, {0, int64_t{1} << 62, 4});
  CHECK(strides.numel() == 0);
  CHECK(strides.sizeProblem().find("contiguous strides overflow") != std::string::npos);

  // Explicit strides: negative, and an extent past int64.
  TensorMeta neg_stride = meta(ScalarType::Float32, {4, 8});
  neg_stride.stride = {-8, 1};
  CHECK(neg_stride.sizeProblem().find("stride 0 of [-8, 1] is negative") != std::string::npos);
  TensorMeta extent = meta(ScalarType::Float32, {2, 2});
  extent.stride = {int64_t{1} << 62, 1};
  CHECK(extent.sizeProblem().find("the storage it spans overflows") != std::string::npos);

  // Fine ones: a scalar, an empty tensor, a transposed view, the largest that fits.
  CHECK(meta(ScalarType::Float32, {}).sizeProblem().empty());
  CHECK(meta(ScalarType::Float32, {0, 5}).sizeProblem().empty());
  TensorMeta t = meta(ScalarType::Float32, {4, 8});
  t.stride = {1, 4};
  CHECK(t.sizeProblem().empty());
  CHECK(meta(ScalarType::UInt8, {kInt64Max}).sizeProblem().empty());

  // Tuples: the item is named; bytes add up saturating.
  ValueMeta list = ValueMeta::ofList(
      {ValueMeta::ofTensor(meta(ScalarType::Float32, {2})), ValueMeta::ofTensor(neg)});
  CHECK(list.sizeProblem() == "item 1: dimension 0 of shape [-4, 8] is negative");
  ValueMeta two_big = ValueMeta::ofList({ValueMeta::ofTensor(meta(ScalarType::UInt8, {kInt64Max})),
                                         ValueMeta::ofTensor(meta(ScalarType::UInt8, {8}))});
  CHECK(two_big.sizeProblem().empty());
  CHECK(two_big.bytes() == kInt64Max);
}

TEST_CASE("sizes: both readers reject overflowing and negative shapes, located", "[sizes]") {
  const std::string head = "jointfx.graph 1\n";
  CHECK(errorOf([&] {
          parseTextGraph(head + "%x : f32[9223372036854775807, 2] = placeholder\n", "g.jfx");
        })
            .find("g.jfx:2:9 (node 'x'): error: shape [9223372036854775807, 2]: the number of "
                  "elements overflows int64") != std::string::npos);
  CHECK(errorOf([&] {
          parseTextGraph(head + "%x : f32[-4, 8] = placeholder\n", "g.jfx");
        }).find("g.jfx:2:9 (node 'x'): error: dimension 0 of shape [-4, 8] is negative") !=
        std::string::npos);
  auto json = [](const std::string& val) {
    return R"({"format": "jointfx.graph", "version": 1, "nodes": [{"name": "x", "op": "placeholder",
      "target": "x", "args": [], "kwargs": {}, "meta": {"val": )" +
           val + R"(}}, {"name": "output", "op": "output", "target": "output", "args": [[]],
      "kwargs": {}, "meta": {}}]})";
  };
  // JSON without "stride": the contiguous strides are computed, and checked.
  CHECK(errorOf([&] {
          readJsonGraph(json(R"({"dtype": "float32", "shape": [9223372036854775807, 2]})"),
                        "g.json");
        }).find("at /nodes/0/meta/val/shape (node 'x'): error: shape [9223372036854775807, 2]") !=
        std::string::npos);
  CHECK(errorOf([&] {
          readJsonGraph(json(R"({"dtype": "float32", "shape": [-4, 8]})"), "g.json");
        }).find("dimension 0 of shape [-4, 8] is negative") != std::string::npos);
  CHECK(errorOf([&] {
          readJsonGraph(json(R"([{"dtype": "float32", "shape": [2]},
                                 {"dtype": "float32", "shape": [4], "stride": [-1]}])"),
                        "g.json");
        }).find("/nodes/0/meta/val/1/shape") != std::string::npos);
  // Fine sizes still load.
  CHECK(readJsonGraph(json(R"({"dtype": "float32", "shape": [0, 3]})"), "g.json")->size() == 2);
}

TEST_CASE("sizes: the verifier reports sizes of graphs built in memory", "[sizes]") {
  auto g = parseTextGraph("jointfx.graph 1\n%x : f32[4] = placeholder\n%output = output([%x])\n",
                          "g.jfx");
  Node* x = g->findNode("x");
  ValueMeta v = ValueMeta::ofTensor(meta(ScalarType::Float32, {-4, 8}));
  x->val() = v;
  auto issues = verifyGraph(*g);
  REQUIRE(issues.size() == 1);
  CHECK(issues[0].str() ==
        "g.jfx:2: node 'x': [tensor-size] dimension 0 of shape [-4, 8] is negative");
  // The analyses stay defined on it: the negative tensor counts as empty, not -128 B.
  PhaseInfo phases = computePhases(*g);
  MemoryProfile mem = analyzeMemory(*g, phases, {});
  CHECK(mem.peak_bytes == 0);
  // Two tensors of INT64_MAX bytes each: the peak saturates instead of wrapping to a small or
  // negative figure.
  auto big = parseTextGraph(
      "jointfx.graph 1\n%a : u8[9223372036854775807] = placeholder\n"
      "%b : u8[9223372036854775807] = placeholder\n%output = output([%a, %b])\n",
      "big.jfx");
  CHECK(verifyGraph(*big).empty());
  MemoryProfile big_mem = analyzeMemory(*big, computePhases(*big), {});
  CHECK(big_mem.peak_bytes == kInt64Max);
  CHECK(big_mem.input_bytes == kInt64Max);
}

TEST_CASE("sizes: numeric pass options are range-checked, naming option and range", "[sizes]") {
  auto err = [](const std::string& spec) {
    return errorOf([&] { buildPipeline(parsePipeline(spec)); });
  };
  CHECK(err("bucket{cap-mb=9223372036854775807}") ==
        "error: pass 'bucket': option 'cap-mb=9223372036854775807': expected an integer in [0, "
        "1073741824]");
  CHECK(err("bucket{cap-mb=99999999999999999999}").find("expected an integer in [0, 1073741824]") !=
        std::string::npos);
  CHECK(err("bucket{cap-mb=-1}").find("'cap-mb=-1': expected an integer in [0, 1073741824]") !=
        std::string::npos);
  CHECK(err("schedule{prefetch=-1}").find("'prefetch=-1': expected an integer in [0, 1000000]") !=
        std::string::npos);
  CHECK(err("schedule{memory-limit=99999999999999999999G}").find("too large") != std::string::npos);
  CHECK(err("tag-fsdp{keep-last=1000001}").find("expected an integer in [0, 1000000]") !=
        std::string::npos);
  CHECK(err("bucket{cap-mb=1073741824}") == "<no error>");

  struct Numbers : Pass {
    Numbers() : Pass("p") {}
    bool run(Graph&, PassContext&) override { return false; }
    Option<double> f{this, "f", 0, "a number"};
    Option<double> g{this, "g", 0, "a fraction", {0, 1}};
    Option<int64_t> i{this, "i", 0, "a count", {0, 10}};
    Option<int64_t> absent{this, "absent", 3, "a count", {0, 10}};
  };
  auto set = [](std::map<std::string, std::string> values) {
    return errorOf([&] { Numbers().configure(PassOptions("p", std::move(values))); });
  };
  CHECK(set({{"f", "1e999"}}).find("expected a finite number") != std::string::npos);
  CHECK(set({{"g", "2.5"}}).find("expected a number in [0, 1]") != std::string::npos);
  Numbers n;
  n.configure(PassOptions("p", {{"i", "7"}}));
  CHECK(*n.i == 7);
  CHECK(*n.absent == 3);
}
