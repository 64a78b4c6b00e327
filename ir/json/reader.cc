// The JSON reader (docs/graph-format.md): one decoder of the format. Nodes are read from the
// tokens by the rules below (the values' helpers are in token_reader.h); the small header goes
// through a JsonTree.
#include "ir/json/op_schemas.h"
#include "ir/json/token_reader.h"
#include "ir/loader.h"

namespace jfx {

namespace json_detail {
namespace {

// ------------------------------------------------------------------------------------ reader

// FastSax drives the document through a TreeBuilder, which keeps the header as a JsonTree and
// hands each element of "nodes" to readDirect as the tokenizer reaches it: the node is read from
// the tokens and made at once, and no tree is built for it, so memory stays proportional to one
// node, not to the file. The header is read at the end. On text FastSax does not accept, nlohmann's
// parser reads the document again only to say what is wrong (readJsonInto).
class JsonReader : public TreeBuilder, public NodeSite, public TokenReader {
  using TokenReader::filename_;
  using TokenReader::text_;
  // The header's accessors (on the tree) beside the nodes' (on the tokens).
  using TokenReader::integer;
  using TokenReader::ints;
  using TokenReader::str;

 public:
  // `into`: a graph whose nodes were built already (readJsonInto); the document's nodes are
  // appended to it and its header applies to all of them.
  JsonReader(std::string_view text, const std::string& filename,
             std::unique_ptr<Graph> into = nullptr)
      : TreeBuilder(Tokenizer::Fast, /*restartable=*/false),
        TokenReader(text, filename),
        // Module FQNs grow with the model (a large one has more than a fixed 8192-slot cache holds,
        // and its backward revisits them in reverse, missing such a cache on most nodes).
        loader_(SourceKind::Json, filename, *this, std::move(into),
                std::max<size_t>(8192, text.size() / 4096)),
        g_(&loader_.graph()) {
    hook_depth_ = 2;  // the header's members and the elements of "nodes"
  }

  std::unique_ptr<Graph> read() {
    // Node names are hashed once per definition and once per use: size the table up front. A
    // node takes 300 bytes or more as the writer writes it (traced ones with stack traces:
    // several KB), so this seldom overestimates; an index twice too large costs a load its
    // zeroed pages (bench/README.md, "Figures behind the code"). Room for half as many again:
    // passes add nodes (the default pipeline does, on the llama3-70b shape enough to rehash the
    // index during bucket), and a table rehashed in a pass costs a second table's pages plus a
    // scattered reinsert of every name.
    loader_.expectNodes(text_.size() / 320 * 3 / 2 + 16);
    parse(text_, filename_);
    node_name_.clear();
    if (bad_ref_) badReference();
    JView doc = root();
    if (!doc.isObject())
      fail("expected a JSON object at the top level, got " + std::string(describe(doc)));
    header(doc);
    return loader_.finish();
  }

  // NodeSite: the node's element of "nodes" and its member.
  SourceLocation at(uint32_t pos, NodePart part) const override {
    static constexpr std::string_view kMembers[] = {"", "/name", "/target", "/args", "/kwargs"};
    SourceLocation loc;
    loc.file = filename_;
    loc.json_pointer = "/nodes/" + std::to_string(pos);
    loc.json_pointer += kMembers[static_cast<int>(part)];
    loc.node = node_name_;
    return loc;
  }

 private:
  // ---- streaming: hooks called while the tree is built

  void keyRead(std::string_view key) override {
    if (stack_.size() == 1) checkTopKey(key);
  }

  void added(uint32_t index) override {
    if (stack_.size() == 1 && tree_.values[index].type == JView::Type::Array &&
        JView(&tree_, index).key() == "nodes") {
      nodes_array_ = index;
      direct_parent_ = index;  // its elements are read by readDirect
    }
  }

  // Format and version are checked as soon as they are read, so a wrong version is reported
  // before any node.
  void completed(uint32_t index) override {
    if (index == nodes_array_) {
      loader_.claimPending();
      nodes_array_ = kNone;
      direct_parent_ = kNoDirect;
    } else if (stack_.size() == 1) {
      JView v(&tree_, index);
      if (v.key() == "format" || v.key() == "version") checkFormat(v.key(), v);
    }
  }

  // ---- nodes
  //
  // Every element of "nodes" is read from the tokens as the tokenizer reaches it, by the rules
  // below; no tree is built for it. Members are read in the file's order, but an error found in
  // one is held until its object is read, and then the first in the format's check order is
  // raised (a node: name, keys, op, target, args, kwargs, meta; kwargs and meta: a repeated key,
  // then by key; a tensor meta: keys, dtype, shape, stride, size, device), so the error a file
  // gets does not depend on the order of its keys.

  bool readDirect(FastSax& s) override {
    try {
      node(s);
    } catch (const TooDeep&) {
      loader_.claimPending();
      SourceLocation loc;
      loc.file = filename_;
      throw JfxError(loc, "JSON nested more than " + std::to_string(kMaxNesting) + " levels deep");
    } catch (const Malformed&) {
      loader_.claimPending();  // a repeated name before the bad text is reported first
      throw ReadAgainWithNlohmann{};
    }
    node_name_.clear();
    ++node_index_;
    return true;
  }

  void node(FastSax& s) {
    Scope nodes(this, "nodes");
    Scope at(this, node_index_);
    if (s.peek() != '{') {
      const std::string got = describeNext(s);
      skip(s);
      loader_.claimPending();
      fail("expected a node object, got " + got);
    }
    const char* start = s.pos();
    NodeParts p;
    readNode(s, p);
    try {
      defineNode(s, start, p);
    } catch (const JfxError&) {
      loader_.claimPending();  // names defined before this node are claimed (and checked) first
      throw;
    }
  }

