// Dims (ir/dims.h): the shape and stride of a tensor meta, interned once per distinct list.
#include <catch2/catch.hpp>
#include <cstdint>
#include <thread>
#include <vector>

#include "ir/types.h"

using namespace jfx;

TEST_CASE("Dims interns each list once: equal lists share their storage", "[dims]") {
  STATIC_REQUIRE(sizeof(Dims) == sizeof(void*));
  const Dims a = {4, 8, 977};
  const Dims b = std::vector<int64_t>{4, 8, 977};
  const int64_t raw[] = {4, 8, 977};
  const Dims c{std::span<const int64_t>(raw)};
  CHECK(a == b);
  CHECK(a.data() == b.data());  // one stored copy
  CHECK(a.data() == c.data());
  CHECK(a.hash() == b.hash());

  const size_t before = Dims::internedCount();
  const Dims again = {4, 8, 977};
  CHECK(Dims::internedCount() == before);  // a repeat stores nothing
  const Dims fresh = {4, 8, 977, 12345678901};
  CHECK(Dims::internedCount() == before + 1);
  CHECK(fresh != a);
  CHECK(again == a);

  // Lists that differ only in one element or in length are distinct.
  CHECK(Dims{4, 8, 976} != a);
  CHECK(Dims{4, 8} != a);
  CHECK(Dims{8, 4, 977} != a);
}

TEST_CASE("Dims of rank 0 is empty and equal to the default", "[dims]") {
  const Dims empty;
  CHECK(empty.empty());
  CHECK(empty.size() == 0);
  CHECK(empty.begin() == empty.end());
  CHECK(Dims{} == empty);
  CHECK(Dims(std::vector<int64_t>{}) == empty);
  CHECK(empty == std::vector<int64_t>{});
  CHECK(std::vector<int64_t>(empty).empty());
  CHECK(Dims{0} != empty);  // a 1-d list holding 0 is not rank 0
}

TEST_CASE("Dims reads like a vector, converts to and from one, and edits by copy", "[dims]") {
  const Dims a = {4, 8};
  CHECK(a.size() == 2);
  CHECK(a[0] == 4);
  CHECK(a.front() == 4);
  CHECK(a.back() == 8);
  CHECK(a == std::vector<int64_t>{4, 8});
  CHECK(std::vector<int64_t>{4, 8} == a);  // the reversed form
  CHECK(a != std::vector<int64_t>{8, 4});

  std::vector<int64_t> v = a;
  v.push_back(2);
  CHECK(a.size() == 2);  // the copy is the caller's own
  const Dims grown = v;
  CHECK(grown == Dims{4, 8, 2});

  const Dims edited = a.with(1, 9);
  CHECK(edited == Dims{4, 9});
  CHECK(a == Dims{4, 8});  // with() leaves the list it was called on alone
  CHECK_THROWS(a.with(2, 1));

  CHECK(Dims(3) == Dims{0, 0, 0});
  CHECK(Dims(2, 7) == Dims{7, 7});
  const std::vector<int64_t> src = {5, 6, 7};
  CHECK(Dims(src.begin() + 1, src.end()) == Dims{6, 7});
  DimsScratch scratch = {1, 2};
  scratch.push_back(3);
  CHECK(Dims(scratch) == Dims{1, 2, 3});
}

TEST_CASE("Dims holds any rank", "[dims]") {
  std::vector<int64_t> big;
  for (int64_t i = 0; i < 40; ++i)
    big.push_back(i * 3 + 1);
  const Dims d = big;
  CHECK(d.size() == 40);
  CHECK(d == big);
  CHECK(d[39] == 118);
  CHECK(Dims(big) == d);
}

TEST_CASE("Dims from several threads at once agree on one stored list", "[dims]") {
  // Each thread interns the same lists (new to the table) in a different order; every thread
  // must get the same storage for the same list.
  constexpr int kThreads = 4, kLists = 2048;  // odd multipliers permute 0..2047
  std::vector<std::vector<const int64_t*>> seen(kThreads, std::vector<const int64_t*>(kLists));
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int k = 0; k < kLists; ++k) {
        const int i = (k * (2 * t + 1)) % kLists;  // a different order per thread
        seen[t][i] = Dims{7777777, i, 0, 31}.data();
      }
    });
  for (auto& th : threads)
    th.join();
  for (int t = 1; t < kThreads; ++t)
    CHECK(seen[t] == seen[0]);
  for (int i = 0; i < kLists; ++i)
    REQUIRE(Dims{7777777, i, 0, 31}.data() == seen[0][i]);
}

TEST_CASE("TensorMeta keeps shape and stride in Dims, contiguous at any rank", "[dims]") {
  TensorMeta t;
  t.dtype = ScalarType::Float32;
  t.shape = {2, 3, 4};
  t.stride = TensorMeta::contiguousStride(t.shape);
  CHECK(t.stride == Dims{12, 4, 1});
  CHECK(t.isContiguous());
  CHECK(t.numel() == 24);

  TensorMeta deep;  // rank 8
  deep.dtype = ScalarType::Float32;
  deep.shape = std::vector<int64_t>{2, 1, 2, 1, 2, 1, 2, 3};
  deep.stride = TensorMeta::contiguousStride(deep.shape);
  CHECK(deep.stride == Dims{24, 24, 12, 12, 6, 6, 3, 1});
  CHECK(deep.isContiguous());
  CHECK(deep.numel() == 48);
  TensorMeta copy = deep;
  CHECK(copy == deep);
  copy.stride = copy.stride.with(7, 2);
  CHECK_FALSE(copy == deep);
  CHECK_FALSE(copy.isContiguous());

  // Past the 16 dimensions contiguousStride computes on the stack.
  const Dims ones(20, 1);
  const Dims wide = ones.with(19, 5).with(0, 3);
  const Dims stride = TensorMeta::contiguousStride(wide);
  CHECK(stride.size() == 20);
  CHECK(stride[19] == 1);
  CHECK(stride[18] == 5);
  CHECK(stride[0] == 5);

  CHECK(TensorMeta::contiguousStride(Dims{}).empty());  // a 0-d tensor
}
