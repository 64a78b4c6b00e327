// Pass options and statistics, each declared once, as a member (MLIR's Pass::Option and
// Pass::Statistic): the declaration names it, gives its default, range and meaning, parses its
// value, and is what `jointfx passes NAME` lists and what the pass reads.
//
//   class MyPass : public Pass {
//     Option<int64_t> keep_{this, "keep-last", 1, "blocks kept unsharded", {0, 1000000}};
//     EnumOption<Mode> mode_{this, "mode", {{"fast", Mode::Fast}, {"safe", Mode::Safe}},
//                            Mode::Safe, "how to run"};
//   };
//
// A pipeline sets options by name (`my-pass{keep-last=2}`); the pass manager refuses a name the
// pass does not declare and a value its option does not parse, naming the pass
// (Pass::configure). Statistics are counters a pass reports through its context:
// `ctx.stat(stats.moved, n)`; `jointfx passes NAME` lists them and `--stats` prints them.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ir/checked.h"

namespace jfx {

class Pass;

// One option of a pass; a member of the pass, registered with it on construction.
class OptionBase {
 public:
  OptionBase(const OptionBase&) = delete;
  OptionBase& operator=(const OptionBase&) = delete;
  virtual ~OptionBase() = default;

  std::string_view name() const { return name_; }
  std::string_view help() const { return help_; }
  // "bool", "int", "float", "string", "bytes" (a size such as 64MiB), "path" (a file: relative to
  // the pipeline file's folder when a pipeline file gives it, to the working directory when the
  // command line does), "list" (comma-separated), or an enum's choices "a|b|c".
  virtual std::string type() const = 0;
  // The default as written in a pipeline, so that setting it changes nothing; "" when the option
  // is unset by default.
  virtual std::string defaultText() const = 0;
  // The values it accepts, for `jointfx passes NAME`: "[0, 64]", "[0, 64] or auto"; "" for any.
  virtual std::string range() const { return ""; }
  // Whether a pipeline gave it.
  bool isSet() const { return set_; }
  // Parses `value` (a JfxError "option 'name=value': expected ..." when it does not parse; the
  // pass manager adds the pass's name).
  void set(const std::string& value) {
    parse(value);
    set_ = true;
  }

 protected:
  OptionBase(Pass* owner, std::string_view name, std::string_view help);
  virtual void parse(const std::string& value) = 0;
  [[noreturn]] void expected(const std::string& value, const std::string& what) const;

 private:
  std::string_view name_;
  std::string_view help_;
  bool set_ = false;
};

template <class T>
struct Range {
  T lo;
  T hi;
};

template <class T>
class Option;

// An integer; unset by default when constructed with std::nullopt (read it with valueOr). Words
// such as "auto" may stand for values of their own (`keywords`), listed in the type as "int|auto".
template <>
class Option<int64_t> : public OptionBase {
 public:
  Option(Pass* owner, std::string_view name, std::optional<int64_t> dflt, std::string_view help,
         Range<int64_t> range = {kInt64Min, kInt64Max},
         std::vector<std::pair<std::string_view, int64_t>> keywords = {});
  int64_t operator*() const { return *value_; }
  int64_t valueOr(int64_t fallback) const { return value_.value_or(fallback); }
  void setValue(int64_t v) { value_ = v; }
  std::string type() const override;
  std::string defaultText() const override;
  std::string range() const override;

 private:
  void parse(const std::string& value) override;
  std::optional<int64_t> value_;
  std::optional<int64_t> dflt_;
  Range<int64_t> range_;
  std::vector<std::pair<std::string_view, int64_t>> keywords_;
};

template <>
class Option<double> : public OptionBase {
 public:
  Option(Pass* owner, std::string_view name, double dflt, std::string_view help,
         Range<double> range = {-kDoubleMax, kDoubleMax});
  double operator*() const { return value_; }
  std::string type() const override { return "float"; }
  std::string defaultText() const override;
  std::string range() const override;

 private:
  static constexpr double kDoubleMax = 1.7976931348623157e308;
  void parse(const std::string& value) override;
  double value_;
  double dflt_;
  Range<double> range_;
};

template <>
class Option<bool> : public OptionBase {
 public:
  Option(Pass* owner, std::string_view name, bool dflt, std::string_view help)
      : OptionBase(owner, name, help), value_(dflt), dflt_(dflt) {}
  bool operator*() const { return value_; }
  std::string type() const override { return "bool"; }
  std::string defaultText() const override { return dflt_ ? "true" : "false"; }

