// The pass interface. A pass has a kebab-case name, typed options read in configure(), and
// run(Graph&, PassContext&) returning whether it changed the graph. Statistics are named counters.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <ostream>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ir/graph.h"
#include "passes/analysis_manager.h"

namespace jfx {

// One option a pass accepts, declared once in the pass (a static table its options() returns):
// `jointfx passes NAME` lists the table, the pass manager rejects keys it lacks, and the typed
// getters below refuse a key the table lacks or declares with another type, so the listing cannot
// drift from what configure() reads.
struct OptionDecl {
  std::string_view name;
  // "bool", "int", "float", "string", "bytes" (a size such as 64MiB, read as a string), "path"
  // (a file, read as a string: relative to the pipeline file's folder when a pipeline file gives
  // it, to the working directory when the command line does), "list" (comma-separated), or an
  // enum's choices as "a|b|c" in getEnum's order.
  std::string_view type;
  std::string_view dflt;  // as written in a pipeline; setting it changes nothing ("" = unset)
  std::string_view help;
};

// One statistic a pass reports. A part in angle brackets stands for a varying segment without dots
// ("buckets.<kind>" covers buckets.all_gather); the pass manager refuses an undeclared one.
struct StatisticDecl {
  std::string_view name;
  std::string_view help;
};

// Whether `stat` is an instance of the declared `pattern` (see StatisticDecl).
bool statisticMatches(std::string_view pattern, std::string_view stat);

// Options from a pipeline spec: `bucket{plan=blocks, cap-mb=64, kinds=ag,rs}`. Typed getters
// mark a key as read; the pass manager rejects keys no getter read (a typo is an error, not a
// silent default). Bad values throw JfxError naming the pass and the key.
class PassOptions {
 public:
  PassOptions() = default;
  PassOptions(std::string pass, std::map<std::string, std::string> values)
      : pass_(std::move(pass)), values_(std::move(values)) {}

  bool has(const std::string& key) const { return values_.count(key) > 0; }
  int64_t getInt(const std::string& key, int64_t dflt);
  double getFloat(const std::string& key, double dflt);
  // The same, range-checked: a value outside [lo, hi] (or too large to parse) is an error that
  // names the pass, the option and the range. Every numeric option should say its range.
  int64_t getInt(const std::string& key, int64_t dflt, int64_t lo, int64_t hi);
  double getFloat(const std::string& key, double dflt, double lo, double hi);
  bool getBool(const std::string& key, bool dflt);
  std::string getString(const std::string& key, const std::string& dflt);
  // One of `choices`; anything else is an error listing them.
  std::string getEnum(const std::string& key, const std::vector<std::string>& choices,
                      const std::string& dflt);
  // Comma-separated list (`kinds=ag,rs`).
  std::vector<std::string> getList(const std::string& key, const std::vector<std::string>& dflt);

  // The options the pass declares (Pass::options()); from then on every getter checks its key
  // against them (an internal error naming the pass when it is undeclared or of another type).
  // Without declare() the getters read anything (unit tests of single passes).
  void declare(std::span<const OptionDecl> decls) {
    decls_ = decls;
    declared_ = true;
  }
  bool declared() const { return declared_; }
  std::span<const OptionDecl> declarations() const { return decls_; }

  const std::map<std::string, std::string>& values() const { return values_; }
  std::vector<std::string> unreadKeys() const;
  // Keys the pass asked for (present or not): the options it knows, for error messages.
  const std::set<std::string>& readKeys() const { return read_; }
  // `{k=v, ...}` in key order, or "" when empty: how the pipeline prints this pass.
  std::string str() const;

 private:
  std::string pass_;
  std::map<std::string, std::string> values_;
  std::set<std::string> read_;
  std::span<const OptionDecl> decls_;
  bool declared_ = false;

  // Marks `key` read after checking it against the declarations: `types` are the declared types
  // this getter may read ("" matches an enum with exactly `choices`).
  void use(const std::string& key, std::initializer_list<std::string_view> types,
           const std::vector<std::string>* choices = nullptr);
};

// Named counters, kept sorted so printing is deterministic.
// Transparent: a pass counts with a literal name without building a string each time.
using Statistics = std::map<std::string, int64_t, std::less<>>;

struct PassContext {
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
  template <class A>
  void preserve() {
    preserved.preserve<A>();
  }
  void preserveAll() { preserved.preserveAll(); }

  void stat(std::string_view name, int64_t delta = 1) {
    auto it = stats.find(name);
    if (it == stats.end()) it = stats.emplace(std::string(name), 0).first;
    it->second += delta;
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
};

class Pass {
 public:
  virtual ~Pass() = default;
  virtual std::string_view name() const = 0;
  // Reads typed options; called once before run(). Default: no options.
  virtual void configure(PassOptions& options) {}
  // Every option configure() reads and every statistic run() reports, for `jointfx passes NAME`
  // and the checks above. Default: none.
  virtual std::span<const OptionDecl> options() const { return {}; }
  virtual std::span<const StatisticDecl> statistics() const { return {}; }
  virtual bool run(Graph& g, PassContext& ctx) = 0;
};

}  // namespace jfx
