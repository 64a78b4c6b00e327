// Memory analysis: liveness over storages in program order, and the estimated peak.
//
// Model (what a caching allocator sees when the graph runs node by node, as runtime/executor.cc
// runs it; `jointfx exec` measures the same quantity: docs/executor.md, "Measured memory"):
//  - A node that makes fresh tensors allocates one storage per output tensor (a tuple value has
//    one per element), sized from its output meta (bytes as requested: no allocator rounding).
//  - Views share their base's storage: AliasKind::View ops (wait_tensor included), in-place ops
//    (their input 0), `out=` ops (the out tensor), and getitems of view ops (split, unbind).
//    A getitem of any other multi-output op names that op's element storage. The ops that view
//    when they can and copy when they must (reshape, flatten, contiguous, to, type_as) are
//    decided from the input's strides, as PyTorch decides when it runs them.
//  - A storage is freed right after the last node that reads it or any of its aliases; reading
//    a multi-output node (a getitem) reads its whole tuple, so every element lives until the last
//    getitem. Graph inputs (placeholders, get_attr) are never freed; values the output node
//    returns live to the end; a collective's inputs and outputs live until its last wait (the
//    communication reads and writes them until then).
//  - The live bytes of a step count the node's fresh outputs together with everything still
//    live, before that step's frees: the high-water mark while the node runs, short of the
//    scratch memory inside the kernel.
//  - MemoryOptions::backend Gloo adds the buffers LibTorch's gloo backend allocates for itself.
// Nodes without tensor meta allocate nothing. Cost: O(N + E), plus O(S log S) for the largest
// tensors at the peak.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "passes/analysis/phase.h"

namespace jfx {

// Whose communication buffers the estimate counts. NCCL reads and writes a collective's own
// input and output tensors, so nothing more is live; LibTorch's gloo backend stages through
// tensors of its own (docs/passes.md, "Memory analysis"), which is what `jointfx exec` on CPU
// measures.
enum class CommBackend : uint8_t { Nccl, Gloo };

struct MemoryOptions {
  size_t top_k = 10;       // largest live tensors reported at the peak
  bool lifetimes = false;  // fill MemoryProfile::storages
  CommBackend backend = CommBackend::Nccl;
};

// One storage's life in steps of the program order: live on [born, last_use] (to the end when
// pinned: a graph input or output). 24 bytes: the storages are the analysis's largest table, and
// bucket builds it while the graph it changed is at its largest. Steps and node ids fit 32 bits.
struct StorageLife {
  static constexpr uint32_t kPinned = UINT32_MAX;  // last_use of a storage never freed
  static constexpr int32_t kStaging = -1;  // element of a backend's buffer (CommBackend::Gloo)
  uint32_t owner = 0;                      // id of the node that allocates it
  int32_t element = 0;                     // which output of a multi-output owner, or kStaging
  uint32_t born = 0;      // step that allocates it (storages are listed in step order)
  uint32_t last_use = 0;  // step after which it can be freed, or kPinned
  int64_t bytes = 0;
  bool pinned() const { return last_use == kPinned; }  // a graph input or graph output
};

struct LiveTensor {
  const Node* owner = nullptr;  // the node that allocated the storage
  int32_t element = 0;          // which output of a multi-output owner, or StorageLife::kStaging
  int64_t bytes = 0;
  bool is_input = false;  // a graph input (never freed)
};

// What the bytes live at the peak are, by the storage's owner: every storage live there is in
// exactly one class, so the classes sum to the peak (short of clamping).
enum class PeakClass : uint8_t {
  Parameters,            // parameter inputs (the local shards)
  OtherInputs,           // the other graph inputs: buffers, the batch
  GatheredParameters,    // all-gather outputs (FSDP's unsharded parameters, and their views)
  CommunicationBuffers,  // the other collectives' outputs, and a backend's staging buffers
  Outputs,               // values the graph returns: the loss and the gradients made so far
  ForwardActivations,    // made in forward or the loss and still live: at a backward peak, saved
  BackwardTemporaries,   // made in backward, not returned
  Other,                 // made outside the three phases
};
inline constexpr size_t kPeakClasses = 8;
std::string_view peakClassName(PeakClass c);  // "parameters", "gathered_parameters", ...

struct PhasePeak {
  int64_t bytes = 0;
  const Node* node = nullptr;  // nullptr when the phase has no nodes
};

struct MemoryProfile {
  int64_t peak_bytes = 0;
  const Node* peak_node = nullptr;
  int64_t input_bytes = 0;                  // graph inputs: live the whole step
  std::vector<LiveTensor> largest_at_peak;  // by bytes, descending; ties by owner position
  std::array<PhasePeak, 4> phase_peaks{};   // indexed by Phase
  std::array<int64_t, kPeakClasses> peak_by_class{};  // indexed by PeakClass
  // Live bytes at each step: one per node, in program order (step i is the graph's i-th node).
  // No node pointers: 8 bytes a step, where a (node, bytes) pair was 16 (the curve is made
  // while bucket's output is at its largest).
  std::vector<int64_t> curve;
  std::vector<StorageLife> storages;  // with MemoryOptions::lifetimes, in allocation order

  const PhasePeak& peakOf(Phase p) const { return phase_peaks[static_cast<size_t>(p)]; }
};

MemoryProfile analyzeMemory(const Graph& g, const PhaseInfo& phases,
                            const MemoryOptions& opts = {});

// Bytes for people: "512 B", "1.50 KiB", ... "2.00 TiB" (two decimals above 1 KiB).
std::string formatBytes(int64_t bytes);

// The default-options profile (MemoryOptions{}).
template <>
struct AnalysisTraits<MemoryProfile> {
  static constexpr std::string_view name = "memory";
  static MemoryProfile compute(const Graph& g, AnalysisManager& am) {
    return analyzeMemory(g, am.get<PhaseInfo>(g));
  }
  static std::string fingerprint(const Graph& g, const MemoryProfile& m);
  static MemoryProfile follow(const MemoryProfile& m, const NodeTranslation& to) {
    MemoryProfile c = m;
    c.peak_node = to(m.peak_node);
    for (LiveTensor& t : c.largest_at_peak)
      t.owner = to(t.owner);
    for (PhasePeak& p : c.phase_peaks)
      p.node = to(p.node);
    return c;
  }
};

}  // namespace jfx