  // What a node's members read to, in the file's order.
  struct NodeParts {
    std::array<Slot, 7> held;  // kNodeKeys' errors, then the unknown or repeated key's
    Read read;
    std::vector<Arg> args;
    Kwargs kwargs;
    bool kwargs_sorted = true;
    ValueMeta val;
    NodeMeta meta;
    std::string extra;  // extra meta, canonical
    std::optional<OpKind> op;
    std::string_view target;
    size_t args_refs = 0, kwargs_refs = 0;  // where their operands' names start in pending_
  };
  static constexpr std::array<std::string_view, 6> kNodeKeys = {"args", "kwargs", "meta",
                                                                "name", "op",     "target"};
  enum NodeKey : size_t { kArgs, kKwargs, kMeta, kName, kOp, kTarget };

  void readNode(FastSax& s, NodeParts& p) {
    pending_.clear();
    kept_names_.clear();
    p.read = members(s, kNodeKeys, "a node", p.held, [&](int key) {
      switch (key) {
        case kArgs:
          p.args_refs = pending_.size();
          if (s.peek() != '[') fail("expected args to be an array, got " + describeNext(s));
          list(s, p.args);
          return;
        case kKwargs:
          p.kwargs_refs = pending_.size();
          p.kwargs_sorted = readKwargs(s, p.kwargs);
          return;
        case kMeta:
          readMeta(s, p.meta, p.val, p.extra);
          return;
        case kName:
          node_name_ = str(s, "the node name");
          loader_.announce(node_name_);
          return;
        case kOp: {
          const std::string_view op = str(s, "the op kind");
          p.op = opKindFromName(op);
          if (!p.op)
            fail("unknown op kind " + quoteForMessage(op) +
                 " (expected placeholder, call_function, get_attr, output)");
          return;
        }
        default:
          p.target = kept(str(s, "the target"), target_buf_);
      }
    });
  }

  // The node's checks in the format's order, then the node itself.
  void defineNode(FastSax& s, const char* start, NodeParts& p) {
    const auto pos = static_cast<uint32_t>(node_index_);
    required(p.read, p.held, kNodeKeys, kName, "every node has a name");
    loader_.checkName(node_name_, pos);
    if (bad_ref_) {
      // An earlier node referred to a name not yet defined: only look for where it is defined.
      if (!bad_ref_defined_at_ && node_name_ == bad_ref_->target) bad_ref_defined_at_ = node_index_;
      return;
    }
    raise(p.held.back());  // unknown or repeated keys
    required(p.read, p.held, kNodeKeys, kOp, "placeholder, call_function, get_attr or output");
    required(p.read, p.held, kNodeKeys, kTarget, "the op's target");
    loader_.checkTarget(*p.op, p.target, pos);
    raise(p.held[kArgs]);
    raise(p.held[kKwargs]);
    // Operands are looked up once the whole node is read: their index slots, prefetched as
    // their names were read, have had the rest of the node's reading to arrive.
    if (!resolvePending(p.args, p.args_refs) || !resolvePending(p.kwargs, p.kwargs_refs)) {
      findBadReference(s, start);
      loader_.claimPending();
      return;
    }
    if (!p.kwargs_sorted)  // the IR keeps kwargs sorted by key, as the printers do
      std::stable_sort(p.kwargs.begin(), p.kwargs.end(),
                       [](const auto& a, const auto& b) { return a.first.str() < b.first.str(); });
    loader_.checkNoArguments(*p.op, !p.args.empty(), !p.kwargs.empty(), pos);
    const Symbol sym =
        *p.op == OpKind::CallFunction ? loader_.symbol(p.target) : Symbol::intern(p.target);
    Node* n = loader_.define(*p.op, sym, std::move(p.args), std::move(p.kwargs), node_name_, pos,
                             GraphLoader::Claim::Late);
    raise(p.held[kMeta]);
    n->val() = std::move(p.val);
    n->meta() = std::move(p.meta);
    if (!p.extra.empty()) {
      liftAttrs(p.extra, n->meta().attrs);
      n->meta().extra_json = std::move(p.extra);
    }
  }

  // A reference to a name not defined (yet): the node is read again with each operand looked up
  // as it is read, so the first such operand's place is known; it is reported once the whole
  // document is read, as a forward reference, a cycle or a dangling one.
  void findBadReference(FastSax& s, const char* start) {
    const char* end = s.pos();
    s.rewind(start);
    resolve_now_ = true;
    bad_refs_.clear();
    NodeParts again;
    readNode(s, again);
    resolve_now_ = false;
    s.rewind(end);
    // The format's order: args before kwargs, kwargs by key.
    const BadRefAt* first = nullptr;
    for (const BadRefAt& b : bad_refs_)
      if (!first || (first->in_kwargs && (!b.in_kwargs || b.kwarg.str() < first->kwarg.str())))
        first = &b;
    if (!first) throw std::logic_error("JSON reader: an operand resolved on the second reading");
    bad_ref_ = BadRef{first->loc, first->target, node_index_};
    bad_ref_->loc.node = node_name_;
    if (first->target == node_name_) bad_ref_defined_at_ = node_index_;
  }

  // ---- arguments

  void arg(FastSax& s, Arg& out) {
    std::string_view str;
    FastSax::Number num;
    switch (s.peek()) {
      case '"':
        if (!s.stringToken(str)) throw Malformed{};
        out = Arg::ofStr(loader_.symbol(str));
        return;
      case 't':
        if (!s.wordToken("true")) throw Malformed{};
        out = Arg::ofBool(true);
        return;
      case 'f':
        if (!s.wordToken("false")) throw Malformed{};
        out = Arg::ofBool(false);
        return;
      case 'n':
        if (!s.wordToken("null")) throw Malformed{};
        out = Arg::none();
        return;
      case '[': {
        std::vector<Arg> items;
        list(s, items);
        out = Arg::ofList(std::move(items));
        return;
      }
      case '{':
        boxed(s, out);
        return;
      default:
        if (!s.numberToken(num)) throw Malformed{};
        if (num.type == JView::Type::Int)
          out = Arg::ofInt(num.i);
        else if (num.type == JView::Type::Float)
          out = Arg::ofFloat(num.f);
        else  // past 64 bits: refused with its place, never rounded to a double
          integerOf(num, "an integer");
    }
  }

