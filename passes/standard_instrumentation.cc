#include "passes/standard_instrumentation.h"

#include <chrono>
#include <ctime>
#include <filesystem>
#include <map>
#include <optional>

#include "ir/clone.h"
#include "ir/error.h"
#include "ir/hash.h"
#include "ir/io.h"
#include "ir/text_format.h"
#include "passes/pass.h"

namespace jfx {

std::string PassRun::label() const {
  return "pass " + quoteForMessage(pass.name()) + " (#" + std::to_string(index + 1) + ")";
}

// One instrumentation at a time: nested pipelines may run on several threads.
void PassInstrumentor::beforePipeline(const PipelineRun& p, Graph& g) {
  std::lock_guard lock(mutex_);
  for (PassInstrumentation* i : all_)
    i->beforePipeline(p, g);
}
void PassInstrumentor::afterPipeline(const PipelineRun& p, Graph& g) {
  std::lock_guard lock(mutex_);
  for (size_t k = all_.size(); k-- > 0;)
    all_[k]->afterPipeline(p, g);
}
void PassInstrumentor::beforePass(const PassRun& r, Graph& g) {
  std::lock_guard lock(mutex_);
  for (PassInstrumentation* i : all_)
    i->beforePass(r, g);
}
void PassInstrumentor::afterPass(const PassRun& r, Graph& g) {
  std::lock_guard lock(mutex_);
  for (size_t k = all_.size(); k-- > 0;)
    all_[k]->afterPass(r, g);
}
std::string PassInstrumentor::passFailed(const PassRun& r, const Graph& g) {
  std::lock_guard lock(mutex_);
  std::string s;
  for (PassInstrumentation* i : all_)
    s += i->passFailed(r, g);
  return s;
}

namespace {

using Clock = std::chrono::steady_clock;

double secondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// CPU time of this process, every thread's: a pass's own CPU time (with the threads it starts,
// e.g. bucket{plan=auto}'s), which other jobs on a shared machine do not inflate as they do the
// wall clock (bench/planner.py times the planner with it).
double processCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

std::string issuesText(const std::vector<VerifyIssue>& issues) {
  constexpr size_t kIssuesShown = 10;
  std::string s;
  for (size_t i = 0; i < issues.size() && i < kIssuesShown; ++i)
    s += "\n  " + issues[i].str();
  if (issues.size() > kIssuesShown)
    s += "\n  ... and " + std::to_string(issues.size() - kIssuesShown) + " more";
  return s;
}

// The caller's before/after hooks (PassManagerOptions), top-level passes only.
class Hooks : public PassInstrumentation {
 public:
  explicit Hooks(const PassManagerOptions& o) : o_(o) {}
  void beforePass(const PassRun& r, Graph& g) override {
    if (r.depth > 0) return;
    for (const auto& hook : o_.before_pass)
      hook(r.pass.name(), r.index, g);
  }
  void afterPass(const PassRun& r, Graph& g) override {
    if (r.depth > 0) return;
    for (const auto& hook : o_.after_pass)
      hook(r.pass.name(), r.index, g, r.changed);
  }

 private:
  const PassManagerOptions& o_;
};

// --print-ir-after[-all]: the text IR after the named passes.
class PrintIr : public PassInstrumentation {
 public:
  PrintIr(const PassManagerOptions& o, std::ostream& out) : o_(o), out_(out) {}
  void beforePipeline(const PipelineRun& p, Graph&) override {
    if (p.depth > 0) return;
    for (const std::string& name : o_.print_ir_after) {
      bool found = false;
      for (std::string_view n : p.passes)
        found = found || n == name;
      if (!found)
        throw JfxError({}, "print-ir-after: no pass " + quoteForMessage(name) + " in the pipeline");
    }
  }
  void afterPass(const PassRun& r, Graph& g) override {
    if (r.depth > 0) return;
    bool print = o_.print_ir_after_all;
    for (const auto& n : o_.print_ir_after)
      print = print || n == r.pass.name();
    if (!print) return;
    out_ << "# ---- IR after pass '" << r.pass.name() << "' (#" << r.index + 1 << ")"
         << (r.changed ? "" : " (unchanged)") << " ----\n"
         << printTextGraph(g);
  }

