// Analyses cached per graph and shared by the passes of a pipeline (MLIR's getAnalysis /
// markAnalysesPreserved, LLVM's PreservedAnalyses).
//
// A pass asks `ctx.analyses.get<PhaseInfo>(g)`; the first request computes it, later requests
// (by this pass or the next ones) get the cached result. When a pass reports a change, the pass
// manager drops every analysis the pass did not declare preserved (`ctx.preserve<PhaseInfo>()`),
// and with it every analysis computed from a dropped one unless that one is declared preserved
// too (a result refers to no other result: an analysis must copy what it reads from another);
// a pass that reports no change keeps them all. Declaring an analysis preserved is a promise
// that recomputing it on the changed graph would give the same result; `jointfx opt
// --verify-full` checks every such promise by recomputing (verifyPreserved below).
//
// A result describes the graph as it was when it was computed, and a reference to it stays valid
// until the pass manager's next invalidation (or clear()). Asking again after a structural edit
// (Graph::generation() moved: nodes made, moved, erased, rewired or renamed) computes afresh, so
// a pass that edits the graph and asks again, or a caller running passes by hand with one
// PassContext, never gets a stale answer; only the pass manager, between passes, vouches that a
// kept result still holds (restamp). Meta edits are not structural: an analysis that reads a
// meta field (the phase analysis reads meta.phase) is stale after a pass rewrites that field on
// existing nodes unless the pass manager invalidates it, which it does unless the pass declared
// it preserved.
//
// An analysis A is any type with a specialization of AnalysisTraits<A> next to it:
//   static constexpr std::string_view name = "phases";          // unique, for messages
//   static A compute(const Graph& g, AnalysisManager& am);      // may get<> other analyses
//   static std::string fingerprint(const Graph& g, const A& a);  // equal iff the results agree
//                                                                // about g's live nodes
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "ir/graph.h"

namespace jfx {

class AnalysisManager;

template <class A>
struct AnalysisTraits;

// What a changing pass leaves valid. Default: nothing.
class PreservedAnalyses {
 public:
  template <class A>
  PreservedAnalyses& preserve() {
    names_.insert(AnalysisTraits<A>::name);
    return *this;
  }
  PreservedAnalyses& preserveAll() {
    all_ = true;
    return *this;
  }
  bool preservesAll() const { return all_; }
  bool preserves(std::string_view name) const { return all_ || names_.count(name) > 0; }
  bool empty() const { return !all_ && names_.empty(); }

 private:
  bool all_ = false;
  std::set<std::string_view> names_;
};

class AnalysisManager {
 public:
  // The analysis of `g`: cached, or computed now. A manager serves the first graph it is asked
  // about (until clear()); asking about another is an internal error, because dropping the cache
  // would leave references a pass still holds dangling (give a copy its own PassContext).
  template <class A>
  const A& get(const Graph& g) {
    bind(g);
    constexpr std::string_view name = AnalysisTraits<A>::name;
    noteUse(name);
    if (auto it = entries_.find(name); it != entries_.end()) {
      if (it->second.generation == g.generation()) {
        ++counts_[name].reused;
        return *static_cast<const A*>(it->second.value.get());
      }
      // The graph changed since: compute afresh, keeping the old result alive for whoever still
      // holds a reference to it (until the pass manager's next invalidate or clear()).
      retired_.push_back(std::move(it->second.value));
      entries_.erase(it);
      ++counts_[name].stale;
    }
    if (std::find(stack_.begin(), stack_.end(), name) != stack_.end()) throwCycle(name);
    stack_.push_back(name);
    std::shared_ptr<const A> value;
    try {
      value = std::make_shared<const A>(AnalysisTraits<A>::compute(g, *this));
    } catch (...) {
      stack_.pop_back();
      pending_deps_.erase(name);
      throw;
    }
    stack_.pop_back();
    std::vector<std::string_view> deps = std::move(pending_deps_[name]);
    pending_deps_.erase(name);
    store<A>(g, value, std::move(deps));
    ++counts_[name].computed;
    return *value;
  }