  // A list of arguments.
  void list(FastSax& s, std::vector<Arg>& out) {
    gather(s, arg_buffers_, list_depth_, out, [&](Arg& a) { arg(s, a); });
  }

  // Reads "[...]" into `out` through a buffer of the reader's, one per depth (a deque: references
  // to them outlive deeper calls), so `out` is allocated once, at its size.
  template <class T, class Out, class F>
  void gather(FastSax& s, std::deque<std::vector<T>>& buffers, size_t& depth, Out& out, F&& read) {
    if (depth == buffers.size()) buffers.emplace_back();
    std::vector<T>& items = buffers[depth++];
    items.clear();
    struct Leave {
      size_t& depth;
      ~Leave() { --depth; }
    } leave{depth};
    array(s, [&](size_t i) {
      Scope at(this, i);
      read(items.emplace_back());
    });
    out.reserve(items.size());
    std::move(items.begin(), items.end(), std::back_inserter(out));
  }

  static constexpr std::string_view kBoxedKinds =
      "(expected one of {\"node\": ...}, {\"float\": ...}, {\"dtype\": ...}, {\"device\": ...}, "
      "{\"layout\": ...}, {\"memory_format\": ...}, {\"tuple\": [...]}, {\"opaque\": ...})";

  // {"node": ...}, {"float": ...}, {"dtype": ...}, ...: exactly one key.
  void boxed(FastSax& s, Arg& out) {
    size_t count = 0;
    Slot held;
    object(s, [&](std::string_view key) {
      if (count++ > 0) {
        skip(s);
        return;
      }
      Scope at(this, key);
      hold(s, held, [&] { boxedValue(s, key, out); });
    });
    if (count != 1)
      fail("expected an argument object with exactly one key, got " + std::to_string(count) +
           " keys " + std::string(kBoxedKinds));
    raise(held);
  }

  void boxedValue(FastSax& s, std::string_view key, Arg& out) {
    if (key == "node") {
      nodeRef(s, out);
    } else if (key == "float") {
      out = Arg::ofFloat(special(s));
    } else if (key == "dtype") {
      out = Arg::ofDtype(dtype(s));
    } else if (key == "device") {
      out = Arg::ofDevice(loader_.symbol(str(s, "a device")));
    } else if (key == "layout") {
      out = Arg::ofLayout(loader_.symbol(str(s, "a layout")));
    } else if (key == "memory_format") {
      out = Arg::ofMemoryFormat(loader_.symbol(str(s, "a memory format")));
    } else if (key == "tuple") {
      if (s.peek() != '[') fail("expected the tuple's items (an array), got " + describeNext(s));
      std::vector<Arg> items;
      list(s, items);
      out = Arg::ofTuple(std::move(items));
    } else if (key == "opaque") {
      out = opaque(s);
    } else {
      fail("unknown argument object key " + quoteForMessage(key) + " " + std::string(kBoxedKinds));
    }
  }

  // "inf", "-inf" or "nan".
  double special(FastSax& s) {
    const std::string_view v = str(s, "\"inf\", \"-inf\" or \"nan\"");
    if (v == "inf") return std::numeric_limits<double>::infinity();
    if (v == "-inf") return -std::numeric_limits<double>::infinity();
    if (v == "nan") return std::numeric_limits<double>::quiet_NaN();
    fail("expected \"inf\", \"-inf\" or \"nan\", got " + quoteForMessage(v));
  }

  ScalarType dtype(FastSax& s) {
    const std::string_view name = str(s, "a dtype name");
    // A graph's tensors mostly share a few dtypes: the last one is compared before anything is
    // looked up. Canonical names only: an alias ("torch.float", "half") is looked up each time.
    if (last_dtype_name_.empty() || name != last_dtype_name_) {
      const auto d = dtypeFromName(name);
      if (!d) fail("unknown dtype " + quoteForMessage(name));
      last_dtype_ = *d;
      last_dtype_name_ = name == dtypeName(*d) ? dtypeName(*d) : std::string_view();
    }
    return last_dtype_;
  }

  Arg opaque(FastSax& s) {
    static constexpr std::array<std::string_view, 2> kKeys = {"repr", "type"};
    if (s.peek() != '{') fail("expected {\"repr\": ..., \"type\": ...}, got " + describeNext(s));
    std::array<Slot, 3> held;
    std::string repr, type;
    const Read r = members(s, kKeys, "an opaque value", held, [&](int key) {
      (key == 0 ? repr : type) = str(s, key == 0 ? "the repr" : "the type name");
    });
    raise(held.back());  // unknown or repeated keys
    required(r, held, kKeys, 0, "the value's repr");
    required(r, held, kKeys, 1, "the value's type name");
    return Arg::ofOpaque(type, repr);
  }

  // An operand: looked up once the node is read (resolvePending), after prefetching its index
  // slot now; or at once, when the node is read again to find a bad reference.
  void nodeRef(FastSax& s, Arg& out) {
    std::string_view name = str(s, "a node name");
    if (!inText(name)) name = kept_names_.emplace_back(name);
    if (resolve_now_) {
      Node* ref = loader_.resolve(name);
      if (!ref) bad_refs_.push_back({where(), std::string(name), in_kwargs_, kwarg_});
      out = Arg::ofNode(ref);
      return;
    }
    loader_.expectOperand(name);
    pending_.push_back(name);
    out = Arg::ofNode(nullptr);
  }
  // Points the node references in `args` at the nodes named by pending_[first...], in order.
  template <class Args>
  bool resolvePending(Args& args, size_t first) {
    size_t i = first;
    bool ok = true;
    auto resolve = [&](Node*& ref) {
      ref = loader_.resolve(pending_[i++]);
      ok = ok && ref != nullptr;
    };
    for (auto& a : args) {
      if constexpr (std::is_same_v<std::decay_t<decltype(a)>, Arg>)
        a.forEachNode(resolve);
      else
        a.second.forEachNode(resolve);
    }
    return ok;
  }

