// The same JSON graph document with the members of every object inside each node in reverse
// order, for tests that check the JSON reader's result (a graph, or the first error) does not
// depend on the order of a node's keys. The header keeps its order: format and version are
// checked as they are read, before the nodes that follow them.
#pragma once

#include <algorithm>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace jfx::testing {

inline nlohmann::ordered_json reversedMembers(const nlohmann::ordered_json& j) {
  if (j.is_array()) {
    nlohmann::ordered_json out = nlohmann::ordered_json::array();
    for (const auto& item : j)
      out.push_back(reversedMembers(item));
    return out;
  }
  if (!j.is_object()) return j;
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  std::vector<std::pair<std::string, const nlohmann::ordered_json*>> members;
  for (const auto& [k, v] : j.items())
    members.emplace_back(k, &v);
  for (auto it = members.rbegin(); it != members.rend(); ++it)
    out[it->first] = reversedMembers(*it->second);
  return out;
}

// nullopt where nlohmann does not read `text`, or reads it as something else than the document
// it is: a repeated key (it keeps one), an integer past 64 bits (it writes a double back), a NUL
// byte (it stops there and takes what came before).
inline std::optional<std::string> reversedKeys(std::string_view text) {
  if (text.find('\0') != std::string_view::npos) return std::nullopt;
  if (std::regex_search(std::string(text), std::regex("[0-9]{19}"))) return std::nullopt;
  try {
    const auto j = nlohmann::ordered_json::parse(text);
    const std::string back = j.dump();
    // A repeated key is dropped by the parse: the document then has fewer members.
    const auto count = [](std::string_view t) { return std::count(t.begin(), t.end(), ':'); };
    if (count(back) != count(text)) return std::nullopt;
    auto out = j;
    if (out.is_object() && out.contains("nodes") && out["nodes"].is_array())
      for (auto& node : out["nodes"])
        node = reversedMembers(node);
    return out.dump();
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;
  }
}

}  // namespace jfx::testing
