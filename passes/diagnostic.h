// Errors passes report, located at the node they concern:
//
//   ctx.emitError(x) << "cannot recompute '" << x->name() << "': it draws random numbers";
//
// throws a JfxError at the end of the statement, located at `x`; the pass manager adds the pass's
// name and place in the pipeline ("pass 'remat' (#3) failed: ..."), so a pass never writes its
// own. What a caller can fix (a graph a pass cannot handle, a bound it cannot meet) is a
// JfxError; a caller's misuse of the API (a planner without its cost model, an analysis asked of
// a second graph) is a bug in the program, not in its input: apiMisuse, a std::logic_error.
#pragma once

#include <sstream>
#include <string>

#include "ir/error.h"
#include "ir/graph.h"

namespace jfx {

// Where an error about `n` points: the place it was read from (Graph::location: the line of the
// text IR, the JSON pointer, the FX node) and its name.
SourceLocation locationOf(const Node* n);

// A message being built; thrown as a JfxError when the statement that built it ends. Not thrown
// when it ends by an exception already under way.
class InFlightError {
 public:
  explicit InFlightError(SourceLocation loc);
  InFlightError(InFlightError&& other) noexcept;
  InFlightError(const InFlightError&) = delete;
  InFlightError& operator=(const InFlightError&) = delete;
  InFlightError& operator=(InFlightError&&) = delete;
  ~InFlightError() noexcept(false);

  template <class T>
  InFlightError& operator<<(const T& v) {
    text_ << v;
    return *this;
  }

 private:
  SourceLocation loc_;
  std::ostringstream text_;
  int exceptions_;      // std::uncaught_exceptions() when made
  bool active_ = true;  // false once moved from
};

// A caller broke the API's contract: throws std::logic_error (the pass manager reports it as an
// internal error, naming the pass).
[[noreturn]] void apiMisuse(const std::string& what);

}  // namespace jfx
