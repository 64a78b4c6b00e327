#include "ir/attributes.h"

#include <algorithm>
#include <charconv>
#include <limits>
#include <nlohmann/json.hpp>

#include "ir/error.h"
#include "ir/json_format.h"

namespace jfx {

namespace {

// The attribute table: every key a pass reads or writes as a typed attribute. Sorted by name.
constexpr AttrDecl kAttrDecls[] = {
    {"autograd_backward", AttrType::Bool,
     "make_fx under preserve_node_meta: the node is part of autograd's backward (phase analysis)"},
    {"bucket", AttrType::Dict,
     "a bucketed collective that is not FSDP's: {kind, members, plan} (bucket)"},
    {"fsdp_bucket", AttrType::Dict,
     "a bucketed FSDP collective: {kind, members, plan} (bucket; read by schedule and "
     "split-comm-groups)"},
};

void appendScalar(std::string& out, const AttrValue::Scalar& s) {
  if (const bool* b = std::get_if<bool>(&s))
    out += *b ? "true" : "false";
  else if (const int64_t* i = std::get_if<int64_t>(&s))
    out += std::to_string(*i);
  else
    appendJsonString(out, std::get<std::string>(s));
}

std::optional<AttrValue::Scalar> scalarOf(const nlohmann::json& j) {
  if (j.is_boolean()) return AttrValue::Scalar(j.get<bool>());
  if (j.is_number_integer()) {
    if (j.is_number_unsigned() &&
        j.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      return std::nullopt;
    return AttrValue::Scalar(j.get<int64_t>());
  }
  if (j.is_string()) return AttrValue::Scalar(j.get<std::string>());
  return std::nullopt;
}

// The value of `text` as a `type` attribute, when it has that type; nullopt otherwise.
std::optional<AttrValue> parseAs(AttrType type, std::string_view text) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return std::nullopt;
  switch (type) {
    case AttrType::Bool:
      if (j.is_boolean()) return AttrValue{j.get<bool>()};
      return std::nullopt;
    case AttrType::Int:
    case AttrType::String: {
      if (type == AttrType::String && !j.is_string()) return std::nullopt;
      if (type == AttrType::Int && !j.is_number_integer()) return std::nullopt;
      auto s = scalarOf(j);
      if (!s) return std::nullopt;
      if (const int64_t* i = std::get_if<int64_t>(&*s)) return AttrValue{*i};
      return AttrValue{std::get<std::string>(*s)};
    }
    case AttrType::Dict: {
      if (!j.is_object()) return std::nullopt;
      AttrValue::Dict d;
      for (const auto& [k, v] : j.items()) {  // nlohmann's objects iterate sorted by key
        auto s = scalarOf(v);
        if (!s) return std::nullopt;
        d.emplace_back(k, std::move(*s));
      }
      return AttrValue{std::move(d)};
    }
  }
  return std::nullopt;
}

// One top-level member of a JSON object's text.
struct Member {
  std::string_view key;    // as written between the quotes (escapes not decoded)
  std::string_view value;  // the value's text
};

// The members of the object `obj`, in order; nullopt when the text is not an object this simple
// scanner can split (the formats' own readers report what is wrong with it).
std::optional<std::vector<Member>> splitObject(std::string_view obj) {
  std::vector<Member> out;
  size_t i = 0;
  auto ws = [&] {
    while (i < obj.size() && (obj[i] == ' ' || obj[i] == '\n' || obj[i] == '\t' || obj[i] == '\r'))
      ++i;
  };
  // Skips a string starting at obj[i] == '"'; i ends after the closing quote.
  auto skipString = [&]() -> bool {
    for (++i; i < obj.size(); ++i) {
      if (obj[i] == '\\') {
        ++i;
      } else if (obj[i] == '"') {
        ++i;
        return true;
      }
    }
    return false;
  };
  ws();
  if (i >= obj.size() || obj[i] != '{') return std::nullopt;
  ++i;
  ws();
  if (i < obj.size() && obj[i] == '}') return out;
  while (true) {
    ws();
    if (i >= obj.size() || obj[i] != '"') return std::nullopt;
    size_t key_start = i + 1;
    if (!skipString()) return std::nullopt;
    std::string_view key = obj.substr(key_start, i - 1 - key_start);
    ws();
    if (i >= obj.size() || obj[i] != ':') return std::nullopt;
    ++i;
    ws();
    size_t value_start = i;
    int depth = 0;
    for (; i < obj.size(); ++i) {
      char c = obj[i];
      if (c == '"') {
        if (!skipString()) return std::nullopt;
        --i;
      } else if (c == '{' || c == '[') {
        ++depth;
      } else if (c == '}' || c == ']') {
        if (depth == 0) break;
        --depth;
      } else if (c == ',' && depth == 0) {
        break;
      }
    }
    if (i >= obj.size()) return std::nullopt;
    size_t value_end = i;
    while (value_end > value_start && (obj[value_end - 1] == ' ' || obj[value_end - 1] == '\n' ||
                                       obj[value_end - 1] == '\t' || obj[value_end - 1] == '\r'))
      --value_end;
    out.push_back({key, obj.substr(value_start, value_end - value_start)});
    if (obj[i] == '}') {
      ++i;
      ws();
      return i == obj.size() ? std::optional(out) : std::nullopt;
    }
    ++i;  // ','
  }
}

void appendMember(std::string& out, std::string_view key, std::string_view value) {
  out += out.size() > 1 ? ",\"" : "\"";
  out += key;
  out += "\":";
  out += value;
}

}  // namespace

std::string_view attrTypeName(AttrType t) {
  switch (t) {
    case AttrType::Bool:
      return "bool";
    case AttrType::Int:
      return "int";
    case AttrType::String:
      return "string";
    case AttrType::Dict:
      return "dict";
  }
  return "?";
}

void AttrValue::appendJson(std::string& out) const {
  switch (type()) {
    case AttrType::Bool:
      out += std::get<bool>(v) ? "true" : "false";
      return;
    case AttrType::Int:
      out += std::to_string(std::get<int64_t>(v));
      return;
    case AttrType::String:
      appendJsonString(out, std::get<std::string>(v));
      return;
    case AttrType::Dict: {
      out += '{';
      bool first = true;
      for (const auto& [k, s] : std::get<Dict>(v)) {
        out += first ? "" : ",";
        first = false;
        appendJsonString(out, k);
        out += ':';
        appendScalar(out, s);
      }
      out += '}';
      return;
    }
  }
}

std::span<const AttrDecl> attrDecls() {
  return kAttrDecls;
}

const AttrDecl* findAttrDecl(std::string_view name) {
  for (const AttrDecl& d : kAttrDecls)
    if (d.name == name) return &d;
  return nullptr;
}

namespace attr {
Symbol autogradBackward() {
  static const Symbol s = Symbol::intern("autograd_backward");
  return s;
}
Symbol fsdpBucket() {
  static const Symbol s = Symbol::intern("fsdp_bucket");
  return s;
}
Symbol bucket() {
  static const Symbol s = Symbol::intern("bucket");
  return s;
}
}  // namespace attr

const AttrValue* AttrMap::find(Symbol key) const {
  for (const auto& [k, v] : entries_)
    if (k == key) return &v;
  return nullptr;
}

std::optional<bool> AttrMap::getBool(Symbol key) const {
  const AttrValue* v = find(key);
  if (!v || v->type() != AttrType::Bool) return std::nullopt;
  return std::get<bool>(v->v);
}

std::optional<int64_t> AttrMap::getInt(Symbol key) const {
  const AttrValue* v = find(key);
  if (!v || v->type() != AttrType::Int) return std::nullopt;
  return std::get<int64_t>(v->v);
}

const std::string* AttrMap::getString(Symbol key) const {
  const AttrValue* v = find(key);
  return v ? std::get_if<std::string>(&v->v) : nullptr;
}

const AttrValue::Dict* AttrMap::getDict(Symbol key) const {
  const AttrValue* v = find(key);
  return v ? std::get_if<AttrValue::Dict>(&v->v) : nullptr;
}

void AttrMap::set(Symbol key, AttrValue value) {
  const AttrDecl* d = findAttrDecl(key.str());
  if (!d)
    throw JfxError({}, "internal error: attribute '" + std::string(key.str()) +
                           "' is not declared (ir/attributes.cc)");
  if (d->type != value.type())
    throw JfxError({}, "internal error: attribute '" + std::string(key.str()) + "' is a " +
                           std::string(attrTypeName(d->type)) + ", set with a " +
                           std::string(attrTypeName(value.type())));
  if (value.type() == AttrType::Dict) {
    auto& dict = std::get<AttrValue::Dict>(value.v);
    std::sort(dict.begin(), dict.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
  }
  std::vector<std::pair<Symbol, AttrValue>>& entries = entries_.mut();
  auto it = std::lower_bound(entries.begin(), entries.end(), key.str(),
                             [](const auto& e, std::string_view k) { return e.first.str() < k; });
  if (it != entries.end() && it->first == key)
    it->second = std::move(value);
  else
    entries.insert(it, {key, std::move(value)});
}

bool AttrMap::erase(Symbol key) {
  if (entries_.empty()) return false;
  std::vector<std::pair<Symbol, AttrValue>>& entries = entries_.mut();
  for (auto it = entries.begin(); it != entries.end(); ++it)
    if (it->first == key) {
      entries.erase(it);
      if (entries.empty()) entries_.clear();  // back to no box: equal to a map never set
      return true;
    }
  return false;
}

void liftAttrs(std::string& extra_json, AttrMap& attrs) {
  if (extra_json.empty()) return;
  // Cheap filter: most nodes carry no declared key.
  bool any = false;
  for (const AttrDecl& d : kAttrDecls) {
    std::string quoted(1, '"');
    quoted += d.name;
    quoted += '"';
    any = any || extra_json.find(quoted) != std::string::npos;
  }
  if (!any) return;
  auto members = splitObject(extra_json);
  if (!members) return;
  std::string rest = "{";
  bool lifted = false;
  for (const Member& m : *members) {
    const AttrDecl* d = findAttrDecl(m.key);
    std::optional<AttrValue> v = d ? parseAs(d->type, m.value) : std::nullopt;
    if (v) {
      // Lifted only when it writes back to the same text (Note [Attributes and the formats]).
      std::string text;
      v->appendJson(text);
      if (text != m.value) v.reset();
    }
    if (v) {
      attrs.set(Symbol::intern(m.key), std::move(*v));
      lifted = true;
    } else {
      appendMember(rest, m.key, m.value);
    }
  }
  if (!lifted) return;
  extra_json = rest.size() > 1 ? rest + "}" : std::string();
}

std::string mergeAttrs(std::string_view extra_json, const AttrMap& attrs) {
  if (attrs.empty()) return std::string(extra_json);
  std::vector<Member> members;
  if (!extra_json.empty()) {
    auto split = splitObject(extra_json);
    if (!split) return std::string(extra_json);  // not an object: the reader that checks it says so
    members = std::move(*split);
  }
  std::string out = "{";
  size_t a = 0;
  const auto& entries = attrs.entries();
  auto flushBelow = [&](std::string_view key, bool all) {
    for (; a < entries.size() && (all || entries[a].first.str() <= key); ++a) {
      std::string value;
      entries[a].second.appendJson(value);
      appendMember(out, entries[a].first.str(), value);
    }
  };
  for (const Member& m : members) {
    flushBelow(m.key, false);
    if (a > 0 && entries[a - 1].first.str() == m.key) continue;  // the attribute wins
    appendMember(out, m.key, m.value);
  }
  flushBelow({}, true);
  return out + "}";
}

}  // namespace jfx
