// The block analysis (passes/analysis/blocks.h) on FQN sets and on traced graphs, and the passes
// that use it: tag-fsdp, bucket, schedule and analyze name the same blocks on every fixture.
#include <catch2/catch.hpp>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "ir/io.h"
#include "ir/json_format.h"
#include "ir/text_format.h"
#include "passes/analysis/blocks.h"
#include "passes/analysis/fsdp.h"
#include "passes/analysis/memory.h"
#include "passes/analysis/phase.h"
#include "passes/bucket/bucket.h"
#include "passes/pass_manager.h"

using namespace jfx;

namespace {

std::string dataDir() {
  return std::string(JFX_SOURCE_DIR) + "/tests/data/traced/";
}

// Every traced fixture, sorted (the tracer's model families included).
std::vector<std::string> fixtures() {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dataDir()))
    if (e.path().extension() == ".json") out.push_back(e.path().stem().string());
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> blockNames(const BlockAnalysis& a) {
  std::vector<std::string> out;
  for (const Block& b : a.blocks)
    out.push_back(b.name);
  return out;
}

PassManagerOptions quiet(std::ostream& sink) {
  PassManagerOptions o;
  o.verify_each = false;  // SAC fixtures carry dead aliases on gathers until dce has run
  o.out = &sink;
  return o;
}

}  // namespace

