// Reading and writing graph files by extension; atomic writes.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "ir/graph.h"

namespace jfx {

enum class GraphFormat { Json, Text };

// ".json" -> Json, ".jfx" -> Text; nullopt otherwise.
std::optional<GraphFormat> formatFromPath(const std::string& path);
// Reads a file ("-" reads stdin). The format comes from the extension (stdin: sniffed, JSON when
// the first non-space byte is '{'). Throws JfxError.
std::unique_ptr<Graph> loadGraph(const std::string& path);
std::string serializeGraph(const Graph& g, GraphFormat format);
// Writes to a temporary file beside `path` and renames it into place, so readers never see a
// partial file and a failure leaves any existing file untouched. "-" writes stdout.
void writeFileAtomic(const std::string& path, const std::string& contents);
void saveGraph(const Graph& g, const std::string& path, GraphFormat format);

}  // namespace jfx
