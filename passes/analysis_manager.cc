#include "passes/analysis_manager.h"

#include "ir/error.h"
#include "passes/diagnostic.h"

namespace jfx {

std::vector<std::string_view> AnalysisManager::cachedNames() const {
  std::vector<std::string_view> names;
  for (const auto& [name, entry] : entries_)
    names.push_back(name);
  return names;
}

void AnalysisManager::invalidate(const PreservedAnalyses& keep) {
  retired_.clear();  // between passes: nobody holds a reference any more
  if (keep.preservesAll()) return;
  std::set<std::string_view> dropped;
  for (const auto& [name, entry] : entries_)
    if (!keep.preserves(name)) dropped.insert(name);
  // Analyses computed from a dropped one go too, transitively (a few analyses, so a fixpoint),
  // unless the pass declared them preserved: a result refers to no other result, so one the
  // pass vouches for holds whatever happened to what it was computed from (remat keeps the
  // block analysis while the phases of its new nodes need computing).
  for (bool grew = true; grew;) {
    grew = false;
    for (const auto& [name, entry] : entries_) {
      if (dropped.count(name) || keep.preserves(name)) continue;
      for (std::string_view dep : entry.deps)
        if (dropped.count(dep)) {
          dropped.insert(name);
          grew = true;
          break;
        }
    }
  }
  for (std::string_view name : dropped)
    entries_.erase(name);
}

void AnalysisManager::restamp(const Graph& g) {
  if (graph_ != &g) return;
  for (auto& [name, entry] : entries_)
    entry.revision = g.revision();
}

AnalysisManager AnalysisManager::followTo(const Graph& source, const Graph& copy) const {
  AnalysisManager out;
  out.graph_ = &copy;
  if (graph_ != &source) return out;
  for (const auto& [name, entry] : entries_) {
    if (entry.revision != graph_->revision() || !entry.follow) continue;
    Entry e = entry;
    e.source = entry.value ? entry.value : entry.source;
    e.value.reset();
    e.revision = copy.revision();
    if (e.source) out.entries_.emplace(name, std::move(e));
  }
  return out;
}

AnalysisManager AnalysisManager::borrow() const {
  AnalysisManager out;
  out.graph_ = graph_;
  out.entries_ = entries_;
  return out;
}

void AnalysisManager::absorb(AnalysisManager&& nested, const Graph& g) {
  if (nested.graph_ != &g) return;
  bind(g);
  for (auto& [name, entry] : nested.entries_)
    if (entry.revision == g.revision()) entries_[name] = std::move(entry);
}

void AnalysisManager::clear() {
  entries_.clear();
  retired_.clear();
  graph_ = nullptr;
}

std::vector<std::string_view> AnalysisManager::verifyPreserved(const Graph& g) const {
  std::vector<std::string_view> broken;
  if (graph_ != &g) return broken;  // nothing cached for this graph
  for (const auto& [name, entry] : entries_)
    if (entry.value && entry.fingerprint_cached(g, entry.value.get()) != entry.fingerprint_fresh(g))
      broken.push_back(name);
  return broken;
}

void AnalysisManager::throwOtherGraph() {
  apiMisuse(
      "an analysis manager (PassContext) asked about a second graph; a pass working on a copy "
      "needs a PassContext of its own (PassContext::fork)");
}

void AnalysisManager::throwCycle(std::string_view name) const {
  std::string chain;
  for (std::string_view s : stack_)
    chain += std::string(s) + " -> ";
  apiMisuse("analysis " + quoteForMessage(name) + " asks for itself while being computed (" +
            chain + std::string(name) + ")");
}

}  // namespace jfx
