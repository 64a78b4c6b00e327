// jointfx passes [NAME]: the registry, one pass per line; with a name, that pass's options (name,
// type, default, range, meaning) and statistics, from the declarations the pass reads them through
// (its Option and Statistic members: passes/options.h).
#include <algorithm>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "passes/registry.h"
#include "tools/jointfx/cli_util.h"
#include "tools/jointfx/commands.h"

namespace jfx::cli {

namespace {

// Rows of cells, columns padded to their widest cell; the last column is not padded.
void printTable(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width;
  for (const auto& row : rows)
    for (size_t c = 0; c < row.size(); ++c) {
      if (width.size() <= c) width.push_back(0);
      width[c] = std::max(width[c], row[c].size());
    }
  for (const auto& row : rows) {
    std::string line = " ";
    for (size_t c = 0; c < row.size(); ++c) {
      line += " " + row[c];
      if (c + 1 < row.size()) line += std::string(width[c] - row[c].size() + 1, ' ');
    }
    while (!line.empty() && line.back() == ' ')
      line.pop_back();
    std::cout << line << "\n";
  }
}

int describePass(const std::string& name) {
  const PassRegistration* reg = nullptr;
  for (const auto& r : passRegistry())
    if (r.name == name) reg = &r;
  if (!reg) {
    std::string known;
    for (const auto& r : passRegistry())
      known += (known.empty() ? "" : ", ") + std::string(r.name);
    printError("passes",
               "error: unknown pass " + quoteForMessage(name) + " (known passes: " + known + ")");
    return kInputError;
  }
  std::unique_ptr<Pass> pass = createPass(reg->name);
  std::cout << reg->name << ": " << reg->summary << "\n\n";
  if (pass->options().empty()) {
    std::cout << "options: none\n";
  } else {
    std::cout << "options:\n";
    std::vector<std::vector<std::string>> rows = {{"name", "type", "default", "range", "meaning"}};
    for (const OptionBase* o : pass->options()) {
      const std::string dflt = o->defaultText(), range = o->range();
      rows.push_back({std::string(o->name()), o->type(), dflt.empty() ? "(unset)" : dflt,
                      range.empty() ? "-" : range, std::string(o->help())});
    }
    printTable(rows);
  }
  std::cout << "\n";
  if (pass->statistics().empty()) {
    std::cout << "statistics: none\n";
  } else {
    std::cout << "statistics (--stats prints them as " << reg->name << ".NAME):\n";
    std::vector<std::vector<std::string>> rows;
    for (const Statistic* s : pass->statistics())
      rows.push_back({std::string(s->name()), std::string(s->help())});
    printTable(rows);
  }
  return kOk;
}

}  // namespace

void addPassesCommand(CLI::App& app, int& exit_code) {
  auto name = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand(
      "passes", "List the passes a pipeline can name; with a NAME, its options and statistics");
  cmd->add_option("name", *name,
                  "A pass: list its options (type, default, range, meaning) and statistics");
  cmd->callback([name, &exit_code] {
    if (!name->empty()) {
      exit_code = describePass(*name);
      return;
    }
    size_t width = 0;
    for (const auto& r : passRegistry())
      width = std::max(width, r.name.size());
    for (const auto& r : passRegistry())
      std::cout << r.name << std::string(width - r.name.size() + 2, ' ') << r.summary << "\n";
    exit_code = kOk;
  });
}

}  // namespace jfx::cli
