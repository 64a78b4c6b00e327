#include "ir/json/tokenizer.h"

namespace jfx::json_detail {

std::string_view describe(JView j) {
  switch (j.type()) {
    case JView::Type::Null:
      return "null";
    case JView::Type::Bool:
      return "a boolean";
    case JView::Type::Int:
    case JView::Type::Unsigned:
    case JView::Type::BigInt:
      return "an integer";
    case JView::Type::Float:
      return "a float";
    case JView::Type::String:
      return "a string";
    case JView::Type::Array:
      return "an array";
    case JView::Type::Object:
      return "an object";
  }
  return "a value";
}

std::string scalarText(JView v) {
  std::string s;
  if (v.type() == JView::Type::Unsigned)
    appendUnsigned(s, v.unsignedInteger());
  else if (v.type() == JView::Type::Int)
    appendInt(s, v.integer());
  else if (v.type() == JView::Type::BigInt)
    s = v.str();
  else if (v.type() == JView::Type::Float)
    appendFloat(s, v.floating());
  else
    s = describe(v);
  return s;
}

SourceLocation locate(std::string_view text, size_t offset, const std::string& filename) {
  SourceLocation loc;
  loc.file = filename;
  loc.line = 1;
  size_t line_start = 0;
  for (size_t i = 0; i < offset && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++loc.line;
      line_start = i + 1;
    }
  }
  loc.column = static_cast<int>(offset - line_start) + 1;
  return loc;
}

// Parses a small JSON text that must be one object (extra meta and the like).
JView parseObject(TreeBuilder& b, std::string_view text) {
  static const std::string kNoFile;
  b.parse(text, kNoFile);
  JView root = b.root();
  if (!root.isObject())
    throw JfxError({}, "expected a JSON object, got " + std::string(describe(root)));
  return root;
}

void nulByteError(std::string_view text, size_t offset, const std::string& filename) {
  throw JfxError(locate(text, offset, filename),
                 "JSON syntax error at byte " + std::to_string(offset) +
                     ": a NUL byte, which JSON text never holds (a string writes it as \\u0000)");
}

void TreeBuilder::parse(std::string_view text, const std::string& filename) {
  reset(text, filename);
  if (tokenizer_ == Tokenizer::Fast) {
    if (FastSax(text, *this).run()) return;
    if (!restartable_) throw ReadAgainWithNlohmann{};
    reset(text, filename);
  }
  try {
    json::sax_parse(text.begin(), text.end(), this);
  } catch (const json::exception& e) {
    // Syntax errors arrive through parse_error(); anything else nlohmann throws is still bad
    // input, not a crash.
    throw JfxError(fileOnly(), "malformed JSON: " + humanLibraryMessage(e.what()));
  }
}

}  // namespace jfx::json_detail