  // Kwargs as the file gives them; returns whether they are sorted by key (as the writer gives
  // them). Errors: a repeated key first, then the first by key.
  bool readKwargs(FastSax& s, Kwargs& out) {
    if (s.peek() != '{') fail("expected kwargs to be an object, got " + describeNext(s));
    kwargs_buffer_.clear();
    bool sorted = true;
    std::vector<std::pair<Symbol, Held>> errors;
    in_kwargs_ = true;
    object(s, [&](std::string_view key) {
      const Symbol k = loader_.symbol(key);
      if (!kwargs_buffer_.empty() && !(kwargs_buffer_.back().first.str() < k.str())) sorted = false;
      Scope at(this, k.str());
      kwarg_ = k;
      Slot held;
      hold(s, held, [&] { arg(s, kwargs_buffer_.emplace_back(k, Arg()).second); });
      if (held) errors.emplace_back(k, std::move(*held));
    });
    in_kwargs_ = false;
    if (!sorted) {
      std::vector<std::string_view> keys;
      for (const auto& [k, a] : kwargs_buffer_)
        keys.push_back(k.str());
      if (auto dup = repeated(keys)) {
        Scope at(this, *dup);
        fail("duplicate key " + quoteForMessage(*dup));
      }
    }
    if (!errors.empty()) {
      const auto first = std::min_element(errors.begin(), errors.end(), [](auto& a, auto& b) {
        return a.first.str() < b.first.str();
      });
      throw JfxError(first->second.loc, first->second.message);
    }
    out.reserve(kwargs_buffer_.size());
    std::move(kwargs_buffer_.begin(), kwargs_buffer_.end(), std::back_inserter(out));
    return sorted;
  }

  // The smallest key `keys` holds twice, if any (sorts `keys`).
  static std::optional<std::string_view> repeated(std::vector<std::string_view>& keys) {
    std::sort(keys.begin(), keys.end());
    for (size_t i = 1; i < keys.size(); ++i)
      if (keys[i] == keys[i - 1]) return keys[i];
    return std::nullopt;
  }

  // ---- meta

  static constexpr std::array<std::string_view, 7> kMetaKeys = {
      "ac_graph_id", "custom", "phase", "recompute", "seq_nr", "stack_trace", "val"};
  enum MetaKey : int { kAcGraphId, kCustom, kPhase, kRecompute, kSeqNr, kStackTrace, kVal };

  // Typed keys into `m` and `val`; any other key, and a typed key's value that its field cannot
  // hold, into `extra` as canonical JSON, sorted by key. Errors: a repeated key first, then the
  // first by key.
  void readMeta(FastSax& s, NodeMeta& m, ValueMeta& val, std::string& extra) {
    if (s.peek() != '{') fail("expected meta to be an object, got " + describeNext(s));
    meta_keys_.clear();
    extras_.clear();
    std::vector<std::pair<std::string_view, Held>> errors;
    bool sorted = true;
    int last = -1;  // the last key's index in kMetaKeys (which is sorted), or -1
    keyedObject(s, kMetaKeys, [&](int i, std::string_view key) {
      if (!meta_keys_.empty() && !(i >= 0 && last >= 0 ? last < i : meta_keys_.back() < key))
        sorted = false;
      last = i;
      meta_keys_.push_back(key);
      Scope at(this, key);
      Slot held;
      hold(s, held, [&] { metaMember(s, i, key, m, val); });
      if (held) errors.emplace_back(key, std::move(*held));
    });
    if (!sorted) {
      if (auto dup = repeated(meta_keys_)) {
        Scope at(this, *dup);
        fail("duplicate key " + quoteForMessage(*dup));
      }
    }
    if (!errors.empty()) {
      const auto first = std::min_element(errors.begin(), errors.end(),
                                          [](auto& a, auto& b) { return a.first < b.first; });
      throw JfxError(first->second.loc, first->second.message);
    }
    if (extras_.empty()) return;
    std::sort(extras_.begin(), extras_.end());
    for (const auto& [key, value] : extras_) {
      extra += extra.empty() ? "{" : ",";
      appendJsonString(extra, key);
      extra += ':';
      extra += value;
    }
    extra += '}';
  }

  void metaMember(FastSax& s, int key, std::string_view name, NodeMeta& m, ValueMeta& val) {
    switch (key) {
      case kAcGraphId:
      case kSeqNr:
        if (FastSax::Number num;
            typedInteger(s, num, key == kAcGraphId ? "the ac_graph_id" : "the seq_nr"))
          (key == kAcGraphId ? m.ac_graph_id : m.seq_nr) = num.i;
        else
          extras_.emplace_back(name, numberText(num));
        return;
      case kCustom:
        custom(s, m);
        return;
      case kPhase: {
        const std::string_view p = str(s, "a phase");
        const auto phase = phaseFromName(p);
        if (!phase || *phase == Phase::Unknown)
          fail("unknown phase " + quoteForMessage(p) + " (expected forward, loss or backward)");
        m.phase = *phase;
        return;
      }
      case kRecompute: {
        const int64_t r = integer(s, "a CheckpointPolicy value");
        if (r < 0 || r > kMaxRecompute)
          fail("recompute must be 0.." + std::to_string(kMaxRecompute) +
               " (CheckpointPolicy), got " + std::to_string(r));
        m.recompute = static_cast<Recompute>(r);
        return;
      }
      case kStackTrace:
        m.stack_trace = str(s, "the stack trace");
        return;
      case kVal:
        readVal(s, val);
        return;
      default:
        extras_.emplace_back(std::string(name), canonicalValue(s));
    }
  }

