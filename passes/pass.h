// The pass interface. A pass has a kebab-case name (given by the registry), options and
// statistics declared as members (passes/options.h), and run(Graph&, PassContext&) returning
// whether it changed the graph.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ir/graph.h"
#include "passes/analysis_manager.h"
#include "passes/diagnostic.h"
#include "passes/options.h"

namespace jfx {

// Options from a pipeline spec, as text: `bucket{plan=blocks, cap-mb=64, kinds=ag,rs}`.
// Pass::configure parses them into the pass's declared options.
class PassOptions {
 public:
  PassOptions() = default;
  PassOptions(std::string pass, std::map<std::string, std::string> values)
      : pass_(std::move(pass)), values_(std::move(values)) {}

  const std::string& pass() const { return pass_; }
  bool has(const std::string& key) const { return values_.count(key) > 0; }
  const std::map<std::string, std::string>& values() const { return values_; }
  // `{k=v, ...}` in key order, or "" when empty: how the pipeline prints this pass.
  std::string str() const;

 private:
  std::string pass_;
  std::map<std::string, std::string> values_;
};

// Named counters, kept sorted so printing is deterministic.
// Transparent: a pass counts with a literal name without building a string each time.
using Statistics = std::map<std::string, int64_t, std::less<>>;

class PassInstrumentor;
struct PipelineResult;
struct ForkedGraph;

// How a nested pipeline (PassContext::runPipeline) reports.
struct NestedPipelineOptions {
  // Remarks and warnings go where this context's go, and the nested passes report in full. Off
  // (the default): a planner's scratch run, whose remarks, warnings and report-only work (the
  // statistics and remarks nobody reads) are skipped; PassContext::quiet() says so.
  bool report = false;
};

class PassContext {
 public:
  Statistics stats;             // this pass's counters
  std::ostream* log = nullptr;  // remarks (e.g. "prefetch lowered at bucket 3"); may be null
  // Warnings: a pass that cannot do its job on this graph (and so does less, or nothing) says so
  // here whether or not remarks are on. The pass manager points this at stderr.
  std::ostream* warnings = nullptr;
  // Analyses shared along the pipeline (passes/analysis_manager.h): `analyses.get<PhaseInfo>(g)`.
  // The pass manager hands the same cache from pass to pass; a context made by hand starts empty.
  AnalysisManager analyses;
  // What this run leaves valid if it reports a change (default: nothing; no change keeps all).
  PreservedAnalyses preserved;

  PassContext() = default;
  PassContext(PassContext&&) = default;
  PassContext& operator=(PassContext&&) = default;

  template <class A>
  void preserve() {
    preserved.preserve<A>();
  }
  void preserveAll() { preserved.preserveAll(); }

  // Adds `delta` to a declared statistic (its <part>, for a statistic with one).
  void stat(const Statistic& s, int64_t delta = 1) { add(s.name(), delta); }
  void stat(const Statistic& s, std::string_view part, int64_t delta = 1) {
    add(s.instance(part), delta);
  }
  void remark(const std::string& text) {
    if (log) *log << text << "\n";
  }
  void warn(const std::string& text) {
    if (warnings)
      *warnings << "warning: " << text << "\n";
    else if (log)
      *log << "warning: " << text << "\n";
  }
  // An error about `n` (nullptr: about the graph), thrown when the statement ends:
  // `ctx.emitError(n) << "cannot ...";` (passes/diagnostic.h).
  InFlightError emitError(const Node* n = nullptr) const { return InFlightError(locationOf(n)); }

  // Runs `spec` ("split-comm-groups,schedule{prefetch=1}") on `g`, the graph this context's
  // analyses describe (a pass's own graph, or a fork's): passes from the registry, observed by the
  // instrumentation of the pipeline this context belongs to (one level deeper), starting from
  // this context's analyses of `g`, which stay this context's (a nested pass that changes the
  // graph drops them from the nested run only). Throws what a nested pass throws.
  PipelineResult runPipeline(Graph& g, std::string_view spec, NestedPipelineOptions how = {});
  // A copy of `g` with a context of its own whose analyses follow the copy: every analysis this
  // context holds for `g` as it is now is served to the copy's passes (translated to its nodes
  // when first asked for) until the copy changes. Reads this context only, so forks may be made
  // from several threads at once.
  ForkedGraph fork(const Graph& g) const;
  // True in a nested run that does not report (NestedPipelineOptions::report off): a pass may
  // skip work whose only product is a remark or a statistic.
  bool quiet() const { return quiet_; }
  // 0 in a top-level pipeline, one more per nested pipeline.
  int depth() const { return depth_; }

 private:
  friend class PassManagerAccess;
  void add(std::string_view name, int64_t delta) {
    auto it = stats.find(name);
    if (it == stats.end()) it = stats.emplace(std::string(name), 0).first;
    it->second += delta;
  }
  PassInstrumentor* instrumentor_ = nullptr;  // the pipeline's, when run by a pass manager
  int depth_ = 0;
  bool quiet_ = false;
};

// A copy of a graph and a context whose analyses follow it (PassContext::fork).
struct ForkedGraph {
  std::unique_ptr<Graph> graph;
  std::unique_ptr<PassContext> ctx;
};

class Pass {
 public:
  Pass(const Pass&) = delete;
  Pass& operator=(const Pass&) = delete;
  virtual ~Pass() = default;

  // As written in pipelines: the registry's name for it (createPass), or the test's.
  std::string_view name() const { return name_; }
  virtual bool run(Graph& g, PassContext& ctx) = 0;
  // The options the pass declares (its Option members, in declaration order) and its
  // statistics, for `jointfx passes NAME`.
  std::span<OptionBase* const> options() const { return options_; }
  virtual std::span<const Statistic* const> statistics() const { return {}; }
  // Sets the options a pipeline gives, then initialize(). Errors name the pass: an option it
  // does not declare ("pass 'bucket' has no option 'x' (it takes: ...)"), a value its option does
  // not parse, a combination initialize() refuses.
  void configure(const PassOptions& values);

 protected:
  Pass() = default;
  explicit Pass(std::string name) : name_(std::move(name)) {}
  // Called once the options are set (also when none is): settings derived from them and the
  // rules between them. Throws JfxError without the pass's name, which configure() adds.
  virtual void initialize() {}

 private:
  friend class OptionBase;
  friend std::unique_ptr<Pass> createPass(std::string_view name);
  std::string name_;
  std::vector<OptionBase*> options_;
};

}  // namespace jfx
