// The pass registry: passes/registry.cc holds one line per pass, which gives the pass its name.
#pragma once

#include <functional>
#include <memory>
#include <string_view>
#include <vector>

#include "passes/pass.h"

namespace jfx {

struct PassRegistration {
  std::string_view name;                        // kebab-case, as written in pipelines
  std::string_view summary;                     // one line for `jointfx passes`
  std::function<std::unique_ptr<Pass>()> make;  // the pass, unnamed: createPass names it
};

const std::vector<PassRegistration>& passRegistry();
// The pass registered under `name`, named so; nullptr when no pass has that name.
std::unique_ptr<Pass> createPass(std::string_view name);
// "dce, dedup-fsdp-unshard, ..." in registry order, for messages that list them.
std::string knownPassNames();

}  // namespace jfx