TEST_CASE("blocks: names from FQN sets", "[blocks]") {
  SECTION("llama: layers.N, head and embeddings outside") {
    auto n = nameBlocks({"tok_embeddings.weight", "layers.0.attention.wq.weight",
                         "layers.0.ffn_norm.weight", "layers.1.attention.wq.weight",
                         "layers.10.attention.wq.weight", "norm.weight", "output.weight"});
    CHECK(n.containers == std::vector<std::string>{"layers"});
    CHECK(n.block_of ==
          std::vector<std::string>{"", "layers.0", "layers.0", "layers.1", "layers.10", "", ""});
  }
  SECTION("GPT-2 (HF): transformer.h.N") {
    auto n = nameBlocks({"transformer.wte.weight", "transformer.wpe.weight",
                         "transformer.h.0.attn.c_attn.weight", "transformer.h.1.mlp.c_fc.bias",
                         "transformer.ln_f.weight", "lm_head.weight"});
    CHECK(n.containers == std::vector<std::string>{"transformer.h"});
    CHECK(n.block_of[2] == "transformer.h.0");
    CHECK(n.block_of[3] == "transformer.h.1");
    CHECK(n.block_of[4].empty());
  }
  SECTION("BERT-style encoder: encoder.layer.N") {
    auto n = nameBlocks({"embeddings.word_embeddings.weight", "encoder.layer.0.attention.q.weight",
                         "encoder.layer.1.attention.q.weight", "pooler.dense.weight"});
    CHECK(n.containers == std::vector<std::string>{"encoder.layer"});
    CHECK(n.block_of == std::vector<std::string>{"", "encoder.layer.0", "encoder.layer.1", ""});
  }
  SECTION("nested stages: the innermost container is the block") {
    auto n = nameBlocks({"stem.conv.weight", "stages.0.blocks.0.conv.weight",
                         "stages.0.blocks.1.conv.weight", "stages.1.downsample.weight",
                         "stages.1.blocks.0.conv.weight", "stages.1.blocks.3.conv.weight",
                         "head.fc.weight"});
    // stages.1's downsample lies beside the blocks of stages.1.blocks: not a block of its own.
    CHECK(n.containers == std::vector<std::string>{"stages.0.blocks", "stages.1.blocks"});
    CHECK(n.block_of == std::vector<std::string>{"", "stages.0.blocks.0", "stages.0.blocks.1", "",
                                                 "stages.1.blocks.0", "stages.1.blocks.3", ""});
  }
  SECTION("ConvNeXt (timm): stages.N.blocks.M are the units; stem and downsample are not") {
    // timm's convnext_atto, named as timm names it: the stem is nn.Sequential(Conv2d,
    // LayerNorm2d) and stages 1-3 open with a downsample nn.Sequential(LayerNorm2d, Conv2d).
    std::vector<std::string> f = {"stem.0.weight", "stem.0.bias", "stem.1.weight", "stem.1.bias"};
    std::vector<std::string> want(4, "");
    const int depths[] = {2, 2, 6, 2};
    for (int s = 0; s < 4; ++s) {
      const std::string stage = "stages." + std::to_string(s);
      if (s > 0)
        for (const char* p : {".downsample.0.weight", ".downsample.0.bias", ".downsample.1.weight",
                              ".downsample.1.bias"}) {
          f.push_back(stage + p);
          want.push_back("");
        }
      for (int b = 0; b < depths[s]; ++b) {
        const std::string block = stage + ".blocks." + std::to_string(b);
        for (const char* p : {".gamma", ".conv_dw.weight", ".conv_dw.bias", ".norm.weight",
                              ".mlp.fc1.weight", ".mlp.fc2.bias"}) {
          f.push_back(block + p);
          want.push_back(block);
        }
      }
    }
    for (const char* p : {"head.norm.weight", "head.fc.weight", "head.fc.bias"}) {
      f.push_back(p);
      want.push_back("");
    }
    auto n = nameBlocks(f);
    CHECK(n.containers == std::vector<std::string>{"stages.0.blocks", "stages.1.blocks",
                                                   "stages.2.blocks", "stages.3.blocks"});
    CHECK(n.block_of == want);
    std::set<std::string> distinct(want.begin(), want.end());
    CHECK(distinct.size() == 12 + 1);  // 12 blocks and ""
    // A stage of depth 1 (timm's tiny test configs: depths 1, 2, 1, 1) is the same stack, one
    // deep: stages.0.blocks.0 is a block as stages.1.blocks.0 is, not stages.0.
    auto shallow = nameBlocks({"stem.0.weight", "stem.1.weight", "stages.0.blocks.0.conv_dw.weight",
                               "stages.0.blocks.0.mlp.fc1.weight", "stages.1.downsample.1.weight",
                               "stages.1.blocks.0.conv_dw.weight",
                               "stages.1.blocks.1.conv_dw.weight", "stages.2.downsample.1.weight",
                               "stages.2.blocks.0.conv_dw.weight", "head.fc.weight"});
    CHECK(shallow.containers ==
          std::vector<std::string>{"stages.0.blocks", "stages.1.blocks", "stages.2.blocks"});
    CHECK(shallow.block_of == std::vector<std::string>{"", "", "stages.0.blocks.0",
                                                       "stages.0.blocks.0", "", "stages.1.blocks.0",
                                                       "stages.1.blocks.1", "", "stages.2.blocks.0",
                                                       ""});
    // Only inside an indexed entry: a lone `encoder.layer.0` beside `decoder.layers.0/1` is
    // not promoted.
    CHECK(nameBlocks({"enc.layer.0.w", "dec.layer.0.w", "dec.layer.1.w"}).containers ==
          std::vector<std::string>{"dec.layer"});
  }
  SECTION("ResNet (torchvision, timm): layerN.M; a block's own downsample stays in it") {
    auto n =
        nameBlocks({"conv1.weight", "bn1.weight", "layer1.0.conv1.weight", "layer1.0.bn1.weight",
                    "layer1.1.conv1.weight", "layer1.1.bn1.weight", "layer2.0.conv1.weight",
                    "layer2.0.bn1.weight", "layer2.0.downsample.0.weight",
                    "layer2.0.downsample.1.weight", "layer2.0.downsample.1.bias",
                    "layer2.1.conv1.weight", "layer2.1.bn1.weight", "fc.weight", "fc.bias"});
    CHECK(n.containers == std::vector<std::string>{"layer1", "layer2"});
    CHECK(n.block_of == std::vector<std::string>{"", "", "layer1.0", "layer1.0", "layer1.1",
                                                 "layer1.1", "layer2.0", "layer2.0", "layer2.0",
                                                 "layer2.0", "layer2.0", "layer2.1", "layer2.1", "",
                                                 ""});
  }
  SECTION("T5: a list of different modules inside each block is not a container") {
    // block.N.layer.M is [self-attention, (cross-attention,) feed-forward]: no entry repeats
    // another, so the T5Block is the block. Block 0 alone holds the relative position bias, and
    // the blocks still repeat (block 1's names are a subset of block 0's).
    std::vector<std::string> f = {
        "shared.weight",
        "encoder.block.0.layer.0.SelfAttention.q.weight",
        "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight",
        "encoder.block.0.layer.0.layer_norm.weight",
        "encoder.block.0.layer.1.DenseReluDense.wi.weight",
        "encoder.block.0.layer.1.layer_norm.weight",
        "encoder.block.1.layer.0.SelfAttention.q.weight",
        "encoder.block.1.layer.0.layer_norm.weight",
        "encoder.block.1.layer.1.DenseReluDense.wi.weight",
        "encoder.block.1.layer.1.layer_norm.weight",
        "decoder.block.0.layer.1.EncDecAttention.q.weight",
        "decoder.block.0.layer.2.DenseReluDense.wi.weight",
        "decoder.block.1.layer.1.EncDecAttention.q.weight",
        "decoder.block.1.layer.2.DenseReluDense.wi.weight",
        "lm_head.weight"};
    auto n = nameBlocks(f);
    CHECK(n.containers == std::vector<std::string>{"decoder.block", "encoder.block"});
    CHECK(n.block_of ==
          std::vector<std::string>{"", "encoder.block.0", "encoder.block.0", "encoder.block.0",
                                   "encoder.block.0", "encoder.block.0", "encoder.block.1",
                                   "encoder.block.1", "encoder.block.1", "encoder.block.1",
                                   "decoder.block.0", "decoder.block.0", "decoder.block.1",
                                   "decoder.block.1", ""});
    CHECK(n.heterogeneous ==
          std::vector<std::string>{"decoder.block.0.layer", "decoder.block.1.layer",
                                   "encoder.block.0.layer", "encoder.block.1.layer"});
    // With nothing around it, a list of different modules is still a container.
    CHECK(nameBlocks({"net.0.attn.w", "net.1.mlp.w"}).block_of ==
          std::vector<std::string>{"net.0", "net.1"});
  }
  SECTION("MoE: experts side by side give way to the layer") {
    std::vector<std::string> f = {
        "model.layers.0.self_attn.q_proj.weight", "model.layers.0.mlp.experts.0.w1.weight",
        "model.layers.0.mlp.experts.1.w1.weight", "model.layers.1.mlp.experts.0.w1.weight",
        "model.layers.1.mlp.experts.1.w1.weight"};
    auto inner = nameBlocks(f);
    CHECK(inner.block_of[1] == "model.layers.0.mlp.experts.0");
    auto moe = nameBlocks(f, [](const std::string& c) { return c.ends_with(".experts"); });
    CHECK(moe.containers == std::vector<std::string>{"model.layers"});
    CHECK(moe.block_of == std::vector<std::string>{"model.layers.0", "model.layers.0",
                                                   "model.layers.0", "model.layers.1",
                                                   "model.layers.1"});
    // With no container around them, side-by-side blocks are still blocks.
    auto top = nameBlocks({"heads.0.w", "heads.1.w"}, [](const std::string&) { return true; });
    CHECK(top.block_of == std::vector<std::string>{"heads.0", "heads.1"});
  }
  SECTION("torchvision's ViT: a module name ending in an underscore and an index") {
    auto n = nameBlocks({"class_token", "conv_proj.weight", "encoder.pos_embedding",
                         "encoder.layers.encoder_layer_0.ln_1.weight",
                         "encoder.layers.encoder_layer_0.self_attention.in_proj_weight",
                         "encoder.layers.encoder_layer_0.mlp.0.weight",
                         "encoder.layers.encoder_layer_0.mlp.3.weight",
                         "encoder.layers.encoder_layer_1.ln_1.weight",
                         "encoder.layers.encoder_layer_1.ln_2.weight",
                         "encoder.layers.encoder_layer_1.mlp.0.weight",
                         "encoder.layers.encoder_layer_1.mlp.3.weight",
                         "encoder.layers.encoder_layer_11.mlp.3.weight", "heads.head.weight"});
    CHECK(n.containers == std::vector<std::string>{"encoder.layers.encoder_layer_"});
    const std::string l0 = "encoder.layers.encoder_layer_0", l1 = "encoder.layers.encoder_layer_1";
    CHECK(n.block_of == std::vector<std::string>{"", "", "", l0, l0, l0, l0, l1, l1, l1, l1,
                                                 "encoder.layers.encoder_layer_11", ""});
    // A module FQN that is the block itself, or inside it, finds it.
    CHECK(blockNameOf(l1, n.containers) == l1);
    CHECK(blockNameOf(l1 + ".mlp.3", n.containers) == l1);
    // HF GPT-2's ln_1 and ln_2 are single layers inside transformer.h.N.
    auto gpt2 = nameBlocks({"transformer.h.0.ln_1.weight", "transformer.h.0.ln_2.weight",
                            "transformer.h.1.ln_1.weight", "transformer.h.1.ln_2.weight"});
    CHECK(gpt2.block_of == std::vector<std::string>{"transformer.h.0", "transformer.h.0",
                                                    "transformer.h.1", "transformer.h.1"});
    // A parameter's own name is never an index (nn.LSTM's weight_ih_l0, weight_ih_l1), nor is
    // a name with no underscore before the digits (fc1, fc2) or only digits after one ("_1").
    CHECK(nameBlocks({"rnn.weight_ih_l0", "rnn.weight_ih_l1", "rnn.bias_0", "rnn.bias_1"})
              .containers.empty());
    CHECK(nameBlocks({"mlp.fc1.weight", "mlp.fc2.weight"}).containers.empty());
    CHECK(nameBlocks({"_1.w", "_2.w"}).containers.empty());
  }
  SECTION("a list of single layers inside a block is part of the block") {
    // An MLP-Mixer layer: token and channel MLPs are nn.Sequential(Linear, GELU, Linear), whose
    // entries look alike (weight, bias) and run one after another; the layer is the block.
    auto mixer =
        nameBlocks({"stem.weight", "layers.0.norm1.weight", "layers.0.tok.0.weight",
                    "layers.0.tok.0.bias", "layers.0.tok.2.weight", "layers.1.norm1.weight",
                    "layers.1.tok.0.weight", "layers.1.tok.2.weight", "head.weight"});
    CHECK(mixer.containers == std::vector<std::string>{"layers"});
    CHECK(mixer.block_of == std::vector<std::string>{"", "layers.0", "layers.0", "layers.0",
                                                     "layers.0", "layers.1", "layers.1", "layers.1",
                                                     ""});
    // A norm-activation-convolution stack (GroupNorm and Conv1d: weight and bias each) in each
    // residual block.
    auto conv = nameBlocks({"blocks.0.0.weight", "blocks.0.0.bias", "blocks.0.2.weight",
                            "blocks.0.2.bias", "blocks.1.0.weight", "blocks.1.0.bias",
                            "blocks.1.2.weight", "blocks.1.2.bias"});
    CHECK(conv.block_of == std::vector<std::string>{"blocks.0", "blocks.0", "blocks.0", "blocks.0",
                                                    "blocks.1", "blocks.1", "blocks.1",
                                                    "blocks.1"});
    // With no container around it, a list of single layers is the list of blocks (a deep MLP,
    // an nn.Sequential of Linears at the root).
    CHECK(nameBlocks({"mlp.layers.0.weight", "mlp.layers.1.weight", "mlp.layers.2.weight"})
              .block_of ==
          std::vector<std::string>{"mlp.layers.0", "mlp.layers.1", "mlp.layers.2"});
    CHECK(nameBlocks({"0.weight", "0.bias", "2.weight", "2.bias"}).block_of ==
          std::vector<std::string>{"0", "0", "2", "2"});
    // Entries that are modules with parts stay blocks of their own inside an outer container
    // (stages.N.blocks.M, above).
    CHECK(nameBlocks({"layers.0.sub.0.fc.weight", "layers.0.sub.1.fc.weight",
                      "layers.1.sub.0.fc.weight", "layers.1.sub.1.fc.weight"})
              .block_of[1] == "layers.0.sub.1");
  }
  SECTION("one index is not a repetition") {
    CHECK(nameBlocks({"layers.0.w", "layers.0.b", "norm.weight"}).containers.empty());
    CHECK(nameBlocks({"0.weight", "0.bias"}).containers.empty());
    CHECK(nameBlocks({"layers.3a.w", "layers.4a.w"}).containers.empty());
    CHECK(nameBlocks({}).containers.empty());
  }
  SECTION("a leading index: the root module, when its entries repeat") {
    // nn.Sequential(Linear, block, block, Linear): every entry is a block.
    auto seq = nameBlocks({"0.weight", "0.bias", "1.fc1.weight", "1.fc2.weight", "2.fc1.weight",
                           "2.fc2.weight", "3.weight", "3.bias"});
    CHECK(seq.containers == std::vector<std::string>{""});
    CHECK(seq.block_of == std::vector<std::string>{"0", "0", "1", "1", "2", "2", "3", "3"});
    CHECK(seq.heterogeneous.empty());
    // An inner container wins; what its entry holds beside the inner blocks (a norm between two
    // stacks) is in no block, as a stage's downsample.
    auto nested = nameBlocks({"0.layers.0.fc.w", "0.layers.1.fc.w", "0.norm.w", "1.layers.0.fc.w",
                              "1.layers.1.fc.w", "1.norm.w"});
    CHECK(nested.containers == std::vector<std::string>{"0.layers", "1.layers"});
    CHECK(nested.block_of ==
          std::vector<std::string>{"0.layers.0", "0.layers.1", "", "1.layers.0", "1.layers.1", ""});
    // nn.Sequential(embedding, stack, head): different modules at the root, which names no
    // block and is not listed as a list of different modules either.
    auto stages =
        nameBlocks({"0.weight", "1.layers.0.w", "1.layers.1.w", "1.norm.weight", "2.weight"});
    CHECK(stages.containers == std::vector<std::string>{"1.layers"});
    CHECK(stages.block_of == std::vector<std::string>{"", "1.layers.0", "1.layers.1", "", ""});
    CHECK(stages.heterogeneous.empty());
    CHECK(blockNameOf("2.fc1", seq.containers) == "2");
    CHECK(blockNameOf("1.layers.1.attn", stages.containers) == "1.layers.1");
    CHECK(blockNameOf("0", stages.containers).empty());
  }
  SECTION("module FQNs resolve to their block") {
    std::vector<std::string> c = {"layers", "stages.0.blocks"};
    CHECK(blockNameOf("layers.3.attention", c) == "layers.3");
    CHECK(blockNameOf("stages.0.blocks.2.conv", c) == "stages.0.blocks.2");
    CHECK(blockNameOf("stages.1.blocks.2.conv", c) == "");
    CHECK(blockNameOf("mylayers.3.w", c) == "");
  }
}

