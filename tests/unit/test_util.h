// Helpers several unit-test files share.
#pragma once

#include <exception>
#include <functional>
#include <string>
#include <string_view>
#include <utility>

#include "passes/pass.h"

namespace jfx::test {

// The message of what `f` throws, or "<no error>".
inline std::string errorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "<no error>";
}

// A pass whose behaviour the test supplies.
class LambdaPass : public Pass {
 public:
  LambdaPass(std::string name, std::function<bool(Graph&, PassContext&)> body)
      : Pass(std::move(name)), body_(std::move(body)) {}
  bool run(Graph& g, PassContext& ctx) override { return body_(g, ctx); }

 private:
  std::function<bool(Graph&, PassContext&)> body_;
};

}  // namespace jfx::test
