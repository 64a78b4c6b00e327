// safetensors reader (runtime/safetensors.cc, torch-free): any file is read or rejected with a
// JfxError; what is read has in-bounds entries and writes back to a file that reads the same.
#include "runtime/safetensors.h"
#include "fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  jfx::fuzz::expectOnlyJfxError([&] {
    auto f = jfx::rt::SafetensorsFile::parse(std::string(jfx::fuzz::asText(data, size)),
                                             "fuzz.safetensors");
    jfx::rt::SafetensorsWriter w;
    for (const auto& [k, v] : f.metadata())
      w.setMetadata(k, v);
    for (const auto& e : f.entries()) {
      if (f.find(e.name) != &e) jfx::fuzz::bug("find() misses entry '" + e.name + "'");
      std::string_view b = f.bytes(e);
      if (b.size() != e.end - e.begin) jfx::fuzz::bug("entry '" + e.name + "' bytes short");
      (void)e.numel();
      w.add(e.name, e.dtype, e.shape, std::string(b));
    }
    auto again = jfx::rt::SafetensorsFile::parse(w.serialize(), "fuzz-rewritten.safetensors");
    if (again.entries().size() != f.entries().size() || again.metadata() != f.metadata())
      jfx::fuzz::bug("rewritten file differs in entries or metadata");
    for (size_t i = 0; i < f.entries().size(); ++i) {
      const auto& a = f.entries()[i];
      const auto& b = again.entries()[i];
      if (a.name != b.name || a.dtype != b.dtype || a.shape != b.shape ||
          f.bytes(a) != again.bytes(b))
        jfx::fuzz::bug("rewritten entry '" + a.name + "' differs");
    }
  });
  return 0;
}
