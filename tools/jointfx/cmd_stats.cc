// jointfx stats IN [--json]: what is in a graph. Node counts by op, category and phase; graph
// inputs by kind and parameter bytes; collectives by kind, process group and phase; targets the
// op-info table does not know. Sections in a fixed order, counts sorted by key, so the output
// diffs cleanly.
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "tools/jointfx/cli_util.h"

namespace jfx::cli {

namespace {

struct StatsArgs {
  std::string input;
  bool json = false;
};

using Counts = std::map<std::string, int64_t>;

// Sections in a fixed order (ordered_json keeps insertion order); counts inside sorted by key.
nlohmann::ordered_json collectStats(const Graph& g) {
  Counts ops, categories, phases, inputs, unknown;
  Counts by_kind, bytes_by_kind, by_group, by_phase;
  std::map<std::string, Counts> by_kind_phase;  // all_gather -> forward -> count
  int64_t param_bytes = 0, params = 0, collectives = 0;
  g.forEach([&](const Node* n) {
    ++ops[std::string(opKindName(n->op()))];
    ++categories[std::string(categoryName(n->info().category))];
    ++phases[std::string(phaseName(n->meta().phase))];
    if (n->op() == OpKind::Placeholder) {
      ++inputs[std::string(inputKindName(n->inputKind()))];
      if (n->inputKind() == InputKind::Parameter) {
        ++params;
        param_bytes += n->val().bytes();
      }
    }
    if (n->op() == OpKind::CallFunction && n->info().category == OpCategory::Unknown)
      ++unknown[std::string(n->target().str())];
    if (!n->isCollective()) return;
    ++collectives;
    const OpInfo& info = n->info();
    std::string kind(collectiveKindName(info.collective));
    ++by_kind[kind];
    ++by_phase[std::string(phaseName(n->meta().phase))];
    ++by_kind_phase[kind][std::string(phaseName(n->meta().phase))];
    // Bytes each rank ends up with: the collective's output.
    bytes_by_kind[kind] += n->val().bytes();
    const Arg* group = nullptr;
    if (info.group_name_arg >= 0 && static_cast<size_t>(info.group_name_arg) < n->numArgs())
      group = &n->arg(info.group_name_arg);
    else
      group = n->kwarg("group_name");
    ++by_group[group && group->isStr() ? std::string(group->str()) : std::string("?")];
  });
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  out["nodes"] = g.size();
  out["ops"] = ops;
  out["categories"] = categories;
  out["phases"] = phases;
  out["inputs"] = inputs;
  out["parameters"] = params;
  out["parameter_bytes"] = param_bytes;
  nlohmann::ordered_json coll = nlohmann::ordered_json::object();
  coll["total"] = collectives;
  coll["by_kind"] = by_kind;
  coll["output_bytes_by_kind"] = bytes_by_kind;
  coll["by_group"] = by_group;
  coll["by_phase"] = by_phase;
  coll["by_kind_phase"] = by_kind_phase;
  out["collectives"] = coll;
  out["unknown_targets"] = unknown;
  return out;
}

// The JSON as indented "key: value" lines, in the same order.
void printText(std::ostream& os, const nlohmann::ordered_json& j, int indent) {
  for (auto it = j.begin(); it != j.end(); ++it) {
    os << std::string(indent, ' ') << it.key() << ":";
    if (it->is_object()) {
      os << (it->empty() ? " -" : "") << "\n";
      printText(os, *it, indent + 2);
    } else {
      os << " " << it->dump() << "\n";
    }
  }
}

}  // namespace

void addStatsCommand(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<StatsArgs>();
  CLI::App* cmd =
      app.add_subcommand("stats", "Summarize a graph: ops, phases, inputs, collectives");
  cmd->add_option("input", args->input, "Graph file (.json, .jfx, or - for stdin)")->required();
  cmd->add_flag("--json", args->json, "Print JSON (fixed key order) for scripts");
  cmd->callback([args, &exit_code] {
    std::unique_ptr<Graph> g = loadInput("stats", args->input);
    if (!g) {
      exit_code = kInputError;
      return;
    }
    nlohmann::ordered_json s = collectStats(*g);
    if (args->json)
      std::cout << s.dump(2) << "\n";
    else
      printText(std::cout, s, 0);
    exit_code = kOk;
  });
}

}  // namespace jfx::cli