  // Takes a result a pass computed itself on `g` as it is now, from the analyses `deps`: it must
  // be what get<A>(g) would compute, which the next get() then reuses. A pass that analyzes its
  // own output (bucket checks its memory bound on it) keeps the result past its end by declaring
  // it preserved too; --verify-full recomputes it then and compares.
  template <class A>
  void provide(const Graph& g, A value, std::vector<std::string_view> deps = {}) {
    bind(g);
    constexpr std::string_view name = AnalysisTraits<A>::name;
    if (auto it = entries_.find(name); it != entries_.end()) {
      retired_.push_back(std::move(it->second.value));  // a pass may still hold the old one
      entries_.erase(it);
    }
    store<A>(g, std::make_shared<const A>(std::move(value)), std::move(deps));
    ++counts_[name].provided;
  }

  bool isCached(std::string_view name) const { return entries_.count(name) > 0; }
  // Names of the cached analyses, sorted.
  std::vector<std::string_view> cachedNames() const;

  // Drops what `keep` does not preserve, then whatever was computed from a dropped analysis.
  void invalidate(const PreservedAnalyses& keep);
  // Marks what is cached as describing `g` as it is now: the pass manager's word, after a pass,
  // that the kept analyses are still true (preserved, or the pass changed nothing).
  void restamp(const Graph& g);
  // Drops every result and forgets the graph.
  void clear();

  // The cached analyses whose recomputation on `g` disagrees with the cached result: broken
  // preservation promises. Costs one computation of each cached analysis.
  std::vector<std::string_view> verifyPreserved(const Graph& g) const;

  // How often each analysis was computed and served from the cache since construction.
  struct Counts {
    int64_t computed = 0;
    int64_t reused = 0;
    int64_t stale = 0;     // cached, but the graph had changed: computed again
    int64_t provided = 0;  // handed on by a pass that computed it itself (provide)
  };
  const std::map<std::string_view, Counts>& counts() const { return counts_; }

 private:
  struct Entry {
    std::shared_ptr<const void> value;
    uint64_t generation = 0;             // Graph::generation() it describes
    std::vector<std::string_view> deps;  // analyses its computation asked for
    std::string (*fingerprint_cached)(const Graph&, const void*) = nullptr;
    std::string (*fingerprint_fresh)(const Graph&) = nullptr;
  };

  template <class A>
  void store(const Graph& g, std::shared_ptr<const A> value, std::vector<std::string_view> deps) {
    constexpr std::string_view name = AnalysisTraits<A>::name;
    Entry& e = entries_[name];
    e.value = std::move(value);
    e.generation = g.generation();
    e.deps = std::move(deps);
    e.fingerprint_cached = [](const Graph& graph, const void* p) {
      return AnalysisTraits<A>::fingerprint(graph, *static_cast<const A*>(p));
    };
    e.fingerprint_fresh = [](const Graph& graph) {
      AnalysisManager fresh;
      return AnalysisTraits<A>::fingerprint(graph, fresh.get<A>(graph));
    };
  }
  [[noreturn]] void throwCycle(std::string_view name) const;
  [[noreturn]] static void throwOtherGraph();
  void bind(const Graph& g) {
    if (graph_ == nullptr) graph_ = &g;
    if (graph_ != &g) throwOtherGraph();
  }
  // Records `name` as a dependency of the analysis being computed, if any.
  void noteUse(std::string_view name) {
    if (!stack_.empty()) pending_deps_[stack_.back()].push_back(name);
  }

  const Graph* graph_ = nullptr;
  std::map<std::string_view, Entry> entries_;
  std::vector<std::string_view> stack_;  // analyses being computed, innermost last
  std::map<std::string_view, std::vector<std::string_view>> pending_deps_;
  std::map<std::string_view, Counts> counts_;
  std::vector<std::shared_ptr<const void>> retired_;  // stale results still referenced, maybe
};

}  // namespace jfx
