// jointfx passes: the registry, one pass per line.
#include <algorithm>
#include <iostream>

#include "passes/registry.h"
#include "tools/jointfx/commands.h"

namespace jfx::cli {

void addPassesCommand(CLI::App& app, int& exit_code) {
  CLI::App* cmd = app.add_subcommand("passes", "List the passes a pipeline can name");
  cmd->callback([&exit_code] {
    size_t width = 0;
    for (const auto& r : passRegistry())
      width = std::max(width, r.name.size());
    for (const auto& r : passRegistry())
      std::cout << r.name << std::string(width - r.name.size() + 2, ' ') << r.summary << "\n";
    exit_code = kOk;
  });
}

}  // namespace jfx::cli