  // An integer for an OptionalInt64 field (true), or one past what the field holds (false: seq_nr
  // is 2^64-1 on nodes autograd numbers as "none", e.g. a chunked loss's backward), which rides
  // along as extra meta, unchanged: jointfx reads neither beyond its value.
  bool typedInteger(FastSax& s, FastSax::Number& num, std::string_view what) {
    const char c = s.peek();
    if (c != '-' && (c < '0' || c > '9'))
      fail("expected " + std::string(what) + " (an integer), got " + describeNext(s));
    if (!s.numberToken(num)) throw Malformed{};
    if (num.type == JView::Type::Unsigned || num.type == JView::Type::BigInt ||
        (num.type == JView::Type::Int && num.i == OptionalInt64::kReserved))
      return false;
    integerOf(num, what);
    return true;
  }

  // "custom": its "module_fqn" is typed; the rest (or all of it, when the FQN is empty) is extra.
  void custom(FastSax& s, NodeMeta& m) {
    const char* start = s.pos();
    if (s.peek() != '{') {
      extras_.emplace_back("custom", canonicalValue(s));
      return;
    }
    std::string_view fqn;
    std::string fqn_buf;
    bool has_fqn = false;
    Slot held;
    size_t count = 0;
    static constexpr std::array<std::string_view, 1> kFqn = {"module_fqn"};
    keyedObject(s, kFqn, [&](int i, std::string_view) {
      ++count;
      if (i != 0 || has_fqn) {
        skip(s);
        return;
      }
      has_fqn = true;
      Scope at(this, "module_fqn");
      hold(s, held, [&] { fqn = kept(str(s, "the module FQN"), fqn_buf); });
    });
    const std::string_view text(start, static_cast<size_t>(s.pos() - start));
    if (!has_fqn) {
      extras_.emplace_back("custom", canonicalText(text));
      return;
    }
    raise(held);
    if (fqn.empty()) {  // not typed (empty means absent): carried verbatim instead
      extras_.emplace_back("custom", canonicalText(text));
      return;
    }
    // Nodes of one module come together: most FQNs are the last node's. The others have a cache
    // of their own: thousands of them would evict the few targets and devices every node has.
    if (fqn != last_fqn_.str()) last_fqn_ = loader_.moduleFqn(fqn);
    m.module_fqn = last_fqn_;
    if (count == 1) return;
    std::string rest = "{";
    JView v = parseObject(span_tree_, text);
    for (JView c : sortedMembers(v)) {
      if (c.key() == "module_fqn") continue;
      Scope k(this, c.key());
      if (rest.size() > 1) rest += ',';
      appendJsonString(rest, c.key());
      rest += ':';
      canonical(rest, c);
    }
    extras_.emplace_back("custom", rest + "}");
  }

  // The next value as canonical JSON.
  std::string canonicalValue(FastSax& s) {
    const char* start = s.pos();
    skip(s);
    return canonicalText(std::string_view(start, static_cast<size_t>(s.pos() - start)));
  }
  std::string canonicalText(std::string_view text) {
    static const std::string kNoFile;
    span_tree_.parse(text, kNoFile);
    std::string out;
    canonical(out, span_tree_.root());
    return out;
  }

  // ---- value meta

  void readVal(FastSax& s, ValueMeta& v) {
    FastSax::Number num;
    switch (s.peek()) {
      case 'n':
        if (!s.wordToken("null")) throw Malformed{};
        v.kind = ValueMeta::Kind::None;
        return;
      case 't':
      case 'f':
        v.kind = ValueMeta::Kind::Bool;
        v.i = s.peek() == 't';
        if (!s.wordToken(v.i ? "true" : "false")) throw Malformed{};
        return;
      case '[': {
        v.kind = ValueMeta::Kind::List;
        gather(s, val_buffers_, val_depth_, v.items, [&](ValueMeta& item) { readVal(s, item); });
        return;
      }
      case '{':
        tensorOrFloat(s, v);
        return;
      case '"':
        fail("expected a value meta (tensor object, array, null or scalar), got a string");
      default:
        if (!s.numberToken(num)) throw Malformed{};
        if (num.type == JView::Type::Int) {
          v.kind = ValueMeta::Kind::Int;
          v.i = num.i;
        } else if (num.type == JView::Type::Unsigned) {
          integerOf(num, "an integer");
        } else {  // as for arguments
          v.kind = ValueMeta::Kind::Float;
          v.f = num.f;
        }
    }
  }

  // A tensor meta whose text was read before is not parsed again: a graph repeats a few shapes,
  // strides, dtypes and devices. The key is the text up to the first '}', which ends a tensor's
  // object unless a string in it holds one: then it is a prefix, which no earlier object's whole
  // text equals (it would end inside a string), so it misses, and a hit is the same bytes, so
  // the same meta. {"float": ...} alone is a float.
  void tensorOrFloat(FastSax& s, ValueMeta& v) {
    const char* start = s.pos();  // at '{' (readVal peeked it)
    const auto* close =
        static_cast<const char*>(std::memchr(start, '}', static_cast<size_t>(s.end() - start)));
    TensorEntry* e = nullptr;
    if (close) {
      const std::string_view text(start, static_cast<size_t>(close + 1 - start));
      e = &tensor_cache_[std::hash<std::string_view>()(text) % tensor_cache_.size()];
      if (e->text == text) {
        v.kind = ValueMeta::Kind::Tensor;
        v.tensor = e->meta;
        s.rewind(close + 1);
        return;
      }
    }
    std::optional<double> f;
    if (tensor(s, v.tensor, f)) {
      v.kind = ValueMeta::Kind::Tensor;
      if (e && s.pos() == close + 1) *e = {std::string_view(start, s.pos() - start), v.tensor};
    } else {
      v.kind = ValueMeta::Kind::Float;
      v.f = *f;
    }
  }

