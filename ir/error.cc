#include "ir/error.h"

namespace jfx {

std::string SourceLocation::str() const {
  std::string s = file;
  if (line > 0) {
    s += ":" + std::to_string(line);
    if (column > 0) s += ":" + std::to_string(column);
  }
  if (!json_pointer.empty()) s += (s.empty() ? "" : " ") + std::string("at ") + json_pointer;
  if (!node.empty()) s += (s.empty() ? "" : " ") + std::string("(node '") + node + "')";
  return s;
}

namespace {
std::string format(const SourceLocation& loc, const std::string& message) {
  std::string where = loc.str();
  return where.empty() ? "error: " + message : where + ": error: " + message;
}
}  // namespace

JfxError::JfxError(SourceLocation loc, const std::string& message)
    : std::runtime_error(format(loc, message)), loc_(std::move(loc)), message_(message) {}

}  // namespace jfx
