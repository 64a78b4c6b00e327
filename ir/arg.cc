#include "ir/arg.h"

#include <cstring>

namespace jfx {

Arg Arg::ofBool(bool b) {
  Arg a;
  a.kind_ = Kind::Bool;
  a.u_.b = b;
  return a;
}
Arg Arg::ofInt(int64_t i) {
  Arg a;
  a.kind_ = Kind::Int;
  a.u_.i = i;
  return a;
}
Arg Arg::ofFloat(double f) {
  Arg a;
  a.kind_ = Kind::Float;
  a.u_.f = f;
  return a;
}

Arg Arg::ofStr(std::string_view s) {
  return ofStr(Symbol::intern(s));
}
Arg Arg::ofStr(Symbol s) {
  Arg a;
  a.kind_ = Kind::Str;
  a.u_.sym = {s, Symbol()};
  return a;
}
Arg Arg::ofNode(jfx::Node* n) {
  Arg a;
  a.kind_ = Kind::Node;
  a.u_.node = n;
  return a;
}
Arg Arg::ofDtype(ScalarType t) {
  Arg a;
  a.kind_ = Kind::Dtype;
  a.u_.dtype = t;
  return a;
}
Arg Arg::ofDevice(std::string_view d) {
  return ofDevice(Symbol::intern(d));
}
Arg Arg::ofDevice(Symbol d) {
  Arg a;
  a.kind_ = Kind::Device;
  a.u_.sym = {d, Symbol()};
  return a;
}
Arg Arg::ofLayout(std::string_view l) {
  return ofLayout(Symbol::intern(l));
}
Arg Arg::ofLayout(Symbol l) {
  Arg a;
  a.kind_ = Kind::Layout;
  a.u_.sym = {l, Symbol()};
  return a;
}
Arg Arg::ofMemoryFormat(std::string_view m) {
  return ofMemoryFormat(Symbol::intern(m));
}
Arg Arg::ofMemoryFormat(Symbol m) {
  Arg a;
  a.kind_ = Kind::MemoryFormat;
  a.u_.sym = {m, Symbol()};
  return a;
}
Arg Arg::ofList(std::vector<Arg> items) {
  Arg a;
  a.kind_ = Kind::List;
  a.items_ = std::move(items);
  return a;
}
Arg Arg::ofTuple(std::vector<Arg> items) {
  Arg a;
  a.kind_ = Kind::Tuple;
  a.items_ = std::move(items);
  return a;
}
Arg Arg::ofOpaque(std::string_view type, std::string_view repr) {
  Arg a;
  a.kind_ = Kind::Opaque;
  a.u_.sym = {Symbol::intern(type), Symbol::intern(repr)};
  return a;
}
Arg Arg::ofInts(const std::vector<int64_t>& v) {
  return ofInts(std::span<const int64_t>(v));
}

Arg Arg::ofInts(std::span<const int64_t> v) {
  std::vector<Arg> items;
  items.reserve(v.size());
  for (int64_t i : v)
    items.push_back(ofInt(i));
  return ofList(std::move(items));
}

bool Arg::toInts(std::vector<int64_t>& out) const {
  if (!isSequence()) return false;
  out.clear();
  for (const auto& a : items_) {
    if (!a.isInt()) return false;
    out.push_back(a.toInt());
  }
  return true;
}

bool operator==(const Arg& a, const Arg& b) {
  if (a.kind_ != b.kind_) return false;
  switch (a.kind_) {
    case Arg::Kind::None:
      return true;
    case Arg::Kind::Bool:
      return a.u_.b == b.u_.b;
    case Arg::Kind::Int:
      return a.u_.i == b.u_.i;
    case Arg::Kind::Float:
      return std::memcmp(&a.u_.f, &b.u_.f, sizeof(double)) == 0;
    case Arg::Kind::Node:
      return a.u_.node == b.u_.node;
    case Arg::Kind::Dtype:
      return a.u_.dtype == b.u_.dtype;
    case Arg::Kind::Str:
    case Arg::Kind::Device:
    case Arg::Kind::Layout:
    case Arg::Kind::MemoryFormat:
    case Arg::Kind::Opaque:
      return a.u_.sym.a == b.u_.sym.a && a.u_.sym.b == b.u_.sym.b;
    case Arg::Kind::List:
    case Arg::Kind::Tuple:
      return a.items_ == b.items_;
  }
  return false;
}

}  // namespace jfx
