// What a list walk costs per node as a function of the node's size: the question behind splitting
// Node into hot and cold parts (bench/README.md, "Fewer walks"). Nodes of S bytes lie in one
// arena, linked in arena order except for a shuffled fraction; each step reads the link, the op
// byte, the id and the op-info table entry, and prefetches the arena slot 8 nodes on, as
// Node::next() does. Prints ns per node, best of 5, for S = 240 (a Node today) down to 64.
//
//   bench_walk [nodes]      (default 1,250,000: the 10^6 graph after the default pipeline)
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

namespace {

template <size_t S>
struct FakeNode {
  FakeNode* next;
  const uint8_t* info;
  uint64_t pos;
  uint32_t id;
  uint8_t op;
  char rest[S - 29];
};

const uint8_t kInfo[64] = {1, 2, 3};

template <size_t S>
double nsPerNode(size_t n, double shuffled) {
  std::vector<FakeNode<S>> arena(n);
  std::vector<uint32_t> order(n);
  for (size_t i = 0; i < n; ++i)
    order[i] = static_cast<uint32_t>(i);
  std::mt19937 rng(1);
  std::uniform_real_distribution<double> coin(0, 1);
  for (size_t i = 0; i + 1 < n; ++i)
    if (coin(rng) < shuffled) std::swap(order[i], order[rng() % n]);
  for (size_t i = 0; i < n; ++i) {
    FakeNode<S>& x = arena[order[i]];
    x.next = i + 1 < n ? &arena[order[i + 1]] : nullptr;
    x.info = &kInfo[i % 32];
    x.id = static_cast<uint32_t>(i);
    x.op = static_cast<uint8_t>(i & 3);
  }
  double best = 1e30;
  uint64_t sum = 0;
  for (int run = 0; run < 5; ++run) {
    const auto t = std::chrono::steady_clock::now();
    for (const FakeNode<S>* x = &arena[order[0]]; x; x = x->next) {
      __builtin_prefetch(reinterpret_cast<const char*>(x) + 8 * S);
      sum += x->op + *x->info + x->id;
    }
    best =
        std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count());
  }
  if (sum == 1) std::puts("");  // keeps the loads
  return best * 1e9 / static_cast<double>(n);
}

}  // namespace

int main(int argc, char** argv) {
  const size_t n = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 1250000;
  std::printf("nodes %zu; ns per node, best of 5\n", n);
  std::printf("%-14s %8s %8s %8s %8s %8s\n", "shuffled", "240 B", "192 B", "128 B", "96 B", "64 B");
  for (double shuffled : {0.0, 0.02, 0.13}) {
    std::printf("%-14.2f %8.1f %8.1f %8.1f %8.1f %8.1f\n", shuffled, nsPerNode<240>(n, shuffled),
                nsPerNode<192>(n, shuffled), nsPerNode<128>(n, shuffled),
                nsPerNode<96>(n, shuffled), nsPerNode<64>(n, shuffled));
  }
  return 0;
}
