#include "ir/json/op_schemas.h"

#include <stdexcept>
#include <string>

#include "ir/json/tokenizer.h"
#include "ir/op_info.h"

namespace jfx {

using json_detail::JView;
using json_detail::TreeBuilder;

void registerOpSchemas(std::string_view meta_json, const SourceLocation& at) {
  if (meta_json.find("\"op_schemas\"") == std::string_view::npos) return;  // the common case
  TreeBuilder tree;
  tree.parse(meta_json, at.file);
  const JView schemas = tree.root().isObject() ? tree.root().find("op_schemas") : JView();
  if (!schemas) return;
  if (!schemas.isObject()) throw JfxError(at, "meta.op_schemas is not an object");
  for (JView entry : schemas) {
    const std::string where = "meta.op_schemas[" + quoteForMessage(entry.key()) + "]";
    const JView schema = entry.isObject() ? entry.find("schema") : JView();
    const JView random = entry.isObject() ? entry.find("random") : JView();
    if (!schema || !schema.isString()) throw JfxError(at, where + " has no \"schema\" string");
    if (random && random.type() != JView::Type::Bool)
      throw JfxError(at, where + ".random is not a boolean");
    try {
      registerSchemaOp(entry.key(), schema.str(), random && random.boolean());
    } catch (const std::invalid_argument& e) {
      throw JfxError(at, where + ": " + e.what());
    }
  }
}

}  // namespace jfx