namespace {

// Two layers of two experts each (per-expert modules, HF-Mixtral style). `chained`: expert 1
// reads expert 0's output instead of the layer input.
std::string expertsGraph(bool chained) {
  std::string b1 = chained ? "%a0" : "%x";
  std::string b2 = chained ? "%a1" : "%h1";
  return R"(jointfx.graph 1
outputs [loss]

%p00 : f32[8, 8] = placeholder {input=parameter, fqn="layers.0.experts.0.ffn.w"}
%p01 : f32[8, 8] = placeholder {input=parameter, fqn="layers.0.experts.1.ffn.w"}
%p10 : f32[8, 8] = placeholder {input=parameter, fqn="layers.1.experts.0.ffn.w"}
%p11 : f32[8, 8] = placeholder {input=parameter, fqn="layers.1.experts.1.ffn.w"}
%x : f32[2, 8] = placeholder {input=user_input}
%a0 : f32[2, 8] = aten.mm.default(%x, %p00) {phase=forward}
%b0 : f32[2, 8] = aten.mm.default()" +
         b1 + R"(, %p01) {phase=forward}
%h1 : f32[2, 8] = aten.add.Tensor(%a0, %b0) {phase=forward}
%a1 : f32[2, 8] = aten.mm.default(%h1, %p10) {phase=forward}
%b1 : f32[2, 8] = aten.mm.default()" +
         b2 + R"(, %p11) {phase=forward}
%h2 : f32[2, 8] = aten.add.Tensor(%a1, %b1) {phase=forward}
%loss : f32[] = aten.sum.default(%h2) {phase=loss}
%output = output([%loss])
)";
}

}  // namespace

