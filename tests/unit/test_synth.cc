#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <utility>

#include "ir/error.h"
#include "ir/hash.h"
#include "ir/io.h"
#include "ir/json_format.h"
#include "ir/text_format.h"
#include "ir/verifier.h"
#include "tools/synth/synth.h"

using namespace jfx;

namespace {

// Verifier issues, as strings. (Arity bounds come from torch's schemas: ir/ops_generated.def.)
std::vector<std::string> verifyIssues(const Graph& g) {
  std::vector<std::string> out;
  for (const VerifyIssue& issue : verifyGraph(g))
    out.push_back(issue.str());
  return out;
}

// Walks single-input ops (casts, views, slices) back from `n` to a placeholder.
const Node* rootPlaceholder(const Node* n) {
  while (n && n->op() != OpKind::Placeholder)
    n = n->inputs().size() == 1 ? n->input(0) : nullptr;
  return n;
}

std::map<std::pair<std::string, Phase>, int> collectivesByKindAndPhase(const Graph& g) {
  std::map<std::pair<std::string, Phase>, int> out;
  g.forEach([&](const Node* n) {
    if (n->isCollective())
      ++out[{std::string(collectiveKindName(n->info().collective)), n->meta().phase}];
  });
  return out;
}

std::map<std::string, int> targetHistogram(const Graph& g) {
  std::map<std::string, int> out;
  g.forEach([&](const Node* n) { ++out[std::string(n->target().str())]; });
  return out;
}

}  // namespace

TEST_CASE("synth: node count is fixed + per_layer * layers", "[synth]") {
  SynthConfig cfg;
  SynthSize size = synthSize(cfg);
  CHECK(size.per_layer > 100);
  CHECK(size.fixed > 0);
  for (int64_t layers : {1, 3, 7}) {
    cfg.layers = layers;
    CHECK(static_cast<int64_t>(synthLlamaJoint(cfg)->size()) == size.nodes(layers));
  }
}

TEST_CASE("synth: layers for a target node count", "[synth]") {
  SynthConfig cfg;
  SynthSize size = synthSize(cfg);
  for (int64_t target : {int64_t{1}, int64_t{10'000}, int64_t{123'456}}) {
    int64_t layers = synthLayersForNodes(cfg, target);
    CHECK(layers >= 1);
    if (target > size.nodes(1)) CHECK(std::abs(size.nodes(layers) - target) <= size.per_layer / 2);
  }
}

TEST_CASE("synth: one all-gather per parameter in forward, one reduce-scatter in backward",
          "[synth]") {
  SynthConfig cfg;
  cfg.layers = 3;
  cfg.param_dtype = ScalarType::BFloat16;
  cfg.vocab = 33;  // padded rows on tok_embeddings and output
  auto g = synthLlamaJoint(cfg);
  std::map<std::string, int> gathers, reduces;
  g->forEach([&](const Node* n) {
    if (!n->isCollective()) return;
    if (n->info().collective == CollectiveKind::AllGather) {
      CHECK(n->meta().phase == Phase::Forward);
      const Node* p = rootPlaceholder(n->input(0));
      REQUIRE(p);
      CHECK(p->inputKind() == InputKind::Parameter);
      ++gathers[std::string(p->inputFqn())];
    } else {
      CHECK(n->info().collective == CollectiveKind::ReduceScatter);
      CHECK(n->meta().phase == Phase::Backward);
    }
  });
  // Each gradient output comes from its own reduce-scatter through single-input ops.
  const Node* out = g->outputNode();
  REQUIRE(out);
  const auto& specs = g->outputSpecs();
  REQUIRE(out->inputs().size() == specs.size());
  CHECK(specs[0].kind == OutputKind::Loss);
  for (size_t k = 1; k < specs.size(); ++k) {
    CHECK(specs[k].kind == OutputKind::Gradient);
    const Node* n = out->input(k);
    while (n && !n->isCollective())
      n = n->inputs().size() == 1 ? n->input(0) : nullptr;
    REQUIRE(n);
    CHECK(n->info().collective == CollectiveKind::ReduceScatter);
    ++reduces[specs[k].fqn];
  }
  std::vector<std::string> fqns = synthParamFqns(cfg);
  CHECK(fqns.size() == 2 + 9 * 3 + 1);
  CHECK(gathers.size() == fqns.size());
  CHECK(reduces.size() == fqns.size());
  for (const std::string& fqn : fqns) {
    CHECK(gathers[fqn] == 1);
    CHECK(reduces[fqn] == 1);
  }
}

