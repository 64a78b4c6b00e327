// Instrumentation: objects the pass manager calls around every pipeline and every pass (MLIR's
// PassInstrumentation). What the manager does besides running passes is one of them:
// verification, the check that a pass reporting "unchanged" changed nothing, timing, statistics,
// print-IR and the reproducer (passes/pass_manager.cc), and a caller adds its own
// (PassManagerOptions::instrumentations).
//
// Order: the before-hooks run in the order the instrumentations were added, the after-hooks in
// the reverse order, so the last added is the innermost (timing, added last, times the pass
// alone) and the first added sees the pass only once every check after it passed. A hook may
// throw a JfxError to fail the pass; the manager then asks every instrumentation for what to add
// to the message (passFailed: the reproducer's path) and stops the pipeline.
//
// Nested pipelines (PassContext::runPipeline) are observed by the same instrumentation with
// depth() one more than the pipeline that runs them; the manager's own instrumentations act at
// depth 0 only, except the unchanged check. A planner may run nested pipelines on several threads
// (bucket{plan=auto}); the manager calls one instrumentation at a time.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "ir/graph.h"

namespace jfx {

class Pass;
class PassContext;
struct PassRecord;

// One pass of a pipeline, as the instrumentation sees it.
struct PassRun {
  const Pass& pass;
  std::string_view options;      // as printed: "{k=v}"
  size_t index = 0;              // 0-based, in its pipeline
  size_t count = 0;              // passes its pipeline runs
  int depth = 0;                 // 0: the top-level pipeline; nested pipelines count up
  bool changed = false;          // what the pass reported (after-hooks)
  PassContext* ctx = nullptr;    // its context: statistics, analyses, preserved analyses
  PassRecord* record = nullptr;  // its entry in the pipeline's result
  bool last() const { return index + 1 == count; }
  // "pass 'bucket' (#5)": how messages name it.
  std::string label() const;
};

// A pipeline about to run or just run.
struct PipelineRun {
  std::vector<std::string_view> passes;  // the names of the passes it runs, in order
  int depth = 0;
};

class PassInstrumentation {
 public:
  virtual ~PassInstrumentation() = default;
  virtual void beforePipeline(const PipelineRun&, Graph&) {}
  virtual void afterPipeline(const PipelineRun&, Graph&) {}
  virtual void beforePass(const PassRun&, Graph&) {}
  // Once the pass returned and the analyses it did not preserve are dropped.
  virtual void afterPass(const PassRun&, Graph&) {}
  // The pass, or a check after it, failed: text to append to the error ("" for none).
  virtual std::string passFailed(const PassRun&, const Graph&) { return ""; }
};

// The instrumentations of one pipeline run, called in order under one lock.
class PassInstrumentor {
 public:
  void add(std::unique_ptr<PassInstrumentation> i) {
    owned_.push_back(std::move(i));
    all_.push_back(owned_.back().get());
  }
  void add(PassInstrumentation* i) { all_.push_back(i); }
  void beforePipeline(const PipelineRun& p, Graph& g);
  void afterPipeline(const PipelineRun& p, Graph& g);
  void beforePass(const PassRun& r, Graph& g);
  void afterPass(const PassRun& r, Graph& g);
  std::string passFailed(const PassRun& r, const Graph& g);

 private:
  std::vector<std::unique_ptr<PassInstrumentation>> owned_;
  std::vector<PassInstrumentation*> all_;
  std::mutex mutex_;
};

}  // namespace jfx