 private:
  void parse(const std::string& value) override;
  bool value_;
  bool dflt_;
};

// Text as given; a "path" is a file name (loadPipelineFile resolves it against the file's folder).
template <>
class Option<std::string> : public OptionBase {
 public:
  enum class Kind { Text, Path };
  Option(Pass* owner, std::string_view name, std::string dflt, std::string_view help,
         Kind kind = Kind::Text)
      : OptionBase(owner, name, help), value_(dflt), dflt_(std::move(dflt)), kind_(kind) {}
  const std::string& operator*() const { return value_; }
  const std::string* operator->() const { return &value_; }
  std::string type() const override { return kind_ == Kind::Path ? "path" : "string"; }
  std::string defaultText() const override { return dflt_; }

 private:
  void parse(const std::string& value) override { value_ = value; }
  std::string value_;
  std::string dflt_;
  Kind kind_;
};

// A comma-separated list (`kinds=ag,rs`); with `choices`, each item must be one of them (an
// unknown one is "option 'kinds': unknown kind 'x' (expected ag, rs, ar)", `noun` naming it).
template <>
class Option<std::vector<std::string>> : public OptionBase {
 public:
  Option(Pass* owner, std::string_view name, std::vector<std::string> dflt, std::string_view help,
         std::vector<std::string_view> choices = {}, std::string_view noun = "item");
  const std::vector<std::string>& operator*() const { return value_; }
  bool contains(std::string_view item) const;
  std::string type() const override { return "list"; }
  std::string defaultText() const override;

 private:
  void parse(const std::string& value) override;
  std::vector<std::string> value_;
  std::vector<std::string> dflt_;
  std::vector<std::string_view> choices_;
  std::string_view noun_;
};

// One of a fixed set of words, each standing for a value of E; the type lists them ("a|b|c").
template <class E>
class EnumOption : public OptionBase {
 public:
  using Choices = std::vector<std::pair<std::string_view, E>>;
  EnumOption(Pass* owner, std::string_view name, Choices choices, E dflt, std::string_view help)
      : OptionBase(owner, name, help), choices_(std::move(choices)), value_(dflt), dflt_(dflt) {}
  E operator*() const { return value_; }
  void setValue(E v) { value_ = v; }
  std::string type() const override {
    std::string s;
    for (const auto& [word, v] : choices_)
      s += (s.empty() ? "" : "|") + std::string(word);
    return s;
  }
  std::string defaultText() const override {
    for (const auto& [word, v] : choices_)
      if (v == dflt_) return std::string(word);
    return "";
  }

 private:
  void parse(const std::string& value) override {
    for (const auto& [word, v] : choices_)
      if (word == value) {
        value_ = v;
        return;
      }
    std::string list = "one of";
    for (size_t i = 0; i < choices_.size(); ++i)
      list += (i ? ", " : " ") + std::string(choices_[i].first);
    expected(value, list);
  }
  Choices choices_;
  E value_;
  E dflt_;
};

// A byte size ("80GiB", "512M", "1000000"; parseByteSize), or one of `keywords` standing for a
// value of its own (memory-limit=input -> -1, none -> 0). Unset by default with std::nullopt.
class BytesOption : public OptionBase {
 public:
  BytesOption(Pass* owner, std::string_view name, std::optional<std::string_view> dflt,
              std::string_view help,
              std::vector<std::pair<std::string_view, int64_t>> keywords = {});
  int64_t operator*() const { return *value_; }
  bool hasValue() const { return value_.has_value(); }
  std::string type() const override { return "bytes"; }
  std::string defaultText() const override { return std::string(dflt_.value_or("")); }

 private:
  void parse(const std::string& value) override;
  int64_t parseText(const std::string& text) const;
  std::optional<int64_t> value_;
  std::optional<std::string_view> dflt_;
  std::vector<std::pair<std::string_view, int64_t>> keywords_;
};

// "80GiB", "512M", "1000000" -> bytes (K, M, G, T with optional iB are powers of 1024; KB, MB,
// GB, TB of 1000). Throws JfxError on anything else.
int64_t parseByteSize(const std::string& text);

class StatisticSet;

// One counter a pass reports, declared once as a member of the pass's StatisticSet. A part in
// angle brackets stands for a varying segment without dots ("buckets.<kind>" counts
// buckets.all_gather, buckets.reduce_scatter): report it with ctx.stat(s, "all_gather").
class Statistic {
 public:
  Statistic(StatisticSet* set, std::string_view name, std::string_view help);
  Statistic(const Statistic&) = delete;
  Statistic& operator=(const Statistic&) = delete;
  std::string_view name() const { return name_; }
  std::string_view help() const { return help_; }
  // The name with its <part> replaced by `part`.
  std::string instance(std::string_view part) const;

 private:
  std::string_view name_;
  std::string_view help_;
};

// The statistics a pass declares: a struct deriving from this, one Statistic member each.
class StatisticSet {
 public:
  StatisticSet() = default;
  StatisticSet(const StatisticSet&) = delete;
  StatisticSet& operator=(const StatisticSet&) = delete;
  std::span<const Statistic* const> all() const { return list_; }

 private:
  friend class Statistic;
  std::vector<const Statistic*> list_;
};

}  // namespace jfx