 private:
  const PassManagerOptions& o_;
  std::ostream& out_;
};

// --verify-full: a preserved analysis is a promise that recomputing it would agree.
class PreservationCheck : public PassInstrumentation {
 public:
  void afterPass(const PassRun& r, Graph& g) override {
    if (r.depth > 0 || !r.changed || r.ctx->preserved.empty()) return;
    std::vector<std::string_view> broken = r.ctx->analyses.verifyPreserved(g);
    if (broken.empty()) return;
    std::string names;
    for (std::string_view b : broken)
      names += (names.empty() ? "" : ", ") + std::string(b);
    throw JfxError({}, r.label() + " failed: internal error: it declares the analyses {" + names +
                           "} preserved, but recomputing them on its output disagrees");
  }
};

// The graph-level facts the node-by-node check cannot see change: the process groups (a few,
// copied) and the output list (one entry per gradient: summarized by its length and a hash rather
// than copied before every pass).
struct Header {
  std::vector<ProcessGroupInfo> groups;
  size_t outputs = 0;
  uint64_t outputs_hash = 0;
  static uint64_t hashOutputs(const std::vector<OutputSpec>& specs) {
    uint64_t h = 0;
    for (const OutputSpec& o : specs)
      h = (h ^ std::hash<std::string_view>()(o.fqn) ^ static_cast<uint64_t>(o.kind)) *
          0x9E3779B97F4A7C15ull;
    return h;
  }
  static Header of(const Graph& g) {
    return {g.processGroups(), g.outputSpecs().size(), hashOutputs(g.outputSpecs())};
  }
  bool same(const Graph& g) const {
    return groups == g.processGroups() && outputs == g.outputSpecs().size() &&
           outputs_hash == hashOutputs(g.outputSpecs());
  }
  // Every group as it was, under the same name (others may have been added): a collective the
  // pass did not touch still finds its group, of the same size.
  bool groupsKept(const Graph& g) const {
    // A header where there was none: every collective's group is checked for the first time.
    if (groups.empty() && !g.processGroups().empty()) return false;
    for (const ProcessGroupInfo& before : groups) {
      const ProcessGroupInfo* now = g.findProcessGroup(before.name);
      if (!now || !(*now == before)) return false;
    }
    return true;
  }
};

// Verification: the whole input before the first pass, the output after the last, and between
// passes what each changing pass touched (Graph's change journal) or, with verify_full_each or a
// whole-graph rule, the whole graph.
class Verification : public PassInstrumentation {
 public:
  Verification(const PassManagerOptions& o, PipelineResult& r)
      : o_(o), r_(r), full_each_(o.verify_full_each || o.verify.one_gather_per_param_per_phase) {}
  ~Verification() override {
    if (journal_) journal_->trackChanges(false);
  }

  void beforePipeline(const PipelineRun& p, Graph& g) override {
    if (p.depth > 0 || !o_.verify_each) return;
    if (!full_each_) {
      g.trackChanges(true);
      journal_ = &g;
    }
    auto issues = wholeCheck(g);
    if (!issues.empty())
      throw PipelineVerifyError("", issues, "input graph fails verification:" + issuesText(issues));
  }

  void beforePass(const PassRun& r, Graph& g) override {
    // The header (process groups, output list) is graph-level: a pass that edits it also gets
    // the header's rules checked, since adding a group can break collectives it never touched.
    if (r.depth == 0 && o_.verify_each && !full_each_) header_before_ = Header::of(g);
  }

