#include "passes/analysis/memory.h"

#include <algorithm>
#include <cstdio>
#include <span>

#include "ir/checked.h"
#include "ir/collectives.h"
#include "ir/fsdp_chains.h"
#include "ir/walk.h"

namespace jfx {
namespace {

using Storage = StorageLife;  // the table is handed out as MemoryProfile::storages
static_assert(sizeof(Storage) == 24);

bool isMultiOutput(const Node* n) {
  return n->val().kind == ValueMeta::Kind::List;
}

// How many outputs a node has: a tuple's elements, or one.
uint32_t outputCount(const Node* n) {
  return isMultiOutput(n) ? static_cast<uint32_t>(n->val().items.size()) : 1;
}

// Storage ids of each walked node's outputs, flattened: elems[begin[id] .. + outputCount(n)).
// The count is read from the node, not kept in a second table by id.
struct StorageMap {
  std::vector<Storage> storages;
  std::vector<uint32_t> begin;
  std::vector<int32_t> elems;  // storage index, or -1 for a non-tensor element

  int32_t first(const Node* n) const { return outputCount(n) ? elems[begin[n->id()]] : -1; }
  int32_t element(const Node* n, int64_t i) const {
    if (i < 0 || i >= static_cast<int64_t>(outputCount(n))) return -1;
    return elems[begin[n->id()] + static_cast<size_t>(i)];
  }
};

// Whether a tensor of `shape` and `stride` can be viewed as `target` without a copy: PyTorch's
// rule for view (and for reshape, which copies when it fails). Runs of input dimensions that are
// contiguous with each other in memory (chunks) must each be the product of a run of target
// dimensions. Size-1 dimensions go with any chunk.
bool viewable(std::span<const int64_t> shape, std::span<const int64_t> stride,
              std::span<const int64_t> target) {
  if (stride.size() != shape.size()) return true;  // no strides: contiguous
  int64_t numel = 1;
  for (int64_t d : shape)
    numel *= d;
  if (numel == 0 || shape.empty()) return true;
  auto view_d = static_cast<int64_t>(target.size()) - 1;
  int64_t chunk_stride = stride.back();
  int64_t chunk_numel = 1, view_numel = 1;
  for (auto d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    const auto ud = static_cast<size_t>(d);
    chunk_numel *= shape[ud];
    // The chunk ends at d when the next dimension out is not laid out right after it.
    if (d == 0 || (shape[ud - 1] != 1 && stride[ud - 1] != chunk_numel * chunk_stride)) {
      while (view_d >= 0 &&
             (view_numel < chunk_numel || target[static_cast<size_t>(view_d)] == 1)) {
        view_numel *= target[static_cast<size_t>(view_d)];
        --view_d;
      }
      if (view_numel != chunk_numel) return false;
      if (d > 0) {
        chunk_stride = stride[ud - 1];
        chunk_numel = view_numel = 1;
      }
    }
  }
  return view_d == -1;
}

// Contiguous as PyTorch's is_contiguous() says: row-major strides, the strides of size-1
// dimensions ignored.
bool denseRowMajor(const TensorMeta& t) {
  if (t.stride.size() != t.shape.size()) return true;
  int64_t expected = 1;
  for (size_t i = t.shape.size(); i-- > 0;) {
    if (t.shape[i] == 1) continue;
    if (t.shape[i] == 0) return true;
    if (t.stride[i] != expected) return false;
    expected *= t.shape[i];
  }
  return true;
}

// The ops whose schema says "may alias input 0" but which copy when they must, as they decide at
// run time from the input's layout (CompositeImplicit ops that make_fx keeps when a pass emits
// them: bucket's reshape of a strided piece of a gathered bucket copies).
struct MaybeViews {
  const OpInfo* reshape = &opInfo("aten.reshape.default");
  const OpInfo* reshape_as = &opInfo("aten.reshape_as.default");
  const OpInfo* flatten = &opInfo("aten.flatten.using_ints");
  const OpInfo* contiguous = &opInfo("aten.contiguous.default");
  const OpInfo* to_dtype = &opInfo("aten.to.dtype");
  const OpInfo* to_dtype_layout = &opInfo("aten.to.dtype_layout");
  const OpInfo* type_as = &opInfo("aten.type_as.default");