TEST_CASE("blocks: side-by-side experts are read off the graph", "[blocks]") {
  {
    auto g = parseTextGraph(expertsGraph(false), "experts");
    BlockAnalysis a = analyzeBlocks(*g);
    CHECK(blockNames(a) == std::vector<std::string>{"layers.0", "layers.1"});
    CHECK(a.parallel_containers ==
          std::vector<std::string>{"layers.0.experts", "layers.1.experts"});
    CHECK(a.blocks[0].params.size() == 2);
  }
  {
    // Chained: the experts run one after another, so they are the blocks (innermost).
    auto g = parseTextGraph(expertsGraph(true), "chained");
    BlockAnalysis a = analyzeBlocks(*g);
    CHECK(blockNames(a) == std::vector<std::string>{"layers.0.experts.0", "layers.0.experts.1",
                                                    "layers.1.experts.0", "layers.1.experts.1"});
    CHECK(a.parallel_containers.empty());
  }
}

TEST_CASE("blocks: traced model families", "[blocks]") {
  struct Expect {
    std::string fixture;
    std::vector<std::string> blocks;
  };
  std::vector<Expect> cases = {
      {"fsdp_w2", {"layers.0", "layers.1"}},
      {"gpt2_w2", {"transformer.h.0", "transformer.h.1"}},
      {"encoder_w2", {"encoder.layer.0", "encoder.layer.1"}},
      {"convbn_w2",
       {"stages.0.blocks.0", "stages.0.blocks.1", "stages.1.blocks.0", "stages.1.blocks.1"}},
      {"moe_w2", {"model.layers.0", "model.layers.1"}},
      {"uneven_w4", {"layers.0", "layers.1"}},
      {"t5_w2", {"encoder.block.0", "encoder.block.1", "decoder.block.0", "decoder.block.1"}},
      // One layer module called three times: no indexed FQN, so no block (the passes warn).
      {"albert_w2", {}},
      // nn.LSTM's layers are a name suffix (rnn.weight_ih_l1), not a module: no block.
      {"lstm_w2", {}},
      // The model is an nn.Sequential (1.fc1.weight): the root module holds the blocks, the
      // input projection and the head among them.
      {"sequential_w2", {"0", "1", "2", "3", "4"}},
      // torchvision's names: encoder_layer_N is an index; mlp.0 and mlp.3 (an nn.Sequential of
      // single layers) are part of their layer's block.
      {"tvvit_w2", {"encoder.layers.encoder_layer_0", "encoder.layers.encoder_layer_1"}},
      // token_mlp.N and channel_mlp.N are single layers inside layers.N.
      {"mixer_w2", {"layers.0", "layers.1"}},
      {"gpt2_sac_w2", {"transformer.h.0", "transformer.h.1"}},
      {"lstm_sac_w2", {}},
  };
  for (const Expect& e : cases) {
    INFO(e.fixture);
    auto g = loadGraph(dataDir() + e.fixture + ".json");
    BlockAnalysis a = analyzeBlocks(*g);
    CHECK(blockNames(a) == e.blocks);
    // Ordered by first use in forward: each block's first user strictly before the next's.
    for (const Block& b : a.blocks)
      REQUIRE(b.first_user != nullptr);
    for (size_t i = 1; i < a.blocks.size(); ++i)
      CHECK(a.blocks[i - 1].first_user->isBefore(a.blocks[i].first_user));
    for (const Block& b : a.blocks)
      for (const Node* p : b.params)
        CHECK(a.blockOfFqn(p->inputFqn()) == a.blockOf(p));
  }
}

