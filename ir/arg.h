// Arguments of a node: a tree of node references and constants, as FX keeps in node.args and
// node.kwargs. Strings are interned, so an Arg is 24 bytes whatever it holds (a list keeps its
// items boxed).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ir/boxed_vector.h"
#include "ir/symbol.h"
#include "ir/types.h"

namespace jfx {

class Node;

class Arg {
 public:
  enum class Kind : uint8_t {
    None,
    Bool,
    Int,
    Float,
    Str,
    Node,
    Dtype,
    Device,        // torch.device, e.g. "cuda:0"
    Layout,        // "torch.strided"
    MemoryFormat,  // "torch.contiguous_format"
    List,
    Tuple,
    Opaque,  // any other Python value: its type name and repr, carried through untouched
  };

  Arg() = default;
  static Arg none() { return Arg(); }
  static Arg ofBool(bool b);
  static Arg ofInt(int64_t i);
  static Arg ofFloat(double f);
  static Arg ofStr(std::string_view s);
  static Arg ofStr(Symbol s);  // a string already interned (readers keep a SymbolCache)
  static Arg ofNode(Node* n);
  static Arg ofDtype(ScalarType t);
  static Arg ofDevice(std::string_view d);
  static Arg ofDevice(Symbol d);
  static Arg ofLayout(std::string_view l);
  static Arg ofLayout(Symbol l);
  static Arg ofMemoryFormat(std::string_view m);
  static Arg ofMemoryFormat(Symbol m);
  static Arg ofList(std::vector<Arg> items);
  static Arg ofTuple(std::vector<Arg> items);
  static Arg ofOpaque(std::string_view type, std::string_view repr);
  static Arg ofInts(const std::vector<int64_t>& v);  // a list of ints
  static Arg ofInts(std::span<const int64_t> v);     // the same, from a Dims or a span

  Kind kind() const { return kind_; }
  bool isNone() const { return kind_ == Kind::None; }
  bool isNode() const { return kind_ == Kind::Node; }
  bool isInt() const { return kind_ == Kind::Int; }
  bool isStr() const { return kind_ == Kind::Str; }
  bool isSequence() const { return kind_ == Kind::List || kind_ == Kind::Tuple; }

  bool toBool() const { return u_.b; }
  int64_t toInt() const { return u_.i; }
  double toFloat() const { return u_.f; }
  jfx::Node* node() const { return kind_ == Kind::Node ? u_.node : nullptr; }
  ScalarType dtype() const { return u_.dtype; }
  // Str, Device, Layout, MemoryFormat: the string; Opaque: the type name.
  Symbol sym() const { return u_.sym.a; }
  std::string_view str() const { return u_.sym.a.str(); }
  std::string_view opaqueRepr() const { return u_.sym.b.str(); }
  const std::vector<Arg>& items() const { return items_.get(); }
  std::vector<Arg>& items() { return items_.mut(); }
  // A list/tuple of ints as a vector; empty optional if it is anything else.
  bool toInts(std::vector<int64_t>& out) const;

  // Calls f(Node*&) on every node reference in depth-first order (the operand order).
  template <typename F>
  void forEachNode(F&& f) {
    if (kind_ == Kind::Node) f(u_.node);
    for (auto& a : items_)
      a.forEachNode(f);
  }
  template <typename F>
  void forEachNode(F&& f) const {
    if (kind_ == Kind::Node) f(static_cast<jfx::Node*>(u_.node));
    for (const auto& a : items_)
      a.forEachNode(f);
  }

  // Structural equality; node references compare by identity. Floats compare bitwise (nan == nan).
  friend bool operator==(const Arg& a, const Arg& b);

 private:
  struct SymPair {
    Symbol a, b;
  };
  Kind kind_ = Kind::None;
  union U {
    bool b;
    int64_t i;
    double f;
    jfx::Node* node;
    ScalarType dtype;
    SymPair sym;
    U() : i(0) {}
  } u_;
  BoxedVector<Arg> items_;  // List and Tuple only
};

using Kwargs = std::vector<std::pair<Symbol, Arg>>;

}  // namespace jfx