  // A tensor meta (true), or {"float": ...} alone (false, the float in `f`).
  bool tensor(FastSax& s, TensorMeta& t, std::optional<double>& f) {
    static constexpr std::array<std::string_view, 4> kKeys = {"device", "dtype", "shape", "stride"};
    enum : size_t { kDevice, kDtype, kShape, kStride };
    std::array<Slot, 5> held;
    Slot float_held;
    size_t n = 0;              // members read so far
    bool float_first = false;  // the first member is "float"
    const Read r = members(
        s, kKeys, "a tensor meta", held,
        [&](int key) {
          ++n;
          switch (key) {
            case kDevice: {
              const std::string_view d = str(s, "a device");
              if (last_device_.empty() || d != last_device_.str()) last_device_ = loader_.symbol(d);
              t.device = last_device_;
              return;
            }
            case kDtype:
              t.dtype = dtype(s);
              return;
            case kShape:
              ints(s, t.shape, "the shape");
              return;
            default:
              ints(s, t.stride, "the stride");
          }
        },
        [&](std::string_view key) {
          if (n++ != 0 || key != "float") return false;
          float_first = true;
          hold(s, float_held, [&] { f = special(s); });
          return true;
        });
    if (r.count == 1 && float_first) {
      raise(float_held);
      return false;
    }
    raise(held.back());  // unknown or repeated keys
    required(r, held, kKeys, kDtype, "a tensor meta needs a dtype");
    required(r, held, kKeys, kShape, "a tensor meta needs a shape");
    raise(held[kStride]);
    if (r.has(kStride)) {
      if (t.stride.size() != t.shape.size()) {
        Scope at(this, "stride");
        fail("stride has " + std::to_string(t.stride.size()) + " dimensions but shape has " +
             std::to_string(t.shape.size()));
      }
    } else {
      t.stride = TensorMeta::contiguousStride(t.shape);
    }
    if (std::string problem = t.sizeProblem(); !problem.empty()) {
      Scope at(this, "shape");
      fail(problem);
    }
    raise(held[kDevice]);
    return true;
  }

  void checkTopKey(std::string_view key) {
    static constexpr std::string_view kKeys[] = {"format",  "version",   "process_groups", "inputs",
                                                 "outputs", "constants", "meta",           "nodes"};
    if (std::find(std::begin(kKeys), std::end(kKeys), key) != std::end(kKeys)) return;
    Scope at(this, key);
    fail("unexpected header key " + quoteForMessage(key) +
         " (expected format, version, process_groups, inputs, outputs, constants, meta, "
         "nodes)");
  }

  void checkFormat(std::string_view key, JView v) {
    Scope at(this, key);
    if (key == "format") {
      if (!v.isString() || v.str() != kFormatName) fail("expected \"format\": \"jointfx.graph\"");
    } else {
      if (!v.isInteger()) fail("expected an integer version, got " + std::string(describe(v)));
      if (v.type() != JView::Type::Int || v.integer() != kFormatVersion)
        fail("unsupported format version " + scalarText(v) + " (this reader reads version 1)");
    }
  }

  // Extra meta is stored canonical, so the same content in any key order reads the same.
  void canonical(std::string& out, JView v) {
    try {
      appendCanonical(out, v);
    } catch (const JfxError& e) {
      fail(e.message());
    }
  }

  // An object's members, sorted, in a buffer of the reader's that the next node reuses: a
  // fresh vector per object was a heap allocation per object, many of a node's (bench/README.md,
  // "Figures behind the code"). Objects nest (meta holds custom), so the buffers are a stack; a
  // Members gives its buffer back when it goes.
  class Members {
   public:
    Members(JsonReader* r, const std::vector<JView>* v) : r_(r), v_(v) {}
    ~Members() { --r_->members_depth_; }
    Members(const Members&) = delete;
    Members& operator=(const Members&) = delete;
    std::vector<JView>::const_iterator begin() const { return v_->begin(); }
    std::vector<JView>::const_iterator end() const { return v_->end(); }

   private:
    JsonReader* r_;
    const std::vector<JView>* v_;
  };
  Members sortedMembers(JView obj) {
    if (members_depth_ == members_pool_.size()) members_pool_.emplace_back();
    std::vector<JView>& members = members_pool_[members_depth_];
    if (auto dup = sortMembers(obj, members)) {
      Scope at(this, *dup);
      fail("duplicate key " + quoteForMessage(*dup));
    }
    ++members_depth_;
    return Members(this, &members);
  }

  // ---- typed accessors: each fails with the pointer of the value it was given.

  std::string_view str(JView j, std::string_view what) const {
    if (!j.isString())
      fail("expected " + std::string(what) + " (a string), got " + std::string(describe(j)));
    return j.str();
  }

  int64_t integer(JView j, std::string_view what) const {
    if (j.type() == JView::Type::BigInt)
      fail("integer " + scalarText(j) + " is out of the int64 range");
    if (!j.isInteger())
      fail("expected " + std::string(what) + " (an integer), got " + std::string(describe(j)));
    if (j.type() == JView::Type::Unsigned)
      fail("integer " + scalarText(j) + " is out of the int64 range");
    return j.integer();
  }

  // Read into a DimsScratch and interned, so a shape or stride is read without a heap allocation.
  Dims ints(JView j, std::string_view what) {
    if (!j.isArray())
      fail("expected " + std::string(what) + " (an array of integers), got " +
           std::string(describe(j)));
    DimsScratch out;
    out.reserve(j.size());
    for (JView item : j) {
      if (item.type() != JView::Type::Int) {  // not an int64: fail with the item's place
        Scope at(this, out.size());
        integer(item, "an integer");
      }
      out.push_back(item.integer());
    }
    return Dims(out);
  }

  JView member(JView obj, std::string_view key, std::string_view what) {
    return present(obj.find(key), key, what);
  }

  // `m`, the member named `key` (from find or a Keyed), or the error for a missing key.
  JView present(JView m, std::string_view key, std::string_view what) const {
    if (!m) fail("missing key " + quoteForMessage(key) + " (" + std::string(what) + ")");
    return m;
  }

