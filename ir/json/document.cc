#include "ir/json_document.h"

#include "ir/json/tokenizer.h"

namespace jfx {
namespace {

using json_detail::JView;

// `at` with `key` appended as the next JSON pointer token.
std::string memberPointer(const std::string& at, std::string_view key) {
  std::string out = at + "/";
  json_detail::appendPointerToken(out, key);
  return out;
}

class DocumentBuilder {
 public:
  explicit DocumentBuilder(const std::string& filename) : filename_(filename) {}

  // The tree's nesting is bounded (json_detail::kMaxNesting), so the recursion is too.
  nlohmann::json build(JView v, const std::string& at) {
    switch (v.type()) {
      case JView::Type::Null:
        return nullptr;
      case JView::Type::Bool:
        return v.boolean();
      case JView::Type::Int:
        return v.integer();
      case JView::Type::Unsigned:
        return v.unsignedInteger();
      case JView::Type::BigInt:
        fail(at, "the integer " + quoteForMessage(v.str()) +
                     " does not fit 64 bits (it would be read rounded)");
      case JView::Type::Float:
        return v.floating();
      case JView::Type::String:
        return std::string(v.str());
      case JView::Type::Array: {
        nlohmann::json out = nlohmann::json::array();
        size_t i = 0;
        for (JView item : v)
          out.push_back(build(item, at + "/" + std::to_string(i++)));
        return out;
      }
      case JView::Type::Object: {
        std::vector<JView> members;
        if (auto dup = json_detail::sortMembers(v, members))
          fail(memberPointer(at, *dup),
               "key " + quoteForMessage(*dup) +
                   " repeated in an object (JSON readers disagree on which one wins)");
        nlohmann::json out = nlohmann::json::object();
        for (JView m : v)
          out[std::string(m.key())] = build(m, memberPointer(at, m.key()));
        return out;
      }
    }
    return nullptr;
  }

 private:
  [[noreturn]] void fail(const std::string& at, const std::string& what) const {
    SourceLocation loc;
    loc.file = filename_;
    loc.json_pointer = at.empty() ? "/" : at;
    throw JfxError(loc, what);
  }

  const std::string& filename_;
};

}  // namespace

nlohmann::json readJsonDocument(std::string_view text, const std::string& filename) {
  // A NUL byte ends the text (nlohmann stops there and would accept what came before it): the
  // document up to it is checked first, so an earlier syntax error is the one reported.
  const size_t nul = text.find('\0');
  json_detail::TreeBuilder tree;
  tree.parse(nul == std::string_view::npos ? text : text.substr(0, nul + 1), filename);
  if (nul != std::string_view::npos) json_detail::nulByteError(text, nul, filename);
  return DocumentBuilder(filename).build(tree.root(), "");
}

}  // namespace jfx
