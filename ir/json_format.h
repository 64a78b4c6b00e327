// JSON interchange format v1 (docs/graph-format.md).
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "ir/graph.h"
#include "ir/sink.h"

namespace jfx {

// Parses a JSON document. Throws JfxError naming `filename` and the JSON pointer / node name of
// the first problem. Never crashes on malformed input.
std::unique_ptr<Graph> readJsonGraph(std::string_view text, const std::string& filename);
// readJsonGraph with `g`'s nodes ahead of the document's: the nodes are appended to `g` and the
// header applies to the whole graph. For callers that build most nodes another way (the in-process
// bridge builds them from torch.fx objects) and hand the rest, and the header, over as JSON.
std::unique_ptr<Graph> readJsonInto(std::string_view text, const std::string& filename,
                                    std::unique_ptr<Graph> g);
// Whether readJsonGraph's own tokenizer reads `text` as JSON by itself (for tests).
bool fastJsonTokenizerAccepts(std::string_view text);
// Canonical JSON: header keys in a fixed order, one node per line, sorted object keys.
std::string writeJsonGraph(const Graph& g);
// The same document, handed to `sink` in pieces of about kSinkChunkBytes as it is written.
void writeJsonGraph(const Graph& g, const ChunkSink& sink);
// One node's canonical JSON object, exactly as writeJsonGraph writes it in "nodes".
std::string writeJsonNode(const Node& n);

// The canonical spellings that both formats share, so JSON <-> text loses nothing. They match
// Python's json.dumps(v, sort_keys=True, separators=(",", ":"), ensure_ascii=False).
//
// A string in JSON quoting: escapes '"', '\\' and control characters only (UTF-8 passes through).
void appendJsonString(std::string& out, std::string_view s);
// Code point `cp` (<= U+10FFFF, not a surrogate) as UTF-8: what a \uXXXX escape decodes to in both
// readers.
void appendUtf8(std::string& out, uint32_t cp);
// A float as Python's repr(): shortest round-trip digits, always with '.' or an exponent
// ("1.0", "1e-06", "1e+16"), or "inf" / "-inf" / "nan" (the JSON writer boxes those itself).
void appendFloat(std::string& out, double v);
// Bytes as lower-case hex (a constant's data), and back: false on an odd length or a character
// other than 0-9, a-f.
void appendHex(std::string& out, std::string_view bytes);
bool decodeHex(std::string_view hex, std::string& out);
// Whether `c`'s data holds exactly meta.bytes() bytes (its shape is checked against the data size
// first, so a huge shape cannot overflow); otherwise why not.
std::string constantSizeProblem(const ConstantInfo& c);
// The canonical form of `text`, which must hold one JSON object: compact, keys sorted, floats as
// appendFloat; "" for {}. Throws JfxError; a syntax error's location has its line and column in
// `text`. A repeated key is an error.
std::string canonicalJsonObject(std::string_view text);
// The same for a node's extra meta as the text format spells it (`extra={...}`): it must not
// hold a key that NodeMeta types (val, phase, recompute, ac_graph_id, seq_nr, stack_trace, or a
// non-empty custom.module_fqn). `has_module` says whether the node also has module=.
std::string canonicalExtraMeta(std::string_view text, bool has_module);

}  // namespace jfx
