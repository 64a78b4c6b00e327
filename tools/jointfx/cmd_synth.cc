// jointfx synth -o OUT [--preset NAME] [--layers N ...]: writes a synthetic Llama-3 joint graph
// (tools/synth/synth.h). A preset sets every field first; explicit flags then override it.
#include <cstdint>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ir/types.h"
#include "tools/jointfx/cli_util.h"
#include "tools/synth/synth.h"

namespace jfx::cli {

namespace {

struct SynthArgs {
  std::string output;
  std::string format;
  std::string preset = "tiny";
  std::vector<int64_t> ints;  // one slot per integer flag (kIntFlags order)
  std::string master_dtype, param_dtype, reduce_dtype, device, attention;
  int64_t target_nodes = 0;
  bool tied = false;
};

struct IntFlag {
  const char* name;
  int64_t SynthConfig::*field;
  const char* help;
};

const IntFlag kIntFlags[] = {
    {"--layers", &SynthConfig::layers, "Transformer blocks"},
    {"--dim", &SynthConfig::dim, "Model dimension"},
    {"--heads", &SynthConfig::heads, "Attention heads"},
    {"--kv-heads", &SynthConfig::kv_heads, "Key/value heads (GQA)"},
    {"--ffn-dim", &SynthConfig::ffn_dim, "FFN hidden dimension"},
    {"--vocab", &SynthConfig::vocab, "Vocabulary size"},
    {"--seq", &SynthConfig::seq, "Sequence length"},
    {"--batch", &SynthConfig::batch, "Local batch size"},
    {"--world-size", &SynthConfig::world_size, "FSDP degree (process group size)"},
};

std::optional<ScalarType> parseDtype(const std::string& s) {
  if (auto t = dtypeFromShortName(s)) return t;
  return dtypeFromName(s);
}

// The flags that override a preset only when given.
struct SynthFlags {
  std::vector<CLI::Option*> ints;  // kIntFlags order
  CLI::Option *target, *master, *param, *reduce, *device, *attention, *tied;
};

// A dtype flag's value into `out`, when given; false (said) when it is not a float dtype.
bool applyDtype(CLI::Option* opt, const std::string& text, ScalarType& out) {
  if (!opt->count()) return true;
  auto t = parseDtype(text);
  if (!t || !dtypeIsFloatingPoint(*t)) {
    printError("synth", opt->get_name() +
                            ": expected a floating-point dtype (f32, bf16, f16), got " +
                            quoteForMessage(text));
    return false;
  }
  out = *t;
  return true;
}

// The preset with the given flags applied; nothing (said) on a bad flag.
std::optional<SynthConfig> configOf(const SynthArgs& a, const SynthFlags& f) {
  SynthConfig cfg = *synthPreset(a.preset);
  for (size_t k = 0; k < f.ints.size(); ++k)
    if (f.ints[k]->count()) cfg.*kIntFlags[k].field = a.ints[k];
  if (!applyDtype(f.master, a.master_dtype, cfg.master_dtype) ||
      !applyDtype(f.param, a.param_dtype, cfg.param_dtype) ||
      !applyDtype(f.reduce, a.reduce_dtype, cfg.reduce_dtype))
    return std::nullopt;
  if (f.device->count()) cfg.device = a.device;
  if (f.attention->count()) {
    auto attention = synthAttentionFromName(a.attention);
    if (!attention) {
      printError("synth", "--attention: expected auto, cpu-flash, flash or efficient, got " +
                              quoteForMessage(a.attention));
      return std::nullopt;
    }
    cfg.attention = *attention;
  }
  if (f.tied->count()) cfg.tied_embeddings = a.tied;
  return cfg;
}

int runSynth(const SynthArgs& a, const SynthFlags& f) {
  auto format = outputFormat("synth", a.output, a.format);
  if (!format) return kInputError;
  std::optional<SynthConfig> cfg = configOf(a, f);
  if (!cfg) return kInputError;
  try {
    validateSynthConfig(*cfg);
    if (f.target->count()) {
      if (a.target_nodes < 1) {
        printError("synth", "--target-nodes must be positive");
        return kInputError;
      }
      cfg->layers = synthLayersForNodes(*cfg, a.target_nodes);
    }
    std::unique_ptr<Graph> g = synthLlamaJoint(*cfg);
    // Each dimension is bounded, their products are not: a graph no reader would load is an
    // error here, not a file.
    for (const Node* n = g->first(); n; n = n->next())
      if (std::string p = n->val().sizeProblem(); !p.empty()) {
        printError("synth", "node " + quoteForMessage(n->name()) + ": " + p +
                                " (the configuration is too large: lower --batch, --seq, "
                                "--vocab or --dim)");
        return kInputError;
      }
    if (!saveOutput("synth", *g, a.output, *format)) return kInputError;
  } catch (const JfxError& e) {
    printError("synth", e.message());
    return kInputError;
  }
  return kOk;
}

}  // namespace

void addSynthCommand(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<SynthArgs>();
  CLI::App* cmd = app.add_subcommand(
      "synth", "Write a synthetic Llama-3 joint fwd+loss+bwd graph with SimpleFSDP collectives");
  cmd->add_option("-o,--output", args->output, "Output file (.json, .jfx, or - for stdout)")
      ->required();
  cmd->add_option("--format", args->format, "Output format, overriding the extension")
      ->check(CLI::IsMember({"json", "text"}));
  std::vector<std::string> presets = synthPresetNames();
  cmd->add_option("--preset", args->preset, "Start from a preset (flags below override it)")
      ->check(CLI::IsMember(presets));

  // Flags are only applied when given, so that they override a preset rather than reset it.
  SynthFlags f;
  args->ints.resize(std::size(kIntFlags));
  for (size_t k = 0; k < std::size(kIntFlags); ++k)
    f.ints.push_back(cmd->add_option(kIntFlags[k].name, args->ints[k], kIntFlags[k].help));
  f.target =
      cmd->add_option("--target-nodes", args->target_nodes,
                      "Pick --layers so the graph has about this many nodes (overrides --layers)");
  f.master =
      cmd->add_option("--master-dtype", args->master_dtype, "Stored parameter dtype (default f32)");
  f.param = cmd->add_option("--param-dtype", args->param_dtype,
                            "Compute / all-gather dtype: bf16, f32, f16");
  f.reduce =
      cmd->add_option("--reduce-dtype", args->reduce_dtype, "Reduce-scatter dtype: f32, bf16");
  f.device = cmd->add_option("--device", args->device, "cpu or cuda[:N]");
  f.attention =
      cmd->add_option("--attention", args->attention, "auto, cpu-flash, flash, efficient");
  f.tied = cmd->add_flag("--tied", args->tied, "Tie output.weight to tok_embeddings");
  cmd->callback([args, f, &exit_code] { exit_code = runSynth(*args, f); });
}

}  // namespace jfx::cli
