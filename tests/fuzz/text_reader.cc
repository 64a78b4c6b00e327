// Text graph reader (.jfx): any input is read or rejected with a JfxError; what is read prints
// back to text that reads to the same graph.
#include "fuzz_common.h"
#include "ir/json_format.h"
#include "ir/text_format.h"
#include "ir/verifier.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  jfx::fuzz::expectOnlyJfxError([&] {
    auto g = jfx::parseTextGraph(jfx::fuzz::asText(data, size), "fuzz.jfx");
    (void)jfx::verifyGraph(*g);
    std::string text = jfx::printTextGraph(*g);
    auto again = jfx::parseTextGraph(text, "fuzz-printed.jfx");
    if (jfx::printTextGraph(*again) != text) jfx::fuzz::bug("printed text does not round-trip");
    (void)jfx::writeJsonGraph(*again);
  });
  return 0;
}