  void afterPass(const PassRun& r, Graph& g) override {
    if (r.depth > 0) return;
    last_pass_ = std::string(r.pass.name());
    if (!r.changed || !o_.verify_each) return;
    // After the last pass the output's full check runs at once, in place of a touched-node
    // check that it covers, and a failure still names the pass.
    const bool output_check = !full_each_ && r.last();
    const bool whole = full_each_ || output_check || wholeIsCheaper(g);
    if (whole) g.dropTouched();
    unchecked_change_ = false;
    const double before = r_.verify_seconds;
    auto issues = whole ? wholeCheck(g) : touchedCheck(g);
    if (!output_check) {
      unchecked_change_ = !whole;
      r_.verify_between_seconds += r_.verify_seconds - before;
      ++r_.verify_between_runs;
    }
    if (!issues.empty())
      throw PipelineVerifyError(
          std::string(r.pass.name()), issues,
          "verification failed after " + r.label() + ":" + issuesText(issues));
  }

  void afterPipeline(const PipelineRun& p, Graph& g) override {
    if (p.depth > 0) return;
    if (journal_) journal_->trackChanges(false), journal_ = nullptr;
    if (!unchecked_change_) return;
    auto issues = wholeCheck(g);
    if (!issues.empty())
      throw PipelineVerifyError(
          last_pass_, issues,
          "verification failed on the pipeline's output (between passes only the nodes each "
          "pass touched are checked; --verify-full checks the whole graph after every pass):" +
              issuesText(issues));
  }

 private:
  // A pass that touched a large share of the graph (erased nodes included) gets the whole
  // graph's check instead, which costs less: a touched node's check also walks its use list and
  // its users, several times a node of the whole walk (bench/README.md, "Figures behind the code"),
  // so the whole check is the cheaper one from about a sixth of the graph.
  static bool wholeIsCheaper(const Graph& g) {
    constexpr size_t kWholeCheckShare = 6;
    return g.touchedCount() * kWholeCheckShare >= g.size();
  }
  std::vector<VerifyIssue> wholeCheck(const Graph& g) {
    auto t = Clock::now();
    auto issues = verifyGraph(g, o_.verify);
    r_.verify_seconds += secondsSince(t);
    ++r_.verify_runs;
    return issues;
  }
  std::vector<VerifyIssue> touchedCheck(Graph& g) {
    auto t = Clock::now();
    auto issues = verifyNodes(g, g.takeTouched(), o_.verify);
    ++r_.verify_node_runs;
    // The touched collectives were checked against the new header just above.
    if (issues.empty() && header_before_ && !header_before_->same(g))
      issues = verifyHeader(g, o_.verify, /*collectives=*/!header_before_->groupsKept(g));
    r_.verify_seconds += secondsSince(t);
    return issues;
  }

  const PassManagerOptions& o_;
  PipelineResult& r_;
  const bool full_each_;
  Graph* journal_ = nullptr;  // the graph whose change journal this turned on
  std::optional<Header> header_before_;
  bool unchecked_change_ = false;  // a pass changed the graph since the last full check
  std::string last_pass_;
};

// A pass that reports "unchanged" while the graph's structure changed (Graph::revision moved)
// fails, at O(1), in nested pipelines too. With check_unchanged_hash, the top-level pipeline's
// passes are also held to the structural hash (meta and values included), computed before a
// pass when the last one changed the graph.
class UnchangedCheck : public PassInstrumentation {
 public:
  UnchangedCheck(const PassManagerOptions& o, PipelineResult& r) : o_(o), r_(r) {}
  void beforePass(const PassRun& r, Graph& g) override {
    revision_before_[&r] = g.revision();
    if (r.depth == 0 && o_.check_unchanged_hash && !hash_known_) {
      hash_ = hashGraph(g);
      hash_known_ = true;
    }
  }
  void afterPass(const PassRun& r, Graph& g) override {
    const uint64_t before = revision_before_[&r];
    revision_before_.erase(&r);
    if (r.changed) {
      if (r.depth == 0) hash_known_ = false;
      return;
    }
    if (g.revision() != before ||
        (r.depth == 0 && o_.check_unchanged_hash && hashGraph(g) != hash_))
      throw JfxError({}, r.label() + " reported no change, but the graph changed");
  }

