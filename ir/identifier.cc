#include "ir/identifier.h"

#include <algorithm>
#include <array>
#include <cstdint>

namespace jfx {

namespace {

// Character classes of ASCII identifiers: kStart may begin one, kPart continue it, and kNoKeyword
// marks characters no Python keyword holds (every keyword is letters only).
constexpr uint8_t kStart = 1, kPart = 2, kNoKeyword = 4;
constexpr std::array<uint8_t, 256> kIdentClass = [] {
  std::array<uint8_t, 256> t{};
  for (int c = 'a'; c <= 'z'; ++c)
    t[c] = t[c - 'a' + 'A'] = kStart | kPart;
  for (int c = '0'; c <= '9'; ++c)
    t[c] = kPart | kNoKeyword;
  t['_'] = kStart | kPart | kNoKeyword;
  return t;
}();

// Python 3's keywords (keyword.kwlist; the soft keywords match, case, type and _ are names).
bool isPythonKeyword(std::string_view s) {
  static constexpr std::string_view kKeywords[] = {
      "False", "None",     "True",  "and",    "as",   "assert", "async",  "await",    "break",
      "class", "continue", "def",   "del",    "elif", "else",   "except", "finally",  "for",
      "from",  "global",   "if",    "import", "in",   "is",     "lambda", "nonlocal", "not",
      "or",    "pass",     "raise", "return", "try",  "while",  "with",   "yield"};
  for (std::string_view k : kKeywords)
    if (k == s) return true;
  return false;
}

}  // namespace

bool isPythonIdentifier(std::string_view s) {
  if (s.empty() || !(kIdentClass[static_cast<unsigned char>(s[0])] & kStart)) return false;
  uint8_t all = kIdentClass[static_cast<unsigned char>(s[0])];
  uint8_t any_no_keyword = all & kNoKeyword;
  for (size_t i = 1; i < s.size(); ++i) {
    const uint8_t c = kIdentClass[static_cast<unsigned char>(s[i])];
    all &= c | kStart;  // kPart must hold for every character after the first
    any_no_keyword |= c & kNoKeyword;
  }
  if (!(all & kPart)) return false;
  // Most generated names hold a digit or '_' ("mm_3"): no keyword does.
  return any_no_keyword || s.size() < 2 || s.size() > 8 || !isPythonKeyword(s);
}

bool isAttributePath(std::string_view s) {
  for (;;) {
    const size_t dot = s.find('.');
    const std::string_view part = s.substr(0, dot);
    const bool number = !part.empty() && std::all_of(part.begin(), part.end(),
                                                     [](char c) { return c >= '0' && c <= '9'; });
    if (!number && !isPythonIdentifier(part)) return false;
    if (dot == std::string_view::npos) return true;
    s.remove_prefix(dot + 1);
  }
}

std::string quotedForMessage(std::string_view s) {
  constexpr size_t kShown = 80;
  std::string out = "\"";
  size_t n = std::min(s.size(), kShown);
  while (n < s.size() && n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80)
    --n;  // not inside a UTF-8 sequence
  for (size_t i = 0; i < n; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7f) {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\u00";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  out += '"';
  if (n < s.size()) out += "... (" + std::to_string(s.size()) + " bytes)";
  return out;
}

}  // namespace jfx
