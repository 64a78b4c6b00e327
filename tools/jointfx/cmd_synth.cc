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
  args->ints.resize(std::size(kIntFlags));
  std::vector<CLI::Option*> int_options;
  for (size_t k = 0; k < std::size(kIntFlags); ++k)
    int_options.push_back(cmd->add_option(kIntFlags[k].name, args->ints[k], kIntFlags[k].help));
  CLI::Option* target =
      cmd->add_option("--target-nodes", args->target_nodes,
                      "Pick --layers so the graph has about this many nodes (overrides --layers)");
  CLI::Option* master =
      cmd->add_option("--master-dtype", args->master_dtype, "Stored parameter dtype (default f32)");
  CLI::Option* param = cmd->add_option("--param-dtype", args->param_dtype,
                                       "Compute / all-gather dtype: bf16, f32, f16");
  CLI::Option* reduce =
      cmd->add_option("--reduce-dtype", args->reduce_dtype, "Reduce-scatter dtype: f32, bf16");
  CLI::Option* device = cmd->add_option("--device", args->device, "cpu or cuda[:N]");
  CLI::Option* attention =
      cmd->add_option("--attention", args->attention, "auto, cpu-flash, flash, efficient");
  CLI::Option* tied = cmd->add_flag("--tied", args->tied, "Tie output.weight to tok_embeddings");

  cmd->callback([=, &exit_code] {
    exit_code = kInputError;
    auto format = outputFormat("synth", args->output, args->format);
    if (!format) return;
    SynthConfig cfg = *synthPreset(args->preset);
    for (size_t k = 0; k < int_options.size(); ++k)
      if (int_options[k]->count()) cfg.*kIntFlags[k].field = args->ints[k];
    auto dtype = [&](CLI::Option* opt, const std::string& text, ScalarType& out) {
      if (!opt->count()) return true;
      auto t = parseDtype(text);
      if (!t || !dtypeIsFloatingPoint(*t)) {
        printError("synth", opt->get_name() + ": expected a floating-point dtype (f32, bf16, " +
                                "f16), got " + quoteForMessage(text));
        return false;
      }
      out = *t;
      return true;
    };
    if (!dtype(master, args->master_dtype, cfg.master_dtype) ||
        !dtype(param, args->param_dtype, cfg.param_dtype) ||
        !dtype(reduce, args->reduce_dtype, cfg.reduce_dtype))
      return;
    if (device->count()) cfg.device = args->device;
    if (attention->count()) {
      auto a = synthAttentionFromName(args->attention);
      if (!a) {
        printError("synth", "--attention: expected auto, cpu-flash, flash or efficient, got " +
                                quoteForMessage(args->attention));
        return;
      }
      cfg.attention = *a;
    }
    if (tied->count()) cfg.tied_embeddings = args->tied;
    try {
      validateSynthConfig(cfg);
      if (target->count()) {
        if (args->target_nodes < 1) {
          printError("synth", "--target-nodes must be positive");
          return;
        }
        cfg.layers = synthLayersForNodes(cfg, args->target_nodes);
      }
      std::unique_ptr<Graph> g = synthLlamaJoint(cfg);
      // Each dimension is bounded, their products are not: a graph no reader would load is an
      // error here, not a file.
      for (const Node* n = g->first(); n; n = n->next())
        if (std::string p = n->val().sizeProblem(); !p.empty()) {
          printError("synth", "node " + quoteForMessage(n->name()) + ": " + p +
                                  " (the configuration is too large: lower --batch, --seq, "
                                  "--vocab or --dim)");
          return;
        }
      if (!saveOutput("synth", *g, args->output, *format)) return;
    } catch (const JfxError& e) {
      printError("synth", e.message());
      return;
    }
    exit_code = kOk;
  });
}

}  // namespace jfx::cli