  // Whether `n`'s output shares input 0's storage.
  bool aliasesInput0(const Node* n) const {
    const OpInfo& info = n->info();
    if (info.alias == AliasKind::InPlace) return true;
    const Node* in0 = n->input(0);
    const bool tensors = in0 && in0->val().isTensor() && n->val().isTensor();
    // type_as is out of place in its schema but returns its input when the dtype already fits.
    if (&info == type_as) return tensors && in0->val().tensor.dtype == n->val().tensor.dtype;
    if (info.alias != AliasKind::View) return false;
    if (!tensors) return true;
    const TensorMeta& in = in0->val().tensor;
    const TensorMeta& out = n->val().tensor;
    if (&info == reshape || &info == reshape_as || &info == flatten)
      return viewable(in.shape, in.stride, out.shape);
    if (&info == contiguous) return out.stride == in.stride || denseRowMajor(in);
    if (&info == to_dtype || &info == to_dtype_layout) {
      const Arg* copy = n->kwarg("copy");
      const bool forced = copy && copy->kind() == Arg::Kind::Bool && copy->toBool();
      return in.dtype == out.dtype && in.stride == out.stride && !forced;
    }
    return true;
  }
};

// The bytes of the buffer LibTorch's gloo backend allocates for a collective of its own (as
// `jointfx exec` measures it with LibTorch 2.15): an all-gather copies its input; an all-gather of
// N tensors stages N copies of the first tensor's size; a reduce-scatter (of one tensor or many)
// reduces through a buffer of its inputs' size.
int64_t glooStagingBytes(const Node* n) {
  std::vector<const Node*> tensors;
  for (const Arg& a : n->args()) {
    if (a.isNode()) tensors.push_back(a.node());
    if (a.isSequence())
      for (const Arg& i : a.items())
        if (i.isNode()) tensors.push_back(i.node());
  }
  if (tensors.empty()) return 0;
  if (n->info().collective == CollectiveKind::AllGather && n->info().coalesced)
    return saturatingMul(static_cast<int64_t>(tensors.size()), tensors.front()->val().bytes());
  int64_t b = 0;
  for (const Node* q : tensors)
    b = saturatingAdd(b, q->val().bytes());
  return b;
}

// Step 1 of the analysis, one sweep of the program (ir/walk.h: each node's memory is read
// once): which storage each output names, and the last use of each storage its inputs name (they
// come earlier, so theirs are known). The curve gets its bytes in step 2, which needs only what
// this keeps by step.
class StorageNaming {
 public:
  StorageNaming(const Graph& g, const PhaseInfo& phases, const MemoryOptions& opts,
                MemoryProfile& prof)
      : phases_(phases), prof_(prof), gloo_(opts.backend == CommBackend::Gloo) {
    m.begin.assign(g.maxId(), 0);
    if (gloo_) staging_of_.assign(g.maxId(), -1);
    // About one storage and one element per node: no regrowth (a copy of everything so far) on
    // large graphs.
    m.storages.reserve(g.size());
    m.elems.reserve(g.size() + g.size() / 8);
    phase_at.reserve(g.size());
    id_at.reserve(g.size());
  }

  void visit(const Node* n, uint32_t step) {
    id_at.push_back(n->id());
    phase_at.push_back(phases_.of(n));
    const uint32_t k = outputCount(n);
    m.begin[n->id()] = static_cast<uint32_t>(m.elems.size());
    for (uint32_t i = 0; i < k; ++i)
      m.elems.push_back(storageOf(n, i, step));
    readInputs(n, step);
    if (gloo_ && n->isCollective()) addStaging(n, step);
    extendToWait(n, step);
  }

