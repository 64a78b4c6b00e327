#include "passes/analysis/blocks.h"

#include <algorithm>
#include <climits>
#include <map>
#include <set>
#include <utility>

#include "passes/analysis/phase.h"

namespace jfx {
namespace {

// An index component of a dotted FQN: the prefix before it ("layers") and its value (3), for
// every component that is all digits. A leading one ("1.fc1.weight": a model that is an
// nn.Sequential of blocks) has the empty prefix, the root module.
struct IndexAt {
  size_t prefix_len;  // the container is fqn.substr(0, prefix_len)
  size_t end;         // the block name is fqn.substr(0, end)
  int64_t value;
};

// Calls f(IndexAt) for each, left to right (no list: this runs several times per parameter).
template <class F>
void forEachIndex(std::string_view fqn, F&& f) {
  size_t start = 0;
  while (start < fqn.size()) {
    size_t end = fqn.find('.', start);
    if (end == std::string_view::npos) end = fqn.size();
    std::string_view part = fqn.substr(start, end - start);
    bool digits =
        !part.empty() && part.size() <= 18 &&
        std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (digits) {
      int64_t v = 0;
      for (char c : part)
        v = v * 10 + (c - '0');
      f(IndexAt{start > 0 ? start - 1 : 0, end, v});
    }
    start = end + 1;
  }
}

// Candidate containers: prefixes followed by at least two distinct integers.
std::set<std::string> candidateContainers(const std::vector<std::string>& fqns) {
  std::map<std::string, std::set<int64_t>> ints;
  for (const std::string& f : fqns)
    forEachIndex(f, [&](const IndexAt& ix) { ints[f.substr(0, ix.prefix_len)].insert(ix.value); });
  std::set<std::string> out;
  for (auto& [prefix, values] : ints)
    if (values.size() >= 2) out.insert(prefix);
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
    bool repeated = false;
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

// The chosen block of one FQN: the innermost candidate that is neither side by side nor
// heterogeneous; else the innermost repeated one (side by side with nothing around it, or read
// as side by side after bucketing hid which parameters a compute node reads: a container whose
// entries repeat still beats a list of different modules); else the innermost candidate.
std::pair<std::string, std::string> chooseBlock(
    std::string_view fqn, const std::set<std::string>& candidates,
    const std::set<std::string>& heterogeneous,
    const std::function<bool(const std::string&)>& parallel) {
  // (container, block); the block is "" when none was found (the container may be "", the root)
  std::pair<std::string, std::string> inner_any, inner_rep, inner_seq;
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
    if (!parallel || !parallel(prefix)) inner_seq = c;
  });
  if (!inner_seq.second.empty()) return inner_seq;
  return inner_rep.second.empty() ? inner_any : inner_rep;
}

}  // namespace

