#include "passes/analysis/blocks.h"

#include <algorithm>
#include <cctype>
#include <climits>
#include <map>
#include <set>
#include <utility>

#include "ir/walk.h"
#include "passes/analysis/phase.h"

namespace jfx {
namespace {

// An index component of a dotted FQN: the prefix before it ("layers") and its value (3), for
// every component that is all digits. A leading one ("1.fc1.weight": a model that is an
// nn.Sequential of blocks) has the empty prefix, the root module. A module name that ends in an
// underscore and digits is one too (torchvision's ViT: `encoder.layers.encoder_layer_3`): its
// prefix runs through the underscore ("encoder.layers.encoder_layer_"). A parameter's own name
// (an LSTM's `weight_ih_l0`) never makes a container: the search for containers passes
// `last_too` = false for parameter FQNs; the other callers look up prefixes among the
// containers found, in module FQNs and block names too, whose last component is a module.
struct IndexAt {
  size_t prefix_len;  // the container is fqn.substr(0, prefix_len)
  size_t end;         // the block name is fqn.substr(0, end)
  int64_t value;
};

// Calls f(IndexAt) for each, left to right (no list: this runs several times per parameter).
template <class F>
void forEachIndex(std::string_view fqn, F&& f, bool last_too = true) {
  auto isDigit = [](char c) { return c >= '0' && c <= '9'; };
  size_t start = 0;
  while (start < fqn.size()) {
    size_t end = fqn.find('.', start);
    if (end == std::string_view::npos) end = fqn.size();
    std::string_view part = fqn.substr(start, end - start);
    // The digits at the end of the component, and where they start.
    size_t d = part.size();
    while (d > 0 && isDigit(part[d - 1]))
      --d;
    const size_t n_digits = part.size() - d;
    const bool whole = n_digits > 0 && d == 0;
    const bool suffixed = n_digits > 0 && d >= 2 && part[d - 1] == '_' &&
                          (last_too || end < fqn.size()) &&
                          std::isalpha(static_cast<unsigned char>(part[0]));
    if ((whole || suffixed) && n_digits <= 18) {
      int64_t v = 0;
      for (char c : part.substr(d))
        v = v * 10 + (c - '0');
      f(IndexAt{whole ? (start > 0 ? start - 1 : 0) : start + d, end, v});
    }
    start = end + 1;
  }
}

// A prefix with its index components replaced by '#': "stages.#.blocks" for "stages.2.blocks".
std::string indexPattern(std::string_view prefix) {
  std::string out;
  size_t start = 0;
  while (start <= prefix.size()) {
    size_t end = prefix.find('.', start);
    if (end == std::string_view::npos) end = prefix.size();
    std::string_view part = prefix.substr(start, end - start);
    const bool index =
        !part.empty() && part.find_first_not_of("0123456789") == std::string_view::npos;
    if (start > 0) out += '.';
    out += index ? std::string_view("#") : part;
    start = end + 1;
  }
  return out;
}

// Candidate containers: prefixes followed by at least two distinct integers; and a prefix
// followed by one, inside an indexed entry, whose siblings are containers (a stage of depth 1,
// stages.0.blocks.0, beside stages.1.blocks.0 and stages.1.blocks.1: the same stack, one deep).
std::set<std::string> candidateContainers(const std::vector<std::string>& fqns) {
  std::map<std::string, std::set<int64_t>> ints;
  for (const std::string& f : fqns)
    forEachIndex(
        f, [&](const IndexAt& ix) { ints[f.substr(0, ix.prefix_len)].insert(ix.value); },
        /*last_too=*/false);
  std::set<std::string> out, patterns;
  for (auto& [prefix, values] : ints)
    if (values.size() >= 2) {
      out.insert(prefix);
      patterns.insert(indexPattern(prefix));
    }
  for (auto& [prefix, values] : ints)
    if (values.size() == 1 && !prefix.empty()) {
      std::string pattern = indexPattern(prefix);
      if (pattern != prefix && patterns.count(pattern)) out.insert(prefix);
    }
  return out;
}

// Candidates whose entries are not repeats of one submodule: T5's `block.N.layer.M` holds the
// self-attention at M = 0 and the feed-forward at M = 1 (a list of different modules, not a
// repeated one). Entries repeat when the parameter names below `P.<i>.` of one include those of
// the next (equal, or a superset: T5's block 0 adds the relative position bias, convbn's first
// block of a stage adds a shortcut). Checked on consecutive indices only: O(FQNs x log).
std::set<std::string> heterogeneousContainers(const std::vector<std::string>& fqns,
                                              const std::set<std::string>& candidates) {
  std::map<std::string, std::map<int64_t, std::set<std::string>>> suffixes;
  for (const std::string& f : fqns)
    forEachIndex(f, [&](const IndexAt& ix) {
      std::string prefix = f.substr(0, ix.prefix_len);
      if (!candidates.count(prefix)) return;
      suffixes[prefix][ix.value].insert(ix.end < f.size() ? f.substr(ix.end + 1) : "");
    });
  std::set<std::string> out;
  for (const auto& [prefix, entries] : suffixes) {
    // One entry (a sibling of a container, above): nothing to compare, so nothing says its
    // entries differ.
    bool repeated = entries.size() == 1;
    const std::set<std::string>* prev = nullptr;
    for (const auto& [index, names] : entries) {
      if (prev && (std::includes(prev->begin(), prev->end(), names.begin(), names.end()) ||
                   std::includes(names.begin(), names.end(), prev->begin(), prev->end()))) {
        repeated = true;
        break;
      }
      prev = &names;
    }
    if (!repeated) out.insert(prefix);
  }
  return out;
}

// Candidates whose entries are single layers: every parameter below `P.<i>.` sits directly in it
// (`mlp.0.weight`, `mlp.2.bias`), so an entry is one Linear, convolution or norm, not a
// submodule with parts. That is an nn.Sequential inside a block (a transformer's MLP, a
// norm-activation-convolution stack), whose entries also look alike (weight, bias): inside an
// outer container it is part of that container's block, not a block of its own.
std::set<std::string> layerListContainers(const std::vector<std::string>& fqns,
                                          const std::set<std::string>& candidates) {
  std::set<std::string> seen, nested;
  for (const std::string& f : fqns)
    forEachIndex(f, [&](const IndexAt& ix) {
      std::string prefix = f.substr(0, ix.prefix_len);
      if (!candidates.count(prefix)) return;
      seen.insert(prefix);
      if (ix.end < f.size() && f.find('.', ix.end + 1) != std::string::npos)
        nested.insert(std::move(prefix));
    });
  std::set<std::string> out;
  for (const std::string& c : seen)
    if (!nested.count(c)) out.insert(c);
  return out;
}

// The chosen block of one FQN: the innermost candidate that is neither side by side nor
// heterogeneous nor a list of single layers inside another such candidate; else the innermost
// one that is neither side by side nor heterogeneous; else the innermost repeated one (side by
// side with nothing around it, or read as side by side after bucketing hid which parameters a
// compute node reads: a container whose entries repeat still beats a list of different
// modules); else the innermost candidate.
struct Choice {
  std::string container;  // may be "", the root
  std::string block;      // "" when none was found
  bool module = false;    // entries are repeated modules with parts (not single layers)
};
Choice chooseBlock(std::string_view fqn, const std::set<std::string>& candidates,
                   const std::set<std::string>& heterogeneous,
                   const std::set<std::string>& layer_lists,
                   const std::function<bool(const std::string&)>& parallel) {
  // (container, block); the block is "" when none was found (the container may be "", the root)
  std::pair<std::string, std::string> inner_any, inner_rep, inner_seq, inner_module;
  forEachIndex(fqn, [&](const IndexAt& ix) {
    std::string prefix(fqn.substr(0, ix.prefix_len));
    if (!candidates.count(prefix)) return;
    // The root names blocks only when its entries repeat: an nn.Sequential of different stages
    // (an embedding, a stack, a head) keeps its parameters outside blocks, as before there was
    // a root container.
    if (prefix.empty() && heterogeneous.count(prefix)) return;
    std::pair<std::string, std::string> c{prefix, std::string(fqn.substr(0, ix.end))};
    inner_any = c;
    if (heterogeneous.count(prefix)) return;
    inner_rep = c;
    if (parallel && parallel(prefix)) return;
    inner_seq = c;
    if (!layer_lists.count(prefix)) inner_module = c;
  });
  if (!inner_module.second.empty()) return {inner_module.first, inner_module.second, true};
  if (!inner_seq.second.empty()) return {inner_seq.first, inner_seq.second, false};
  const auto& c = inner_rep.second.empty() ? inner_any : inner_rep;
  return {c.first, c.second, false};
}

// Whether some block in `blocks` (sorted) lies strictly inside `block` ("stages.1.blocks.0"
// inside "stages.1").
bool enclosesBlock(const std::string& block, const std::set<std::string>& blocks) {
  const std::string prefix = block + ".";
  auto it = blocks.lower_bound(prefix);
  return it != blocks.end() && it->starts_with(prefix);
}

}  // namespace

BlockNaming nameBlocks(const std::vector<std::string>& fqns,
                       const std::function<bool(const std::string&)>& parallel) {
  BlockNaming out;
  std::set<std::string> candidates = candidateContainers(fqns);
  std::set<std::string> heterogeneous = heterogeneousContainers(fqns, candidates);
  std::set<std::string> layer_lists = layerListContainers(fqns, candidates);
  // A root of different modules is simply no container (no outer one it gave way to).
  for (const std::string& h : heterogeneous)
    if (!h.empty()) out.heterogeneous.push_back(h);
  std::vector<Choice> choices;
  choices.reserve(fqns.size());
  bool any_module = false;
  for (const std::string& f : fqns) {
    choices.push_back(chooseBlock(f, candidates, heterogeneous, layer_lists, parallel));
    any_module = any_module || choices.back().module;
  }
  // The units a user would wrap (docs/passes.md, "Blocks"). Where the model has blocks that are
  // repeated modules, a list of single layers with no container around it (ConvNeXt's
  // `stem.0` convolution and `stem.1` norm) is not a list of blocks; and the parameters an entry
  // holds beside the blocks of an inner container (`stages.1.downsample` beside
  // `stages.1.blocks.M`) are not a block either: both stay outside every block.
  std::set<std::string> module_blocks;
  for (const Choice& c : choices)
    if (c.module) module_blocks.insert(c.block);
  std::set<std::string> used;
  out.block_of.reserve(fqns.size());
  for (Choice& c : choices) {
    if (!c.block.empty() && ((any_module && !c.module && layer_lists.count(c.container)) ||
                             enclosesBlock(c.block, module_blocks)))
      c.block.clear();
    if (!c.block.empty()) used.insert(c.container);
    out.block_of.push_back(std::move(c.block));
  }
  out.containers.assign(used.begin(), used.end());
  return out;
}

std::string blockNameOf(std::string_view fqn, const std::vector<std::string>& containers) {
  std::string best;
  forEachIndex(fqn, [&](const IndexAt& ix) {
    if (std::binary_search(containers.begin(), containers.end(), fqn.substr(0, ix.prefix_len),
                           std::less<>()))
      best = std::string(fqn.substr(0, ix.end));
  });
  return best;
}

int32_t BlockAnalysis::blockOf(const Node* param) const {
  return param->id() < of_param_.size() ? of_param_[param->id()] : -1;
}

std::vector<uint32_t> BlockAnalysis::firstUserIds() const {
  std::vector<uint32_t> ids;
  for (const Block& b : blocks)
    if (b.first_user) ids.push_back(b.first_user->id());
  std::sort(ids.begin(), ids.end());
  return ids;
}

int32_t BlockAnalysis::blockOfFqn(std::string_view fqn) const {
  std::string name = blockNameOf(fqn, containers);
  if (name.empty()) return -1;
  auto it = by_name_.find(name);
  return it == by_name_.end() ? -1 : it->second;
}

std::string containerLabel(const std::string& container) {
  return container.empty() ? "the root module" : container;
}

std::string BlockAnalysis::summary() const {
  std::string s = std::to_string(blocks.size()) + " block" + (blocks.size() == 1 ? "" : "s");
  if (!containers.empty()) {
    s += " in ";
    for (size_t i = 0; i < containers.size(); ++i)
      s += (i ? ", " : "") + containerLabel(containers[i]);
  }
  if (!blocks.empty()) s += " (" + blocks.front().name + " .. " + blocks.back().name + ")";
  s += ", " + std::to_string(parameters_in_blocks) + " of " + std::to_string(parameters) +
       " parameters in blocks";
  return s;
}

std::string BlockAnalysis::noBlocksMessage(std::string_view pass) const {
  return std::string(pass) + ": no repeated blocks among " + std::to_string(parameters) +
         " parameters (no FQN prefix P with P.<int> for two or more integers, and no "
         "nn.Sequential of repeated modules at the root)";
}

BlockAnalysis analyzeBlocks(const Graph& g) {
  return analyzeBlocks(g, computePhases(g));
}

namespace {

// Step 1 of the block analysis, one sweep of the program (ir/walk.h: a node's memory is read
// once). Operands precede
// users, so a parameter is known before any node reading it.
//
// group[id]: the parameters a node is computed from alone, ignoring input-free factories
// (padding zeros), as an index into `groups` (sorted parameter indices), or -1 when it reads an
// activation. Parameter k's own group is k: its casts, views and gather. A node reading several
// groups and nothing else has their union, up to kMaxParamsPerValue parameters: a bucket's
// copy-in (the concatenation of a block's parameters), its gather and the pieces split from it
// are the parameters' own values, not compute, so the first compute node reading a block is the
// same before and after bucketing.
class ParameterReaders {
 public:
  ParameterReaders(const Graph& g, const PhaseInfo& phases)
      : pos(g), group(g, -1), phases_(phases) {}

