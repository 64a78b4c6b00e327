#include "passes/analysis/memory.h"

#include <algorithm>
#include <cstdio>

#include "ir/checked.h"
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

bool aliasesInput0(const Node* n) {
  AliasKind a = n->info().alias;
  return a == AliasKind::View || a == AliasKind::InPlace;
}

// Step 1 of the analysis, one sweep of the program (ir/walk.h: each node's memory is read
// once): which storage each output
// names, and the last use of each storage its inputs name (they come earlier, so theirs are
// known). The curve gets its bytes in step 2, which needs only what this keeps by step.
class StorageNaming {
 public:
  StorageNaming(const Graph& g, const PhaseInfo& phases, MemoryProfile& prof)
      : phases_(phases), prof_(prof) {
    m.begin.assign(g.maxId(), 0);
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
      return aliasesInput0(in0) ? m.first(in0) : m.element(in0, n->arg(1).toInt());
    if (aliasesInput0(n) && in0) return m.first(in0);
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

  // A getitem reading a multi-output node reads only its element, whose storage it names
  // itself, so it does not extend the other elements.
  void extend(const Node* p, size_t t) {
    for (uint32_t i = 0, k = outputCount(p); i < k; ++i)
      if (int32_t s = m.elems[m.begin[p->id()] + i]; s >= 0)
        m.storages[s].last_use = std::max(m.storages[s].last_use, static_cast<uint32_t>(t));
  }

  void readInputs(const Node* n, size_t step) {
    const bool getitem = n->info().category == OpCategory::Getitem;
    for (const Node* p : n->inputs()) {
      if (n->op() == OpKind::Output) {
        for (uint32_t i = 0, k = outputCount(p); i < k; ++i)
          if (int32_t s = m.elems[m.begin[p->id()] + i]; s >= 0)
            m.storages[s].last_use = Storage::kPinned;
        continue;
      }
      if (getitem && isMultiOutput(p)) continue;
      extend(p, step);
    }
    // A collective's inputs stay live until its wait: the transfer reads them until then.
    const Node* in0 = n->input(0);
    if (n->isWait() && in0 && in0->isCollective())
      for (const Node* q : in0->inputs())
        extend(q, step);
  }

  const PhaseInfo& phases_;
  MemoryProfile& prof_;
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

// Step 3: the largest tensors live at the peak: born at or before it, not freed before it.
void findLargestAtPeak(const Graph& g, const std::vector<Storage>& storages, size_t peak_step,
                       size_t top_k, MemoryProfile& prof) {
  std::vector<int32_t> at_peak;
  for (size_t s = 0; s < storages.size(); ++s) {
    const Storage& st = storages[s];
    if (st.born <= peak_step && (st.pinned() || st.last_use >= peak_step))
      at_peak.push_back(static_cast<int32_t>(s));
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
  StorageNaming naming(g, phases, prof);
  sweep(g, naming);
  naming.releaseNodeTables();
  const size_t peak_step = playSchedule(g, naming, prof);
  findLargestAtPeak(g, naming.m.storages, peak_step, opts.top_k, prof);
  // The table itself, not a copy: a second table, made at bucket's bound check while the graph is
  // at its largest, would raise the pipeline's peak (bench/README.md, "Figures behind the code").
  if (opts.lifetimes) prof.storages = std::move(naming.m.storages);
  return prof;
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
