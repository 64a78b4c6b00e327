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
// until the pass manager's next invalidation (or clear()). It is stamped with the graph's
// revision() (ir/graph.h): asking again after a structural edit (nodes made, moved, erased,
// rewired or renamed) computes afresh, so a pass that edits the graph and asks again, or a caller
// running passes by hand with one PassContext, never gets a stale answer; only the pass manager,
// between passes, vouches that a kept result still holds (restamp). A rollback gives the graph
// back the revision it had (Graph::rollback), so a result computed before a speculative rewrite
// serves again once the rewrite is undone (schedule{prefetch=auto} tries each distance so). Meta
// edits are not structural: an analysis that reads a meta field (the phase analysis reads
// meta.phase) is stale after a pass rewrites that field on existing nodes unless the pass manager
// invalidates it, which it does unless the pass declared it preserved.
//
// Copies (PassContext::fork): the manager of an exact copy of a graph (Graph::copy: same node
// ids) starts with the source's current results, each translated to the copy's nodes when first
// asked for (AnalysisTraits<A>::follow), and counted as followed rather than computed.
//
// An analysis A is any type with a specialization of AnalysisTraits<A> next to it:
//   static constexpr std::string_view name = "phases";          // unique, for messages
//   static A compute(const Graph& g, AnalysisManager& am);      // may get<> other analyses
//   static std::string fingerprint(const Graph& g, const A& a);  // equal iff the results agree
//                                                                // about g's live nodes
//   static A follow(const A& a, const NodeTranslation& to);      // optional: the same result
//                                                                // for an exact copy
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

// From a graph's nodes to the same nodes of an exact copy (Graph::copy keeps every id).
class NodeTranslation {
 public:
  explicit NodeTranslation(const Graph& copy) : copy_(copy) {}
  Node* operator()(const Node* n) const { return n ? copy_.nodeById(n->id()) : nullptr; }
  void all(std::vector<Node*>& nodes) const {
    for (Node*& n : nodes)
      n = (*this)(n);
  }

 private:
  const Graph& copy_;
};

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
      if (it->second.revision == g.revision()) {
        if (!it->second.value) {  // a source's result, translated to this copy on first use
          it->second.value = it->second.follow(it->second.source.get(), g);
          it->second.source.reset();
          ++counts_[name].followed;
        } else {
          ++counts_[name].reused;
        }
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

  // A manager for `copy`, an exact copy (Graph::copy) of `source` as it is now: when this
  // manager describes `source`, it serves this manager's current results, translated when first
  // asked for (those whose AnalysisTraits have follow()). Reads this manager only.
  AnalysisManager followTo(const Graph& source, const Graph& copy) const;
  // A manager for the same graph starting from this one's results (shared, not copied), for a
  // nested pipeline: what it drops, this one keeps.
  AnalysisManager borrow() const;
  // Takes `nested`'s results that describe `g` as it is now (a nested pipeline's, over this
  // manager's graph), in place of this one's.
  void absorb(AnalysisManager&& nested, const Graph& g);

  // The cached analyses whose recomputation on `g` disagrees with the cached result: broken
  // preservation promises. Costs one computation of each cached analysis.
  std::vector<std::string_view> verifyPreserved(const Graph& g) const;

  // How often each analysis was computed and served from the cache since construction.
  struct Counts {
    int64_t computed = 0;
    int64_t reused = 0;
    int64_t stale = 0;     // cached, but the graph had changed: computed again
    int64_t provided = 0;  // handed on by a pass that computed it itself (provide)
    int64_t followed = 0;  // a source graph's result, translated to its copy (followTo)
  };
  const std::map<std::string_view, Counts>& counts() const { return counts_; }

 private:
  struct Entry {
    std::shared_ptr<const void> value;   // null until a followed result is translated
    uint64_t revision = 0;               // Graph::revision() it describes
    std::vector<std::string_view> deps;  // analyses its computation asked for
    std::string (*fingerprint_cached)(const Graph&, const void*) = nullptr;
    std::string (*fingerprint_fresh)(const Graph&) = nullptr;
    // A source graph's result and how to translate it to this manager's graph (followTo).
    std::shared_ptr<const void> (*follow)(const void*, const Graph&) = nullptr;
    std::shared_ptr<const void> source;
  };

  template <class A>
  void store(const Graph& g, std::shared_ptr<const A> value, std::vector<std::string_view> deps) {
    constexpr std::string_view name = AnalysisTraits<A>::name;
    Entry& e = entries_[name];
    e.value = std::move(value);
    e.revision = g.revision();
    e.deps = std::move(deps);
    e.source.reset();
    e.follow = nullptr;
    if constexpr (requires(const A& a, const NodeTranslation& t) {
                    AnalysisTraits<A>::follow(a, t);
                  }) {
      e.follow = [](const void* p, const Graph& copy) -> std::shared_ptr<const void> {
        return std::make_shared<const A>(
            AnalysisTraits<A>::follow(*static_cast<const A*>(p), NodeTranslation(copy)));
      };
    }
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
