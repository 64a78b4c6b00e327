#include "passes/pass_manager.h"

#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>

#include "ir/clone.h"
#include "ir/error.h"
#include "ir/hash.h"
#include "ir/io.h"
#include "ir/text_format.h"
#include "passes/data_files.h"
#include "passes/registry.h"

namespace jfx {
namespace {

// CPU time of this process, every thread's: a pass's own CPU time (with the threads it starts,
// e.g. bucket{plan=auto}'s), which other jobs on a shared machine do not inflate as they do the
// wall clock (bench/planner.py times the planner with it).
double processCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// The graph-level facts the node-by-node check cannot see change: the process groups (a few,
// copied) and the output list (one entry per gradient: 29K strings at 10^6 nodes, copied before
// every pass until it was summarized by its length and a hash).
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

std::string knownPasses() {
  std::string s;
  for (const auto& r : passRegistry())
    s += (s.empty() ? "" : ", ") + std::string(r.name);
  return s.empty() ? "none" : s;
}

bool isNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_';
}
bool isSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

std::string trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && isSpace(s[b]))
    ++b;
  while (e > b && isSpace(s[e - 1]))
    --e;
  return std::string(s.substr(b, e - b));
}

// A recursive-descent parser over the pipeline text; every error carries the 1-based column.
class PipelineParser {
 public:
  explicit PipelineParser(std::string_view spec) : s_(spec) {}

  std::vector<PipelineEntry> parse() {
    std::vector<PipelineEntry> out;
    skipSpace();
    if (pos_ == s_.size()) return out;  // an empty pipeline runs nothing (load, verify, save)
    for (;;) {
      out.push_back(entry());
      skipSpace();
      if (pos_ == s_.size()) return out;
      if (s_[pos_] != ',') fail("expected ',' between passes or the end of the pipeline");
      ++pos_;
      skipSpace();
    }
  }

 private:
  PipelineEntry entry() {
    size_t start = pos_;
    while (pos_ < s_.size() && isNameChar(s_[pos_]))
      ++pos_;
    if (pos_ == start) fail("expected a pass name");
    std::string name(s_.substr(start, pos_ - start));
    bool known = false;
    for (const auto& r : passRegistry())
      known = known || r.name == name;
    if (!known)
      fail("unknown pass " + quoteForMessage(name) + " (known passes: " + knownPasses() + ")",
           start);
    skipSpace();
    std::map<std::string, std::string> values;
    if (pos_ < s_.size() && s_[pos_] == '{') options(name, values);
    return {name, PassOptions(name, std::move(values))};
  }

  // `{k=v, k2=a,b}`: items split at commas; an item without '=' continues the previous value, so
  // list values need no quoting.
  void options(const std::string& pass, std::map<std::string, std::string>& values) {
    size_t open = pos_++;
    std::string last_key;
    for (;;) {
      size_t start = pos_;
      while (pos_ < s_.size() && s_[pos_] != ',' && s_[pos_] != '}') {
        if (s_[pos_] == '{') fail("unexpected '{' inside the options of " + quoteForMessage(pass));
        ++pos_;
      }
      if (pos_ == s_.size())
        fail("unterminated '{' for the options of " + quoteForMessage(pass), open);
      std::string_view item = s_.substr(start, pos_ - start);
      size_t item_col = start;
      while (item_col < pos_ && isSpace(s_[item_col]))
        ++item_col;
      bool close = s_[pos_] == '}';
      ++pos_;
      std::string text = trim(item);
      if (text.empty()) {
        if (close && last_key.empty() && values.empty()) return;  // `{}`
        fail("empty option in the options of " + quoteForMessage(pass), item_col);
      }
      size_t eq = text.find('=');
      if (eq == std::string::npos) {
        if (last_key.empty())
          fail("expected key=value in the options of " + quoteForMessage(pass), item_col);
        values[last_key] += "," + text;
      } else {
        std::string key = trim(std::string_view(text).substr(0, eq));
        bool ok = !key.empty();
        for (char c : key)
          ok = ok && isNameChar(c);
        if (!ok)
          fail("bad option name " + quoteForMessage(key) + " for " + quoteForMessage(pass),
               item_col);
        if (values.count(key))
          fail("option " + quoteForMessage(key) + " given twice for " + quoteForMessage(pass),
               item_col);
        values[key] = trim(std::string_view(text).substr(eq + 1));
        last_key = key;
      }
      if (close) return;
    }
  }

