// The pass registry: passes/registry.cc holds one line per pass.
#pragma once

#include <functional>
#include <memory>
#include <string_view>
#include <vector>

#include "passes/pass.h"

namespace jfx {

struct PassRegistration {
  std::string_view name;     // kebab-case, as written in pipelines
  std::string_view summary;  // one line for `jointfx passes`
  std::function<std::unique_ptr<Pass>()> create;
};

const std::vector<PassRegistration>& passRegistry();
// nullptr when no pass has that name.
std::unique_ptr<Pass> createPass(std::string_view name);

}  // namespace jfx
