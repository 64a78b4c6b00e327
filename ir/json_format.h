// JSON interchange format v1 (docs/graph-format.md).
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "ir/graph.h"

namespace jfx {

// Parses a JSON document. Throws JfxError naming `filename` and the JSON pointer / node name of
// the first problem. Never crashes on malformed input.
std::unique_ptr<Graph> readJsonGraph(std::string_view text, const std::string& filename);
// Canonical JSON: header keys in a fixed order, one node per line, sorted object keys.
std::string writeJsonGraph(const Graph& g);

}  // namespace jfx