  // Unknown keys are errors rather than silently dropped: the formats are lossless.
  void onlyKeys(JView obj, std::initializer_list<std::string_view> keys, std::string_view what) {
    unsigned seen = 0;
    for (JView m : obj) {
      auto it = std::find(keys.begin(), keys.end(), m.key());
      if (it != keys.end() && !(seen & (1u << (it - keys.begin())))) {
        seen |= 1u << (it - keys.begin());
        continue;  // the common case: no path step to push for an error that does not come
      }
      Scope at(this, m.key());
      if (it == keys.end()) {
        std::string list;
        for (auto k : keys)
          list += (list.empty() ? "" : ", ") + std::string(k);
        fail("unexpected key " + quoteForMessage(m.key()) + " in " + std::string(what) +
             " (expected " + list + ")");
      }
      unsigned bit = 1u << (it - keys.begin());
      if (seen & bit) fail("duplicate key " + quoteForMessage(m.key()));
      seen |= bit;
    }
  }

  // ---- constants

  // {"name", "dtype", "shape", "device", "data"}: data is the contiguous little-endian bytes in
  // lower-case hex, exactly meta.bytes() of them.
  ConstantInfo constant(JView c) {
    ConstantInfo info;
    {
      Scope k(this, "name");
      info.name = str(member(c, "name", "the get_attr target"), "the constant's name");
      if (g_->findConstant(info.name)) fail("duplicate constant " + quoteForMessage(info.name));
    }
    {
      Scope k(this, "dtype");
      std::string_view s = str(member(c, "dtype", "a constant needs a dtype"), "a dtype name");
      auto d = dtypeFromName(s);
      if (!d) fail("unknown dtype " + quoteForMessage(s));
      info.meta.dtype = *d;
    }
    {
      Scope k(this, "shape");
      info.meta.shape = ints(member(c, "shape", "a constant needs a shape"), "the shape");
      info.meta.stride = TensorMeta::contiguousStride(info.meta.shape);
    }
    if (JView d = c.find("device")) {
      Scope k(this, "device");
      info.meta.device = Symbol::intern(str(d, "a device"));
    }
    Scope k(this, "data");
    if (!decodeHex(str(member(c, "data", "the constant's bytes in hex"), "hex bytes"), info.data))
      fail("expected lower-case hex digits (two per byte)");
    if (std::string e = constantSizeProblem(info); !e.empty()) fail(e);
    return info;
  }

  // ---- header

  void header(JView doc) {
    // Already checked while streaming when present; here only whether they are missing.
    for (std::string_view key : {"format", "version"}) {
      if (!doc.find(key))
        fail("missing key " + quoteForMessage(key) + " (expected " +
             (key == "format" ? "\"format\": \"jointfx.graph\"" : "\"version\": 1") + ")");
    }
    JView nodes = doc.find("nodes");
    if (!nodes) fail("missing key 'nodes'");
    if (!nodes.isArray()) {
      Scope at(this, "nodes");
      fail("expected nodes to be an array, got " + std::string(describe(nodes)));
    }
    onlyKeys(
        doc,
        {"format", "version", "process_groups", "inputs", "outputs", "constants", "meta", "nodes"},
        "the header");
    if (JView list = doc.find("process_groups")) processGroups(list);
    if (JView list = doc.find("inputs")) inputs(list);
    if (JView list = doc.find("outputs")) outputs(list);
    if (JView list = doc.find("constants")) constants(list);
    if (JView meta = doc.find("meta")) {
      Scope at(this, "meta");
      if (!meta.isObject())
        fail("expected meta to be an object, got " + std::string(describe(meta)));
      if (!meta.empty()) canonical(g_->extraJson(), meta);
      registerOpSchemas(g_->extraJson(), where());
    }
  }

  void processGroups(JView list) {
    Scope at(this, "process_groups");
    if (!list.isArray())
      fail("expected an array of process groups, got " + std::string(describe(list)));
    size_t i = 0;
    for (JView pg : list) {
      Scope item(this, i++);
      if (!pg.isObject()) fail("expected a process group object, got " + std::string(describe(pg)));
      onlyKeys(pg, {"name", "ranks", "size"}, "a process group");
      ProcessGroupInfo info;
      {
        Scope k(this, "name");
        info.name = str(member(pg, "name", "the group_name collectives carry"), "the group name");
        if (g_->findProcessGroup(info.name))
          fail("duplicate process group " + quoteForMessage(info.name));
      }
      {
        Scope k(this, "size");
        info.size = integer(member(pg, "size", "the group size"), "the group size");
      }
      if (JView r = pg.find("ranks")) {
        Scope k(this, "ranks");
        info.ranks = ints(r, "the ranks");
      }
      g_->processGroups().push_back(std::move(info));
    }
  }

  void inputs(JView list) {
    Scope at(this, "inputs");
    if (!list.isArray()) fail("expected an array of inputs, got " + std::string(describe(list)));
    size_t i = 0;
    for (JView in : list) {
      Scope item(this, i++);
      if (!in.isObject()) fail("expected an input object, got " + std::string(describe(in)));
      onlyKeys(in, {"fqn", "kind", "name"}, "an input");
      Node* n = nullptr;
      {
        Scope k(this, "name");
        std::string_view name = str(member(in, "name", "the placeholder's name"), "a name");
        n = g_->findNode(name);
        if (!n) fail("input " + quoteForMessage(name) + " names no node");
        if (n->op() != OpKind::Placeholder)
          fail("input " + quoteForMessage(name) + " is not a placeholder");
      }
      InputKind kind;
      {
        Scope k(this, "kind");
        std::string_view s =
            str(member(in, "kind", "parameter, buffer, user_input, mesh or opaque"), "a kind");
        auto ik = inputKindFromName(s);
        if (!ik)
          fail("unknown input kind " + quoteForMessage(s) +
               " (expected parameter, buffer, user_input, mesh, opaque)");
        kind = *ik;
      }
      std::string fqn;
      if (JView f = in.find("fqn")) {
        Scope k(this, "fqn");
        fqn = str(f, "the FQN");
      }
      n->setInputInfo(kind, std::move(fqn));
    }
  }

