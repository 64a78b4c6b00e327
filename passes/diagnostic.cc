#include "passes/diagnostic.h"

#include <exception>
#include <stdexcept>

namespace jfx {

SourceLocation locationOf(const Node* n) {
  if (!n) return {};
  return n->graph() ? n->graph()->location(n) : SourceLocation::atNode(std::string(n->name()));
}

InFlightError::InFlightError(SourceLocation loc)
    : loc_(std::move(loc)), exceptions_(std::uncaught_exceptions()) {}

InFlightError::InFlightError(InFlightError&& other) noexcept
    : loc_(std::move(other.loc_)), text_(std::move(other.text_)), exceptions_(other.exceptions_) {
  other.active_ = false;
}

InFlightError::~InFlightError() noexcept(false) {
  if (!active_ || std::uncaught_exceptions() > exceptions_)
    return;  // unwinding: the first error stands
  throw JfxError(loc_, text_.str());
}

void apiMisuse(const std::string& what) {
  throw std::logic_error(what);
}

}  // namespace jfx
