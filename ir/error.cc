#include "ir/error.h"

#include <algorithm>

namespace jfx {

// Built with append() rather than operator+ chains: GCC 12 at -O3 reports a false -Wrestrict
// on `"literal" + std::string`.
std::string SourceLocation::str() const {
  std::string s = file;
  if (line > 0) {
    s.append(":").append(std::to_string(line));
    if (column > 0) s.append(":").append(std::to_string(column));
  }
  if (!json_pointer.empty()) {
    if (!s.empty()) s.append(" ");
    s.append("at ").append(json_pointer);
  }
  if (!node.empty()) {
    if (!s.empty()) s.append(" ");
    s.append("(node '").append(node).append("')");
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
  return std::string(what);
}

}  // namespace jfx
