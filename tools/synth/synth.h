// synth: generates the joint forward + loss + backward graph of a Llama-3-style transformer trained
// with SimpleFSDP, node for node as make_fx records it, at any size. Benchmarks use it for graphs
// of any size up to millions of nodes; tests use it where a traced fixture would be too small.
//
// The graph matches python/jointfx/trace.py's traces of python/jointfx/model.py (torch 2.15,
// fake process group, rank 0), which tests/data/traced/ holds at 2 layers:
//   - inputs: one placeholder per parameter (local dim-0 shard [ceil(dim0/W), ...] in
//     master_dtype, registration order, named after the FQN with '.' -> '_'), the RoPE buffers
//     rope_cos / rope_sin, tokens, labels;
//   - each module gathers the parameters it owns when it is entered (SimpleFSDP re-gathers on
//     every access): [_to_copy(dtype=param_dtype)] -> all_gather_into_tensor(x, W, group) ->
//     wait_tensor -> [slice.Tensor back to dim0 when dim0 % W != 0];
//   - forward: embedding, per layer RMSNorm (pow/mean/add/rsqrt/mul in float32), q/k/v
//     projections (t + view + mm + _unsafe_view), real-valued RoPE (select/mul/sub/add/stack), GQA
//     scaled-dot-product attention, output projection, residual adds, SwiGLU FFN; final norm and
//     output projection; loss (_log_softmax + nll_loss_forward);
//   - backward: the ops autograd records for the above; per gradient the unshard's backward:
//     [constant_pad_nd when padded] -> [_to_copy(dtype=reduce_dtype)] ->
//     reduce_scatter_tensor(g, "sum", W, group) -> wait_tensor -> [_to_copy(dtype=master_dtype)]
//     -> graph output.
// Every node carries val (dtype, shape, stride, device), phase, seq_nr (backward ops share their
// forward op's) and module_fqn (the innermost module, as torchtitan's annotate_module_fqns sets it:
// "layers.3.attention.wq", "layers.3.attention", "layers.3", "norm", "output", "loss").
// Output is deterministic: the same config always gives the same graph.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ir/graph.h"
#include "ir/types.h"

namespace jfx {

// Which scaled-dot-product-attention kernel the trace shows. Auto picks what PyTorch dispatches
// to: the CPU flash kernel on "cpu", flash for 16-bit dtypes on CUDA, memory-efficient otherwise.
// The CPU kernel's nodes match traces; the CUDA ones follow the aten schemas (args, outputs and
// the getitems backward reads) but have not been compared with a CUDA trace.
enum class SynthAttention : uint8_t { Auto, CpuFlash, Flash, Efficient };
std::string_view synthAttentionName(SynthAttention a);  // "auto", "cpu-flash", "flash", "efficient"
std::optional<SynthAttention> synthAttentionFromName(std::string_view s);

struct SynthConfig {
  // Defaults are the traced fixtures' tiny model (python/jointfx/model.py ModelArgs, batch 2,
  // variant "fsdp": float32 throughout), at world size 4.
  int64_t layers = 2;
  int64_t dim = 16;
  int64_t heads = 4;
  int64_t kv_heads = 2;
  int64_t ffn_dim = 32;
  int64_t vocab = 32;
  int64_t seq = 8;
  int64_t batch = 2;
  int64_t world_size = 4;
  // Parameters are stored (and sharded) in master_dtype; SimpleFSDP's MixedPrecisionPolicy casts
  // them to param_dtype before the all-gather (the compute dtype) and gradients to reduce_dtype
  // before the reduce-scatter. Equal dtypes mean no cast node.
  ScalarType master_dtype = ScalarType::Float32;
  ScalarType param_dtype = ScalarType::Float32;
  ScalarType reduce_dtype = ScalarType::Float32;
  std::string device = "cpu";  // "cpu" or "cuda:N" ("cuda" means "cuda:0")
  // output.weight is tok_embeddings.weight: one parameter, gathered twice in forward (once per
  // using module, as SimpleFSDP does) and reduce-scattered twice, the two gradients summed.
  bool tied_embeddings = false;
  SynthAttention attention = SynthAttention::Auto;
  double norm_eps = 1e-5;
  std::string group_name = "0";
};

// Throws JfxError naming the first bad field (e.g. "heads (6) must divide dim (16)").
void validateSynthConfig(const SynthConfig& cfg);

// Named presets: "tiny" (the defaults), "llama3-8b", "llama3-70b".
std::optional<SynthConfig> synthPreset(std::string_view name);
std::vector<std::string> synthPresetNames();

// The graph for `cfg` (validated first; throws JfxError when invalid).
std::unique_ptr<Graph> synthLlamaJoint(const SynthConfig& cfg);

// Parameter FQNs in registration order (the order of placeholders and gradient outputs).
std::vector<std::string> synthParamFqns(const SynthConfig& cfg);

// Node count as `fixed + per_layer * layers` (exact: measured by building 1- and 2-layer graphs
// with the same config).
struct SynthSize {
  int64_t fixed = 0;
  int64_t per_layer = 0;
  int64_t nodes(int64_t layers) const { return fixed + per_layer * layers; }
};
SynthSize synthSize(const SynthConfig& cfg);
// The layer count (>= 1) whose graph has the node count closest to `target_nodes`.
int64_t synthLayersForNodes(const SynthConfig& cfg, int64_t target_nodes);

}  // namespace jfx
