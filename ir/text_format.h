// Text IR (.jfx): FX-like, one node per line (docs/graph-format.md).
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "ir/graph.h"
#include "ir/sink.h"

namespace jfx {

// Throws JfxError with file:line:column and what was expected.
std::unique_ptr<Graph> parseTextGraph(std::string_view text, const std::string& filename);
std::string printTextGraph(const Graph& g);
// The same text, handed to `sink` in pieces of about kSinkChunkBytes as it is printed.
void printTextGraph(const Graph& g, const ChunkSink& sink);
// One node's line, as printTextGraph writes it (default device "cpu"); for messages and debugging.
std::string printNode(const Node& n);

}  // namespace jfx