BlockNaming nameBlocks(const std::vector<std::string>& fqns,
                       const std::function<bool(const std::string&)>& parallel) {
  BlockNaming out;
  std::set<std::string> candidates = candidateContainers(fqns);
  std::set<std::string> heterogeneous = heterogeneousContainers(fqns, candidates);
  // A root of different modules is simply no container (no outer one it gave way to).
  for (const std::string& h : heterogeneous)
    if (!h.empty()) out.heterogeneous.push_back(h);
  std::set<std::string> used;
  out.block_of.reserve(fqns.size());
  for (const std::string& f : fqns) {
    auto [container, block] = chooseBlock(f, candidates, heterogeneous, parallel);
    if (!block.empty()) used.insert(container);
    out.block_of.push_back(block);
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

BlockAnalysis analyzeBlocks(const Graph& g, const PhaseInfo& phases) {
  BlockAnalysis a;
  const size_t n_ids = g.maxId();
  // One walk of the program (a node's memory is read once: at 10^6 nodes each walk that comes
  // back to a node costs a cache miss per node). Operands precede users, so a parameter is known
  // before any node reading it.
  std::vector<uint32_t> pos(n_ids, 0);
  std::vector<Node*> params;
  std::vector<std::string> fqns;
  // derived[id]: the parameter a node is computed from alone (casts, views, the gather of it),
  // ignoring input-free factories (padding zeros).
  std::vector<Node*> derived(n_ids, nullptr);
  std::vector<int32_t> param_index(n_ids, -1);
  // First compute node (not derived from one parameter) reading each parameter, forward first.
  std::vector<size_t> first_fwd, first_any;
  std::vector<Node*> first_fwd_node;
  uint32_t i = 0;
  for (Node* n = g.first(); n; n = n->next(), ++i) {
    pos[n->id()] = i;
    if (n->op() == OpKind::Placeholder && n->inputKind() == InputKind::Parameter) {
      derived[n->id()] = n;
      param_index[n->id()] = static_cast<int32_t>(params.size());
      params.push_back(n);
      first_fwd.push_back(SIZE_MAX);
      first_any.push_back(SIZE_MAX);
      first_fwd_node.push_back(nullptr);
      std::string f(n->inputFqn());
      if (f.empty())
        for (Node* u : n->users())
          if (!u->meta().module_fqn.str().empty()) {
            f = std::string(u->meta().module_fqn.str());
            break;
          }
      fqns.push_back(f.empty() ? std::string(n->name()) : f);
      continue;
    }
    if (n->op() != OpKind::CallFunction) continue;
    Node* sole = nullptr;
    bool several = false;
    for (Node* p : n->inputs()) {
      if (p == sole) continue;
      if (p->op() == OpKind::CallFunction && p->inputs().empty()) continue;  // factory
      if (sole) several = true;
      sole = p;
    }
    if (!several && sole && derived[sole->id()]) {
      derived[n->id()] = derived[sole->id()];
      continue;
    }
    bool fwd = false, fwd_known = false;  // the phase is looked up only when a parameter is read
    for (Node* p : n->inputs()) {
      Node* q = derived[p->id()];
      if (!q) continue;
      if (!fwd_known) fwd = phases.isForwardOrLoss(n), fwd_known = true;
      size_t k = static_cast<size_t>(param_index[q->id()]);
      first_any[k] = std::min<size_t>(first_any[k], i);
      if (fwd && i < first_fwd[k]) {
        first_fwd[k] = i;
        first_fwd_node[k] = n;
      }
    }
  }
  a.parameters = static_cast<int64_t>(params.size());
  a.of_param_.assign(n_ids, -1);
  if (params.empty()) return a;

  // Which candidate containers run their blocks one after another.
  std::set<std::string> candidates = candidateContainers(fqns);
  std::set<std::string> parallel;
  {
    // container -> block index -> (first compute step, node, params)
    struct Cand {
      size_t first = SIZE_MAX;
      Node* node = nullptr;
      std::vector<size_t> params;
    };
    std::map<std::string, std::map<int64_t, Cand>> by_container;
    for (size_t k = 0; k < params.size(); ++k)
      forEachIndex(fqns[k], [&](const IndexAt& ix) {
        std::string prefix = fqns[k].substr(0, ix.prefix_len);
        if (!candidates.count(prefix)) return;
        Cand& c = by_container[prefix][ix.value];
        c.params.push_back(k);
        if (first_fwd[k] < c.first) {
          c.first = first_fwd[k];
          c.node = first_fwd_node[k];
        }
      });
    std::vector<uint8_t> in_prev(params.size(), 0);
    std::vector<uint32_t> seen(n_ids, 0);
    uint32_t stamp = 0;
    for (auto& [container, blocks_map] : by_container) {
      std::vector<const Cand*> seq;
      for (auto& [idx, c] : blocks_map)
        if (c.node) seq.push_back(&c);
      std::sort(seq.begin(), seq.end(),
                [](const Cand* x, const Cand* y) { return x->first < y->first; });
      size_t pairs = 0, chained = 0;
      for (size_t i = 1; i < seq.size(); ++i) {
        const Cand& prev = *seq[i - 1];
        const Cand& cur = *seq[i];
        ++pairs;
        for (size_t k : prev.params)
          in_prev[k] = 1;
        // Walk back from cur's first compute node over activations (not parameter chains),
        // never before prev's first compute node: nothing earlier can read prev's parameters.
        ++stamp;
        bool found = false;
        std::vector<Node*> work{cur.node};
        seen[cur.node->id()] = stamp;
        while (!work.empty() && !found) {
          Node* x = work.back();
          work.pop_back();
          for (Node* p : x->inputs()) {
            if (seen[p->id()] == stamp) continue;
            seen[p->id()] = stamp;
            if (Node* q = derived[p->id()]) {
              if (in_prev[static_cast<size_t>(param_index[q->id()])]) found = true;
              continue;
            }
            if (pos[p->id()] < prev.first) continue;
            work.push_back(p);
          }
        }
        chained += found;
        for (size_t k : prev.params)
          in_prev[k] = 0;
      }
      if (pairs > 0 && 2 * chained < pairs) parallel.insert(container);
    }
  }
  a.parallel_containers.assign(parallel.begin(), parallel.end());

  BlockNaming naming =
      nameBlocks(fqns, [&](const std::string& c) { return parallel.count(c) > 0; });
  a.containers = naming.containers;
  for (const std::string& c : naming.heterogeneous)
    if (!std::binary_search(a.containers.begin(), a.containers.end(), c))
      a.heterogeneous_containers.push_back(c);
  std::map<std::string, size_t> index_of;  // block name -> position in a.blocks (unsorted)
  for (size_t k = 0; k < params.size(); ++k) {
    const std::string& name = naming.block_of[k];
    if (name.empty()) continue;
    auto [it, fresh] = index_of.emplace(name, a.blocks.size());
    if (fresh) {
      Block b;
      b.name = name;
      const size_t dot = name.rfind('.');
      b.container = dot == std::string::npos ? std::string() : name.substr(0, dot);
      forEachIndex(name, [&](const IndexAt& ix) { b.index = ix.value; });  // the last
      a.blocks.push_back(std::move(b));
    }
    Block& b = a.blocks[it->second];
    b.params.push_back(params[k]);
    b.first_use = std::min(b.first_use, first_fwd[k] != SIZE_MAX ? first_fwd[k] : first_any[k]);
    ++a.parameters_in_blocks;
  }
  std::sort(a.blocks.begin(), a.blocks.end(), [](const Block& x, const Block& y) {
    return std::tie(x.first_use, x.container, x.index) <
           std::tie(y.first_use, y.container, y.index);
  });
  for (size_t i = 0; i < a.blocks.size(); ++i) {
    a.by_name_[a.blocks[i].name] = static_cast<int32_t>(i);
    for (Node* p : a.blocks[i].params)
      a.of_param_[p->id()] = static_cast<int32_t>(i);
  }
  return a;
}

std::string AnalysisTraits<BlockAnalysis>::fingerprint(const BlockAnalysis& a) {
  std::string s;
  for (const Block& b : a.blocks) {
    for (const std::string* part : {&b.name, &b.container}) {
      s += *part;
      s += '|';
    }
    s += std::to_string(b.index);
    s += '|';
    s += std::to_string(b.first_use);
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
