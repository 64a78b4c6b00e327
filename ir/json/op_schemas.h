// Graph meta "op_schemas" (docs/graph-format.md): the torch schemas of the custom ops a graph
// calls, recorded by the exporter so the passes know what such an op writes and aliases instead
// of assuming it writes every operand. Both readers (JSON and text) hand the graph meta here.
#pragma once

#include <string_view>

#include "ir/error.h"

namespace jfx {

// Registers every entry of `meta_json`'s "op_schemas" ({"ns.op.overload": {"schema": "...",
// "random": bool}}) with registerSchemaOp (ir/op_info.h). Throws JfxError at `at` naming the
// entry when one is malformed or conflicts with a schema registered before.
void registerOpSchemas(std::string_view meta_json, const SourceLocation& at);

}  // namespace jfx