  void visit(Node* n, uint32_t i) {
    pos[n] = i;
    if (n->op() == OpKind::Placeholder && n->inputKind() == InputKind::Parameter)
      return addParameter(n);
    if (n->op() != OpKind::CallFunction) return;
    bool activation = false;
    read_.clear();
    for (Node* p : n->inputs()) {
      if (p->op() == OpKind::CallFunction && p->inputs().empty()) continue;  // factory
      const int32_t gp = group[p];
      if (gp < 0)
        activation = true;
      else if (std::find(read_.begin(), read_.end(), gp) == read_.end())
        read_.push_back(gp);
    }
    if (!activation && computedFromParameters(n)) return;
    if (read_.empty()) return;
    const bool fwd = phases_.isForwardOrLoss(n);
    for (int32_t gp : read_) {
      if (i < any[gp].step) any[gp] = {i, n};
      if (fwd && i < fwd_first[gp].step) fwd_first[gp] = {i, n};
    }
  }

  struct Reader {
    size_t step = SIZE_MAX;  // SIZE_MAX for none
    Node* node = nullptr;
  };
  NodeMap<uint32_t> pos;
  std::vector<Node*> params;
  std::vector<std::string> fqns;
  NodeMap<int32_t> group;
  std::vector<std::vector<uint32_t>> groups;
  // Per group: the first compute node reading it in forward, and at all.
  std::vector<Reader> fwd_first, any;