  void skipSpace() {
    while (pos_ < s_.size() && isSpace(s_[pos_]))
      ++pos_;
  }

  [[noreturn]] void fail(const std::string& what) { fail(what, pos_); }
  [[noreturn]] void fail(const std::string& what, size_t at) {
    SourceLocation loc;
    loc.file = "pipeline";
    loc.line = 1;
    loc.column = static_cast<int>(at) + 1;
    throw JfxError(loc, what);
  }

  std::string_view s_;
  size_t pos_ = 0;
};

std::string optionValue(const nlohmann::json& v, const std::string& file, const std::string& ptr) {
  auto bad = [&]() -> JfxError {
    SourceLocation loc;
    loc.file = file;
    loc.json_pointer = ptr;
    return JfxError(loc, "expected a string, number, boolean or array of them");
  };
  if (v.is_string()) return v.get<std::string>();
  if (v.is_boolean()) return v.get<bool>() ? "true" : "false";
  if (v.is_number()) return v.dump();
  if (v.is_array()) {
    std::string s;
    for (size_t i = 0; i < v.size(); ++i) {
      if (v[i].is_array() || v[i].is_object() || v[i].is_null()) throw bad();
      s += (i ? "," : "") + optionValue(v[i], file, ptr + "/" + std::to_string(i));
    }
    return s;
  }
  throw bad();
}

std::string issuesText(const std::vector<VerifyIssue>& issues, size_t limit) {
  std::string s;
  for (size_t i = 0; i < issues.size() && i < limit; ++i)
    s += "\n  " + issues[i].str();
  if (issues.size() > limit) s += "\n  ... and " + std::to_string(issues.size() - limit) + " more";
  return s;
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

// Writes a failing pass's input as a reproducer; returns the line for the error message.
std::string writeReproducer(const Graph& input, const PassManagerOptions& opts,
                            const std::string& pass, const std::string& options) {
  namespace fs = std::filesystem;
  std::string stem = opts.reproducer_stem.empty() ? "graph" : opts.reproducer_stem;
  std::string path = (fs::path(opts.reproducer_dir) / (stem + "." + pass + ".repro.jfx")).string();
  try {
    std::error_code ec;
    fs::create_directories(opts.reproducer_dir, ec);  // writeFileAtomic reports what went wrong
    writeFileAtomic(path, printTextGraph(input));
  } catch (const std::exception& e) {
    return "reproducer: not written: " + std::string(e.what());
  }
  std::string cmd = "jointfx opt " + path + " -o - -p '" + pass + options + "'";
  if (!opts.verify_each) cmd += " --no-verify";
  if (opts.verify.one_gather_per_param_per_phase) cmd += " --verify-one-gather";
  return "reproducer: " + path + " (" + cmd + " reproduces)";
}

}  // namespace

std::vector<PipelineEntry> parsePipeline(std::string_view spec) {
  return PipelineParser(spec).parse();
}

