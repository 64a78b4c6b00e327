#include "passes/pass_manager.h"

#include <chrono>
#include <cstdio>
#include <exception>
#include <iostream>
#include <map>

#include "passes/registry.h"
#include "passes/standard_instrumentation.h"

namespace jfx {

// What the pass manager sets on the contexts it makes (PassContext keeps it private).
class PassManagerAccess {
 public:
  static void setup(PassContext& ctx, PassInstrumentor* inst, int depth, bool quiet) {
    ctx.instrumentor_ = inst;
    ctx.depth_ = depth;
    ctx.quiet_ = quiet;
  }
};

namespace {

// How the passes of one pipeline get their contexts.
struct PipelineSetup {
  PassInstrumentor* inst = nullptr;
  int depth = 0;
  std::ostream* log = nullptr;
  std::ostream* warnings = nullptr;
  bool quiet = false;
};

// Rethrows the exception in flight with `suffix` appended to its message, keeping its kind.
[[noreturn]] void rethrowWith(const std::string& suffix) {
  try {
    throw;
  } catch (const PipelineVerifyError& e) {
    if (suffix.empty()) throw;
    throw PipelineVerifyError(e.pass(), e.issues(), e.message() + suffix);
  } catch (const JfxError& e) {
    if (suffix.empty()) throw;
    throw JfxError(e.location(), e.message() + suffix);
  }
}

// Runs one pass between the instrumentation's hooks. A failure of the pass is reported with its
// name ("pass 'remat' (#3) failed: ..."), located where the pass located it; the after-hooks'
// checks name it themselves. Either way every instrumentation may add to the message.
void runOnePass(Graph& g, ConfiguredPass& cp, PassRun& run, PassInstrumentor& inst) {
  PassContext& ctx = *run.ctx;
  inst.beforePass(run, g);
  try {
    try {
      run.changed = cp.pass->run(g, ctx);
    } catch (const JfxError& e) {
      throw JfxError(e.location(), run.label() + " failed: " + e.message());
    } catch (const std::exception& e) {
      throw JfxError({}, run.label() + " failed: internal error: " + e.what());
    }
    ctx.analyses.invalidate(run.changed ? ctx.preserved : PreservedAnalyses().preserveAll());
    ctx.analyses.restamp(g);
    run.record->changed = run.changed;
    run.record->stats = std::move(ctx.stats);
    inst.afterPass(run, g);
  } catch (const JfxError&) {
    rethrowWith(inst.passFailed(run, g));
  }
}

// Runs the first `count` of `passes` on `g`, starting from `analyses`; returns the analyses as
// the last pass left them.
AnalysisManager runPassList(Graph& g, std::vector<ConfiguredPass>& passes, size_t count,
                            const PipelineSetup& s, PipelineResult& result,
                            AnalysisManager analyses) {
  PipelineRun pipeline{{}, s.depth};
  for (size_t i = 0; i < count; ++i)
    pipeline.passes.push_back(passes[i].pass->name());
  s.inst->beforePipeline(pipeline, g);
  result.passes.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    PassContext ctx;
    PassManagerAccess::setup(ctx, s.inst, s.depth, s.quiet);
    ctx.analyses = std::move(analyses);
    ctx.log = s.log;
    ctx.warnings = s.warnings;
    PassRecord& rec = result.passes.emplace_back();
    rec.name = std::string(passes[i].pass->name());
    rec.options = passes[i].options;
    PassRun run{*passes[i].pass, passes[i].options, i, count, s.depth, false, &ctx, &rec};
    runOnePass(g, passes[i], run, *s.inst);
    analyses = std::move(ctx.analyses);
  }
  s.inst->afterPipeline(pipeline, g);
  return analyses;
}

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

void printTiming(std::ostream& out, const PipelineResult& r) {
  size_t width = 16;  // the widest own row, "(verify between)"
  for (const auto& p : r.passes)
    width = std::max(width, p.name.size() + p.options.size());
  auto pad = [](std::string s, size_t w, bool left) {
    std::string fill(w > s.size() ? w - s.size() : 0, ' ');
    return left ? s + fill : fill + s;
  };
  out << "===== pass timing (total " << fixed(r.total_seconds, 6) << " s) =====\n";
  out << pad("#", 3, false) << "  " << pad("pass", width, true) << "  " << pad("seconds", 10, false)
      << "  " << pad("cpu s", 10, false) << "  " << pad("%", 6, false) << "  changed\n";
  auto pct = [&](double seconds) {
    return fixed(r.total_seconds > 0 ? 100.0 * seconds / r.total_seconds : 0.0, 1);
  };
  for (size_t i = 0; i < r.passes.size(); ++i) {
    const PassRecord& p = r.passes[i];
    out << pad(std::to_string(i + 1), 3, false) << "  " << pad(p.name + p.options, width, true)
        << "  " << pad(fixed(p.seconds, 6), 10, false) << "  "
        << pad(fixed(p.cpu_seconds, 6), 10, false) << "  " << pad(pct(p.seconds), 6, false) << "  "
        << (p.changed ? "yes" : "no") << "\n";
  }
  // What the pass manager itself spends between passes, so the rows add up to the total.
  auto row = [&](const std::string& what, double seconds, size_t runs) {
    out << pad("", 3, false) << "  " << pad(what, width, true) << "  "
        << pad(fixed(seconds, 6), 10, false) << "  " << pad("", 10, false) << "  "
        << pad(pct(seconds), 6, false) << "  " << runs << (runs == 1 ? " run" : " runs") << "\n";
  };
  // Verification in two rows: the whole-graph checks of the input and the output, and the
  // checks after each changing pass (the cost item 5 of the design bounds; docs/passes.md).
  auto verifyRow = [&](const std::string& what, double seconds, size_t full, size_t touched) {
    if (full + touched == 0) return;
    std::string runs;
    if (full) runs = std::to_string(full) + " full";
    if (touched) runs += (runs.empty() ? "" : " + ") + std::to_string(touched) + " touched-node";
    out << pad("", 3, false) << "  " << pad(what, width, true) << "  "
        << pad(fixed(seconds, 6), 10, false) << "  " << pad("", 10, false) << "  "
        << pad(pct(seconds), 6, false) << "  " << runs << "\n";
  };
  const size_t between_full = r.verify_between_runs - r.verify_node_runs;
  verifyRow("(verify in/out)", r.verify_seconds - r.verify_between_seconds,
            r.verify_runs - between_full, 0);
  verifyRow("(verify between)", r.verify_between_seconds, between_full, r.verify_node_runs);
  if (r.hash_runs) row("(hash)", r.hash_seconds, r.hash_runs);
  // Inside the pass rows above: which analyses the passes computed, handed on (a pass that
  // computed one on its own output) and reused from the cache.
  if (!r.analyses.empty()) {
    out << "analyses computed/handed on/reused:";
    const char* sep = " ";
    for (const auto& [name, c] : r.analyses) {
      out << sep << name << " " << c.computed << "/" << c.provided << "/" << c.reused;
      sep = ", ";
    }
    out << "\n";
  }
}

void printStatistics(std::ostream& out, const PipelineResult& r) {
  // Summed over repeated runs of a pass, so one counter per name.
  std::map<std::string, int64_t> total;
  for (const auto& p : r.passes)
    for (const auto& [k, v] : p.stats)
      total[p.name + "." + k] += v;
  out << "===== statistics =====\n";
  for (const auto& [k, v] : total)
    out << k << " = " << v << "\n";
}

}  // namespace

