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
  throw JfxError({},
                 "pass '" + pass + "': option '" + key + "=" + value + "': expected " + expected);
}

}  // namespace

int64_t PassOptions::getInt(const std::string& key, int64_t dflt) {
  return getInt(key, dflt, kInt64Min, kInt64Max);
}

int64_t PassOptions::getInt(const std::string& key, int64_t dflt, int64_t lo, int64_t hi) {
  read_.insert(key);
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
  read_.insert(key);
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
  read_.insert(key);
  auto it = values_.find(key);
  if (it == values_.end()) return dflt;
  const std::string& v = it->second;
  if (v == "true" || v == "1" || v == "on" || v.empty()) return true;
  if (v == "false" || v == "0" || v == "off") return false;
  badOption(pass_, key, v, "true or false");
}

std::string PassOptions::getString(const std::string& key, const std::string& dflt) {
  read_.insert(key);
  auto it = values_.find(key);
  return it == values_.end() ? dflt : it->second;
}

std::string PassOptions::getEnum(const std::string& key, const std::vector<std::string>& choices,
                                 const std::string& dflt) {
  std::string v = getString(key, dflt);
  for (const auto& c : choices)
    if (c == v) return v;
  std::string expected = "one of";
  for (size_t i = 0; i < choices.size(); ++i)
    expected += (i ? ", " : " ") + choices[i];
  badOption(pass_, key, v, expected);
}

std::vector<std::string> PassOptions::getList(const std::string& key,
                                              const std::vector<std::string>& dflt) {
  read_.insert(key);
  auto it = values_.find(key);
  if (it == values_.end()) return dflt;
  std::vector<std::string> out;
  std::stringstream ss(it->second);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
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
