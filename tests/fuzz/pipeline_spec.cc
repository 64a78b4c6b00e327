// Pipeline specs: the same bytes as a text spec (`dce,bucket{cap-mb=64}`) and as a pipeline JSON
// file; each is parsed and every pass configured from its options, or a JfxError says why not.
#include <unistd.h>

#include <fstream>

#include "fuzz_common.h"
#include "passes/pass_manager.h"

namespace {

// loadPipelineFile reads a path: one scratch file per process, written for each input and removed
// after it (libFuzzer may end the process without running static destructors).
const std::string& scratchPath() {
  static const std::string path = [] {
    const char* dir = std::getenv("TMPDIR");
    return std::string(dir && *dir ? dir : "/tmp") + "/jfx-fuzz-pipeline-" +
           std::to_string(getpid()) + ".json";
  }();
  return path;
}

struct RemoveScratch {
  ~RemoveScratch() { std::remove(scratchPath().c_str()); }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text = jfx::fuzz::asText(data, size);
  jfx::fuzz::expectOnlyJfxError([&] { (void)jfx::buildPipeline(jfx::parsePipeline(text)); });
  {
    std::ofstream out(scratchPath(), std::ios::binary | std::ios::trunc);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
  }
  RemoveScratch remove_scratch;
  jfx::fuzz::expectOnlyJfxError(
      [&] { (void)jfx::buildPipeline(jfx::loadPipelineFile(scratchPath())); });
  return 0;
}
