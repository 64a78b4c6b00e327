#include "ir/error.h"

#include <algorithm>

namespace jfx {

// Built with append() rather than operator+ chains: GCC 12 at -O3 reports a false -Wrestrict
// on `"literal" + std::string`.
std::string SourceLocation::str() const {
  std::string s = clipForMessage(file, kPathQuoteLimit);
  if (line > 0) {
    s.append(":").append(std::to_string(line));
    if (column > 0) s.append(":").append(std::to_string(column));
  }
  // A pointer holds the file's keys and a node name is the file's text: either may be long.
  if (!json_pointer.empty()) {
    if (!s.empty()) s.append(" ");
    s.append("at ").append(clipForMessage(json_pointer));
  }
  if (!node.empty()) {
    if (!s.empty()) s.append(" ");
    s.append("(node ").append(quoteForMessage(node)).append(")");
  }
  return s;
}

namespace {
std::string format(const SourceLocation& loc, const std::string& message) {
  std::string out = loc.str();
  if (!out.empty()) out.append(": ");
  out.append("error: ").append(message);
  return out;
}
}  // namespace

JfxError::JfxError(SourceLocation loc, const std::string& message)
    : std::runtime_error(format(loc, message)), loc_(std::move(loc)), message_(message) {}

SourceLocation locateByte(std::string_view text, size_t offset, std::string file) {
  SourceLocation loc;
  loc.file = std::move(file);
  offset = std::min(offset, text.size());
  loc.line = 1;
  size_t line_start = 0;
  for (size_t i = 0; i < offset; ++i)
    if (text[i] == '\n') {
      ++loc.line;
      line_start = i + 1;
    }
  loc.column = static_cast<int>(offset - line_start) + 1;
  return loc;
}

namespace {
// The length of the longest prefix of `v` of at most `limit` bytes that ends on a UTF-8
// character boundary.
size_t utf8Prefix(std::string_view v, size_t limit) {
  if (v.size() <= limit) return v.size();
  size_t n = limit;
  while (n > 0 && (static_cast<unsigned char>(v[n]) & 0xC0) == 0x80)
    --n;
  return n;
}
}  // namespace

std::string clipForMessage(std::string_view value, size_t limit) {
  if (value.size() <= limit) return std::string(value);
  std::string out(value.substr(0, utf8Prefix(value, limit)));
  out.append("... (").append(std::to_string(value.size())).append(" bytes)");
  return out;
}

std::string quoteForMessage(std::string_view value, size_t limit) {
  std::string out = "'";
  if (value.size() <= limit) return out.append(value).append("'");
  out.append(value.substr(0, utf8Prefix(value, limit)));
  out.append("...' (").append(std::to_string(value.size())).append(" bytes)");
  return out;
}

std::string humanLibraryMessage(std::string_view what) {
  // nlohmann: "[json.exception.<kind>.<id>] " then, for parse errors, "parse error at line L,
  // column C: " or "parse error: ".
  if (what.starts_with("[json.exception.")) {
    if (size_t close = what.find("] "); close != std::string_view::npos)
      what.remove_prefix(close + 2);
    if (what.starts_with("parse error")) {
      if (size_t colon = what.find(": "); colon != std::string_view::npos)
        what.remove_prefix(colon + 2);
    }
  }
  // c10::Error::what() appends the C++ stack after the message.
  for (std::string_view marker : {"\nException raised from ", "\nframe #0"})
    if (size_t at = what.find(marker); at != std::string_view::npos) what = what.substr(0, at);
  while (!what.empty() && (what.back() == '\n' || what.back() == ' '))
    what.remove_suffix(1);
  // nlohmann quotes the input it stopped at (a whole unterminated string, every digit of a
  // number): from the first quote to the last.
  const size_t open = what.find('\'');
  const size_t close = what.rfind('\'');
  if (open != std::string_view::npos && close > open + 1 + kQuoteLimit)
    return std::string(what.substr(0, open)) +
           quoteForMessage(what.substr(open + 1, close - open - 1)) +
           std::string(what.substr(close + 1));
  return std::string(what);
}

}  // namespace jfx