std::vector<PipelineEntry> loadPipelineFile(const std::string& path) {
  std::string text = readInputFile(path, "pipeline file");
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    // nlohmann counts bytes from 1 and points just past the offending character.
    size_t offset = e.byte > 0 ? e.byte - 1 : 0;
    throw JfxError(
        locateByte(text, offset, path),
        "invalid JSON at byte " + std::to_string(offset) + ": " + humanLibraryMessage(e.what()));
  } catch (const nlohmann::json::exception& e) {
    // A number out of range (1e400) and the like.
    throw JfxError({path, 0, 0, "", ""}, "invalid JSON: " + humanLibraryMessage(e.what()));
  }
  auto fail = [&](const std::string& ptr, const std::string& what) -> JfxError {
    SourceLocation loc;
    loc.file = path;
    loc.json_pointer = ptr;
    return JfxError(loc, what);
  };
  if (!doc.is_object() || !doc.contains("passes") || !doc["passes"].is_array())
    throw fail("", "expected an object {\"passes\": [...]}");
  for (const auto& [key, v] : doc.items())
    if (key != "passes" && key != "description")
      throw fail("/" + key, "unknown key (expected \"passes\" or \"description\")");
  std::vector<PipelineEntry> out;
  const auto& passes = doc["passes"];
  for (size_t i = 0; i < passes.size(); ++i) {
    std::string ptr = "/passes/" + std::to_string(i);
    const auto& e = passes[i];
    if (!e.is_object()) throw fail(ptr, "expected {\"name\": ..., \"options\": {...}}");
    for (const auto& [key, v] : e.items())
      if (key != "name" && key != "options")
        throw fail(ptr + "/" + key, "unknown key (expected \"name\" or \"options\")");
    if (!e.contains("name") || !e["name"].is_string())
      throw fail(ptr + "/name", "expected the pass name as a string");
    std::string name = e["name"].get<std::string>();
    if (!createPass(name))
      throw fail(ptr + "/name", "unknown pass " + quoteForMessage(name) +
                                    " (known passes: " + knownPasses() + ")");
    std::map<std::string, std::string> values;
    if (e.contains("options")) {
      const auto& opts = e["options"];
      if (!opts.is_object()) throw fail(ptr + "/options", "expected an object");
      for (const auto& [key, v] : opts.items())
        values[key] = optionValue(v, path, ptr + "/options/" + key);
    }
    // A file the pipeline names is found beside it, wherever the command runs: a relative path
    // option is joined to the pipeline file's folder (a shipped pipeline works from any folder).
    // A bare name (hardware=h100) stays a name, looked up when the pass loads it.
    for (const OptionDecl& d : createPass(name)->options()) {
      auto it = values.find(std::string(d.name));
      if (d.type != "path" || it == values.end() || it->second.empty() || isDataName(it->second))
        continue;
      std::filesystem::path p(it->second);
      if (p.is_relative())
        it->second = (std::filesystem::path(path).parent_path() / p).lexically_normal().string();
    }
    out.push_back({name, PassOptions(name, std::move(values))});
  }
  return out;
}

std::vector<PipelineEntry> resolvePipeline(const std::string& spec_or_path) {
  std::error_code ec;
  bool json_name =
      spec_or_path.size() > 5 && spec_or_path.compare(spec_or_path.size() - 5, 5, ".json") == 0;
  // A '/' inside a pass's braces is an option's value (hardware=configs/hardware/h100.json), not
  // a path to a pipeline file: pass names have none.
  bool slash_outside_braces = false;
  int depth = 0;
  for (char c : spec_or_path) {
    if (c == '{')
      ++depth;
    else if (c == '}' && depth > 0)
      --depth;
    else if (c == '/' && depth == 0)
      slash_outside_braces = true;
  }
  bool path_like = json_name || slash_outside_braces;
  // A bare word is a pass when one has that name, else a shipped pipeline (passes/data_files.h).
  if (!path_like && isDataName(spec_or_path) && !createPass(spec_or_path)) {
    std::string file = findDataFile(DataKind::Pipeline, spec_or_path);
    if (!file.empty()) return loadPipelineFile(file);
    if (!std::filesystem::is_regular_file(spec_or_path, ec))
      throw JfxError({}, "unknown pass or pipeline " + quoteForMessage(spec_or_path) + ": " +
                             describeDataNames(DataKind::Pipeline) + "; passes: " + knownPasses() +
                             "; a path (with a '/' or ending in .json) is read as a file");
  }
  if (path_like || std::filesystem::is_regular_file(spec_or_path, ec)) {
    if (!std::filesystem::exists(spec_or_path, ec))
      throw JfxError({spec_or_path, 0, 0, "", ""}, "pipeline file not found");
    return loadPipelineFile(spec_or_path);
  }
  return parsePipeline(spec_or_path);
}