TEST_CASE("synth: tied embeddings gather and reduce the shared weight twice", "[synth]") {
  SynthConfig cfg;
  cfg.tied_embeddings = true;
  auto g = synthLlamaJoint(cfg);
  int emb_gathers = 0, outputs_for_emb = 0;
  g->forEach([&](const Node* n) {
    if (n->isCollective() && n->info().collective == CollectiveKind::AllGather &&
        rootPlaceholder(n->input(0))->inputFqn() == "tok_embeddings.weight")
      ++emb_gathers;
  });
  for (const OutputSpec& s : g->outputSpecs())
    outputs_for_emb += s.fqn == "tok_embeddings.weight";
  CHECK(emb_gathers == 2);
  CHECK(outputs_for_emb == 1);
  CHECK(g->findNode("output_weight") == nullptr);
  CHECK(verifyIssues(*g).empty());
}

TEST_CASE("synth: collective shapes and the process group", "[synth]") {
  SynthConfig cfg;
  cfg.world_size = 8;
  cfg.vocab = 50;
  auto g = synthLlamaJoint(cfg);
  REQUIRE(g->processGroups().size() == 1);
  const ProcessGroupInfo& pg = g->processGroups()[0];
  CHECK(pg.name == "0");
  CHECK(pg.size == 8);
  CHECK(pg.ranks == std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7});
  int collectives = 0;
  g->forEach([&](const Node* n) {
    if (!n->isCollective()) return;
    ++collectives;
    const TensorMeta& in = n->input(0)->val().tensor;
    const TensorMeta& out = n->val().tensor;
    if (n->info().collective == CollectiveKind::AllGather)
      CHECK(out.shape[0] == in.shape[0] * 8);
    else
      CHECK(in.shape[0] == out.shape[0] * 8);
    CHECK(n->arg(n->info().group_name_arg).str() == "0");
    CHECK(n->arg(n->info().group_size_arg).toInt() == 8);
    REQUIRE(n->users().size() == 1);
    const Node* wait = n->users()[0];
    CHECK(wait->isWait());
    CHECK(wait->val() == n->val());
  });
  CHECK(collectives == 2 * (2 + 9 * 2 + 1));  // one all-gather and one reduce-scatter each
}

TEST_CASE("synth: every node has meta and every target is known", "[synth]") {
  for (const char* device : {"cpu", "cuda"}) {
    for (ScalarType dt : {ScalarType::Float32, ScalarType::BFloat16}) {
      SynthConfig cfg;
      cfg.device = device;
      cfg.param_dtype = dt;
      auto g = synthLlamaJoint(cfg);
      INFO("device " << device << ", dtype " << dtypeName(dt));
      std::set<std::string> unknown;
      std::string want_device = std::string(device) == "cuda" ? "cuda:0" : "cpu";
      g->forEach([&](const Node* n) {
        if (n->op() == OpKind::Output) return;
        INFO(n->name());
        CHECK(n->val().kind != ValueMeta::Kind::Absent);
        if (n->val().isTensor()) {
          const TensorMeta& t = n->val().tensor;
          CHECK(t.device.str() == want_device);
          CHECK(t.shape.size() == t.stride.size());
        }
        if (n->op() != OpKind::CallFunction) return;
        CHECK(n->meta().phase != Phase::Unknown);
        CHECK(n->meta().seq_nr.has_value());
        if (!isKnownOp(n->target())) unknown.insert(std::string(n->target().str()));
      });
      CHECK(unknown.empty());
      CHECK(verifyIssues(*g).empty());
    }
  }
}

