// Dims (ir/types.h): the shape and stride of a tensor meta, inline up to Dims::kInline dimensions.
#include <catch2/catch.hpp>
#include <cstdint>
#include <vector>

#include "ir/types.h"

using namespace jfx;

namespace {

// Whether the elements of `d` lie inside the object itself (no heap block).
bool storedInline(const Dims& d) {
  auto* p = reinterpret_cast<const unsigned char*>(d.data());
  auto* self = reinterpret_cast<const unsigned char*>(&d);
  return p >= self && p + d.size() * sizeof(int64_t) <= self + sizeof(Dims);
}

}  // namespace

TEST_CASE("Dims holds up to kInline dimensions inline and grows past them", "[dims]") {
  STATIC_REQUIRE(Dims::kInline == 5);
  Dims d;
  CHECK(d.empty());
  for (int64_t i = 0; i < static_cast<int64_t>(Dims::kInline); ++i) {
    d.push_back(10 + i);
    CHECK(storedInline(d));
  }
  CHECK(d == std::vector<int64_t>{10, 11, 12, 13, 14});
  d.push_back(15);  // rank 6: spills to the heap, keeping the elements
  CHECK_FALSE(storedInline(d));
  CHECK(d.size() == 6);
  CHECK(d == std::vector<int64_t>{10, 11, 12, 13, 14, 15});
  d.push_back(16);
  CHECK(d.size() == 7);

  Dims copy = d;  // a spilled copy owns its own block
  copy[0] = -1;
  CHECK(d[0] == 10);
  CHECK(copy != d);
  d.erase(d.begin());
  d.erase(d.begin());
  CHECK(d == std::vector<int64_t>{12, 13, 14, 15, 16});

  Dims small = {2, 3, 4};
  Dims moved = std::move(small);
  CHECK(storedInline(moved));
  CHECK(moved == Dims{2, 3, 4});
}

TEST_CASE("Dims compares by elements and converts to and from std::vector", "[dims]") {
  const Dims a = {4, 8};
  CHECK(a == Dims{4, 8});
  CHECK(a != Dims{4});
  CHECK(a != Dims{4, 9});
  CHECK(Dims{} == Dims{});
  CHECK(a == std::vector<int64_t>{4, 8});
  CHECK(std::vector<int64_t>{4, 8} == a);  // the reversed form
  CHECK(a != std::vector<int64_t>{8, 4});

  std::vector<int64_t> v = a;
  CHECK(v == std::vector<int64_t>{4, 8});
  Dims from = std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8};
  CHECK(from.size() == 8);
  CHECK(from[7] == 8);
  std::vector<int64_t> back = from;
  CHECK(back == std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8});

  Dims sized(3);
  CHECK(sized == Dims{0, 0, 0});
  sized.insert(sized.begin() + 1, 7);
  CHECK(sized == Dims{0, 7, 0, 0});
}

TEST_CASE("TensorMeta keeps shape and stride in Dims, contiguous at any rank", "[dims]") {
  TensorMeta t;
  t.dtype = ScalarType::Float32;
  t.shape = {2, 3, 4};
  t.stride = TensorMeta::contiguousStride(t.shape);
  CHECK(t.stride == Dims{12, 4, 1});
  CHECK(storedInline(t.shape));
  CHECK(storedInline(t.stride));
  CHECK(t.isContiguous());
  CHECK(t.numel() == 24);

  TensorMeta deep;  // rank 8, past the inline capacity
  deep.dtype = ScalarType::Float32;
  deep.shape = std::vector<int64_t>{2, 1, 2, 1, 2, 1, 2, 3};
  deep.stride = TensorMeta::contiguousStride(deep.shape);
  CHECK(deep.stride == Dims{24, 24, 12, 12, 6, 6, 3, 1});
  CHECK(deep.isContiguous());
  CHECK(deep.numel() == 48);
  TensorMeta copy = deep;
  CHECK(copy == deep);
  copy.stride[7] = 2;
  CHECK_FALSE(copy == deep);
  CHECK_FALSE(copy.isContiguous());

  CHECK(TensorMeta::contiguousStride(Dims{}).empty());  // a 0-d tensor
}
