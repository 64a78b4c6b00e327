// Typed node attributes: the facts passes read from and write to node meta (autograd's backward
// flag, the bucket records), as typed values keyed by Symbol rather than JSON text.
//
// Note [Attributes and the formats]
// Node meta in both formats is one JSON object. A key declared in the attribute table
// (attributes.cc) is read into NodeMeta::attrs when its value has the declared type and renders
// back to exactly the same JSON text; anything else (an undeclared key, a declared key with
// another type) stays in NodeMeta::extra_json verbatim. The writers merge attrs back into the
// object at their sorted places, so a graph reads and writes byte-identically whether or not a
// key is declared, and only the formats ever see attribute JSON.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "ir/boxed_vector.h"
#include "ir/symbol.h"

namespace jfx {

enum class AttrType : uint8_t { Bool, Int, String, Dict };
std::string_view attrTypeName(AttrType t);  // "bool", "int", "string", "dict"

struct AttrValue {
  using Scalar = std::variant<bool, int64_t, std::string>;
  // Scalars only, keys sorted and unique.
  using Dict = std::vector<std::pair<std::string, Scalar>>;

  std::variant<bool, int64_t, std::string, Dict> v;

  AttrType type() const { return static_cast<AttrType>(v.index()); }
  // Compact JSON, dict keys in order: what the formats write.
  void appendJson(std::string& out) const;
  friend bool operator==(const AttrValue&, const AttrValue&) = default;
};

struct AttrDecl {
  std::string_view name;
  AttrType type;
  std::string_view help;
};
// The declared attributes, sorted by name; `findAttrDecl` returns nullptr for an undeclared one.
std::span<const AttrDecl> attrDecls();
const AttrDecl* findAttrDecl(std::string_view name);

// The keys passes use, interned once.
namespace attr {
Symbol autogradBackward();  // bool: make_fx under preserve_node_meta marked the node backward
Symbol fsdpBucket();        // dict {kind, members, plan}: a bucketed FSDP collective
Symbol bucket();            // dict {kind, members, plan}: a bucketed non-FSDP collective
}  // namespace attr

class AttrMap {
 public:
  bool empty() const { return entries_.empty(); }
  size_t size() const { return entries_.size(); }
  const AttrValue* find(Symbol key) const;
  bool has(Symbol key) const { return find(key) != nullptr; }
  // nullopt / nullptr when absent (a declared key always has its declared type).
  std::optional<bool> getBool(Symbol key) const;
  std::optional<int64_t> getInt(Symbol key) const;
  const std::string* getString(Symbol key) const;
  const AttrValue::Dict* getDict(Symbol key) const;
  // The key must be declared with the value's type (an internal error otherwise): what is set
  // must be writable and readable back.
  void set(Symbol key, AttrValue value);
  bool erase(Symbol key);
  // Sorted by key name: the order the formats write them in.
  const std::vector<std::pair<Symbol, AttrValue>>& entries() const { return entries_.get(); }
  friend bool operator==(const AttrMap&, const AttrMap&) = default;

 private:
  // Boxed: most nodes have no attributes, and a node's meta pays 8 bytes for them, not 24.
  BoxedVector<std::pair<Symbol, AttrValue>> entries_;
};

// The formats' side of the Note above. `liftAttrs` moves declared keys out of an extra-meta JSON
// object (canonical: compact, sorted) into `attrs`; `mergeAttrs` gives the object with `attrs`
// merged back at their sorted places (an attribute wins over an extra key of the same name).
void liftAttrs(std::string& extra_json, AttrMap& attrs);
std::string mergeAttrs(std::string_view extra_json, const AttrMap& attrs);

}  // namespace jfx