TEST_CASE("synth: attention kernels", "[synth]") {
  struct Case {
    const char* device;
    ScalarType dtype;
    const char* forward;
  };
  for (const Case& c :
       {Case{"cpu", ScalarType::BFloat16,
             "aten._scaled_dot_product_flash_attention_for_cpu.default"},
        Case{"cuda:1", ScalarType::BFloat16, "aten._scaled_dot_product_flash_attention.default"},
        Case{"cuda", ScalarType::Float32,
             "aten._scaled_dot_product_efficient_attention.default"}}) {
    SynthConfig cfg;
    cfg.device = c.device;
    cfg.param_dtype = c.dtype;
    auto g = synthLlamaJoint(cfg);
    auto hist = targetHistogram(*g);
    CHECK(hist[c.forward] == cfg.layers);
    std::string backward = std::string(c.forward);
    backward.insert(backward.size() - std::string(".default").size(), "_backward");
    CHECK(hist[backward] == cfg.layers);
    CHECK(verifyIssues(*g).empty());
  }
}

TEST_CASE("synth: deterministic", "[synth]") {
  SynthConfig cfg;
  cfg.layers = 3;
  cfg.param_dtype = ScalarType::BFloat16;
  cfg.tied_embeddings = true;
  auto a = synthLlamaJoint(cfg);
  auto b = synthLlamaJoint(cfg);
  CHECK(structuralHash(*a) == structuralHash(*b));
  CHECK(printTextGraph(*a) == printTextGraph(*b));
  CHECK(writeJsonGraph(*a) == writeJsonGraph(*b));
  cfg.layers = 4;
  CHECK(structuralHash(*synthLlamaJoint(cfg)) != structuralHash(*a));
}

TEST_CASE("synth: round-trips through both formats at 1, 2 and 32 layers", "[synth]") {
  for (int layers : {1, 2, 32}) {
    CAPTURE(layers);
    SynthConfig cfg;
    cfg.layers = layers;
    cfg.param_dtype = ScalarType::BFloat16;
    cfg.vocab = 33;
    auto g = synthLlamaJoint(cfg);
    std::string text = printTextGraph(*g);
    CHECK(printTextGraph(*parseTextGraph(text, "<synth>")) == text);
    std::string json = writeJsonGraph(*g);
    CHECK(writeJsonGraph(*readJsonGraph(json, "<synth>")) == json);
    // JSON -> text -> JSON loses nothing.
    CHECK(writeJsonGraph(*parseTextGraph(printTextGraph(*readJsonGraph(json, "<j>")), "<t>")) ==
          json);
  }
}

