// load -> verify -> passes -> verify -> save -> reload -> print. A graph that loads and verifies
// goes through the default pipeline (configs/pipelines/default.json) and through each registered
// pass alone. Passes may reject a graph with a JfxError (e.g. remat over a random op); they must
// not break it: the result verifies, and saving it in either format and reading it back prints
// the same text and JSON. Input: JSON when the first non-space byte is '{', text IR otherwise.
#include <memory>
#include <vector>

#include "fuzz_common.h"
#include "ir/io.h"
#include "ir/json_format.h"
#include "ir/text_format.h"
#include "ir/verifier.h"
#include "passes/pass_manager.h"
#include "passes/registry.h"

namespace {

using jfx::fuzz::bug;

bool looksLikeJson(std::string_view s) {
  for (char c : s) {
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') continue;
    return c == '{';
  }
  return false;
}

std::unique_ptr<jfx::Graph> load(std::string_view text) {
  return looksLikeJson(text) ? jfx::readJsonGraph(text, "fuzz.json")
                             : jfx::parseTextGraph(text, "fuzz.jfx");
}

// The pipelines every verified input goes through: the default one, then each pass alone.
const std::vector<std::pair<std::string, std::vector<jfx::PipelineEntry>>>& pipelines() {
  static const auto all = [] {
    std::vector<std::pair<std::string, std::vector<jfx::PipelineEntry>>> out;
    out.emplace_back("default",
                     jfx::loadPipelineFile(JFX_SOURCE_DIR "/configs/pipelines/default.json"));
    for (const auto& r : jfx::passRegistry()) {
      std::string name(r.name);
      out.emplace_back(name, jfx::parsePipeline(name));
    }
    return out;
  }();
  return all;
}

void checkSavedForm(const jfx::Graph& g, const std::string& label) {
  std::string text = jfx::serializeGraph(g, jfx::GraphFormat::Text);
  std::string json = jfx::serializeGraph(g, jfx::GraphFormat::Json);
  std::unique_ptr<jfx::Graph> from_text, from_json;
  try {
    from_text = jfx::parseTextGraph(text, label + ".jfx");
    from_json = jfx::readJsonGraph(json, label + ".json");
  } catch (const jfx::JfxError& e) {
    bug(label + ": a saved graph does not load: " + e.what());
  }
  if (jfx::printTextGraph(*from_text) != text) bug(label + ": text save/reload prints differently");
  if (jfx::writeJsonGraph(*from_json) != json) bug(label + ": JSON save/reload prints differently");
  if (jfx::printTextGraph(*from_json) != text) bug(label + ": JSON reload prints other text");
  if (!jfx::verifyGraph(*from_text).empty()) bug(label + ": reloaded graph fails verification");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view input = jfx::fuzz::asText(data, size);
  std::unique_ptr<jfx::Graph> original;
  jfx::fuzz::expectOnlyJfxError([&] { original = load(input); });
  if (!original || !jfx::verifyGraph(*original).empty()) return 0;
  checkSavedForm(*original, "input");

  for (const auto& [label, pipeline] : pipelines()) {
    std::unique_ptr<jfx::Graph> g = load(input);
    jfx::PassManagerOptions opts;
    opts.verify_each = true;
    opts.check_unchanged_hash = true;
    try {
      jfx::runPipeline(*g, pipeline, opts);
    } catch (const jfx::PipelineVerifyError& e) {
      // The input verified, so this is a pass that broke the graph.
      bug("pipeline '" + label + "' broke a verified graph: " + e.what());
    } catch (const jfx::JfxError& e) {
      // Passes turn foreign exceptions into "internal error" and a hash mismatch into an error;
      // both are bugs in a pass, not properties of the input.
      std::string what = e.what();
      if (what.find("failed: internal error:") != std::string::npos ||
          what.find("reported no change, but the graph changed") != std::string::npos)
        bug("pipeline '" + label + "': " + what);
      continue;
    } catch (const std::exception& e) {
      bug("pipeline '" + label + "': exception other than JfxError escaped: " + e.what());
    }
    if (!jfx::verifyGraph(*g).empty()) bug("pipeline '" + label + "': result fails verification");
    checkSavedForm(*g, label);
  }
  return 0;
}