TEST_CASE("blocks: tag-fsdp reshards GPT-2 blocks (transformer.h.N)", "[blocks]") {
  // Before the shared analysis, tag-fsdp knew only layers.N and re-gathered nothing here.
  auto g = loadGraph(dataDir() + "gpt2_w2.json");
  std::ostringstream sink;
  runPipeline(*g, resolvePipeline("tag-fsdp{reshard=default},remat"), quiet(sink));
  PhaseInfo phases = computePhases(*g);
  FsdpAnalysis fsdp = analyzeFsdp(*g, phases);
  BlockAnalysis blocks = analyzeBlocks(*g);
  std::set<std::string> regathered_blocks;
  int64_t backward = 0;
  for (const auto& c : fsdp.unshard) {
    if (!phases.isBackward(c.all_gather)) continue;
    ++backward;
    if (int32_t b = blocks.blockOf(c.param); b >= 0)
      regathered_blocks.insert(blocks.blocks[static_cast<size_t>(b)].name);
  }
  CHECK(backward > 0);
  // keep-last=1: the first block is re-gathered, the last is kept.
  CHECK(regathered_blocks == std::set<std::string>{"transformer.h.0"});
  CHECK(sink.str().find("warning") == std::string::npos);
}

TEST_CASE("blocks: no block is said out loud", "[blocks]") {
  // fsdp_w2 with its layers renamed so no prefix repeats with two indices.
  std::string text = writeJsonGraph(*loadGraph(dataDir() + "fsdp_w2.json"));
  for (std::string from : {"layers.0.", "layers.1."}) {
    std::string to = from == "layers.0." ? "first." : "second.";
    for (size_t p = text.find(from); p != std::string::npos; p = text.find(from, p + to.size()))
      text.replace(p, from.size(), to);
  }
  auto g = readJsonGraph(text, "renamed");
  CHECK(analyzeBlocks(*g).blocks.empty());
  std::ostringstream sink;
  runPipeline(*g, resolvePipeline("tag-fsdp{reshard=default},remat,bucket,schedule"), quiet(sink));
  const std::string out = sink.str();
  CHECK(out.find("warning: tag-fsdp: no repeated blocks among 21 parameters") != std::string::npos);
  CHECK(out.find("warning: bucket: no repeated blocks") != std::string::npos);
}

