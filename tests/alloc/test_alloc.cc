// Heap allocations of the IR's value metas, counted by replacing the global operator new. The
// replacement is this executable's alone: the library and the other tests run with the standard
// one.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <new>
#include <sstream>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "ir/json_format.h"
#include "ir/types.h"

namespace {
size_t g_allocations = 0;  // the tests are single-threaded
}  // namespace

void* operator new(std::size_t n) {
  ++g_allocations;
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
  std::free(p);
}

using namespace jfx;

namespace {

// Heap allocations `f` makes.
template <class F>
size_t allocationsOf(F&& f) {
  size_t before = g_allocations;
  f();
  return g_allocations - before;
}

TensorMeta contiguous(std::vector<int64_t> shape) {
  return TensorMeta::contiguous(ScalarType::Float32, std::move(shape));
}

// What copying `v` must allocate, tensor metas costing nothing: two blocks per non-empty tuple,
// its boxed vector and that vector's elements (ir/boxed_vector.h).
size_t tupleBlocks(const ValueMeta& v) {
  size_t n = v.kind == ValueMeta::Kind::List && !v.items.empty() ? 2 : 0;
  for (const ValueMeta& item : v.items)
    n += tupleBlocks(item);
  return n;
}

std::string readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

TEST_CASE("a tensor meta of any rank is copied without a heap allocation", "[dims][alloc]") {
  // Shapes and strides are interned (ir/dims.h): a copy copies two pointers.
  for (const TensorMeta& t : {contiguous({2, 3, 4, 5, 6}), contiguous({2, 3, 4, 5, 6, 7}),
                              contiguous({1, 2, 1, 2, 1, 2, 1, 2, 1, 2, 1, 2})}) {
    INFO("rank " << t.shape.size());
    const ValueMeta val = ValueMeta::ofTensor(t);
    CHECK(allocationsOf([&] { [[maybe_unused]] TensorMeta copy = t; }) == 0);
    CHECK(allocationsOf([&] { ValueMeta copy = val; }) == 0);
    // A list seen before is found in the table, not stored again.
    CHECK(allocationsOf([&] { (void)TensorMeta::contiguousStride(t.shape); }) == 0);
    CHECK(allocationsOf([&] { (void)t.isContiguous(); }) == 0);
  }
}

TEST_CASE("copying the tensor metas of traced graphs allocates only for tuples", "[dims][alloc]") {
  for (const char* name : {"gpt2_w2", "fsdp_w2", "moe_w2", "vit_w2"}) {
    const std::string path = std::string(JFX_SOURCE_DIR) + "/tests/data/traced/" + name + ".json";
    const std::string text = readFile(path);
    std::unique_ptr<Graph> g;
    size_t load = allocationsOf([&] { g = readJsonGraph(text, path); });
    const std::vector<Node*> nodes = g->nodes();
    size_t copies = 0, tuples = 0, tensors = 0;
    for (const Node* n : nodes) {
      copies += allocationsOf([&] { ValueMeta copy = n->val(); });
      tuples += tupleBlocks(n->val());
      tensors += n->val().isTensor();
    }
    INFO(name << ": " << nodes.size() << " nodes, " << tensors << " tensor-valued");
    CHECK(tensors > 0);
    CHECK(copies == tuples);
    WARN(name << ": loading makes " << load << " heap allocations, "
              << static_cast<double>(load) / static_cast<double>(nodes.size()) << " per node");
  }
}

TEST_CASE("loading a traced graph makes at most 3 heap allocations per node", "[alloc]") {
  // Nodes share 64-node chunks and the reader reuses its buffers; what is left per node is its
  // argument vector, a name too long for the string's inline buffer, and amortized table growth.
  // The op table and the symbols of op names are built once per process: the first load pays.
  std::vector<std::string> paths;
  for (const auto& e :
       std::filesystem::directory_iterator(std::string(JFX_SOURCE_DIR) + "/tests/data/traced"))
    if (e.path().extension() == ".json") paths.push_back(e.path().string());
  std::sort(paths.begin(), paths.end());
  REQUIRE(paths.size() >= 10);
  for (const std::string& path : paths) {
    const std::string text = readFile(path);
    (void)readJsonGraph(text, path);  // the process-wide tables, and this graph's symbols
    std::unique_ptr<Graph> g;
    size_t load = allocationsOf([&] { g = readJsonGraph(text, path); });
    INFO(path << ": " << g->size() << " nodes, " << load << " heap allocations");
    CHECK(load <= 3 * g->size());
  }
}