// --set KEY=VALUE replaces KEY in every pass of the pipeline that gives it (memory-limit,
// hardware: the per-run settings of configs/pipelines/auto.json); --set PASS.KEY=VALUE sets it on
// every pass named PASS, given or not. A --set that matches no pass is an error (a typo must not
// pass unnoticed).
void applyOptionOverrides(std::vector<PipelineEntry>& pipeline,
                          const std::vector<std::string>& sets) {
  for (const std::string& s : sets) {
    const size_t eq = s.find('=');
    if (eq == std::string::npos || eq == 0)
      throw JfxError({}, "--set " + quoteForMessage(s) + ": expected KEY=VALUE or PASS.KEY=VALUE");
    std::string key = s.substr(0, eq);
    const std::string value = s.substr(eq + 1);
    std::string pass;
    if (const size_t dot = key.find('.'); dot != std::string::npos)
      pass = key.substr(0, dot), key = key.substr(dot + 1);
    bool matched = false;
    for (PipelineEntry& e : pipeline) {
      if (pass.empty() ? !e.options.has(key) : e.name != pass) continue;
      std::map<std::string, std::string> values = e.options.values();
      values[key] = value;
      e.options = PassOptions(e.name, std::move(values));
      matched = true;
    }
    if (!matched)
      throw JfxError(
          {}, "--set " + quoteForMessage(s) + ": " +
                  (pass.empty() ? "no pass in the pipeline has option " + quoteForMessage(key)
                                : "no pass " + quoteForMessage(pass) + " in the pipeline"));
  }
}

std::vector<ConfiguredPass> buildPipeline(const std::vector<PipelineEntry>& pipeline) {
  std::vector<ConfiguredPass> out;
  out.reserve(pipeline.size());
  for (const PipelineEntry& e : pipeline) {
    std::unique_ptr<Pass> pass = createPass(e.name);
    if (!pass)
      throw JfxError(
          {}, "unknown pass " + quoteForMessage(e.name) + " (known passes: " + knownPasses() + ")");
    PassOptions options = e.options;
    options.declare(pass->options());
    // Keys the pass does not declare fail before configure() reads anything; a declared key
    // that configure() did not read fails the same way after it (the declarations are wrong).
    std::set<std::string> declared;
    for (const OptionDecl& d : pass->options())
      declared.insert(std::string(d.name));
    std::vector<std::string> unknown;
    for (const auto& kv : options.values())
      if (!declared.count(kv.first)) unknown.push_back(kv.first);
    if (unknown.empty()) {
      pass->configure(options);
      unknown = options.unreadKeys();
    }
    if (!unknown.empty()) {
      std::string keys;
      for (size_t i = 0; i < unknown.size() && i < 10; ++i)
        keys += (i ? ", " : "") + quoteForMessage(unknown[i]);
      if (unknown.size() > 10) keys += " and " + std::to_string(unknown.size() - 10) + " more";
      std::string known;
      for (const auto& k : declared)
        known += (known.empty() ? "" : ", ") + k;
      throw JfxError({}, "pass " + quoteForMessage(e.name) + " has no option " + keys +
                             (known.empty() ? " (it takes none)" : " (it takes: " + known + ")"));
    }
    out.push_back({std::move(pass), options.str()});
  }
  return out;
}

PipelineResult runPipeline(Graph& g, const std::vector<PipelineEntry>& pipeline,
                           const PassManagerOptions& opts) {
  std::vector<ConfiguredPass> passes = buildPipeline(pipeline);
  return runPasses(g, passes, opts);
}

