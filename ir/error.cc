#include "ir/error.h"

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

}  // namespace jfx
