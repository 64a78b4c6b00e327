#include "passes/options.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "ir/error.h"
#include "passes/pass.h"

namespace jfx {

OptionBase::OptionBase(Pass* owner, std::string_view name, std::string_view help)
    : name_(name), help_(help) {
  owner->options_.push_back(this);
}

void OptionBase::expected(const std::string& value, const std::string& what) const {
  throw JfxError(
      {}, "option " + quoteForMessage(std::string(name_) + "=" + value) + ": expected " + what);
}

Option<int64_t>::Option(Pass* owner, std::string_view name, std::optional<int64_t> dflt,
                        std::string_view help, Range<int64_t> range,
                        std::vector<std::pair<std::string_view, int64_t>> keywords)
    : OptionBase(owner, name, help),
      value_(dflt),
      dflt_(dflt),
      range_(range),
      keywords_(std::move(keywords)) {}

std::string Option<int64_t>::type() const {
  std::string s = "int";
  for (const auto& [word, v] : keywords_)
    s += "|" + std::string(word);
  return s;
}

std::string Option<int64_t>::defaultText() const {
  if (!dflt_) return "";
  for (const auto& [word, v] : keywords_)
    if (v == *dflt_) return std::string(word);
  return std::to_string(*dflt_);
}

std::string Option<int64_t>::range() const {
  std::string s;
  if (range_.lo != kInt64Min || range_.hi != kInt64Max)
    s = "[" + std::to_string(range_.lo) + ", " + std::to_string(range_.hi) + "]";
  for (const auto& [word, v] : keywords_)
    s += (s.empty() ? "" : " or ") + std::string(word);
  return s;
}

void Option<int64_t>::parse(const std::string& v) {
  for (const auto& [word, k] : keywords_)
    if (word == v) {
      value_ = k;
      return;
    }
  const bool full = range_.lo == kInt64Min && range_.hi == kInt64Max;
  std::string range =
      full ? "an integer"
           : "an integer in [" + std::to_string(range_.lo) + ", " + std::to_string(range_.hi) + "]";
  for (const auto& [word, k] : keywords_)
    range += " or " + std::string(word);
  int64_t out = 0;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  if (!keywords_.empty() && (ec != std::errc() || p != v.data() + v.size())) expected(v, range);
  if (ec == std::errc::result_out_of_range && p == v.data() + v.size())
    expected(v, full ? "an integer that fits 64 bits" : range);
  if (ec != std::errc() || p != v.data() + v.size()) {
    // A whole number written as a float (JSON pipeline files turn 2^64 into 1.8e+19): out of
    // range rather than not a number.
    double d = 0;
    auto [q, dec] = std::from_chars(v.data(), v.data() + v.size(), d);
    if (dec == std::errc() && q == v.data() + v.size() && std::isfinite(d) && d == std::floor(d))
      expected(v, full ? "an integer that fits 64 bits" : range);
    expected(v, "an integer");
  }
  if (out < range_.lo || out > range_.hi) expected(v, range);
  value_ = out;
}

Option<double>::Option(Pass* owner, std::string_view name, double dflt, std::string_view help,
                       Range<double> range)
    : OptionBase(owner, name, help), value_(dflt), dflt_(dflt), range_(range) {}

namespace {
std::string shortNumber(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}
}  // namespace

std::string Option<double>::defaultText() const {
  return shortNumber(dflt_);
}

std::string Option<double>::range() const {
  if (range_.lo == -kDoubleMax && range_.hi == kDoubleMax) return "";
  return "[" + shortNumber(range_.lo) + ", " + shortNumber(range_.hi) + "]";
}

void Option<double>::parse(const std::string& v) {
  double out = 0;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  if (ec == std::errc::result_out_of_range || (ec == std::errc() && !std::isfinite(out)))
    expected(v, "a finite number");
  if (ec != std::errc() || p != v.data() + v.size()) expected(v, "a number");
  if (out < range_.lo || out > range_.hi)
    expected(v, "a number in [" + shortNumber(range_.lo) + ", " + shortNumber(range_.hi) + "]");
  value_ = out;
}

void Option<bool>::parse(const std::string& v) {
  if (v == "true" || v == "1" || v == "on" || v.empty()) {
    value_ = true;
  } else if (v == "false" || v == "0" || v == "off") {
    value_ = false;
  } else {
    expected(v, "true or false");
  }
}

Option<std::vector<std::string>>::Option(Pass* owner, std::string_view name,
                                         std::vector<std::string> dflt, std::string_view help,
                                         std::vector<std::string_view> choices,
                                         std::string_view noun)
    : OptionBase(owner, name, help),
      value_(dflt),
      dflt_(std::move(dflt)),
      choices_(std::move(choices)),
      noun_(noun) {}

bool Option<std::vector<std::string>>::contains(std::string_view item) const {
  for (const std::string& s : value_)
    if (s == item) return true;
  return false;
}

std::string Option<std::vector<std::string>>::defaultText() const {
  std::string s;
  for (const std::string& item : dflt_)
    s += (s.empty() ? "" : ",") + item;
  return s;
}

void Option<std::vector<std::string>>::parse(const std::string& v) {
  std::vector<std::string> out;
  std::stringstream ss(v);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  if (!choices_.empty())
    for (const std::string& x : out) {
      bool known = false;
      std::string list;
      for (std::string_view c : choices_) {
        known = known || c == x;
        list += (list.empty() ? "" : ", ") + std::string(c);
      }
      if (!known)
        throw JfxError({}, "option " + quoteForMessage(name()) + ": unknown " + std::string(noun_) +
                               " " + quoteForMessage(x) + " (expected " + list + ")");
    }
  value_ = std::move(out);
}

BytesOption::BytesOption(Pass* owner, std::string_view name, std::optional<std::string_view> dflt,
                         std::string_view help,
                         std::vector<std::pair<std::string_view, int64_t>> keywords)
    : OptionBase(owner, name, help), dflt_(dflt), keywords_(std::move(keywords)) {
  if (dflt_) value_ = parseText(std::string(*dflt_));
}

int64_t BytesOption::parseText(const std::string& text) const {
  for (const auto& [word, v] : keywords_)
    if (word == text) return v;
  try {
    return parseByteSize(text);
  } catch (const JfxError& e) {
    throw JfxError({}, "option " + quoteForMessage(name()) + ": " + e.message());
  }
}

void BytesOption::parse(const std::string& v) {
  value_ = parseText(v);
}

int64_t parseByteSize(const std::string& text) {
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.'))
    ++i;
  std::string num = text.substr(0, i), unit = text.substr(i);
  static constexpr std::pair<std::string_view, double> kUnits[] = {
      {"", 1},        {"B", 1},        {"K", 0x1p10},   {"KiB", 0x1p10}, {"Ki", 0x1p10},
      {"M", 0x1p20},  {"MiB", 0x1p20}, {"Mi", 0x1p20},  {"G", 0x1p30},   {"GiB", 0x1p30},
      {"Gi", 0x1p30}, {"T", 0x1p40},   {"TiB", 0x1p40}, {"Ti", 0x1p40},  {"KB", 1e3},
      {"MB", 1e6},    {"GB", 1e9},     {"TB", 1e12},
  };
  double mult = 0;
  for (const auto& [u, m] : kUnits)
    if (u == unit) mult = m;
  // A whole number of bytes is read exactly: through a double, 2^63 - 1 (a bound a nested
  // pipeline passes on) would round up past the largest int64.
  if (mult == 1 && !num.empty() && num.find('.') == std::string::npos) {
    int64_t whole = 0;
    auto [end, ec] = std::from_chars(num.data(), num.data() + num.size(), whole);
    if (ec == std::errc() && end == num.data() + num.size()) return whole;
  }
  if (mult == 0) num.clear();
  double v = 0;
  try {
    size_t used = 0;
    v = num.empty() ? -1 : std::stod(num, &used);
    if (used != num.size()) v = -1;
  } catch (const std::exception&) {
    v = -1;
  }
  if (v < 0)
    throw JfxError(
        {}, "bad byte size " + quoteForMessage(text) + " (expected e.g. 80GiB, 512M, 1000000)");
  // 2^63 bytes and more do not fit int64 (and converting such a double is undefined).
  if (!(v * mult < 9223372036854775807.0))
    throw JfxError({}, "byte size " + quoteForMessage(text) + " is too large (at most 8 EiB)");
  return static_cast<int64_t>(v * mult);
}

Statistic::Statistic(StatisticSet* set, std::string_view name, std::string_view help)
    : name_(name), help_(help) {
  set->list_.push_back(this);
}

std::string Statistic::instance(std::string_view part) const {
  const size_t open = name_.find('<');
  const size_t close = name_.find('>', open);
  if (open == std::string_view::npos || close == std::string_view::npos) return std::string(name_);
  std::string s(name_.substr(0, open));
  s += part;
  s += name_.substr(close + 1);
  return s;
}

}  // namespace jfx
