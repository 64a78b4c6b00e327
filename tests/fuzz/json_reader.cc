// JSON graph reader: any input is read or rejected with a JfxError; what is read prints in both
// formats, and the canonical JSON reads back to the same text. The result does not depend on the
// order of keys: the input with every object's members reversed reads the same.
#include "fuzz_common.h"
#include "ir/json_format.h"
#include "ir/text_format.h"
#include "ir/verifier.h"
#include "tests/reordered_json.h"

namespace {

std::string outcome(std::string_view text) {
  try {
    auto g = jfx::readJsonGraph(text, "fuzz.json");
    return "ok\n" + jfx::printTextGraph(*g);
  } catch (const jfx::JfxError& e) {
    return std::string("error: ") + e.what();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  jfx::fuzz::expectOnlyJfxError([&] {
    const std::string_view text = jfx::fuzz::asText(data, size);
    if (auto reversed = jfx::testing::reversedKeys(text))
      if (outcome(text) != outcome(*reversed))
        jfx::fuzz::bug("the JSON reader's result depends on the order of keys");
  });
  jfx::fuzz::expectOnlyJfxError([&] {
    auto g = jfx::readJsonGraph(jfx::fuzz::asText(data, size), "fuzz.json");
    (void)jfx::verifyGraph(*g);
    std::string text = jfx::printTextGraph(*g);
    std::string json = jfx::writeJsonGraph(*g);
    auto again = jfx::readJsonGraph(json, "fuzz-canonical.json");
    if (jfx::writeJsonGraph(*again) != json) jfx::fuzz::bug("canonical JSON does not round-trip");
    if (jfx::printTextGraph(*again) != text)
      jfx::fuzz::bug("JSON round trip changed the text form");
  });
  return 0;
}