TEST_CASE("blocks: tag-fsdp, bucket, schedule and analyze agree on every fixture", "[blocks]") {
  for (const std::string& name : fixtures()) {
    INFO(name);
    auto g = loadGraph(dataDir() + name + ".json");
    const std::vector<std::string> expected = blockNames(analyzeBlocks(*g));
    const std::string before = AnalysisTraits<BlockAnalysis>::fingerprint(*g, analyzeBlocks(*g));
    std::ostringstream sink;
    PassManagerOptions o = quiet(sink);
    o.remarks = true;
    // memory-limit=none: the bound may leave blocks unbucketed, which is not the question here.
    PipelineResult r =
        runPipeline(*g,
                    resolvePipeline("dce,tag-fsdp{reshard=default},remat,dedup-fsdp-unshard,"
                                    "bucket{memory-limit=none},schedule{memory-limit=none}"),
                    o);
    // tag-fsdp and schedule count the same blocks.
    for (const PassRecord& rec : r.passes)
      if (rec.name == "tag-fsdp" || rec.name == "schedule") {
        INFO(rec.name);
        auto it = rec.stats.find("blocks");
        CHECK((it == rec.stats.end() ? 0 : it->second) == static_cast<int64_t>(expected.size()));
      }
    // Every bucket named after a block names one of the analysis' blocks, and every block that
    // has two or more gathers got its bucket.
    std::set<std::string> bucket_plans;
    g->forEach([&](const Node* n) {
      if (!hasFsdpBucketMeta(*n)) return;
      for (const auto& [key, value] : *n->meta().attrs.getDict(attr::fsdpBucket()))
        if (key == "plan") bucket_plans.insert(std::get<std::string>(value));
    });
    for (const std::string& b : expected)
      CHECK(bucket_plans.count(b) == 1);
    for (const std::string& p : bucket_plans)
      if (p != "head" && p.find('.') != std::string::npos)
        CHECK(std::find(expected.begin(), expected.end(), p) != expected.end());
    // The optimized graph has the same analysis: the same blocks, first users and verdicts on
    // containers (a bucket's copy-in, gather and pieces are the parameters' values, not compute
    // reading them; before, the containers read as side by side after bucketing).
    CHECK(AnalysisTraits<BlockAnalysis>::fingerprint(*g, analyzeBlocks(*g)) == before);
  }
}