PipelineResult runPasses(Graph& g, std::vector<ConfiguredPass>& passes,
                         const PassManagerOptions& opts) {
  using Clock = std::chrono::steady_clock;
  std::ostream& out = opts.out ? *opts.out : std::cerr;
  constexpr size_t kIssuesShown = 10;
  // Touched nodes (erased ones included) at least 1/kWholeCheckShare of the live nodes: the
  // whole graph's check between passes. Per node it costs 1/4 to 1/7 of a touched node's (bucket
  // and remat at 10^6 nodes), so it is the cheaper one from about a sixth of the graph.
  constexpr size_t kWholeCheckShare = 6;

  for (const std::string& name : opts.print_ir_after) {
    bool found = false;
    for (const auto& p : passes)
      found = found || p.pass->name() == name;
    if (!found)
      throw JfxError({}, "print-ir-after: no pass " + quoteForMessage(name) + " in the pipeline");
  }

  PipelineResult result;
  auto pipeline_start = Clock::now();
  auto seconds_since = [](Clock::time_point t) {
    return std::chrono::duration<double>(Clock::now() - t).count();
  };
  auto verify = [&]() {
    auto t = Clock::now();
    auto issues = verifyGraph(g, opts.verify);
    result.verify_seconds += seconds_since(t);
    ++result.verify_runs;
    return issues;
  };
  // Between passes: only what the pass touched, unless a full check is asked for (a whole-graph
  // rule such as one-gather-per-param cannot be checked node by node).
  const bool full_each = opts.verify_full_each || opts.verify.one_gather_per_param_per_phase;
  auto verifyTouched = [&]() {
    auto t = Clock::now();
    auto issues = verifyNodes(g, g.takeTouched(), opts.verify);
    result.verify_seconds += seconds_since(t);
    ++result.verify_node_runs;
    return issues;
  };
  struct JournalOff {
    Graph& g;
    ~JournalOff() { g.trackChanges(false); }
  } journal_off{g};
  if (opts.verify_each && !full_each) g.trackChanges(true);
  bool unchecked_change = false;  // a pass changed the graph since the last full check
  auto hashGraph = [&]() {
    auto t = Clock::now();
    uint64_t h = structuralHash(g);
    result.hash_seconds += seconds_since(t);
    ++result.hash_runs;
    return h;
  };
  if (opts.verify_each) {
    auto issues = verify();
    if (!issues.empty())
      throw PipelineVerifyError(
          "", issues, "input graph fails verification:" + issuesText(issues, kIssuesShown));
  }

  // print-ir-after is an after-pass hook ahead of the caller's.
  std::vector<AfterPassHook> after_hooks;
  if (opts.print_ir_after_all || !opts.print_ir_after.empty()) {
    after_hooks.push_back(
        [&out, &opts](std::string_view name, size_t index, const Graph& graph, bool changed) {
          bool print = opts.print_ir_after_all;
          for (const auto& n : opts.print_ir_after)
            print = print || n == name;
          if (!print) return;
          out << "# ---- IR after pass '" << name << "' (#" << index + 1 << ")"
              << (changed ? "" : " (unchanged)") << " ----\n"
              << printTextGraph(graph);
        });
  }
  after_hooks.insert(after_hooks.end(), opts.after_pass.begin(), opts.after_pass.end());

  const bool reproducers = !opts.reproducer_dir.empty();
  AnalysisManager analyses;  // handed from pass to pass through PassContext
  uint64_t hash = 0;         // the current graph's hash, when hash_known
  bool hash_known = false;
  size_t count = passes.size();
  if (opts.stop_after >= 0 && static_cast<size_t>(opts.stop_after) < count)
    count = static_cast<size_t>(opts.stop_after);
  for (size_t i = 0; i < count; ++i) {
    Pass& pass = *passes[i].pass;
    std::string name(pass.name());
    std::string label = "pass " + quoteForMessage(name) + " (#" + std::to_string(i + 1) + ")";
    if (opts.check_unchanged_hash && !hash_known) {
      hash = hashGraph();
      hash_known = true;
    }
    for (const auto& hook : opts.before_pass)
      hook(name, i, g);
    std::unique_ptr<Graph> input;  // this pass's input, for a reproducer
    if (reproducers) input = cloneGraph(g);
    // Appended to a failure's message: where the reproducer went (or why it did not).
    auto repro = [&]() -> std::string {
      if (!input) return "";
      return "\n" + writeReproducer(*input, opts, name, passes[i].options);
    };

    // The header (process groups, output list) is graph-level: a pass that edits it also gets
    // the header's rules checked, since adding a group can break collectives it never touched.
    std::optional<Header> header_before;
    if (opts.verify_each && !full_each) header_before = Header::of(g);

    PassContext ctx;
    ctx.analyses = std::move(analyses);
    ctx.log = opts.remarks ? &out : nullptr;
    ctx.warnings = &out;
    PassRecord rec;
    rec.name = name;
    rec.options = passes[i].options;
    const uint64_t revision_before = g.revision();
    auto start = Clock::now();
    const double cpu_start = processCpuSeconds();
    try {
      rec.changed = pass.run(g, ctx);
    } catch (const JfxError& e) {
      throw JfxError(e.location(), label + " failed: " + e.message() + repro());
    } catch (const std::exception& e) {
      throw JfxError({}, label + " failed: internal error: " + e.what() + repro());
    }
    rec.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    rec.cpu_seconds = processCpuSeconds() - cpu_start;
    rec.stats = std::move(ctx.stats);
    analyses = std::move(ctx.analyses);
    analyses.invalidate(rec.changed ? ctx.preserved : PreservedAnalyses().preserveAll());
    analyses.restamp(g);
    // A pass that declares statistics declares all of them (`jointfx passes NAME` lists them).
    if (std::span<const StatisticDecl> decls = pass.statistics(); !decls.empty()) {
      for (const auto& [stat, value] : rec.stats) {
        bool ok = false;
        for (const StatisticDecl& d : decls)
          ok = ok || statisticMatches(d.name, stat);
        if (!ok)
          throw JfxError({}, label + " failed: internal error: it reports statistic " +
                                 quoteForMessage(stat) +
                                 ", which its statistics() does not declare" + repro());
      }
    }

    if (!rec.changed &&
        (g.revision() != revision_before || (opts.check_unchanged_hash && hashGraph() != hash)))
      throw JfxError({}, label + " reported no change, but the graph changed" + repro());
    if (rec.changed) hash_known = false;
    if (rec.changed && opts.verify_each) {
      // After the last pass the output's full check runs at once, in place of a touched-node
      // check that it covers (schedule touches 176K nodes at 10^6), and a failure still names
      // the pass.
      const bool output_check = !full_each && i + 1 == count;
      // A pass that touched a large share of the graph gets the whole graph's check instead,
      // which costs less: a touched node's check also walks its use list and its users (at 10^6
      // nodes bucket's journal holds 783K for 1.25M live: 0.17 s, against 0.07 s for the whole
      // graph; remat's 224K for 1.09M: 0.086 s against 0.06 s).
      const bool whole =
          full_each || output_check || g.touchedCount() * kWholeCheckShare >= g.size();
      if (whole) g.dropTouched();
      unchecked_change = false;
      const double before = result.verify_seconds;
      auto issues = whole ? verify() : verifyTouched();
      if (issues.empty() && !whole && header_before && !header_before->same(g)) {
        auto t = Clock::now();
        // The touched collectives were checked against the new header just above.
        issues = verifyHeader(g, opts.verify, /*collectives=*/!header_before->groupsKept(g));
        result.verify_seconds += seconds_since(t);
      }
      if (!output_check) {
        unchecked_change = !whole;
        result.verify_between_seconds += result.verify_seconds - before;
        ++result.verify_between_runs;
      }
      if (!issues.empty())
        throw PipelineVerifyError(name, issues,
                                  "verification failed after " + label + ":" +
                                      issuesText(issues, kIssuesShown) + repro());
    }
    // A preserved analysis is a promise that recomputing it would agree; --verify-full checks it.
    if (rec.changed && opts.verify_each && full_each && !ctx.preserved.empty()) {
      auto broken = analyses.verifyPreserved(g);
      if (!broken.empty()) {
        std::string names;
        for (std::string_view b : broken)
          names += (names.empty() ? "" : ", ") + std::string(b);
        throw JfxError({}, label + " failed: internal error: it declares the analyses {" + names +
                               "} preserved, but recomputing them on its output disagrees" +
                               repro());
      }
    }
    for (const auto& hook : after_hooks)
      hook(name, i, g, rec.changed);
    result.passes.push_back(std::move(rec));
  }
  if (unchecked_change) {
    auto issues = verify();
    if (!issues.empty())
      throw PipelineVerifyError(
          result.passes.back().name, issues,
          "verification failed on the pipeline's output (between passes only the nodes each "
          "pass touched are checked; --verify-full checks the whole graph after every pass):" +
              issuesText(issues, kIssuesShown));
  }
  result.total_seconds = std::chrono::duration<double>(Clock::now() - pipeline_start).count();
  result.analyses = analyses.counts();

  if (count < passes.size())
    out << "# stop-after=" << count << ": skipped " << passes.size() - count << " of "
        << passes.size() << " passes, starting at '" << passes[count].pass->name() << "'\n";
  if (opts.timing) printTiming(out, result);
  if (opts.stats) {
    // Summed over repeated runs of a pass, so one counter per name.
    std::map<std::string, int64_t> total;
    for (const auto& p : result.passes)
      for (const auto& [k, v] : p.stats)
        total[p.name + "." + k] += v;
    out << "===== statistics =====\n";
    for (const auto& [k, v] : total)
      out << k << " = " << v << "\n";
  }
  return result;
}

}  // namespace jfx