  // Step 2 needs only the storages: the node tables go before its own are made (bucket profiles
  // its output at the pipeline's peak).
  void releaseNodeTables() {
    std::vector<uint32_t>().swap(m.begin);
    std::vector<int32_t>().swap(m.elems);
  }

  StorageMap m;
  std::vector<Phase> phase_at;  // phase of each step, so step 2 reads no node
  std::vector<uint32_t> id_at;  // node id of each step, for the peaks step 2 finds

 private:
  // The storage output `i` of `n` names: a fresh one, its base's (views, in-place and out= ops,
  // getitems), or none.
  int32_t storageOf(const Node* n, uint32_t i, size_t step) {
    const ValueMeta& v = n->val();
    const ValueMeta& ev = isMultiOutput(n) ? v.items[i] : v;
    const Node* in0 = n->input(0);
    if (n->op() == OpKind::Output) return -1;
    if (n->op() == OpKind::Placeholder || n->op() == OpKind::GetAttr)
      return fresh(n, static_cast<int32_t>(i), ev, step, true);
    if (n->info().category == OpCategory::Getitem && in0 && n->numArgs() > 1 && n->arg(1).isInt())
      return views_.aliasesInput0(in0) ? m.first(in0) : m.element(in0, n->arg(1).toInt());
    if (in0 && views_.aliasesInput0(n)) return m.first(in0);
    if (n->info().alias == AliasKind::Out) {
      const Arg* out = n->kwarg("out");
      if (out && out->node()) return m.first(out->node());
    }
    return fresh(n, static_cast<int32_t>(i), ev, step, false);
  }

  int32_t fresh(const Node* n, int32_t element, const ValueMeta& v, size_t t, bool input) {
    if (v.kind != ValueMeta::Kind::Tensor && v.kind != ValueMeta::Kind::List) return -1;
    const auto step = static_cast<uint32_t>(t);
    const int64_t bytes = v.bytes();
    if (input) prof_.input_bytes = saturatingAdd(prof_.input_bytes, bytes);
    m.storages.push_back({n->id(), element, step, input ? Storage::kPinned : step, bytes});
    return static_cast<int32_t>(m.storages.size() - 1);
  }

  void extendStorage(int32_t s, size_t t) {
    if (s >= 0) m.storages[s].last_use = std::max(m.storages[s].last_use, static_cast<uint32_t>(t));
  }

  // Reading a node keeps all its outputs: a multi-output node's value is one tuple, which the
  // executor (and FX's generated code) drops after its last reader, the last getitem, so every
  // element lives at least that long.
  void extend(const Node* p, size_t t) {
    for (uint32_t i = 0, k = outputCount(p); i < k; ++i)
      extendStorage(m.elems[m.begin[p->id()] + i], t);
  }

  void readInputs(const Node* n, size_t step) {
    for (const Node* p : n->inputs()) {
      if (n->op() == OpKind::Output) {
        for (uint32_t i = 0, k = outputCount(p); i < k; ++i)
          if (int32_t s = m.elems[m.begin[p->id()] + i]; s >= 0)
            m.storages[s].last_use = Storage::kPinned;
        continue;
      }
      extend(p, step);
    }
  }

  // LibTorch's gloo backend copies an all-gather's input for the duration of the call, and
  // reduce-scatters through an input-sized buffer that lives until the collective completes
  // (docs/passes.md, "Memory analysis").
  void addStaging(const Node* n, size_t step) {
    const CollectiveKind kind = n->info().collective;
    if (kind != CollectiveKind::ReduceScatter && kind != CollectiveKind::AllGather) return;
    const auto t = static_cast<uint32_t>(step);
    m.storages.push_back({n->id(), Storage::kStaging, t, t, glooStagingBytes(n)});
    if (kind == CollectiveKind::ReduceScatter)
      staging_of_[n->id()] = static_cast<int32_t>(m.storages.size() - 1);
  }

