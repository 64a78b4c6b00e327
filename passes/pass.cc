#include "passes/pass.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>

#include "ir/error.h"

namespace jfx {
namespace {

[[noreturn]] void badOption(const std::string& pass, const std::string& key,
                            const std::string& value, const std::string& expected) {
  throw JfxError({}, "pass " + quoteForMessage(pass) + ": option " +
                         quoteForMessage(key + "=" + value) + ": expected " + expected);
}

}  // namespace

int64_t PassOptions::getInt(const std::string& key, int64_t dflt) {
  return getInt(key, dflt, kInt64Min, kInt64Max);
}

int64_t PassOptions::getInt(const std::string& key, int64_t dflt, int64_t lo, int64_t hi) {
  use(key, {"int"});
  auto it = values_.find(key);
  if (it == values_.end()) return dflt;
  const std::string& v = it->second;
  const bool full = lo == kInt64Min && hi == kInt64Max;
  const std::string range =
      full ? "an integer"
           : "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  int64_t out = 0;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  if (ec == std::errc::result_out_of_range && p == v.data() + v.size())
    badOption(pass_, key, v, full ? "an integer that fits 64 bits" : range);
  if (ec != std::errc() || p != v.data() + v.size()) {
    // A whole number written as a float (JSON pipeline files turn 2^64 into 1.8e+19): out of
    // range rather than not a number.
    double d = 0;
    auto [q, dec] = std::from_chars(v.data(), v.data() + v.size(), d);
    if (dec == std::errc() && q == v.data() + v.size() && std::isfinite(d) && d == std::floor(d))
      badOption(pass_, key, v, full ? "an integer that fits 64 bits" : range);
    badOption(pass_, key, v, "an integer");
  }
  if (out < lo || out > hi) badOption(pass_, key, v, range);
  return out;
}

double PassOptions::getFloat(const std::string& key, double dflt) {
  return getFloat(key, dflt, -std::numeric_limits<double>::max(),
                  std::numeric_limits<double>::max());
}

double PassOptions::getFloat(const std::string& key, double dflt, double lo, double hi) {
  use(key, {"float"});
  auto it = values_.find(key);
  if (it == values_.end()) return dflt;
  const std::string& v = it->second;
  double out = 0;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  if (ec == std::errc::result_out_of_range || (ec == std::errc() && !std::isfinite(out)))
    badOption(pass_, key, v, "a finite number");
  if (ec != std::errc() || p != v.data() + v.size()) badOption(pass_, key, v, "a number");
  if (out < lo || out > hi) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "a number in [%g, %g]", lo, hi);
    badOption(pass_, key, v, buf);
  }
  return out;
}

bool PassOptions::getBool(const std::string& key, bool dflt) {
  use(key, {"bool"});
  auto it = values_.find(key);
  if (it == values_.end()) return dflt;
  const std::string& v = it->second;
  if (v == "true" || v == "1" || v == "on" || v.empty()) return true;
  if (v == "false" || v == "0" || v == "off") return false;
  badOption(pass_, key, v, "true or false");
}

std::string PassOptions::getString(const std::string& key, const std::string& dflt) {
  use(key, {"string", "bytes", "path"});
  auto it = values_.find(key);
  return it == values_.end() ? dflt : it->second;
}

std::string PassOptions::getEnum(const std::string& key, const std::vector<std::string>& choices,
                                 const std::string& dflt) {
  use(key, {}, &choices);
  auto it = values_.find(key);
  std::string v = it == values_.end() ? dflt : it->second;
  for (const auto& c : choices)
    if (c == v) return v;
  std::string expected = "one of";
  for (size_t i = 0; i < choices.size(); ++i)
    expected += (i ? ", " : " ") + choices[i];
  badOption(pass_, key, v, expected);
}

std::vector<std::string> PassOptions::getList(const std::string& key,
                                              const std::vector<std::string>& dflt) {
  use(key, {"list"});
  auto it = values_.find(key);
  if (it == values_.end()) return dflt;
  std::vector<std::string> out;
  std::stringstream ss(it->second);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

void PassOptions::use(const std::string& key, std::initializer_list<std::string_view> types,
                      const std::vector<std::string>* choices) {
  read_.insert(key);
  if (!declared_) return;
  const OptionDecl* decl = nullptr;
  for (const OptionDecl& d : decls_)
    if (d.name == key) decl = &d;
  auto internal = [&](const std::string& what) {
    throw JfxError({}, "internal error: pass " + quoteForMessage(pass_) + " reads option " +
                           quoteForMessage(key) + " " + what);
  };
  if (!decl) internal("that its options() does not declare");
  bool ok = false;
  for (std::string_view t : types)
    ok = ok || decl->type == t;
  if (choices) {
    std::string joined;
    for (size_t i = 0; i < choices->size(); ++i)
      joined += (i ? "|" : "") + (*choices)[i];
    ok = decl->type == joined;
  }
  if (!ok) internal("as another type than its declared " + quoteForMessage(decl->type));
}

bool statisticMatches(std::string_view pattern, std::string_view stat) {
  size_t open = pattern.find('<');
  if (open == std::string_view::npos) return pattern == stat;
  size_t close = pattern.find('>', open);
  if (close == std::string_view::npos) return pattern == stat;
  std::string_view prefix = pattern.substr(0, open), rest = pattern.substr(close + 1);
  if (stat.size() <= prefix.size() || stat.substr(0, prefix.size()) != prefix) return false;
  stat.remove_prefix(prefix.size());
  // The varying part: one or more characters, no dot, then the rest of the pattern.
  for (size_t n = 1; n <= stat.size(); ++n) {
    if (stat[n - 1] == '.') return false;
    if (statisticMatches(rest, stat.substr(n))) return true;
  }
  return false;
}

std::vector<std::string> PassOptions::unreadKeys() const {
  std::vector<std::string> out;
  for (const auto& kv : values_)
    if (!read_.count(kv.first)) out.push_back(kv.first);
  return out;
}

std::string PassOptions::str() const {
  if (values_.empty()) return "";
  std::string s = "{";
  bool first = true;
  for (const auto& [k, v] : values_) {
    s += (first ? "" : ", ") + k + "=" + v;
    first = false;
  }
  return s + "}";
}

}  // namespace jfx
