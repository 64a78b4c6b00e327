// MaxTree (passes/bucket/max_tree.h): schedule's range add / range max over the memory curve,
// checked against a plain vector under random operations that cross block boundaries.
#include <catch2/catch.hpp>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <random>
#include <vector>

#include "passes/bucket/max_tree.h"

using namespace jfx;

namespace {

int64_t plainMax(const std::vector<int64_t>& v, size_t l, size_t r) {
  r = std::min(r, v.size());
  if (l >= r) return INT64_MIN;
  return *std::max_element(v.begin() + static_cast<std::ptrdiff_t>(l),
                           v.begin() + static_cast<std::ptrdiff_t>(r));
}

}  // namespace

TEST_CASE("MaxTree agrees with a plain vector under random adds and maxes", "[max_tree]") {
  // Sizes below, at and across block sizes, including a partial last block.
  for (size_t n : {size_t{1}, size_t{2}, size_t{63}, size_t{64}, size_t{65}, size_t{200},
                   size_t{1000}, size_t{4099}}) {
    std::mt19937_64 rng(n);
    std::vector<int64_t> plain(n);
    for (auto& x : plain)
      x = static_cast<int64_t>(rng() % 1'000'000);
    MaxTree tree(n, [&](size_t i) { return plain[i]; });
    CHECK(tree.max() == plainMax(plain, 0, n));
    for (int op = 0; op < 2000; ++op) {
      size_t l = rng() % (n + 1), r = rng() % (n + 2);  // r past the end is clamped
      if (l > r) std::swap(l, r);
      if (rng() % 2) {
        const int64_t v = static_cast<int64_t>(rng() % 20'001) - 10'000;
        tree.add(l, r, v);
        for (size_t i = l; i < std::min(r, n); ++i)
          plain[i] += v;
      } else {
        INFO("n=" << n << " op=" << op << " [" << l << ", " << r << ")");
        REQUIRE(tree.max(l, r) == plainMax(plain, l, r));
      }
      REQUIRE(tree.max() == plainMax(plain, 0, n));
    }
  }
}

TEST_CASE("MaxTree over no steps is one zero", "[max_tree]") {
  MaxTree tree(0, [](size_t) { return int64_t{7}; });
  CHECK(tree.max() == 0);
  CHECK(tree.max(0, 0) == INT64_MIN);
  tree.add(0, 5, 3);
  CHECK(tree.max() == 3);
}