 private:
  int32_t newGroup(std::vector<uint32_t> members) {
    groups.push_back(std::move(members));
    fwd_first.emplace_back();
    any.emplace_back();
    return static_cast<int32_t>(groups.size() - 1);
  }
  void addParameter(Node* n) {
    group[n] = newGroup({static_cast<uint32_t>(params.size())});
    params.push_back(n);
    std::string f(n->inputFqn());
    if (f.empty())
      for (Node* u : n->users())
        if (!u->meta().module_fqn.str().empty()) {
          f = std::string(u->meta().module_fqn.str());
          break;
        }
    fqns.push_back(f.empty() ? std::string(n->name()) : f);
  }
  // A node reading one or more parameter groups and no activation: its value is theirs (up to
  // kMaxParamsPerValue parameters), not compute.
  bool computedFromParameters(Node* n) {
    if (read_.size() == 1) {
      group[n] = read_[0];
      return true;
    }
    if (read_.empty()) return false;
    std::vector<uint32_t> members;
    for (int32_t gp : read_)
      members.insert(members.end(), groups[gp].begin(), groups[gp].end());
    std::sort(members.begin(), members.end());
    members.erase(std::unique(members.begin(), members.end()), members.end());
    if (members.size() > kMaxParamsPerValue) return false;
    group[n] = newGroup(std::move(members));
    return true;
  }
  const PhaseInfo& phases_;
  std::vector<int32_t> read_;  // scratch: the groups one node reads
};

// The first compute node reading each parameter: the first reading any group it is in.
struct FirstUsers {
  std::vector<ParameterReaders::Reader> fwd, any;
};
FirstUsers firstUsers(const ParameterReaders& r) {
  FirstUsers f;
  f.fwd.resize(r.params.size());
  f.any.resize(r.params.size());
  for (size_t gp = 0; gp < r.groups.size(); ++gp)
    for (uint32_t k : r.groups[gp]) {
      if (r.fwd_first[gp].step < f.fwd[k].step) f.fwd[k] = r.fwd_first[gp];
      if (r.any[gp].step < f.any[k].step) f.any[k] = r.any[gp];
    }
  return f;
}

// One candidate container's block, for the side-by-side check: its first compute step and node,
// and its parameters.
struct Entry {
  size_t first = SIZE_MAX;
  Node* node = nullptr;
  std::vector<size_t> params;
};

// Whether `cur`'s first compute node depends on `prev`'s parameters: a walk back over
// activations (not parameter chains), never before prev's first compute node (nothing earlier
// can read prev's parameters). `in_prev` marks prev's parameters; `seen`/`stamp`: scratch.
bool readsPrevious(const ParameterReaders& r, const Entry& prev, const Entry& cur,
                   const std::vector<uint8_t>& in_prev, NodeMap<uint32_t>& seen, uint32_t stamp) {
  std::vector<Node*> work{cur.node};
  seen[cur.node] = stamp;
  while (!work.empty()) {
    Node* x = work.back();
    work.pop_back();
    for (Node* p : x->inputs()) {
      if (seen[p] == stamp) continue;
      seen[p] = stamp;
      if (const int32_t gp = r.group[p]; gp >= 0) {
        for (uint32_t k : r.groups[gp])
          if (in_prev[k]) return true;
        continue;
      }
      if (r.pos[p] < prev.first) continue;
      work.push_back(p);
    }
  }
  return false;
}

// The candidate containers whose blocks run side by side: for consecutive blocks (by first
// use), fewer than half of the pairs have the later block read the earlier one's parameters.
std::set<std::string> parallelContainers(const Graph& g, const ParameterReaders& r,
                                         const FirstUsers& first) {
  const std::set<std::string> candidates = candidateContainers(r.fqns);
  std::map<std::string, std::map<int64_t, Entry>> by_container;
  for (size_t k = 0; k < r.params.size(); ++k)
    forEachIndex(r.fqns[k], [&](const IndexAt& ix) {
      std::string prefix = r.fqns[k].substr(0, ix.prefix_len);
      if (!candidates.count(prefix)) return;
      Entry& c = by_container[prefix][ix.value];
      c.params.push_back(k);
      if (first.fwd[k].step < c.first) c.first = first.fwd[k].step, c.node = first.fwd[k].node;
    });
  std::set<std::string> parallel;
  std::vector<uint8_t> in_prev(r.params.size(), 0);
  NodeMap<uint32_t> seen(g, 0);
  uint32_t stamp = 0;
  for (auto& [container, blocks_map] : by_container) {
    std::vector<const Entry*> seq;
    for (auto& [idx, c] : blocks_map)
      if (c.node) seq.push_back(&c);
    std::sort(seq.begin(), seq.end(),
              [](const Entry* x, const Entry* y) { return x->first < y->first; });
    size_t pairs = 0, chained = 0;
    for (size_t i = 1; i < seq.size(); ++i, ++pairs) {
      for (size_t k : seq[i - 1]->params)
        in_prev[k] = 1;
      chained += readsPrevious(r, *seq[i - 1], *seq[i], in_prev, seen, ++stamp);
      for (size_t k : seq[i - 1]->params)
        in_prev[k] = 0;
    }
    if (pairs > 0 && 2 * chained < pairs) parallel.insert(container);
  }
  return parallel;
}

// The blocks `naming` gives the parameters, each with its first user (the first compute node
// reading one of its parameters, forward first), in first-appearance order; `step` gets each
// block's first user's step.
void assembleBlocks(BlockAnalysis& a, const BlockNaming& naming, const ParameterReaders& r,
                    const FirstUsers& first, std::vector<size_t>& step) {
  std::map<std::string, size_t> index_of;  // block name -> position in a.blocks (unsorted)
  for (size_t k = 0; k < r.params.size(); ++k) {
    const std::string& name = naming.block_of[k];
    if (name.empty()) continue;
    auto [it, fresh] = index_of.emplace(name, a.blocks.size());
    if (fresh) {
      Block b;
      b.name = name;
      forEachIndex(name, [&](const IndexAt& ix) {  // the last
        b.container = name.substr(0, ix.prefix_len);
        b.index = ix.value;
      });
      a.blocks.push_back(std::move(b));
      step.push_back(SIZE_MAX);
    }
    Block& b = a.blocks[it->second];
    b.params.push_back(r.params[k]);
    const bool fwd = first.fwd[k].step != SIZE_MAX;
    const ParameterReaders::Reader& user = fwd ? first.fwd[k] : first.any[k];
    if (user.step < step[it->second]) {
      step[it->second] = user.step;
      b.first_user = user.node;
    }
    ++a.parameters_in_blocks;
  }
}

// Blocks by first use in forward, then container and index.
void sortBlocks(BlockAnalysis& a, const std::vector<size_t>& step) {
  std::vector<size_t> order(a.blocks.size());
  for (size_t k = 0; k < order.size(); ++k)
    order[k] = k;
  std::sort(order.begin(), order.end(), [&](size_t x, size_t y) {
    const Block& bx = a.blocks[x];
    const Block& by = a.blocks[y];
    return std::tie(step[x], bx.container, bx.index) < std::tie(step[y], by.container, by.index);
  });
  std::vector<Block> sorted;
  sorted.reserve(order.size());
  for (size_t k : order)
    sorted.push_back(std::move(a.blocks[k]));
  a.blocks = std::move(sorted);
}

}  // namespace

BlockAnalysis analyzeBlocks(const Graph& g, const PhaseInfo& phases) {
  BlockAnalysis a;
  ParameterReaders readers(g, phases);
  sweep(g, readers);
  const FirstUsers first = firstUsers(readers);
  a.parameters = static_cast<int64_t>(readers.params.size());
  a.of_param_.assign(g.maxId(), -1);
  if (readers.params.empty()) return a;

  const std::set<std::string> parallel = parallelContainers(g, readers, first);
  a.parallel_containers.assign(parallel.begin(), parallel.end());
  BlockNaming naming =
      nameBlocks(readers.fqns, [&](const std::string& c) { return parallel.count(c) > 0; });
  a.containers = naming.containers;
  for (const std::string& c : naming.heterogeneous)
    if (!std::binary_search(a.containers.begin(), a.containers.end(), c))
      a.heterogeneous_containers.push_back(c);
  std::vector<size_t> step;  // by position in a.blocks: the first user's step
  assembleBlocks(a, naming, readers, first, step);
  sortBlocks(a, step);
  for (size_t i = 0; i < a.blocks.size(); ++i) {
    a.by_name_[a.blocks[i].name] = static_cast<int32_t>(i);
    for (Node* p : a.blocks[i].params)
      a.of_param_[p->id()] = static_cast<int32_t>(i);
  }
  return a;
}

std::string AnalysisTraits<BlockAnalysis>::fingerprint(const Graph&, const BlockAnalysis& a) {
  std::string s;
  for (const Block& b : a.blocks) {
    for (const std::string* part : {&b.name, &b.container}) {
      s += *part;
      s += '|';
    }
    s += std::to_string(b.index);
    s += '|';
    s += b.first_user ? std::to_string(b.first_user->id()) : std::string("-");
    s += '[';
    for (const Node* p : b.params) {
      s += std::to_string(p->id());
      s += ',';
    }
    s += "];";
  }
  for (const auto& c : a.containers) {
    s += "c:";
    s += c;
    s += ';';
  }
  for (const auto& c : a.parallel_containers) {
    s += "p:";
    s += c;
    s += ';';
  }
  for (const auto& c : a.heterogeneous_containers) {
    s += "h:";
    s += c;
    s += ';';
  }
  s += std::to_string(a.parameters);
  s += '/';
  s += std::to_string(a.parameters_in_blocks);
  return s;
}

}  // namespace jfx
