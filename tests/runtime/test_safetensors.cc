// safetensors reader/writer: round trips and malformed files.
#include <catch2/catch.hpp>
#include <cstring>
#include <string>

#include "ir/error.h"
#include "runtime/safetensors.h"

namespace jfx {
namespace {

std::string header(const std::string& json, const std::string& data) {
  std::string out(8, '\0');
  uint64_t n = json.size();
  for (int i = 0; i < 8; ++i)
    out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + json + data;
}

std::string parseError(const std::string& bytes) {
  try {
    rt::SafetensorsFile::parse(bytes, "bad.safetensors");
  } catch (const JfxError& e) {
    return e.what();
  }
  return {};
}

}  // namespace

TEST_CASE("safetensors: write then read gives the same tensors, sorted, 8-byte aligned",
          "[runtime]") {
  rt::SafetensorsWriter w;
  float f[6] = {1, 2, 3, 4, 5, 6};
  std::string fb(reinterpret_cast<const char*>(f), sizeof f);
  w.add("b.weight", ScalarType::Float32, {2, 3}, fb);
  w.add("a.scalar", ScalarType::Int64, {}, std::string(8, '\x07'));
  w.add("empty", ScalarType::BFloat16, {0, 4}, "");
  w.setMetadata("step", "3");
  std::string bytes = w.serialize();
  uint64_t hlen = 0;
  std::memcpy(&hlen, bytes.data(), 8);
  CHECK(hlen % 8 == 0);

  auto f2 = rt::SafetensorsFile::parse(bytes, "mem");
  REQUIRE(f2.entries().size() == 3);
  CHECK(f2.entries()[0].name == "a.scalar");
  const auto* e = f2.find("b.weight");
  REQUIRE(e);
  CHECK(e->dtype == ScalarType::Float32);
  CHECK(e->shape == std::vector<int64_t>{2, 3});
  CHECK(f2.bytes(*e) == fb);
  CHECK(f2.find("a.scalar")->shape.empty());
  CHECK(f2.metadata().at("step") == "3");
  CHECK(f2.find("missing") == nullptr);
}

TEST_CASE("safetensors: writer rejects bad tensors", "[runtime]") {
  rt::SafetensorsWriter w;
  CHECK_THROWS_AS(w.add("x", ScalarType::Float32, {2}, "abc"), JfxError);
  w.add("x", ScalarType::Float32, {1}, std::string(4, '\0'));
  CHECK_THROWS_AS(w.add("x", ScalarType::Float32, {1}, std::string(4, '\0')), JfxError);
  CHECK_THROWS_AS(w.add("__metadata__", ScalarType::Float32, {1}, std::string(4, '\0')), JfxError);
}

TEST_CASE("safetensors: malformed files give located errors, never a crash", "[runtime]") {
  CHECK(parseError("abc").find("too short") != std::string::npos);
  CHECK(parseError(std::string("\xff\xff\xff\xff\x00\x00\x00\x00", 8) + "{}").find("exceeds") !=
        std::string::npos);
  CHECK(parseError(header("{not json", "")).find("not a JSON object") != std::string::npos);
  CHECK(parseError(header(R"({"x":{"dtype":"F99","shape":[1],"data_offsets":[0,4]}})",
                          std::string(4, '\0')))
            .find("unsupported dtype") != std::string::npos);
  CHECK(parseError(header(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})",
                          std::string(4, '\0')))
            .find("needs 8 bytes") != std::string::npos);
  CHECK(parseError(header(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,8]}})",
                          std::string(4, '\0')))
            .find("outside the data section") != std::string::npos);
  CHECK(parseError(header(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                          R"("y":{"dtype":"F32","shape":[1],"data_offsets":[2,6]}})",
                          std::string(8, '\0')))
            .find("overlap") != std::string::npos);
  CHECK(parseError(header(R"({"x":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})",
                          std::string(4, '\0')))
            .find("non-negative") != std::string::npos);
  CHECK(parseError(header(R"({"__metadata__":{"k":1}})", "")).find("__metadata__") !=
        std::string::npos);
  CHECK(parseError(header(R"({"x":{"dtype":"F32","shape":[1]}})", std::string(4, '\0')))
            .find("data_offsets") != std::string::npos);
  // The error names the file.
  CHECK(parseError("abc").find("bad.safetensors") != std::string::npos);
}

}  // namespace jfx
