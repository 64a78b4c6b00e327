// JSON graph reader: any input is read or rejected with a JfxError; what is read prints in both
// formats, and the canonical JSON reads back to the same text.
#include "fuzz_common.h"
#include "ir/json_format.h"
#include "ir/text_format.h"
#include "ir/verifier.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
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