  // A collective's inputs and outputs stay live until its last wait: the transfer reads and
  // writes them until then. A coalesced collective's waits read getitems of it.
  void extendToWait(const Node* n, size_t step) {
    const Node* c = n->isWait() ? n->input(0) : nullptr;
    if (c && c->info().category == OpCategory::Getitem) c = c->input(0);
    if (!c || !c->isCollective()) return;
    for (const Node* q : c->inputs())
      extend(q, step);
    extend(c, step);
    if (gloo_) extendStorage(staging_of_[c->id()], step);
  }

  const PhaseInfo& phases_;
  MemoryProfile& prof_;
  const MaybeViews views_;
  // Gloo's own buffers (MemoryOptions::backend): the staging storage of each collective that
  // lives until its wait, by node id.
  const bool gloo_;
  std::vector<int32_t> staging_of_;
};

// Step 2: plays the schedule. Storages are born in index order; frees are bucketed by step (a
// linked list per step). Fills the curve, the peak and the phase peaks; returns the peak's step.
size_t playSchedule(const Graph& g, const StorageNaming& s, MemoryProfile& prof) {
  const std::vector<Storage>& storages = s.m.storages;
  const size_t n_steps = s.id_at.size();
  prof.curve.assign(n_steps, 0);
  std::vector<int32_t> die_head(n_steps, -1), die_next(storages.size(), -1);
  for (size_t i = storages.size(); i-- > 0;) {
    const Storage& st = storages[i];
    if (st.pinned()) continue;
    die_next[i] = die_head[st.last_use];
    die_head[st.last_use] = static_cast<int32_t>(i);
  }
  // 128-bit sums: each storage fits int64, their total need not (reported clamped).
  WideInt wide_live = 0;
  size_t peak_step = 0;
  size_t next_born = 0;
  for (size_t t = 0; t < n_steps; ++t) {
    for (; next_born < storages.size() && storages[next_born].born == t; ++next_born)
      wide_live += storages[next_born].bytes;
    const int64_t live = clampToInt64(wide_live);
    prof.curve[t] = live;
    if (live > prof.peak_bytes || !prof.peak_node) {
      prof.peak_bytes = live;
      prof.peak_node = g.nodeById(s.id_at[t]);
      peak_step = t;
    }
    PhasePeak& pp = prof.phase_peaks[static_cast<size_t>(s.phase_at[t])];
    if (!pp.node || live > pp.bytes) pp = {live, g.nodeById(s.id_at[t])};
    for (int32_t d = die_head[t]; d >= 0; d = die_next[d])
      wide_live -= storages[d].bytes;
  }
  return peak_step;
}

PeakClass classOfCollective(const Node* c) {
  return collectiveKind(*c) == CollectiveKind::AllGather ? PeakClass::GatheredParameters
                                                         : PeakClass::CommunicationBuffers;
}

PeakClass classOf(const Node* owner, const Storage& st, const PhaseInfo& phases) {
  if (owner->op() == OpKind::Placeholder || owner->op() == OpKind::GetAttr)
    return owner->inputKind() == InputKind::Parameter ? PeakClass::Parameters
                                                      : PeakClass::OtherInputs;
  if (st.element == Storage::kStaging) return PeakClass::CommunicationBuffers;
  if (owner->isCollective()) return classOfCollective(owner);
  if (producingCollective(*owner, CollectiveKind::AllGather))  // a bucket's copied-out piece
    return PeakClass::GatheredParameters;
  // A buffer a collective writes (its out= variant: GraphTrainer's bucketed gathers) is the
  // collective's; out= is a keyword argument, so it is the collective's only input of its kind.
  for (const Use& u : owner->uses())
    if (u.user->isCollective() && u.user->info().alias == AliasKind::Out && u.index != 0)
      return classOfCollective(u.user);
  if (st.pinned()) return PeakClass::Outputs;
  switch (phases.of(owner)) {
    case Phase::Forward:
    case Phase::Loss:
      return PeakClass::ForwardActivations;
    case Phase::Backward:
      return PeakClass::BackwardTemporaries;
    default:
      return PeakClass::Other;
  }
}

// Step 3: the tensors live at the peak (born at or before it, not freed before it): their
// classes, and the largest of them.
void findLargestAtPeak(const Graph& g, const PhaseInfo& phases,
                       const std::vector<Storage>& storages, size_t peak_step, size_t top_k,
                       MemoryProfile& prof) {
  std::vector<int32_t> at_peak;
  for (size_t s = 0; s < storages.size(); ++s) {
    const Storage& st = storages[s];
    if (st.born <= peak_step && (st.pinned() || st.last_use >= peak_step)) {
      at_peak.push_back(static_cast<int32_t>(s));
      int64_t& sum =
          prof.peak_by_class[static_cast<size_t>(classOf(g.nodeById(st.owner), st, phases))];
      sum = clampToInt64(static_cast<WideInt>(sum) + st.bytes);
    }
  }
  auto larger = [&](int32_t a, int32_t b) {
    const Storage &x = storages[a], &y = storages[b];
    if (x.bytes != y.bytes) return x.bytes > y.bytes;
    if (x.born != y.born) return x.born < y.born;
    return x.element < y.element;
  };
  const size_t k = std::min(top_k, at_peak.size());
  std::partial_sort(at_peak.begin(), at_peak.begin() + static_cast<std::ptrdiff_t>(k),
                    at_peak.end(), larger);
  for (size_t i = 0; i < k; ++i) {
    const Storage& st = storages[at_peak[i]];
    const Node* owner = g.nodeById(st.owner);
    const bool input = owner->op() == OpKind::Placeholder || owner->op() == OpKind::GetAttr;
    prof.largest_at_peak.push_back({owner, st.element, st.bytes, input});
  }
}

}  // namespace

MemoryProfile analyzeMemory(const Graph& g, const PhaseInfo& phases, const MemoryOptions& opts) {
  MemoryProfile prof;
  StorageNaming naming(g, phases, opts, prof);
  sweep(g, naming);
  naming.releaseNodeTables();
  const size_t peak_step = playSchedule(g, naming, prof);
  findLargestAtPeak(g, phases, naming.m.storages, peak_step, opts.top_k, prof);
  // The table itself, not a copy: a second table, made at bucket's bound check while the graph is
  // at its largest, would raise the pipeline's peak (bench/README.md, "Figures behind the code").
  if (opts.lifetimes) prof.storages = std::move(naming.m.storages);
  return prof;
}

std::string_view peakClassName(PeakClass c) {
  static constexpr std::array<std::string_view, kPeakClasses> kNames = {
      "parameters", "other_inputs",        "gathered_parameters",  "communication_buffers",
      "outputs",    "forward_activations", "backward_temporaries", "other"};
  return kNames[static_cast<size_t>(c)];
}

std::string formatBytes(int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[64];
  if (u == 0)
    std::snprintf(buf, sizeof buf, "%lld B", static_cast<long long>(bytes));
  else
    std::snprintf(buf, sizeof buf, "%.2f %s", v, units[u]);
  return buf;
}

std::string AnalysisTraits<MemoryProfile>::fingerprint(const Graph&, const MemoryProfile& m) {
  std::string s;
  auto num = [&](int64_t v, char sep) {
    s += std::to_string(v);
    s += sep;
  };
  auto id = [&](const Node* n, char sep) {
    if (n)
      s += std::to_string(n->id());
    else
      s += '-';
    s += sep;
  };
  num(m.peak_bytes, '@');
  id(m.peak_node, ';');
  num(m.input_bytes, ';');
  for (const PhasePeak& p : m.phase_peaks) {
    num(p.bytes, '@');
    id(p.node, ',');
  }
  for (const int64_t bytes : m.peak_by_class)
    num(bytes, ',');
  for (const LiveTensor& t : m.largest_at_peak) {
    id(t.owner, '.');
    num(t.element, '=');
    num(t.bytes, ',');
  }
  s += ';';
  for (const int64_t live : m.curve)
    num(live, ',');
  return s;
}

}  // namespace jfx
