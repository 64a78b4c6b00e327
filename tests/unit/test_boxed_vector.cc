// BoxedVector (ir/boxed_vector.h): the one-pointer vector that Arg, ValueMeta and Node keep
// their nested lists in.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "ir/arg.h"
#include "ir/boxed_vector.h"
#include "ir/graph.h"

using namespace jfx;

TEST_CASE("BoxedVector is one pointer, null while empty, and copies deeply", "[boxed_vector]") {
  STATIC_REQUIRE(sizeof(BoxedVector<std::string>) == sizeof(void*));
  BoxedVector<std::string> v;
  CHECK(v.empty());
  CHECK(v.size() == 0);
  CHECK(v.begin() == v.end());
  CHECK(v.get().empty());
  for (const std::string& s : v)  // iterating an empty box makes nothing
    FAIL("unexpected element " << s);
  CHECK(v.empty());

  v.push_back("a");
  v.emplace_back("b");
  CHECK(v.size() == 2);
  CHECK(v == std::vector<std::string>{"a", "b"});
  CHECK(v.front() == "a");
  CHECK(v.back() == "b");

  BoxedVector<std::string> copy = v;  // a copy owns its own elements
  copy[0] = "z";
  CHECK(v[0] == "a");
  CHECK_FALSE(copy == v);

  BoxedVector<std::string> moved = std::move(copy);
  CHECK(moved == std::vector<std::string>{"z", "b"});

  std::vector<std::string> taken = moved.take();
  CHECK(taken == std::vector<std::string>{"z", "b"});
  CHECK(moved.empty());

  v = std::vector<std::string>{};  // assigning an empty vector frees the box
  CHECK(v.empty());
  CHECK(v == BoxedVector<std::string>());
  for (std::string& s : v)
    FAIL("unexpected element " << s);

  v.mut().push_back("c");
  const std::vector<std::string>& view = v;
  CHECK(view == std::vector<std::string>{"c"});
  v.clear();
  CHECK(v.empty());
}

TEST_CASE("Arg and ValueMeta keep their lists boxed, with value semantics", "[boxed_vector]") {
  // An Arg is a kind and a word besides its box: three words, not five.
  STATIC_REQUIRE(sizeof(Arg) == 3 * sizeof(void*));
  Arg list = Arg::ofList({Arg::ofInt(1), Arg::ofList({Arg::ofInt(2), Arg::ofInt(3)})});
  Arg copy = list;
  copy.items()[1].items()[0] = Arg::ofInt(9);
  CHECK(list.items()[1].items()[0].toInt() == 2);
  CHECK_FALSE(copy == list);
  CHECK(Arg::ofList({}) == Arg::ofList({}));
  CHECK_FALSE(Arg::ofList({}) == Arg::ofTuple({}));
  std::vector<int64_t> ints;
  CHECK(Arg::ofInts({4, 5}).toInts(ints));
  CHECK(ints == std::vector<int64_t>{4, 5});

  ValueMeta pair =
      ValueMeta::ofList({ValueMeta::ofTensor(TensorMeta::contiguous(ScalarType::Float32, {2, 3})),
                         ValueMeta::ofTensor(TensorMeta::contiguous(ScalarType::BFloat16, {4}))});
  ValueMeta pair_copy = pair;
  CHECK(pair_copy == pair);
  pair_copy.items[1].tensor.shape = {5};
  CHECK(pair.items[1].tensor.shape == Dims{4});
  CHECK_FALSE(pair_copy == pair);
  CHECK(ValueMeta::ofTensor(TensorMeta::contiguous(ScalarType::Float32, {2})).items.empty());
}