TEST_CASE("blocks: gloo ring chunks", "[blocks][bucket]") {
  // Checked against gloo at world 4 (float32): reduce_scatter_tensor results matched this chunk
  // model bit for bit for every size below, and a plain left-to-right sum did not.
  CHECK(glooRingChunkElems(4 * 7, 4, 4) == 8);
  CHECK(glooRingChunkElems(4 * 16, 4, 4) == 16);
  CHECK(glooRingChunkElems(4 * 100, 4, 4) == 100);
  CHECK(glooRingChunkElems(4 * 101, 4, 4) == 102);
  CHECK(glooRingChunkElems(4 * 65539, 4, 4) == 65540);
  CHECK(glooRingChunkElems(4 * 262149, 4, 4) == 262150);
  CHECK(glooRingChunkElems(4 * 700003, 4, 4) == 700005);
  CHECK(glooRingChunkElems(2 * 9, 2, 2) == 10);
}

TEST_CASE("blocks: bucketed reduce-scatters keep every element's ring chunk", "[blocks][bucket]") {
  // uneven_w4: world 4 with per-rank gradient chunks of 1 and 7 elements, which gloo sums in a
  // chunk that straddles rank rows; they stay unbucketed, and every bucket's rows are ring chunks.
  auto g = loadGraph(dataDir() + "uneven_w4.json");
  std::ostringstream sink;
  PipelineResult r = runPipeline(*g, resolvePipeline("bucket{memory-limit=none}"), quiet(sink));
  CHECK(r.passes[0].stats.at("unbucketed.rs-order") == 2);
  int64_t buckets = 0;
  g->forEach([&](const Node* n) {
    if (!n->isCollective() || n->info().collective != CollectiveKind::ReduceScatter) return;
    const int64_t per_rank = n->val().tensor.numel();
    const int64_t elem = dtypeItemSize(n->val().tensor.dtype);
    if (hasFsdpBucketMeta(*n)) {
      ++buckets;
      CHECK(glooRingChunkElems(4 * per_rank, elem, 4) == per_rank);
    }
  });
  CHECK(buckets > 0);
  // Without the rule, they join.
  auto h = loadGraph(dataDir() + "uneven_w4.json");
  PipelineResult free = runPipeline(
      *h, resolvePipeline("bucket{memory-limit=none, exact-rs-order=false}"), quiet(sink));
  CHECK(free.passes[0].stats.count("unbucketed.rs-order") == 0);
}

