// The identifier rule (docs/graph-format.md, "Names are data"): what a node name, a placeholder
// target, a kwargs key and each part of a get_attr target must be, because torch.fx writes them
// into the Python source it generates for a graph. The verifier's rule `identifier` applies it;
// the Python importer (python/jointfx/export.py) applies the same.
#pragma once

#include <string>
#include <string_view>

namespace jfx {

// ASCII letters, digits and '_', not starting with a digit, not one of Python's keywords
// (keyword.kwlist; the soft keywords match, case, type and _ are names). Non-ASCII identifiers,
// which Python would take, are refused: no traced graph has them, and ASCII leaves no doubt
// about what Python's tokenizer makes of a name.
bool isPythonIdentifier(std::string_view s);
// Identifiers or decimal numbers (nn.Sequential's children: `layers.0.weight`) joined by single
// dots, at least one part: a get_attr target, which torch.fx writes as `self.layers` or, for a
// part that is no identifier, `getattr(self, "0")`.
bool isAttributePath(std::string_view s);
// `s` quoted for a message: JSON escapes for quotes, backslashes and control bytes, and at most
// the first 80 bytes with the whole length after (a name can be any length; a message names it,
// it need not hold it).
std::string quotedForMessage(std::string_view s);

}  // namespace jfx