 private:
  uint64_t hashGraph(const Graph& g) {
    auto t = Clock::now();
    uint64_t h = structuralHash(g);
    r_.hash_seconds += secondsSince(t);
    ++r_.hash_runs;
    return h;
  }
  const PassManagerOptions& o_;
  PipelineResult& r_;
  std::map<const PassRun*, uint64_t> revision_before_;
  uint64_t hash_ = 0;  // the current graph's, when hash_known_
  bool hash_known_ = false;
};

// --reproducer-dir: each top-level pass's input is copied (only then: no copy without the
// option), and a failing pass's input is written as text IR; the error says where and which
// `jointfx opt` command reproduces it.
class Reproducer : public PassInstrumentation {
 public:
  explicit Reproducer(const PassManagerOptions& o) : o_(o) {}
  void beforePass(const PassRun& r, Graph& g) override {
    if (r.depth == 0) input_ = cloneGraph(g);
  }
  void afterPipeline(const PipelineRun& p, Graph&) override {
    if (p.depth == 0) input_.reset();
  }
  std::string passFailed(const PassRun& r, const Graph&) override {
    if (r.depth > 0 || !input_) return "";
    return "\n" + write(*input_, std::string(r.pass.name()), std::string(r.options));
  }

 private:
  // Writes a failing pass's input; returns the line for the error message.
  std::string write(const Graph& input, const std::string& pass, const std::string& options) {
    namespace fs = std::filesystem;
    std::string stem = o_.reproducer_stem.empty() ? "graph" : o_.reproducer_stem;
    std::string path = (fs::path(o_.reproducer_dir) / (stem + "." + pass + ".repro.jfx")).string();
    try {
      std::error_code ec;
      fs::create_directories(o_.reproducer_dir, ec);  // writeFileAtomic reports what went wrong
      writeFileAtomic(path, printTextGraph(input));
    } catch (const std::exception& e) {
      return "reproducer: not written: " + std::string(e.what());
    }
    std::string cmd = "jointfx opt " + path + " -o - -p '" + pass + options + "'";
    if (!o_.verify_each) cmd += " --no-verify";
    if (o_.verify.one_gather_per_param_per_phase) cmd += " --verify-one-gather";
    return "reproducer: " + path + " (" + cmd + " reproduces)";
  }
  const PassManagerOptions& o_;
  std::unique_ptr<Graph> input_;  // the running pass's input
};

// Wall and process CPU time of each top-level pass, into its record.
class Timing : public PassInstrumentation {
 public:
  void beforePass(const PassRun& r, Graph&) override {
    if (r.depth > 0) return;
    cpu_start_ = processCpuSeconds();
    start_ = Clock::now();
  }
  void afterPass(const PassRun& r, Graph&) override {
    if (r.depth > 0) return;
    r.record->seconds = secondsSince(start_);
    r.record->cpu_seconds = processCpuSeconds() - cpu_start_;
  }

 private:
  Clock::time_point start_;
  double cpu_start_ = 0;
};

}  // namespace

void addStandardInstrumentation(PassInstrumentor& inst, const PassManagerOptions& opts,
                                PipelineResult& result, std::ostream& out) {
  inst.add(std::make_unique<Hooks>(opts));
  if (opts.print_ir_after_all || !opts.print_ir_after.empty())
    inst.add(std::make_unique<PrintIr>(opts, out));
  if (opts.verify_each && (opts.verify_full_each || opts.verify.one_gather_per_param_per_phase))
    inst.add(std::make_unique<PreservationCheck>());
  inst.add(std::make_unique<Verification>(opts, result));
  inst.add(std::make_unique<UnchangedCheck>(opts, result));
  if (!opts.reproducer_dir.empty()) inst.add(std::make_unique<Reproducer>(opts));
  inst.add(std::make_unique<Timing>());
}

}  // namespace jfx
