#include "ir/loader.h"

#include <stdexcept>

namespace jfx {

GraphLoader::GraphLoader(SourceKind kind, std::string file, const NodeSite& site,
                         std::unique_ptr<Graph> into, size_t fqn_slots)
    : kind_(kind),
      site_(site),
      g_(into ? std::move(into) : std::make_unique<Graph>()),
      fqn_symbols_(fqn_slots) {
  NodeSources& s = g_->sources_;
  if (s.kind != SourceKind::None && s.kind != kind) {
    record_places_ = false;  // a bridge's graph: its nodes' places are the bridge's
    return;
  }
  s = NodeSources{};
  s.kind = kind;
  s.file = std::move(file);
  s.first = static_cast<uint32_t>(g_->nodes_.size());
}

void GraphLoader::checkName(std::string_view name, uint32_t pos) const {
  if (name.empty()) throw JfxError(site_.at(pos, NodePart::Name), "empty node name");
}

void GraphLoader::checkTarget(OpKind op, std::string_view target, uint32_t pos) const {
  if (op == OpKind::Output && target != "output")
    throw JfxError(site_.at(pos, NodePart::Target),
                   "the output node's target must be \"output\", got " + quoteForMessage(target));
  if (op == OpKind::CallFunction && target.empty())
    throw JfxError(site_.at(pos, NodePart::Target), "empty call_function target");
}

void GraphLoader::checkNoArguments(OpKind op, bool has_args, bool has_kwargs, uint32_t pos) const {
  if ((op == OpKind::Placeholder || op == OpKind::GetAttr) && (has_args || has_kwargs))
    throw JfxError(site_.at(pos, has_args ? NodePart::Args : NodePart::Kwargs),
                   "a " + std::string(opKindName(op)) + " takes no arguments");
}

Node* GraphLoader::define(OpKind op, Symbol target, std::vector<Arg> args, Kwargs kwargs,
                          std::string_view name, uint32_t pos, Claim claim) {
  const uint64_t hash = name.data() == announced_.data() && name.size() == announced_.size()
                            ? announced_hash_
                            : Graph::nameHash(name);
  Node* n = g_->createUnclaimed(op, target, std::move(args), std::move(kwargs), name);
  if (claim == Claim::Now) {
    if (!g_->claimName(n, hash)) duplicateName(n, pos);
  } else {
    if (pending_count_ == kClaimLag) claimOldest();
    pending_[(pending_first_ + pending_count_++) % kClaimLag] = {n, hash, pos};
  }
  recent_.add(n);
  record(n, pos);
  return n;
}

void GraphLoader::record(const Node* n, uint32_t pos) {
  if (!record_places_) return;
  NodeSources& s = g_->sources_;
  if (s.count == 0 && kind_ == SourceKind::Json) s.base = pos;
  s.count = n->id() - s.first + 1;
  if (kind_ == SourceKind::Text) s.lines.push_back(pos);
}

void GraphLoader::claimOldest() {
  const PendingClaim c = pending_[pending_first_];
  pending_first_ = (pending_first_ + 1) % kClaimLag;
  --pending_count_;
  if (!g_->claimName(c.node, c.hash)) duplicateName(c.node, c.pos);
}

void GraphLoader::duplicateName(const Node* n, uint32_t pos) const {
  std::string message = "duplicate node name " + spell(n->name());
  // The text format says where the first definition was; JSON's messages name only the element.
  if (kind_ == SourceKind::Text) {
    const Node* first = g_->findNode(n->name());
    const SourceLocation was = g_->location(first);
    if (was.line > 0) message += " (first defined at line " + std::to_string(was.line) + ")";
  }
  SourceLocation at = site_.at(pos, NodePart::Name);
  at.node = n->name();
  throw JfxError(at, message);
}

std::unique_ptr<Graph> GraphLoader::finish() {
  claimPending();
  return std::move(g_);
}

void GraphLoader::takeBack(std::unique_ptr<Graph> g, uint32_t pos) {
  g_ = std::move(g);
  if (g_->maxId() > 0) record(g_->nodeById(g_->maxId() - 1), pos);
}

std::string GraphLoader::spell(std::string_view name) const {
  return kind_ == SourceKind::Text ? "%" + clipForMessage(name) : quoteForMessage(name);
}

std::string GraphLoader::place(uint32_t pos) const {
  return kind_ == SourceKind::Text ? "line " + std::to_string(pos)
                                   : "/nodes/" + std::to_string(pos);
}

void GraphLoader::unresolved(std::string_view name, const SourceLocation& at,
                             std::optional<uint32_t> later, bool self) const {
  // The text format spells a node %x; the others name it as node 'x'.
  const std::string node = kind_ == SourceKind::Text ? spell(name) : "node " + spell(name);
  if (self) throw JfxError(at, node + " refers to itself (a cycle)");
  if (later)
    throw JfxError(at, node + " is used before its definition at " + place(*later) +
                           " (a forward reference or cycle: nodes must be in topological order)");
  if (kind_ == SourceKind::Text)
    throw JfxError(at, "undefined node " + spell(name) + " (dangling reference)");
  throw JfxError(at, "dangling reference to undefined node " + spell(name));
}

}  // namespace jfx
