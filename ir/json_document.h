// Small JSON documents that are not graphs (pipeline files, hardware profiles), read by the graph
// reader's rules (docs/graph-format.md, JSON): the same texts accepted, and every rejection
// located.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace jfx {

// Parses `text` as one JSON document. Throws JfxError naming `filename` and the line, column and
// byte (a syntax error, a NUL byte, invalid UTF-8, nesting past the graph reader's limit) or the
// JSON pointer (a key repeated in an object, an integer past 64 bits, which nlohmann would keep
// only as a rounded double).
nlohmann::json readJsonDocument(std::string_view text, const std::string& filename);

}  // namespace jfx
