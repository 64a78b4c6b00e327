// Pipelines as text and files: the spec parser (`dce,bucket{cap-mb=64, kinds=ag,rs}`), pipeline
// JSON files, per-run overrides, and configuring the registry's passes from them.
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "ir/error.h"
#include "ir/io.h"
#include "ir/json_document.h"
#include "passes/data_files.h"
#include "passes/pass_manager.h"
#include "passes/registry.h"

namespace jfx {
namespace {

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
      fail("unknown pass " + quoteForMessage(name) + " (known passes: " + knownPassNames() + ")",
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

}  // namespace

std::vector<PipelineEntry> parsePipeline(std::string_view spec) {
  return PipelineParser(spec).parse();
}

std::vector<PipelineEntry> loadPipelineFile(const std::string& path) {
  std::string text = readInputFile(path, "pipeline file");
  nlohmann::json doc = readJsonDocument(text, path);
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
                                    " (known passes: " + knownPassNames() + ")");
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
    const std::unique_ptr<Pass> pass = createPass(name);
    for (const OptionBase* o : pass->options()) {
      auto it = values.find(std::string(o->name()));
      if (o->type() != "path" || it == values.end() || it->second.empty() || isDataName(it->second))
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
                             describeDataNames(DataKind::Pipeline) +
                             "; passes: " + knownPassNames() +
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
      throw JfxError({}, "unknown pass " + quoteForMessage(e.name) +
                             " (known passes: " + knownPassNames() + ")");
    pass->configure(e.options);
    out.push_back({std::move(pass), e.options.str()});
  }
  return out;
}

}  // namespace jfx