TEST_CASE("synth: presets have Llama 3's parameter counts", "[synth]") {
  // Every dim 0 divides by the preset's world size, so the all-gather outputs are exactly the
  // parameters.
  for (auto [name, params] : {std::pair{"llama3-8b", int64_t{8'030'261'248}},
                              std::pair{"llama3-70b", int64_t{70'553'706'496}}}) {
    INFO(name);
    std::optional<SynthConfig> cfg = synthPreset(name);
    REQUIRE(cfg);
    CHECK(cfg->param_dtype == ScalarType::BFloat16);
    CHECK(cfg->reduce_dtype == ScalarType::Float32);
    auto g = synthLlamaJoint(*cfg);
    int64_t total = 0;
    g->forEach([&](const Node* n) {
      if (n->isCollective() && n->info().collective == CollectiveKind::AllGather)
        total += n->val().tensor.numel();
    });
    CHECK(total == params);
    CHECK(static_cast<int64_t>(g->size()) == synthSize(*cfg).nodes(cfg->layers));
  }
  CHECK(!synthPreset("llama3-405b"));
  CHECK(synthPreset("tiny"));
}

TEST_CASE("synth: bad configs are rejected with the field named", "[synth]") {
  auto rejects = [](auto edit, const char* needle) {
    SynthConfig cfg;
    edit(cfg);
    try {
      validateSynthConfig(cfg);
      FAIL("accepted a bad config; expected an error about " << needle);
    } catch (const JfxError& e) {
      CHECK_THAT(e.what(), Catch::Contains(needle));
    }
    CHECK_THROWS_AS(synthLlamaJoint(cfg), JfxError);
  };
  rejects([](SynthConfig& c) { c.heads = 3; }, "heads");
  rejects([](SynthConfig& c) { c.kv_heads = 3; }, "kv_heads");
  rejects([](SynthConfig& c) { c.layers = 0; }, "layers");
  rejects([](SynthConfig& c) { c.world_size = -1; }, "world_size");
  rejects([](SynthConfig& c) { c.dim = 12; }, "head dim");
  rejects([](SynthConfig& c) { c.device = "tpu"; }, "device");
  rejects([](SynthConfig& c) { c.reduce_dtype = ScalarType::Int32; }, "reduce_dtype");
  rejects([](SynthConfig& c) { c.attention = SynthAttention::Flash; }, "cuda");
}

// The traced fixtures (tests/data/traced, python/jointfx/trace.py) are the ground truth: synth with
// a fixture's model config reproduces it node for node: names, targets, args, val, phase, seq_nr
// and module_fqn. The SAC and TP variants carry what synth does not model (recompute tags, TP
// collectives).
TEST_CASE("synth: reproduces the traced fixtures", "[synth]") {
  namespace fs = std::filesystem;
  fs::path dir = fs::path(JFX_SOURCE_DIR) / "tests" / "data" / "traced";
  int compared = 0;
  for (const char* name : {"fsdp_w1", "fsdp_w2", "fsdp_w4", "bf16_w1", "bf16_w2", "bf16_w4",
                           "padding_w2", "padding_w4", "tied_w2", "tied_w4"}) {
    fs::path path = dir / (std::string(name) + ".json");
    if (!fs::exists(path)) continue;
    INFO(path.string());
    auto traced = loadGraph(path.string());
    nlohmann::json meta = nlohmann::json::parse(traced->extraJson());
    const nlohmann::json& m = meta.at("model");
    SynthConfig cfg;
    cfg.layers = m.at("n_layers");
    cfg.dim = m.at("dim");
    cfg.heads = m.at("n_heads");
    cfg.kv_heads = m.at("n_kv_heads");
    cfg.ffn_dim = m.at("ffn_hidden_dim");
    cfg.vocab = m.at("vocab_size");
    cfg.seq = m.at("seq_len");
    cfg.batch = m.at("batch_size");
    cfg.tied_embeddings = m.at("tie_embeddings");
    cfg.world_size = meta.at("world_size");
    if (!m.at("param_dtype").is_null())
      cfg.param_dtype = *dtypeFromName(m.at("param_dtype").get<std::string>());
    // No reduce dtype: the reduce-scatter runs in the dtype the gradient has.
    cfg.reduce_dtype = m.at("reduce_dtype").is_null()
                           ? cfg.param_dtype
                           : *dtypeFromName(m.at("reduce_dtype").get<std::string>());
    auto synth = synthLlamaJoint(cfg);

    CHECK(collectivesByKindAndPhase(*synth) == collectivesByKindAndPhase(*traced));
    CHECK(targetHistogram(*synth) == targetHistogram(*traced));
    CHECK(synth->processGroups() == traced->processGroups());
    CHECK(synth->outputSpecs() == traced->outputSpecs());
    REQUIRE(synth->size() == traced->size());
    std::vector<Node*> s = synth->nodes(), t = traced->nodes();
    for (size_t k = 0; k < s.size(); ++k) {
      if (printNode(*s[k]) == printNode(*t[k]) && s[k]->inputKind() == t[k]->inputKind() &&
          s[k]->inputFqn() == t[k]->inputFqn())
        continue;
      CHECK(printNode(*s[k]) == printNode(*t[k]));
      break;  // the first difference says it all
    }
    ++compared;
  }
  if (compared == 0) WARN("no traced fixtures under " << dir.string());
}