PipelineResult runPipeline(Graph& g, const std::vector<PipelineEntry>& pipeline,
                           const PassManagerOptions& opts) {
  std::vector<ConfiguredPass> passes = buildPipeline(pipeline);
  return runPasses(g, passes, opts);
}

PipelineResult runPasses(Graph& g, std::vector<ConfiguredPass>& passes,
                         const PassManagerOptions& opts) {
  std::ostream& out = opts.out ? *opts.out : std::cerr;
  PipelineResult result;
  PassInstrumentor inst;
  for (PassInstrumentation* i : opts.instrumentations)
    inst.add(i);
  addStandardInstrumentation(inst, opts, result, out);
  size_t count = passes.size();
  if (opts.stop_after >= 0 && static_cast<size_t>(opts.stop_after) < count)
    count = static_cast<size_t>(opts.stop_after);

  const auto start = std::chrono::steady_clock::now();
  PipelineSetup setup{&inst, 0, opts.remarks ? &out : nullptr, &out, false};
  AnalysisManager analyses = runPassList(g, passes, count, setup, result, AnalysisManager());
  result.total_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  result.analyses = analyses.counts();

  if (count < passes.size())
    out << "# stop-after=" << count << ": skipped " << passes.size() - count << " of "
        << passes.size() << " passes, starting at '" << passes[count].pass->name() << "'\n";
  if (opts.timing) printTiming(out, result);
  if (opts.stats) printStatistics(out, result);
  return result;
}

PipelineResult PassContext::runPipeline(Graph& g, std::string_view spec,
                                        NestedPipelineOptions how) {
  std::vector<ConfiguredPass> passes = buildPipeline(parsePipeline(spec));
  PassInstrumentor none;
  PipelineSetup setup{instrumentor_ ? instrumentor_ : &none, depth_ + 1, how.report ? log : nullptr,
                      how.report ? warnings : nullptr, quiet_ || !how.report};
  PipelineResult result;
  AnalysisManager nested = runPassList(g, passes, passes.size(), setup, result, analyses.borrow());
  result.analyses = nested.counts();
  analyses.absorb(std::move(nested), g);
  return result;
}

ForkedGraph PassContext::fork(const Graph& g) const {
  ForkedGraph f;
  f.graph = g.copy();
  f.ctx = std::make_unique<PassContext>();
  PassManagerAccess::setup(*f.ctx, instrumentor_, depth_, quiet_);
  f.ctx->analyses = analyses.followTo(g, *f.graph);
  return f;
}

}  // namespace jfx
