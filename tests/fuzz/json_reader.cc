// JSON graph reader: any input is read or rejected with a JfxError; what is read prints in both
// formats, and the canonical JSON reads back to the same text. The reader's own tokenizer and
// nlohmann's agree on every input: the same graph or the same error message.
#include "fuzz_common.h"
#include "ir/json_format.h"
#include "ir/text_format.h"
#include "ir/verifier.h"

namespace {

std::string outcome(std::string_view text, bool nlohmann) {
  try {
    auto g = nlohmann ? jfx::readJsonGraphWithNlohmann(text, "fuzz.json")
                      : jfx::readJsonGraph(text, "fuzz.json");
    return "ok\n" + jfx::printTextGraph(*g);
  } catch (const jfx::JfxError& e) {
    return std::string("error: ") + e.what();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  jfx::fuzz::expectOnlyJfxError([&] {
    if (outcome(jfx::fuzz::asText(data, size), false) !=
        outcome(jfx::fuzz::asText(data, size), true))
      jfx::fuzz::bug("the fast JSON tokenizer and nlohmann's read this input differently");
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