TEST_CASE("fsdp: reduce-scatters summed into one gradient are each its gradient chain",
          "[blocks][fsdp]") {
  // ALBERT's shared layer runs 3 times: each of its 16 parameters is gathered 3 times and its
  // gradient is add(add(wait, wait), wait). Those reduce-scatters used to be "other collectives",
  // which bucket, split-comm-groups and schedule leave alone.
  auto g = loadGraph(dataDir() + "albert_w2.json");
  PhaseInfo phases = computePhases(*g);
  FsdpAnalysis a = analyzeFsdp(*g, phases);
  CHECK(a.other_collectives.empty());
  CHECK(a.grads.size() == 59);
  std::map<std::string, int> per_fqn;
  for (const FsdpGradChain& c : a.grads) {
    ++per_fqn[c.param_fqn];
    CHECK(a.roleOf(c.reduce_scatter) == CollectiveRole::FsdpReduceGrad);
    for (const Node* p : c.post)  // the sum is no chain's post: it reads other chains' waits
      CHECK(p->inputs().size() == 1);
  }
  CHECK(per_fqn.size() == 27);
  CHECK(per_fqn["encoder.shared_layer.attention.query.weight"] == 3);
  CHECK(per_fqn["classifier.weight"] == 1);
  // The tied GPT-2 embedding: two reductions, one gradient.
  auto gpt2 = loadGraph(dataDir() + "gpt2_w2.json");
  FsdpAnalysis b = analyzeFsdp(*gpt2, computePhases(*gpt2));
  CHECK(b.other_collectives.empty());
  CHECK(b.grads.size() == 29);
}
