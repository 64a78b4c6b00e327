#include "ir/verifier.h"

#include <algorithm>
#include <map>
#include <span>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "ir/error.h"
#include "ir/fsdp_chains.h"
#include "ir/identifier.h"
#include "ir/mutation.h"

namespace jfx {

std::string VerifyIssue::str() const {
  // A node name is shown escaped when it holds a quote or a control byte (a name that is code).
  bool plain = std::none_of(node.begin(), node.end(), [](char ch) {
    const unsigned char c = static_cast<unsigned char>(ch);
    return c < 0x20 || c == 0x7f || c == '\'';
  });
  std::string s = node.empty()                 ? ""
                  : plain && node.size() <= 80 ? "node '" + node + "': "
                                               : "node " + quotedForMessage(node) + ": ";
  if (!where.empty()) s = where + ": " + s;
  return s + "[" + rule + "] " + message;
}

namespace {

std::string quoted(const Node* n) {
  return quoteForMessage(n->name());
}

std::string shapeStr(std::span<const int64_t> shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// Positional argument `pos` or, failing that, the kwarg FX would use for it.
const Arg* argAt(const Node* n, int pos, std::string_view kwarg) {
  if (pos >= 0 && static_cast<size_t>(pos) < n->numArgs()) return &n->arg(pos);
  return n->kwarg(kwarg);
}

// The collective a wait reads: the collective itself, or the coalesced collective behind a
// getitem. nullptr when the input is anything else.
const Node* collectiveBehind(const Node* in) {
  if (in == nullptr) return nullptr;
  if (in->isCollective()) return in->info().coalesced ? nullptr : in;
  if (in->info().category == OpCategory::Getitem) {
    const Node* src = in->input(0);
    if (src && src->isCollective() && src->info().coalesced) return src;
  }
  return nullptr;
}

class Verifier {
 public:
  Verifier(const Graph& g, const VerifyOptions& opts) : g_(g), opts_(opts) {}

  // The per-node rules on `nodes` only (the nodes a pass touched: Graph::takeTouched), each
  // with its edges both ways. Graph-level rules (process groups, input/output info, one gather
  // per parameter) are left to run().
  std::vector<VerifyIssue> runNodes(const std::vector<const Node*>& nodes) {
    touched_.assign(g_.maxId(), false);
    for (const Node* n : nodes) {
      checkLinks(n);
      if (n->id() < touched_.size()) touched_[n->id()] = true;  // a foreign node: reported above
    }
    // With broken links the rules below could walk deleted nodes.
    if (!issues_.empty()) return std::move(issues_);
    // One walk for the operand rules and the node rules (a second walk missed the cache once
    // per node, and bucket touches a large part of the graph). The node rules' issues go to a list
    // of their own, returned only when no operand or use-list issue came up, as the node rules read
    // other nodes' use lists; once one has, they stop running.
    std::vector<VerifyIssue> node_rules;
    std::vector<const Node*> refs;
    for (const Node* n : nodes) {
      if (n->name().empty())
        add(n, "unique-name", "node has an empty name");
      else if (opts_.ir_invariants && g_.findNode(n->name()) != n)
        add(n, "unique-name", "name is used twice");
      checkOperandsOf(n, refs);
      checkUsesOf(n);
      if (!issues_.empty()) continue;
      std::swap(issues_, node_rules);
      if (!full()) checkNodeRules(n);
      std::swap(issues_, node_rules);
    }
    return std::move(issues_.empty() ? node_rules : issues_);
  }

  void checkNodeRules(const Node* n) {
    if (n->op() == OpKind::Output) {
      if (n != g_.last()) add(n, "output-last", "output node is not the last node");
      if (n->hasUses()) add(n, "output-last", "output node has users");
    }
    checkIdentifiers(n);
    if (std::string p = n->val().sizeProblem(); !p.empty()) add(n, "tensor-size", p);
    checkArity(n);
    if (n->isCollective()) checkCollective(n);
    if (n->isWait()) checkWait(n);
  }

  // The rules that read the header: the process groups themselves, every collective's group
  // name and size against them, and the output list against the output node.
  std::vector<VerifyIssue> runHeader(bool collectives) {
    checkProcessGroups();
    if (collectives)
      for (const Node* n : g_.collectives()) {
        if (full()) break;
        checkCollective(n);
      }
    checkOutputInfo();
    return std::move(issues_);
  }

  // The identifier rule alone, on every node.
  std::vector<VerifyIssue> runIdentifiers() {
    for (const Node* n = g_.first(); n && !full(); n = n->next())
      checkIdentifiers(n);
    return std::move(issues_);
  }

  std::vector<VerifyIssue> run() {
    // The order matters only for which issues come first when max_issues truncates: structure
    // before semantics, so the root cause of a broken graph is reported first.
    if (!opts_.ir_invariants) return runOneWalk();
    if (!checkNodeList()) return std::move(issues_);
    checkNames();
    checkOperands();
    size_t before = issues_.size();
    if (opts_.ir_invariants) checkUseLists();
    // Later rules follow use lists; with broken ones they could read deleted nodes.
    if (issues_.size() != before) return std::move(issues_);
    checkOutput();
    checkProcessGroups();
    for (const Node* n = g_.first(); n && !full(); n = n->next()) {
      checkIdentifiers(n);
      // Sizes first: the shape rules below multiply dims, the analyses sum bytes.
      if (std::string p = n->val().sizeProblem(); !p.empty()) add(n, "tensor-size", p);
      checkArity(n);
      if (n->isCollective()) checkCollective(n);
      if (n->isWait()) checkWait(n);
      if (n->op() == OpKind::Placeholder || n->inputKind() != InputKind::None) inputs_.push_back(n);
    }
    checkInputInfo();
    checkOutputInfo();
    if (opts_.one_gather_per_param_per_phase) checkOneGatherPerParam();
    return std::move(issues_);
  }

 private:
  // run() without the IR invariants: the list rules, the operand rules and the node rules in one
  // walk (each more walk missed the cache once per node on large graphs). The issues come in
  // run()'s order, from three lists: the list rules' alone when there is one (a broken list
  // stops the verifier, and the other rules stop running at the first), else the operand
  // rules', then the output and process-group rules', then the node rules'. Nothing stops
  // between the last two: only broken use lists do, and they are checked with the IR invariants.
  std::vector<VerifyIssue> runOneWalk() {
    std::vector<VerifyIssue> list_rules, node_rules;
    std::vector<const Node*> refs;
    size_t count = 0;
    const Node* prev = nullptr;
    for (const Node* n = g_.first(); n; prev = n, n = n->next()) {
      std::swap(issues_, list_rules);
      const bool go_on = checkListNode(n, prev, count);
      std::swap(issues_, list_rules);
      if (!go_on) return list_rules;
      if (!list_rules.empty()) continue;
      checkOperandsOf(n, refs);
      std::swap(issues_, node_rules);
      if (!full()) {
        checkIdentifiers(n);
        // Sizes first: the shape rules below multiply dims, the analyses sum bytes.
        if (std::string p = n->val().sizeProblem(); !p.empty()) add(n, "tensor-size", p);
        checkArity(n);
        if (n->isCollective()) checkCollective(n);
        if (n->isWait()) checkWait(n);
      }
      std::swap(issues_, node_rules);
      if (n->op() == OpKind::Placeholder || n->inputKind() != InputKind::None) inputs_.push_back(n);
    }
    std::swap(issues_, list_rules);
    checkListEnd(prev, count);
    std::swap(issues_, list_rules);
    if (!list_rules.empty()) return list_rules;
    checkOutput();
    checkProcessGroups();
    for (VerifyIssue& issue : node_rules)
      if (!full()) issues_.push_back(std::move(issue));
    checkInputInfo();
    checkOutputInfo();
    if (opts_.one_gather_per_param_per_phase) checkOneGatherPerParam();
    return std::move(issues_);
  }

  bool full() const { return issues_.size() >= opts_.max_issues; }
  std::vector<std::pair<uint32_t, uint32_t>> seen_uses_;  // checkUsesOf's scratch
  std::vector<const Node*> waits_;                        // checkCollective's scratch
  std::vector<const Node*> outputs_;                      // output nodes, in list order

  void add(const Node* n, std::string rule, std::string message) {
    if (full()) return;
    std::string where;
    if (n) {
      SourceLocation loc = g_.location(n);
      loc.node.clear();
      where = loc.str();
    }
    issues_.push_back({n ? std::string(n->name()) : std::string(), std::move(rule),
                       std::move(message), std::move(where)});
  }

  // The list links and positions everything else relies on (isBefore). A broken list stops the
  // verifier: walking it further could loop.
  bool checkNodeList() {
    size_t count = 0;
    const Node* prev = nullptr;
    for (const Node* n = g_.first(); n; prev = n, n = n->next())
      if (!checkListNode(n, prev, count)) return false;
    checkListEnd(prev, count);
    return issues_.empty();
  }

  // One step of checkNodeList: false when the walk must stop (the list is longer than any the
  // graph can hold, so it loops).
  bool checkListNode(const Node* n, const Node* prev, size_t& count) {
    if (++count > g_.maxId()) {
      add(nullptr, "node-list", "the node list is longer than the number of nodes ever made");
      return false;
    }
    if (n->graph() != &g_) add(n, "node-list", "node belongs to another graph");
    if (n->isDead()) add(n, "node-list", "a deleted node is still linked");
    if (n->prev() != prev) add(n, "node-list", "prev link does not point at the previous node");
    if (prev && !prev->isBefore(n))
      add(n, "node-list", "position is not after the previous node's " + quoted(prev));
    if (n->op() == OpKind::Output) outputs_.push_back(n);  // for checkOutput: no second walk
    return true;
  }

  // The end of checkNodeList's walk: `last` the node it ended on, `count` the nodes it saw.
  void checkListEnd(const Node* last, size_t count) {
    if (last != g_.last()) add(nullptr, "node-list", "the last node is not the list tail");
    if (count != g_.size())
      add(nullptr, "node-list",
          "list holds " + std::to_string(count) + " nodes, graph counts " +
              std::to_string(g_.size()));
  }

  // `n` is a live node of this graph, linked both ways to neighbours in position order.
  void checkLinks(const Node* n) {
    if (n->graph() != &g_ || n->isDead()) {
      add(n, "node-list", "a deleted or foreign node is still linked");
      return;
    }
    const Node* p = n->prev();
    const Node* x = n->next();
    if (p ? p->next() != n : g_.first() != n)
      add(n, "node-list", "prev link does not point at the previous node");
    else if (p && !p->isBefore(n))
      add(n, "node-list", "position is not after the previous node's " + quoted(p));
    if (x ? x->prev() != n : g_.last() != n)
      add(n, "node-list", "next link does not point at the next node");
  }

  // Whether use `u` of `n` names a live user of this graph that reads `n` in that operand slot;
  // an issue when not. The touched-node check (checkUsesOf) and the whole-graph one
  // (checkUseLists) share it.
  bool checkUse(const Node* n, const Use& u) {
    const Node* user = u.user;
    if (user == nullptr || user->graph() != &g_ || user->isDead()) {
      add(n, "use-list", "use list names a deleted or foreign user");
      return false;
    }
    if (u.index == Operand::kNotASlot) {
      add(n, "use-list", "use list names a slot outside " + quoted(user) + "'s operands");
      return false;
    }
    if (u.index >= user->inputs().size() || user->inputs()[u.index] != n) {
      add(n, "use-list",
          "use list says " + quoted(user) + " reads it as operand " + std::to_string(u.index) +
              ", but it does not");
      return false;
    }
    return true;
  }

  // Every use of `n` names a live user that reads `n` in that slot, after `n`, once; and every
  // operand slot of `n` is in its producer's use list.
  void checkUsesOf(const Node* n) {
    std::vector<std::pair<uint32_t, uint32_t>>& seen = seen_uses_;  // reused: no allocation a node
    seen.clear();
    for (const Use& u : n->uses()) {
      if (!checkUse(n, u)) continue;
      const Node* user = u.user;
      // A touched user reports its own operands (checkOperandsOf): once is enough.
      if (!n->isBefore(user) && !(user->id() < touched_.size() && touched_[user->id()]))
        add(user, "topological-order",
            "operand " + std::to_string(u.index) + " " + quoted(n) + " is defined after its use");
      seen.emplace_back(user->id(), u.index);
    }
    if (seen.size() > 1) std::sort(seen.begin(), seen.end());
    for (size_t k = 1; k < seen.size(); ++k)
      if (seen[k] == seen[k - 1])
        add(n, "use-list",
            "use by " + quoted(g_.nodeById(seen[k].first)) + " operand " +
                std::to_string(seen[k].second) + " is listed twice");
    // Each slot of n is linked into its producer's use list: its neighbours point back at it
    // and read the same producer, or it is the list's end. Checked at the slot, so a producer
    // with many users (a position table read by every layer) is not walked once per user.
    const auto& inputs = n->inputs();
    for (uint32_t k = 0; k < inputs.size(); ++k) {
      const Node* in = inputs[k];
      if (in == nullptr || in->graph() != &g_ || in->isDead()) continue;  // reported above
      const Operand& s = n->operandSlot(k);
      const bool listed =
          s.user == n &&
          (s.prev_use ? s.prev_use->next_use == &s && s.prev_use->value == in
                      : in->isFirstUse(&s)) &&
          (s.next_use ? s.next_use->prev_use == &s && s.next_use->value == in : in->isLastUse(&s));
      if (!listed)
        add(in, "use-list",
            "use list lacks " + quoted(n) + " operand " + std::to_string(k) +
                ", which refers to the node");
    }
  }

  // Names are unique when the graph's own name index maps each node's name back to that node:
  // a second node with a taken name finds the first. No set of a million names to build.
  void checkNames() {
    g_.forEach([&](const Node* n) {
      if (n->name().empty())
        add(n, "unique-name", "node has an empty name");
      else if (g_.findNode(n->name()) != n)
        add(n, "unique-name", "name is used twice");
    });
  }

  // Each operand is a live node of this graph, defined earlier, and (with the IR invariants)
  // inputs() matches the Arg tree.
  void checkOperands() {
    std::vector<const Node*> refs;  // reused: one allocation for the graph, not one per node
    g_.forEach([&](const Node* n) { checkOperandsOf(n, refs); });
  }

  void checkOperandsOf(const Node* n, std::vector<const Node*>& refs) {
    const auto& inputs = n->inputs();
    // The operand slots against the Arg tree, an IR invariant like the use lists: args are
    // read-only outside Graph, whose every edit rebuilds the slots it changes. Checked with the
    // IR invariants only: reading each node's Arg buffer was a cache miss per node, a sizeable part
    // of the whole-graph check (bench/README.md, "Figures behind the code").
    if (opts_.ir_invariants) {
      refs.clear();
      auto collect = [&](const Node* r) { refs.push_back(r); };
      for (const Arg& a : n->args())
        a.forEachNode(collect);
      for (const auto& kv : n->kwargs())
        kv.second.forEachNode(collect);
      bool same = refs.size() == inputs.size();
      for (size_t k = 0; same && k < refs.size(); ++k)
        same = refs[k] == inputs[k];
      if (!same) add(n, "use-list", "operand list does not match the node references in args");
    }
    for (size_t k = 0; k < inputs.size(); ++k) {
      const Node* in = inputs[k];
      // Fast path: the message is built only for a broken operand.
      if (in != nullptr && in != n && in->graph() == &g_ && !in->isDead() && in->isBefore(n))
        continue;
      std::string which = "operand " + std::to_string(k);
      if (in == nullptr) {
        add(n, "use-list", which + " is null");
      } else if (in->graph() != &g_) {
        add(n, "use-list", which + " belongs to another graph");
      } else if (in->isDead()) {
        add(n, "use-list", which + " " + quoted(in) + " was deleted");
      } else if (in == n) {
        add(n, "topological-order", "node uses itself");
      } else {
        add(n, "topological-order", which + " " + quoted(in) + " is defined after its use");
      }
    }
  }

  // Uses and operands describe the same edges: every use names a real operand slot that refers
  // back to its producer, no slot is listed twice, and every slot is listed. O(N + E): slots are
  // numbered by prefix sums over node ids instead of searching use vectors.
  void checkUseLists() {
    uint32_t ids = g_.maxId();
    std::vector<size_t> first_slot(ids + 1, 0);
    std::vector<uint32_t> refs(ids, 0);
    g_.forEach([&](const Node* n) { first_slot[n->id() + 1] = n->inputs().size(); });
    for (uint32_t i = 0; i < ids; ++i)
      first_slot[i + 1] += first_slot[i];
    std::vector<bool> slot_seen(first_slot[ids], false);
    g_.forEach([&](const Node* n) {
      for (const Node* in : n->inputs())
        if (in && in->graph() == &g_ && in->id() < ids) ++refs[in->id()];
    });
    g_.forEach([&](const Node* n) {
      size_t listed = 0;  // counted by walking the links, which a broken count cannot hide
      for (const Use& u : n->uses()) {
        ++listed;
        if (!checkUse(n, u)) continue;
        const Node* user = u.user;
        size_t slot = first_slot[user->id()] + u.index;
        if (slot_seen[slot])
          add(n, "use-list",
              "use by " + quoted(user) + " operand " + std::to_string(u.index) +
                  " is listed twice");
        slot_seen[slot] = true;
      }
      if (listed != n->numUses())
        add(n, "use-list",
            "use list links " + std::to_string(listed) + " entries but counts " +
                std::to_string(n->numUses()));
      if (listed != refs[n->id()])
        add(n, "use-list",
            "use list has " + std::to_string(listed) + " entries but " +
                std::to_string(refs[n->id()]) + " operands refer to the node");
    });
  }

  // On the output nodes checkNodeList found.
  void checkOutput() {
    const Node* first_output = nullptr;
    for (const Node* n : outputs_) {
      if (first_output) {
        add(n, "single-output", "second output node (the first is " + quoted(first_output) + ")");
        continue;
      }
      first_output = n;
      if (n != g_.last()) add(n, "output-last", "output node is not the last node");
      if (n->hasUses()) add(n, "output-last", "output node has users");
    }
    if (!first_output) add(nullptr, "single-output", "graph has no output node");
  }

  void checkProcessGroups() {
    std::unordered_set<std::string_view> names;
    for (const ProcessGroupInfo& pg : g_.processGroups()) {
      if (!names.insert(pg.name).second)
        add(nullptr, "process-group", "process group \"" + pg.name + "\" is declared twice");
      if (pg.size <= 0)
        add(nullptr, "process-group",
            "process group \"" + pg.name + "\" has size " + std::to_string(pg.size));
      else if (!pg.ranks.empty() && pg.ranks.size() != static_cast<size_t>(pg.size))
        add(nullptr, "process-group",
            "process group \"" + pg.name + "\" has size " + std::to_string(pg.size) + " but " +
                std::to_string(pg.ranks.size()) + " ranks");
    }
  }

  // Rule identifier (docs/graph-format.md, "Names are data"): the strings torch.fx pastes into
  // the Python code it generates for a graph are identifiers, so a graph file cannot smuggle code
  // into that source. Node names (empty ones are unique-name's), placeholder targets, kwargs keys
  // and each part of a get_attr target.
  void checkIdentifiers(const Node* n) {
    // Names are checked as the graph stores them: reading each node's name here cost a cache
    // miss per node on a large graph whose passes had reordered it.
    if (names_may_be_bad_) {
      std::string_view name = n->name();
      if (!name.empty() && !isPythonIdentifier(name))
        add(n, "identifier", "node name " + quotedForMessage(name) + kNotIdentifier);
    }
    if (n->op() == OpKind::Placeholder) {
      if (std::string_view t = n->target().str(); !isPythonIdentifier(t))
        add(n, "identifier", "placeholder target " + quotedForMessage(t) + kNotIdentifier);
    } else if (n->op() == OpKind::GetAttr) {
      if (std::string_view t = n->target().str(); !isAttributePath(t))
        add(n, "identifier",
            "get_attr target " + quotedForMessage(t) +
                " is not an attribute path (Python identifiers or decimal numbers joined by "
                "'.')");
    }
    for (const auto& kv : n->kwargs())
      if (std::string_view key = kv.first.str(); !isPythonIdentifier(key))
        add(n, "identifier", "kwargs key " + quotedForMessage(key) + kNotIdentifier);
  }
  static constexpr const char* kNotIdentifier =
      " is not a Python identifier (ASCII letters, digits and '_', not starting with a digit, "
      "not a Python keyword)";

  void checkArity(const Node* n) {
    if (n->op() == OpKind::Output) {
      if (n->numArgs() != 1)
        add(n, "arity",
            "output takes 1 argument (the list of graph outputs), got " +
                std::to_string(n->numArgs()));
      return;
    }
    if (n->op() != OpKind::CallFunction || !isKnownOp(n->target())) return;
    const OpInfo& info = n->info();
    int64_t got = static_cast<int64_t>(n->numArgs());
    if (got < info.min_args || (info.max_args >= 0 && got > info.max_args)) {
      std::string want =
          info.min_args == info.max_args
              ? std::to_string(info.min_args)
              : std::to_string(info.min_args) + ".." +
                    (info.max_args < 0 ? std::string("") : std::to_string(info.max_args));
      add(n, "arity",
          std::string(n->target().str()) + " takes " + want + " positional arguments, got " +
              std::to_string(got));
    }
  }

  void checkCollective(const Node* c) {
    const OpInfo& info = c->info();
    // ---- pairing
    std::vector<const Node*>& waits = waits_;  // reused: no allocation a collective
    if (!info.coalesced) {
      waits.clear();
      for (const Use& u : c->uses()) {
        if (u.user->isWait())
          waits.push_back(u.user);
        else if (!isDeadView(u.user) && !u.user->info().metadata_only)  // a shape is known early
          add(c, "collective-wait-pairing",
              "result is read by " + quoted(u.user) + " without a wait");
      }
      reportWaitCount(c, c, waits);
    } else {
      bool any = false;
      for (const Use& u : c->uses()) {
        const Node* gi = u.user;
        if (gi->info().category != OpCategory::Getitem || u.index != 0) {
          add(c, "collective-wait-pairing",
              "coalesced result is read by " + quoted(gi) + ", which is not a getitem");
          continue;
        }
        any = true;
        waits.clear();
        for (const Use& gu : gi->uses()) {
          if (gu.user->isWait())
            waits.push_back(gu.user);
          else
            add(gi, "collective-wait-pairing",
                "element of coalesced collective " + quoted(c) + " is read by " + quoted(gu.user) +
                    " without a wait");
        }
        reportWaitCount(gi, c, waits);
      }
      if (!any) add(c, "collective-wait-pairing", "collective has no wait");
    }

    // ---- group
    int64_t group_size = 0;
    if (info.group_size_arg >= 0) {
      const Arg* a = argAt(c, info.group_size_arg, "group_size");
      if (a && a->isInt()) {
        group_size = a->toInt();
        if (group_size <= 0) add(c, "group-size", "group_size is " + std::to_string(group_size));
      }
    }
    const Arg* name_arg = argAt(c, info.group_name_arg, "group_name");
    if (name_arg && name_arg->isStr() && !g_.processGroups().empty()) {
      const ProcessGroupInfo* pg = g_.findProcessGroup(name_arg->str());
      if (!pg) {
        add(c, "unknown-group",
            "process group \"" + std::string(name_arg->str()) + "\" is not in the header");
      } else if (group_size > 0 && pg->size != group_size) {
        add(c, "group-size",
            "group_size " + std::to_string(group_size) + " but process group \"" + pg->name +
                "\" has size " + std::to_string(pg->size));
      }
    }

    // ---- shapes, from value meta where both sides have it
    if (c->numArgs() == 0) return;
    const Arg& in_arg = c->arg(0);
    if (!info.coalesced) {
      if (in_arg.isNode()) checkCollectiveShape(c, in_arg.node()->val(), c->val(), group_size, "");
      return;
    }
    if (!in_arg.isSequence() || c->val().kind != ValueMeta::Kind::List) return;
    const auto& ins = in_arg.items();
    const auto& outs = c->val().items;
    if (ins.size() != outs.size()) {
      add(c, "collective-shape",
          std::to_string(ins.size()) + " inputs but " + std::to_string(outs.size()) + " outputs");
      return;
    }
    for (size_t i = 0; i < ins.size(); ++i)
      if (ins[i].isNode())
        checkCollectiveShape(c, ins[i].node()->val(), outs[i], group_size,
                             " (element " + std::to_string(i) + ")");
  }

  // Activation checkpointing in PyTorch caches an alias of every value it sees, un-waited
  // collective results included; those aliases are never read. A view nobody reads cannot observe
  // the un-waited buffer, so real SAC traces stay valid (dce removes them).
  static bool isDeadView(const Node* n) {
    return n->info().category == OpCategory::View && !n->hasUses();
  }

  void reportWaitCount(const Node* at, const Node* c, const std::vector<const Node*>& waits) {
    if (waits.empty()) {
      add(at, "collective-wait-pairing",
          at == c ? "collective has no wait" : "element of " + quoted(c) + " has no wait");
    } else if (waits.size() > 1) {
      std::string names;
      for (size_t i = 0; i < waits.size(); ++i)
        names += (i ? ", " : "") + quoted(waits[i]);
      add(at, "collective-wait-pairing",
          std::to_string(waits.size()) + " waits (" + names + "); expected exactly one");
    }
  }

  void checkCollectiveShape(const Node* c, const ValueMeta& in_val, const ValueMeta& out_val,
                            int64_t group_size, const std::string& which) {
    if (!in_val.isTensor() || !out_val.isTensor()) return;
    const TensorMeta& in = in_val.tensor;
    const TensorMeta& out = out_val.tensor;
    CollectiveKind kind = c->info().collective;
    if (in.dtype != ScalarType::Undefined && out.dtype != ScalarType::Undefined &&
        in.dtype != out.dtype && kind != CollectiveKind::AllToAll) {
      add(c, "collective-shape",
          "input dtype " + std::string(dtypeName(in.dtype)) + " but output dtype " +
              std::string(dtypeName(out.dtype)) + which);
    }
    // Built only for a report: this runs for every collective of every verification.
    auto shapes = [&] {
      return "input " + shapeStr(in.shape) + ", output " + shapeStr(out.shape) + which;
    };
    switch (kind) {
      case CollectiveKind::AllGather:
      case CollectiveKind::ReduceScatter: {
        if (in.shape.empty() || out.shape.empty() || group_size <= 0) return;
        if (in.shape.size() != out.shape.size()) {
          add(c, "collective-shape", "rank differs: " + shapes());
          return;
        }
        bool gather = kind == CollectiveKind::AllGather;
        int64_t small = gather ? in.shape[0] : out.shape[0];
        int64_t big = gather ? out.shape[0] : in.shape[0];
        int64_t expected = 0;
        if (__builtin_mul_overflow(small, group_size, &expected) || expected != big) {
          add(c, "collective-shape",
              std::string(gather ? "all-gather output dim 0 must be input dim 0"
                                 : "reduce-scatter input dim 0 must be output dim 0") +
                  " x group_size " + std::to_string(group_size) + ": " + shapes());
          return;
        }
        for (size_t d = 1; d < in.shape.size(); ++d)
          if (in.shape[d] != out.shape[d]) {
            add(c, "collective-shape", "dim " + std::to_string(d) + " differs: " + shapes());
            return;
          }
        return;
      }
      case CollectiveKind::AllReduce:
      case CollectiveKind::Broadcast:
        if (in.shape != out.shape) add(c, "collective-shape", "shape changes: " + shapes());
        return;
      case CollectiveKind::AllToAll:
      case CollectiveKind::None:
        return;
    }
  }

  void checkWait(const Node* w) {
    const Node* in = w->input(0);
    if (in == nullptr) {
      add(w, "collective-wait-pairing", "wait has no input");
      return;
    }
    // A wait on a wait is a no-op on a finished collective: torchtitan's expert parallelism
    // waits on the token counts twice (its "sync" after the exchange's own wait).
    const Node* waited = in->isWait() ? in->input(0) : in;
    if (!collectiveBehind(waited))
      add(w, "collective-wait-pairing",
          "waits on " + quoted(in) + ", which is not a collective nor a wait on one" +
              (in->isCollective() ? " result (a coalesced collective needs a getitem)" : ""));
  }

  // The header's input list lives on the placeholders (kind + fqn). It must cover every
  // placeholder or none, name each parameter and buffer, and never name one twice.
  void checkInputInfo() {
    std::unordered_map<std::string_view, const Node*> by_fqn;
    size_t placeholders = 0, with_kind = 0;
    const Node* first_without = nullptr;
    forEachInput([&](const Node* n) {
      if (n->op() != OpKind::Placeholder) {
        if (n->inputKind() != InputKind::None)
          add(n, "input-info", "only placeholders can be graph inputs");
        return;
      }
      ++placeholders;
      InputKind k = n->inputKind();
      if (k == InputKind::None) {
        if (!first_without) first_without = n;
        return;
      }
      ++with_kind;
      if (k == InputKind::Parameter || k == InputKind::Buffer) {
        if (n->inputFqn().empty()) {
          add(n, "input-info", std::string(inputKindName(k)) + " has no fqn");
        } else if (auto [it, fresh] = by_fqn.emplace(n->inputFqn(), n); !fresh) {
          add(n, "input-info",
              "fqn \"" + std::string(n->inputFqn()) + "\" is also the input " + quoted(it->second));
        }
      }
    });
    if (with_kind > 0 && with_kind < placeholders)
      add(first_without, "input-info",
          "placeholder has no input kind, but " + std::to_string(with_kind) + " of " +
              std::to_string(placeholders) + " placeholders do");
  }

  // The header's output list describes the output node's list element by element; a gradient
  // names a parameter input.
  void checkOutputInfo() {
    const auto& specs = g_.outputSpecs();
    const Node* out = g_.outputNode();
    if (specs.empty() || !out || out->numArgs() != 1) return;
    const Arg& a = out->arg(0);
    size_t count = a.isSequence() ? a.items().size() : 1;
    if (count != specs.size())
      add(out, "output-info",
          "header lists " + std::to_string(specs.size()) + " outputs, output node has " +
              std::to_string(count));
    std::unordered_set<std::string_view> params;
    forEachInput([&](const Node* n) {
      if (n->op() == OpKind::Placeholder && n->inputKind() == InputKind::Parameter)
        params.insert(n->inputFqn());
    });
    checkBufferMutations(out, a, count);
    for (size_t i = 0; i < specs.size(); ++i) {
      if (specs[i].kind != OutputKind::Gradient) continue;
      if (specs[i].fqn.empty())
        add(out, "output-info", "output " + std::to_string(i) + " is a gradient without an fqn");
      else if (!params.empty() && !params.count(specs[i].fqn))
        add(out, "output-info",
            "output " + std::to_string(i) + " is the gradient of \"" + specs[i].fqn +
                "\", which is not a parameter input");
    }
  }

  // A buffer_mutation output names a buffer input, at most once, and has the buffer's dtype and
  // shape; a buffer is updated either by an output or by in-place ops, not both (the runner would
  // apply the output over the in-place result).
  void checkBufferMutations(const Node* out, const Arg& list, size_t count) {
    const auto& specs = g_.outputSpecs();
    std::unordered_map<std::string_view, const Node*> buffers;
    forEachInput([&](const Node* n) {
      if (n->op() == OpKind::Placeholder && n->inputKind() == InputKind::Buffer)
        buffers.emplace(n->inputFqn(), n);
    });
    std::unordered_set<std::string_view> seen;
    BufferMutations inplace;
    bool analyzed = false;
    for (size_t i = 0; i < specs.size(); ++i) {
      if (specs[i].kind != OutputKind::BufferMutation) continue;
      std::string what = "output " + std::to_string(i) + " (buffer_mutation";
      what += specs[i].fqn.empty() ? ")" : " \"" + specs[i].fqn + "\")";
      auto it = buffers.find(specs[i].fqn);
      if (specs[i].fqn.empty()) {
        add(out, "buffer-mutation", what + " names no buffer (no fqn)");
        continue;
      }
      if (it == buffers.end()) {
        add(out, "buffer-mutation", what + " names no buffer input");
        continue;
      }
      if (!seen.insert(specs[i].fqn).second) {
        add(out, "buffer-mutation", what + ": the buffer is updated by an earlier output too");
        continue;
      }
      const Node* buf = it->second;
      if (!analyzed) {
        inplace = analyzeBufferMutations(g_);
        analyzed = true;
      }
      if (buf->id() < inplace.written_alias.size() && inplace.written_alias[buf->id()])
        add(out, "buffer-mutation", what + ": the buffer is also written in place");
      const Arg* item = nullptr;
      if (list.isSequence() && i < list.items().size())
        item = &list.items()[i];
      else if (!list.isSequence() && count == 1)
        item = &list;
      if (!item || !item->isNode()) {
        add(out, "buffer-mutation", what + " is not a node");
        continue;
      }
      const ValueMeta& v = item->node()->val();
      const ValueMeta& b = buf->val();
      if (v.isTensor() && b.isTensor() &&
          (v.tensor.dtype != b.tensor.dtype || v.tensor.shape != b.tensor.shape))
        add(out, "buffer-mutation",
            what + ": value " + quoted(item->node()) +
                " does not match the buffer's dtype and "
                "shape (placeholder " +
                quoted(buf) + ")");
    }
  }

  // The parameter placeholder an all-gather input comes from through unshard chain steps
  // (ir/fsdp_chains.h, the same steps FsdpAnalysis follows), or nullptr. Memoized by id so shared
  // chains are walked once: O(N) overall.
  const Node* paramSource(const Node* n, std::vector<const Node*>& memo, std::vector<bool>& done) {
    std::vector<const Node*> path;
    const Node* src = nullptr;
    while (n) {
      if (done[n->id()]) {
        src = memo[n->id()];
        break;
      }
      path.push_back(n);
      if (n->op() == OpKind::Placeholder) {
        src = n->inputKind() == InputKind::Parameter ? n : nullptr;
        break;
      }
      const Node* in = unshardChainInput(*n);
      // Only step backwards in program order: a broken order must not make this loop.
      if (in == nullptr || in->graph() != &g_ || in->isDead() || !in->isBefore(n)) break;
      n = in;
    }
    for (const Node* p : path) {
      memo[p->id()] = src;
      done[p->id()] = true;
    }
    return src;
  }

  void checkOneGatherPerParam() {
    std::vector<const Node*> memo(g_.maxId(), nullptr);
    std::vector<bool> done(g_.maxId(), false);
    // (param id, phase) -> first all-gather; ordered map for deterministic lookups only.
    std::map<std::pair<uint32_t, Phase>, const Node*> first;
    g_.forEach([&](const Node* n) {
      if (!n->isCollective() || n->info().collective != CollectiveKind::AllGather) return;
      // Without a phase two gathers cannot be told apart by phase; phase-less graphs are skipped.
      Phase phase = n->meta().phase;
      if (phase == Phase::Unknown || n->numArgs() == 0) return;
      std::vector<const Node*> sources;
      const Arg& in = n->arg(0);
      if (in.isNode())
        sources.push_back(in.node());
      else
        for (const Arg& item : in.items())
          if (item.isNode()) sources.push_back(item.node());
      for (const Node* s : sources) {
        const Node* param = paramSource(s, memo, done);
        if (!param) continue;
        auto [it, fresh] = first.emplace(std::make_pair(param->id(), phase), n);
        if (!fresh)
          add(n, "one-gather-per-param",
              "parameter " + quoted(param) + " is all-gathered again in " +
                  std::string(phaseName(phase)) + " (first by " + quoted(it->second) + ")");
      }
    });
  }

  const Graph& g_;
  const VerifyOptions& opts_;
  const bool names_may_be_bad_ = g_.mayHaveNonIdentifierNames();
  std::vector<VerifyIssue> issues_;
  std::vector<bool> touched_;  // runNodes' nodes, by id
  // The placeholders and any other node with an input kind, in program order: the graph-input
  // rules read only these, so run() collects them in its per-node walk instead of three more.
  std::vector<const Node*> inputs_;
  template <typename F>
  void forEachInput(F&& f) {
    for (const Node* n : inputs_)
      f(n);
  }
};

}  // namespace

std::vector<VerifyIssue> verifyGraph(const Graph& g, const VerifyOptions& opts) {
  if (opts.max_issues == 0) return {};
  return Verifier(g, opts).run();
}

std::vector<VerifyIssue> verifyNodes(const Graph& g, const std::vector<const Node*>& nodes,
                                     const VerifyOptions& opts) {
  if (opts.max_issues == 0) return {};
  // The nodes as given first (the change journal hands them over in arena order, the cheapest
  // to visit). Each node's rules read the graph and the set of nodes, not the order, so no issue
  // in that order means none in any; a graph with issues is checked again in program order,
  // whose report (which issues, in which order, up to max_issues) is the one documented.
  std::vector<VerifyIssue> issues = Verifier(g, opts).runNodes(nodes);
  if (issues.empty()) return issues;
  const bool sortable = std::all_of(nodes.begin(), nodes.end(), [&](const Node* n) {
    return n != nullptr && n->graph() == &g && !n->isDead();
  });
  if (!sortable) return issues;  // a foreign or deleted node: the link issues say so
  std::vector<const Node*> ordered = nodes;
  std::stable_sort(ordered.begin(), ordered.end(),
                   [](const Node* a, const Node* b) { return a->isBefore(b); });
  return Verifier(g, opts).runNodes(ordered);
}

std::vector<VerifyIssue> verifyIdentifiers(const Graph& g, const VerifyOptions& opts) {
  if (opts.max_issues == 0) return {};
  return Verifier(g, opts).runIdentifiers();
}

std::vector<VerifyIssue> verifyHeader(const Graph& g, const VerifyOptions& opts, bool collectives) {
  if (opts.max_issues == 0) return {};
  return Verifier(g, opts).runHeader(collectives);
}

}  // namespace jfx