  void outputs(JView list) {
    Scope at(this, "outputs");
    if (!list.isArray()) fail("expected an array of outputs, got " + std::string(describe(list)));
    size_t i = 0;
    for (JView out : list) {
      Scope item(this, i++);
      if (!out.isObject()) fail("expected an output object, got " + std::string(describe(out)));
      onlyKeys(out, {"fqn", "kind"}, "an output");
      OutputSpec spec;
      {
        Scope k(this, "kind");
        std::string_view s =
            str(member(out, "kind", "loss, gradient, buffer_mutation, other, mesh or opaque"),
                "a kind");
        auto ok = outputKindFromName(s);
        if (!ok)
          fail("unknown output kind " + quoteForMessage(s) +
               " (expected loss, gradient, buffer_mutation, other, mesh, opaque)");
        spec.kind = *ok;
      }
      if (JView f = out.find("fqn")) {
        Scope k(this, "fqn");
        spec.fqn = str(f, "the FQN");
      }
      g_->outputSpecs().push_back(std::move(spec));
    }
  }

  void constants(JView list) {
    Scope at(this, "constants");
    if (!list.isArray()) fail("expected an array of constants, got " + std::string(describe(list)));
    size_t i = 0;
    for (JView c : list) {
      Scope item(this, i++);
      if (!c.isObject()) fail("expected a constant object, got " + std::string(describe(c)));
      onlyKeys(c, {"data", "device", "dtype", "name", "shape"}, "a constant");
      g_->constants().push_back(constant(c));
    }
  }

  [[noreturn]] void badReference() {
    const BadRef& b = *bad_ref_;
    std::optional<uint32_t> later;
    if (bad_ref_defined_at_) later = static_cast<uint32_t>(*bad_ref_defined_at_);
    loader_.unresolved(b.target, b.loc, later, later && *later == b.node_index);
  }

  struct BadRef {
    SourceLocation loc;
    std::string target;
    size_t node_index;
  };
  static constexpr uint32_t kNone = std::numeric_limits<uint32_t>::max();

  struct BadRefAt {  // findBadReference's operands not found, in the file's order
    SourceLocation loc;
    std::string target;
    bool in_kwargs;
    Symbol kwarg;
  };

  GraphLoader loader_;
  Graph* g_;
  uint32_t nodes_array_ = kNone;                 // index of the open "nodes" array
  std::deque<std::vector<JView>> members_pool_;  // sortedMembers' buffers (a deque: they stay put)
  size_t members_depth_ = 0;                     // how many are lent out
  size_t node_index_ = 0;
  std::optional<BadRef> bad_ref_;
  std::optional<size_t> bad_ref_defined_at_;
  std::vector<std::string_view> pending_;  // operands read, not yet looked up
  bool resolve_now_ = false;               // findBadReference's second reading
  std::vector<BadRefAt> bad_refs_;
  bool in_kwargs_ = false;  // nodeRef is in kwargs,
  Symbol kwarg_;            // under this key
  std::string target_buf_;
  std::vector<std::string_view> meta_keys_;                  // readMeta's keys
  std::vector<std::pair<std::string, std::string>> extras_;  // and its extra meta
  TreeBuilder span_tree_;                                    // canonicalText's
  Symbol last_fqn_;
  Symbol last_device_;                             // tensor()'s last device,
  ScalarType last_dtype_ = ScalarType::Undefined;  // dtype
  std::string_view last_dtype_name_;               // and its name (dtypeName's, or empty)
  struct TensorEntry {
    std::string_view text;  // in the input
    TensorMeta meta;
  };
  std::vector<TensorEntry> tensor_cache_ = std::vector<TensorEntry>(1024);  // tensorOrFloat's
  // gather's buffers for list and readVal.
  std::deque<std::vector<Arg>> arg_buffers_;
  size_t list_depth_ = 0;
  std::deque<std::vector<ValueMeta>> val_buffers_;
  size_t val_depth_ = 0;
  Kwargs kwargs_buffer_;
};

}  // namespace
}  // namespace json_detail

using namespace json_detail;

namespace {

// Reads a text the fast tokenizer stopped on with nlohmann's parser, only to report what is wrong
// as nlohmann says it (its message and byte offset). Each value two containers deep (a node) is
// dropped once read, so memory stays proportional to one node.
class SyntaxCheck : public TreeBuilder {
 public:
  SyntaxCheck() : TreeBuilder(Tokenizer::Nlohmann) { hook_depth_ = 2; }

 private:
  void added(uint32_t index) override {
    if (stack_.size() != 2) return;
    start_ = index;
    chars_ = static_cast<uint32_t>(tree_.chars.size());
  }
  void completed(uint32_t index) override {
    if (stack_.size() == 2 && index == start_) truncate(start_, chars_);
  }
  uint32_t start_ = 0, chars_ = 0;
};

}  // namespace

std::unique_ptr<Graph> readJsonGraph(std::string_view text, const std::string& filename) {
  return readJsonInto(text, filename, nullptr);
}

bool fastJsonTokenizerAccepts(std::string_view text) {
  TreeBuilder b;
  try {
    return FastSax(text, b).run();
  } catch (const JfxError&) {
    return false;  // the builder's own limits (nesting, size)
  }
}

std::unique_ptr<Graph> readJsonInto(std::string_view text, const std::string& filename,
                                    std::unique_ptr<Graph> g) {
  try {
    return JsonReader(text, filename, std::move(g)).read();
  } catch (const ReadAgainWithNlohmann&) {
    // The fast tokenizer stopped on text it does not accept: nlohmann says what is wrong, as it
    // always has. A text ends just past its first NUL byte (readInputFile's rule; a mapped file
    // is handed over whole, and the fast tokenizer always stops at a NUL byte).
    const size_t nul = text.find('\0');
    if (nul != std::string_view::npos) text = text.substr(0, nul + 1);
    SyntaxCheck().parse(text, filename);
    // nlohmann takes a NUL byte for the end of its input, so a document followed by one passes.
    if (nul != std::string_view::npos) nulByteError(text, nul, filename);
    throw std::logic_error("JSON reader: nlohmann accepts a text the fast tokenizer does not");
  }
}

}  // namespace jfx
