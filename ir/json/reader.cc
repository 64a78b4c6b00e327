// The JSON reader (docs/graph-format.md): nodes are read as the tokenizer delivers them.
#include "ir/json/tokenizer.h"
#include "ir/loader.h"

namespace jfx {

namespace json_detail {
namespace {

// ------------------------------------------------------------------------------------ reader

// Reads the document with nlohmann's SAX parser into a JsonTree and turns each element of
// "nodes" into a Node as soon as it is complete, then drops it from the tree: memory stays
// proportional to one node, not to the file. The header is small and read at the end.
class JsonReader : public TreeBuilder, public NodeSite {
 public:
  // `into`: a graph whose nodes were built already (readJsonInto); the document's nodes are
  // appended to it and its header applies to all of them.
  JsonReader(std::string_view text, const std::string& filename, Tokenizer tokenizer,
             std::unique_ptr<Graph> into = nullptr)
      : TreeBuilder(tokenizer, /*restartable=*/false),
        text_(text),
        filename_(filename),
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
      direct_parent_ = index;
    } else if (stack_.size() == 2 && stack_[1] == nodes_array_) {
      // A new element of "nodes": remember where it starts so it can be dropped once read.
      node_start_ = index;
      node_chars_ = static_cast<uint32_t>(tree_.chars.size());
    }
  }

  // Format and version are checked as soon as they are read, so a wrong version is reported
  // before any node; a node is read as soon as it is complete, then dropped from the tree.
  void completed(uint32_t index) override {
    if (index == nodes_array_) {
      loader_.claimPending();
      nodes_array_ = kNone;
      direct_parent_ = kNoDirect;
    } else if (stack_.size() == 1) {
      JView v(&tree_, index);
      if (v.key() == "format" || v.key() == "version") checkFormat(v.key(), v);
    } else if (stack_.size() == 2 && stack_[1] == nodes_array_) {
      Scope nodes(this, "nodes");
      Scope at(this, node_index_);
      node(JView(&tree_, index));
      node_name_.clear();
      ++node_index_;
      truncate(node_start_, node_chars_);
    }
  }

  // ---- nodes read straight from the text
  //
  // A node in the shape the writer gives it (and PyTorch's graphs have: operands, scalars,
  // lists, dtypes, devices, tensor metas, phase, seq_nr, module FQN) is read from the tokens,
  // without the tree: the tree and the lookups in it were a large part of loading a graph
  // (bench/README.md, "Figures behind the code"). On anything else (another key, an escaped name,
  // an error of any kind) readDirect gives up before changing the graph and the tree reads the node
  // as before, so every error message and every unusual node is the tree path's. Both paths give
  // the same graph: the fuzzer and the tokenizer tests compare them with the nlohmann tokenizer's,
  // which never reads directly.

  bool readDirect(FastSax& s) override {
    if (bad_ref_) return false;  // the tree path then only looks for the name's definition
    const char* start = s.pos();
    pending_.clear();
    const bool read = directNode(s);
    node_name_.clear();
    if (!read) {
      s.rewind(start);
      loader_.claimPending();  // the tree path reads this node against the whole index
      return false;
    }
    ++node_index_;
    ++direct_nodes_;
    return true;
  }

  // Reads "{...}": f(key) reads each member's value; false from f gives up.
  template <class F>
  static bool directObject(FastSax& s, F&& f) {
    if (!s.eat('{')) return false;
    if (s.peek() == '}') return s.advance();
    for (;;) {
      std::string_view key;
      if (!s.stringToken(key) || !s.eat(':') || !f(key)) return false;
      const char c = s.take();
      if (c == '}') return true;
      if (c != ',') return false;
    }
  }
  // Reads "{...}" whose keys are some of `keys`, each once (bit i of `seen`): f(i) reads the
  // value of keys[i], f(-1) is called for any other key. The writer sorts keys, so the key after
  // the last one seen is tried first, against the text itself.
  template <size_t N, class F>
  static bool directMembers(FastSax& s, const std::array<std::string_view, N>& keys, unsigned& seen,
                            F&& f) {
    if (!s.eat('{')) return false;
    if (s.peek() == '}') return s.advance();
    for (;;) {
      const auto next = static_cast<size_t>(std::bit_width(seen));
      int i = -1;
      if (next < N && s.quotedKey(keys[next])) {
        seen |= 1u << next;
        i = static_cast<int>(next);
      } else {
        std::string_view key;
        if (!s.stringToken(key)) return false;
        i = directKey(key, keys, seen);
      }
      if (!s.eat(':') || !f(i)) return false;
      const char c = s.take();
      if (c == '}') return true;
      if (c != ',') return false;
    }
  }
  // Reads "[...]": f() reads each element.
  template <class F>
  static bool directArray(FastSax& s, F&& f) {
    if (!s.eat('[')) return false;
    if (s.peek() == ']') return s.advance();
    for (;;) {
      if (!f()) return false;
      const char c = s.take();
      if (c == ']') return true;
      if (c != ',') return false;
    }
  }
  // Which of `keys` `key` is, once each (bit i of `seen`), or -1. The writer sorts keys, so the
  // search starts after the last key seen.
  template <size_t N>
  static int directKey(std::string_view key, const std::array<std::string_view, N>& keys,
                       unsigned& seen) {
    const size_t next = static_cast<size_t>(std::bit_width(seen));
    for (size_t j = 0; j < N; ++j) {
      const size_t i = (next + j) % N;
      if (keys[i].size() != key.size() || keys[i][0] != key[0] ||
          !std::equal(key.begin(), key.end(), keys[i].begin()))
        continue;
      if (seen & (1u << i)) return -1;
      seen |= 1u << i;
      return static_cast<int>(i);
    }
    return -1;
  }
  // `v` (a token just read) as it stays valid: the text's own bytes, or a copy in `buf`.
  bool inText(std::string_view v) const {
    const auto p = reinterpret_cast<uintptr_t>(v.data());
    const auto b = reinterpret_cast<uintptr_t>(text_.data());
    return p >= b && p - b <= text_.size() && v.size() <= text_.size() - (p - b);
  }
  std::string_view kept(std::string_view v, std::string& buf) const {
    if (inText(v)) return v;
    buf.assign(v);
    return buf;
  }

  bool directNode(FastSax& s) {
    static constexpr std::array<std::string_view, 6> kKeys = {"args", "kwargs", "meta",
                                                              "name", "op",     "target"};
    std::vector<Arg> args;
    Kwargs kwargs;
    ValueMeta val;
    NodeMeta meta;
    std::optional<OpKind> op;
    std::string_view target;
    unsigned seen = 0;                      // bit i: kKeys[i] was read
    size_t args_refs = 0, kwargs_refs = 0;  // where their operands' names start in pending_
    const bool ok = directMembers(s, kKeys, seen, [&](int key) {
      std::string_view str;
      switch (key) {
        case 0:
          args_refs = pending_.size();
          return directList(s, args, 0);
        case 1:
          kwargs_refs = pending_.size();
          return directKwargs(s, kwargs);
        case 2:
          return directMeta(s, meta, val);
        case 3:
          if (!s.stringToken(str) || str.empty()) return false;
          node_name_ = str;
          loader_.announce(node_name_);
          return true;
        case 4:
          return s.stringToken(str) && (op = opKindFromName(str)).has_value();
        case 5:
          if (!s.stringToken(str)) return false;
          target = kept(str, target_buf_);
          return true;
        default:
          return false;
      }
    });
    constexpr unsigned kRequired = 1u << 3 | 1u << 4 | 1u << 5;  // name, op, target
    if (!ok || (seen & kRequired) != kRequired) return false;
    // Operands are looked up once the whole node is read: their index slots, prefetched as
    // their names were read, have had the meta's reading to arrive.
    if (!resolvePending(args, args_refs) || !resolvePending(kwargs, kwargs_refs)) return false;
    // A node that breaks a rule is left to the tree path, which reports it.
    if (!GraphLoader::followsRules(*op, target, !args.empty(), !kwargs.empty())) return false;
    const Symbol sym =
        *op == OpKind::CallFunction ? loader_.symbol(target) : Symbol::intern(target);
    Node* n = loader_.define(*op, sym, std::move(args), std::move(kwargs), node_name_,
                             static_cast<uint32_t>(node_index_), GraphLoader::Claim::Late);
    n->val() = std::move(val);
    n->meta() = std::move(meta);
    return true;
  }

  // Operands are looked up once the node is read, after prefetching each one's index slot as
  // it is read (prefetchOperands does the same on the tree path).
  bool directNodeRef(FastSax& s, Arg& out) {
    std::string_view name;
    if (!s.stringToken(name) || !inText(name)) return false;  // kept in pending_ as a view
    loader_.expectOperand(name);
    pending_.push_back(name);
    out = Arg::ofNode(nullptr);
    return true;
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
    return ok;  // an undefined operand: the tree path reports it
  }

  bool directArg(FastSax& s, Arg& out, int depth) {
    std::string_view str;
    switch (s.peek()) {
      case '"':
        if (!s.stringToken(str)) return false;
        out = Arg::ofStr(loader_.symbol(str));
        return true;
      case 't':
        out = Arg::ofBool(true);
        return s.wordToken("true");
      case 'f':
        out = Arg::ofBool(false);
        return s.wordToken("false");
      case 'n':
        out = Arg::none();
        return s.wordToken("null");
      case '[': {
        std::vector<Arg> items;
        if (!directList(s, items, depth + 1)) return false;
        out = Arg::ofList(std::move(items));
        return true;
      }
      case '{':
        return directBoxed(s, out, depth);
      default: {
        FastSax::Number num;
        if (!s.numberToken(num) || num.type == JView::Type::Unsigned) return false;
        out = num.type == JView::Type::Float ? Arg::ofFloat(num.f) : Arg::ofInt(num.i);
        return true;
      }
    }
  }

  // Every boxed argument but {"opaque": ...}, which is left to the tree path.
  bool directBoxed(FastSax& s, Arg& out, int depth) {
    std::string_view key, str;
    if (!s.eat('{') || !s.stringToken(key) || !s.eat(':')) return false;
    if (key == "node") {
      if (!directNodeRef(s, out)) return false;
    } else if (key == "dtype") {
      if (!s.stringToken(str)) return false;
      const auto t = dtypeFromName(str);
      if (!t) return false;
      out = Arg::ofDtype(*t);
    } else if (key == "device") {
      if (!s.stringToken(str)) return false;
      out = Arg::ofDevice(loader_.symbol(str));
    } else if (key == "layout") {
      if (!s.stringToken(str)) return false;
      out = Arg::ofLayout(loader_.symbol(str));
    } else if (key == "memory_format") {
      if (!s.stringToken(str)) return false;
      out = Arg::ofMemoryFormat(loader_.symbol(str));
    } else if (key == "float") {
      if (!s.stringToken(str)) return false;
      if (str == "inf")
        out = Arg::ofFloat(std::numeric_limits<double>::infinity());
      else if (str == "-inf")
        out = Arg::ofFloat(-std::numeric_limits<double>::infinity());
      else if (str == "nan")
        out = Arg::ofFloat(std::numeric_limits<double>::quiet_NaN());
      else
        return false;
    } else if (key == "tuple") {
      std::vector<Arg> items;
      if (!directList(s, items, depth + 1)) return false;
      out = Arg::ofTuple(std::move(items));
    } else {
      return false;
    }
    return s.eat('}');  // exactly one key
  }

  // A list of arguments `depth` lists deep, gathered in a buffer of the reader's so the list
  // is allocated once, at its size (a vector grown item by item made loading exceed three heap
  // allocations per node).
  bool directList(FastSax& s, std::vector<Arg>& out, int depth) {
    if (depth >= kDirectDepth) return false;
    std::vector<Arg>& items = arg_buffers_[static_cast<size_t>(depth)];
    items.clear();
    if (!directArray(s, [&] { return directArg(s, items.emplace_back(), depth); })) return false;
    out.reserve(items.size());
    std::move(items.begin(), items.end(), std::back_inserter(out));
    return true;
  }

  // Kwargs in the IR's order (sorted by key, as the writer gives them); others go the tree path.
  bool directKwargs(FastSax& s, Kwargs& out) {
    kwargs_buffer_.clear();
    const bool ok = directObject(s, [&](std::string_view key) {
      const Symbol k = loader_.symbol(key);
      if (!kwargs_buffer_.empty() && !(kwargs_buffer_.back().first.str() < k.str())) return false;
      return directArg(s, kwargs_buffer_.emplace_back(k, Arg()).second, 0);
    });
    if (!ok) return false;
    out.reserve(kwargs_buffer_.size());
    std::move(kwargs_buffer_.begin(), kwargs_buffer_.end(), std::back_inserter(out));
    return true;  // its operands are resolved with the node's (directNode)
  }

  bool directMeta(FastSax& s, NodeMeta& m, ValueMeta& val) {
    static constexpr std::array<std::string_view, 7> kKeys = {
        "ac_graph_id", "custom", "phase", "recompute", "seq_nr", "stack_trace", "val"};
    unsigned seen = 0;
    return directMembers(s, kKeys, seen, [&](int key) {
      std::string_view str;
      FastSax::Number num;
      switch (key) {
        case 0:
          if (!s.numberToken(num) || num.type != JView::Type::Int ||
              num.i == OptionalInt64::kReserved)
            return false;  // the tree path says why
          m.ac_graph_id = num.i;
          return true;
        case 1: {  // {"module_fqn": "..."} alone; anything more is extra meta
          unsigned custom_seen = 0;
          static constexpr std::array<std::string_view, 1> kFqn = {"module_fqn"};
          return directMembers(s, kFqn, custom_seen,
                               [&](int k) {
                                 if (k != 0 || !s.stringToken(str) || str.empty()) return false;
                                 // Nodes of one module come together: most FQNs are the last
                                 // node's. The others have a cache of their own: thousands of
                                 // them would evict the few targets and devices every node has.
                                 if (str != last_fqn_.str()) last_fqn_ = loader_.moduleFqn(str);
                                 m.module_fqn = last_fqn_;
                                 return true;
                               }) &&
                 custom_seen == 1;
        }
        case 2: {
          if (!s.stringToken(str)) return false;
          const auto p = phaseFromName(str);
          if (!p || *p == Phase::Unknown) return false;
          m.phase = *p;
          return true;
        }
        case 3:
          if (!s.numberToken(num) || num.type != JView::Type::Int || num.i < 0 || num.i > 3)
            return false;
          m.recompute = static_cast<Recompute>(num.i);
          return true;
        case 4:
          if (!s.numberToken(num) || num.type != JView::Type::Int ||
              num.i == OptionalInt64::kReserved)
            return false;
          m.seq_nr = num.i;
          return true;
        case 5:
          if (!s.stringToken(str)) return false;
          m.stack_trace = str;
          return true;
        case 6:
          return directVal(s, val, 0);
        default:
          return false;
      }
    });
  }

  bool directVal(FastSax& s, ValueMeta& v, int depth) {
    FastSax::Number num;
    switch (s.peek()) {
      case 'n':
        v.kind = ValueMeta::Kind::None;
        return s.wordToken("null");
      case 't':
      case 'f':
        v.kind = ValueMeta::Kind::Bool;
        v.i = s.peek() == 't';
        return s.wordToken(v.i ? "true" : "false");
      case '[': {
        if (depth >= kDirectDepth) return false;
        v.kind = ValueMeta::Kind::List;
        std::vector<ValueMeta>& items = val_buffers_[static_cast<size_t>(depth)];
        items.clear();
        if (!directArray(s, [&] { return directVal(s, items.emplace_back(), depth + 1); }))
          return false;
        v.items.reserve(items.size());
        std::move(items.begin(), items.end(), std::back_inserter(v.items));
        return true;
      }
      case '{':
        v.kind = ValueMeta::Kind::Tensor;
        return cachedTensor(s, v.tensor);
      case '"':
        return false;
      default:
        if (!s.numberToken(num) || num.type == JView::Type::Unsigned) return false;
        if (num.type == JView::Type::Float) {
          v.kind = ValueMeta::Kind::Float;
          v.f = num.f;
        } else {
          v.kind = ValueMeta::Kind::Int;
          v.i = num.i;
        }
        return true;
    }
  }

  // A tensor meta whose text was read before is not parsed again: a graph repeats a few shapes,
  // strides, dtypes and devices (formatting their numbers was a large part of reading a value;
  // bench/README.md, "Figures behind the code"). The key is the text up to the first '}', which
  // ends a tensor's object unless a string in it holds one: then it is a prefix, which no earlier
  // object's whole text equals (it would end inside a string), so it misses, and a hit is the same
  // bytes, so the same meta.
  bool cachedTensor(FastSax& s, TensorMeta& t) {
    const char* start = s.pos();  // at '{' (directVal peeked it)
    const auto* close =
        static_cast<const char*>(std::memchr(start, '}', static_cast<size_t>(s.end() - start)));
    if (!close) return directTensor(s, t);
    const std::string_view text(start, static_cast<size_t>(close + 1 - start));
    TensorEntry& e = tensor_cache_[std::hash<std::string_view>()(text) % tensor_cache_.size()];
    if (e.text == text) {
      t = e.meta;
      s.rewind(close + 1);
      return true;
    }
    if (!directTensor(s, t)) return false;
    if (s.pos() == close + 1) e = {text, t};  // the input outlives the reader
    return true;
  }

  bool directTensor(FastSax& s, TensorMeta& t) {
    static constexpr std::array<std::string_view, 4> kKeys = {"device", "dtype", "shape", "stride"};
    unsigned seen = 0;
    const bool ok = directMembers(s, kKeys, seen, [&](int key) {
      std::string_view str;
      switch (key) {
        case 0:
          if (!s.stringToken(str)) return false;
          // A graph's tensors mostly share one device and a few dtypes: the last one is
          // compared before anything is hashed or searched.
          if (last_device_.empty() || str != last_device_.str()) last_device_ = loader_.symbol(str);
          t.device = last_device_;
          return true;
        case 1: {
          if (!s.stringToken(str)) return false;
          if (last_dtype_name_.empty() || str != last_dtype_name_) {
            const auto d = dtypeFromName(str);
            if (!d) return false;
            last_dtype_ = *d;
            // Canonical names only: an alias ("torch.float", "half") is looked up each time.
            last_dtype_name_ = str == dtypeName(*d) ? dtypeName(*d) : std::string_view();
          }
          t.dtype = last_dtype_;
          return true;
        }
        case 2:
          return directInts(s, t.shape);
        case 3:
          return directInts(s, t.stride);
        default:
          return false;
      }
    });
    // dtype and shape are required; a stride has the shape's rank.
    if (!ok || (seen & 6u) != 6u) return false;
    if (!(seen & 8u))
      t.stride = TensorMeta::contiguousStride(t.shape);
    else if (t.stride.size() != t.shape.size())
      return false;
    return t.sizeProblem().empty();
  }

  bool directInts(FastSax& s, Dims& out) {
    DimsScratch dims;
    const bool ok = directArray(s, [&] {
      FastSax::Number num;
      if (!s.numberToken(num) || num.type != JView::Type::Int) return false;
      dims.push_back(num.i);
      return true;
    });
    if (ok) out = Dims(dims);
    return ok;
  }

  // Deeper nesting of argument lists or values than this is read by the tree path.
  static constexpr int kDirectDepth = 16;

  // ---- locations

  // One step of the JSON pointer to the value being read, kept as a stack and only rendered when
  // an error needs it.
  struct Step {
    std::string_view key;
    size_t index = 0;
    bool is_key = false;
  };
  class Scope {
   public:
    Scope(JsonReader* r, std::string_view key) : r_(r) { r_->push({key, 0, true}); }
    Scope(JsonReader* r, size_t index) : r_(r) { r_->push({{}, index, false}); }
    ~Scope() { --r_->depth_; }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    JsonReader* r_;
  };

  // A fixed array, not a vector: steps are pushed and popped a few dozen times per node, and a
  // vector's emplace_back is an out-of-line call each time (bench/README.md, "Figures behind the
  // code"). Steps past the array (deeper than any document may nest) are counted, not kept.
  static constexpr size_t kMaxPath = kMaxNesting + 8;
  void push(const Step& s) {
    if (depth_ < kMaxPath) path_[depth_] = s;
    ++depth_;
  }

  std::string pointer() const {
    std::string p;
    for (size_t i = 0; i < std::min(depth_, kMaxPath); ++i) {
      const Step& s = path_[i];
      p += '/';
      if (!s.is_key) {
        p += std::to_string(s.index);
        continue;
      }
      for (char c : s.key) {  // RFC 6901 escaping
        if (c == '~')
          p += "~0";
        else if (c == '/')
          p += "~1";
        else
          p += c;
      }
    }
    return p;
  }

  SourceLocation where() const {
    SourceLocation loc;
    loc.file = filename_;
    loc.json_pointer = pointer();
    if (loc.json_pointer.empty() && !loc.file.empty()) loc.json_pointer = "/";
    loc.node = node_name_;
    return loc;
  }

  [[noreturn]] void fail(const std::string& message) const { throw JfxError(where(), message); }

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
    auto begin() const { return v_->begin(); }
    auto end() const { return v_->end(); }

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

  // An integer for an OptionalInt64 field, which cannot hold INT64_MIN.
  int64_t optionalInteger(JView j, std::string_view what) {
    const int64_t i = integer(j, what);
    if (i == OptionalInt64::kReserved)
      fail(std::string(what) + " " + std::to_string(i) +
           " is out of range (INT64_MIN is reserved)");
    return i;
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

  // An object's members under a fixed list of keys, found in one pass: at[i] is the first member
  // named keys[i] (or empty); `bad` says whether a member is one onlyKeys rejects. The caller reads
  // members from `at` and calls onlyKeys where it always did if `bad` is set, so errors and their
  // order stay as they were; a find() per key plus onlyKeys compared each key about 8 times.
  template <size_t N>
  struct Keyed {
    std::array<JView, N> at{};
    bool bad = false;
  };
  template <size_t N>
  static Keyed<N> keyed(JView obj, const std::array<std::string_view, N>& keys) {
    Keyed<N> out;
    for (JView m : obj) {
      const std::string_view k = m.key();
      size_t i = 0;
      while (i < N && keys[i] != k)
        ++i;
      if (i == N || out.at[i])
        out.bad = true;
      else
        out.at[i] = m;
    }
    return out;
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

  // ---- nodes

  void node(JView j) {
    if (!j.isObject()) fail("expected a node object, got " + std::string(describe(j)));
    static constexpr std::array<std::string_view, 6> kKeys = {"args", "kwargs", "meta",
                                                              "name", "op",     "target"};
    const Keyed<6> k = keyed(j, kKeys);
    {
      Scope at(this, "name");
      std::string_view name =
          str(present(k.at[3], "name", "every node has a name"), "the node name");
      loader_.checkName(name, static_cast<uint32_t>(node_index_));
      node_name_ = name;
      loader_.announce(node_name_);
    }
    if (bad_ref_) {
      // An earlier node referred to a name not yet defined: only look for where it is defined.
      if (!bad_ref_defined_at_ && node_name_ == bad_ref_->target) bad_ref_defined_at_ = node_index_;
      return;
    }
    if (k.bad) onlyKeys(j, {"args", "kwargs", "meta", "name", "op", "target"}, "a node");
    prefetchOperands(k.at[0]);

    const OpKind op = nodeOp(k.at[4]);
    const Symbol target = nodeTarget(k.at[5], op);
    std::vector<Arg> args = nodeArgs(k.at[0]);
    Kwargs kwargs = nodeKwargs(k.at[1]);
    if (bad_ref_) return;
    const auto pos = static_cast<uint32_t>(node_index_);
    loader_.checkNoArguments(op, !args.empty(), !kwargs.empty(), pos);
    Node* n = loader_.define(op, target, std::move(args), std::move(kwargs), node_name_, pos);
    if (JView m = k.at[2]) {
      Scope at(this, "meta");
      meta(m, n);
    }
  }

  // The kind named by the node's "op" member (`op`, empty when the node has none).
  OpKind nodeOp(JView op) {
    Scope at(this, "op");
    std::string_view s =
        str(present(op, "op", "placeholder, call_function, get_attr or output"), "the op kind");
    auto k = opKindFromName(s);
    if (!k)
      fail("unknown op kind " + quoteForMessage(s) +
           " (expected placeholder, call_function, get_attr, output)");
    return *k;
  }

  Symbol nodeTarget(JView target, OpKind op) {
    Scope at(this, "target");
    std::string_view s = str(present(target, "target", "the op's target"), "the target");
    loader_.checkTarget(op, s, static_cast<uint32_t>(node_index_));
    // A placeholder's target is its own name: caching it would only evict the op targets.
    return op == OpKind::CallFunction ? loader_.symbol(s) : Symbol::intern(s);
  }

  std::vector<Arg> nodeArgs(JView a) {
    std::vector<Arg> args;
    if (!a) return args;
    Scope at(this, "args");
    if (!a.isArray()) fail("expected args to be an array, got " + std::string(describe(a)));
    args.reserve(a.size());
    for (JView item : a) {
      Scope k(this, args.size());
      args.push_back(arg(item));
    }
    return args;
  }

  Kwargs nodeKwargs(JView kw) {
    Kwargs kwargs;
    if (!kw) return kwargs;
    Scope at(this, "kwargs");
    if (!kw.isObject()) fail("expected kwargs to be an object, got " + std::string(describe(kw)));
    kwargs.reserve(kw.size());
    for (JView m : sortedMembers(kw)) {  // the IR keeps kwargs sorted, as the printers do
      Scope k(this, m.key());
      kwargs.emplace_back(loader_.symbol(m.key()), arg(m));
    }
    return kwargs;
  }

  // Operands name nodes defined anywhere before (a backward node reads a forward activation
  // from half a graph back), so resolving one is often a cache miss in the name index; starting
  // them all before the arguments are read overlaps those misses with each other.
  void prefetchOperands(JView args) {
    if (!args || !args.isArray()) return;
    auto one = [&](JView item) {
      if (!item.isObject() || item.size() != 1) return;
      JView v = *item.begin();
      if (v.key() != "node" || !v.isString()) return;
      loader_.expectOperand(v.str());
    };
    for (JView item : args) {
      if (item.isArray())  // a list of tensors (cat, stack, a bucket's split)
        for (JView inner : item)
          one(inner);
      else
        one(item);
    }
  }

  Arg arg(JView j) {
    switch (j.type()) {
      case JView::Type::Null:
        return Arg::none();
      case JView::Type::Bool:
        return Arg::ofBool(j.boolean());
      case JView::Type::Int:
      case JView::Type::Unsigned:
        return Arg::ofInt(integer(j, "an integer"));
      case JView::Type::BigInt:  // no op takes an integer past 64 bits: the double it reads as
      case JView::Type::Float:
        return Arg::ofFloat(j.floating());
      case JView::Type::String:
        return Arg::ofStr(j.str());
      case JView::Type::Array: {
        std::vector<Arg> items;
        items.reserve(j.size());
        for (JView item : j) {
          Scope at(this, items.size());
          items.push_back(arg(item));
        }
        return Arg::ofList(std::move(items));
      }
      case JView::Type::Object:
        return boxedArg(j);
    }
    fail("unexpected JSON value");
  }

  Arg boxedArg(JView j) {
    static constexpr std::string_view kExpected =
        "(expected one of {\"node\": ...}, {\"float\": ...}, {\"dtype\": ...}, {\"device\": ...}, "
        "{\"layout\": ...}, {\"memory_format\": ...}, {\"tuple\": [...]}, {\"opaque\": ...})";
    if (j.size() != 1)
      fail("expected an argument object with exactly one key, got " + std::to_string(j.size()) +
           " keys " + std::string(kExpected));
    JView v = *j.begin();
    std::string_view key = v.key();
    Scope at(this, key);
    if (key == "node") {
      std::string_view name = str(v, "a node name");
      if (Node* ref = loader_.resolve(name)) return Arg::ofNode(ref);
      // Not defined yet: keep reading to learn whether it is defined later (a forward reference
      // or cycle) or nowhere (dangling), and report the first one at the end.
      if (!bad_ref_) {
        bad_ref_ = BadRef{where(), std::string(name), node_index_};
        if (name == node_name_) bad_ref_defined_at_ = node_index_;
      }
      return Arg::none();
    }
    if (key == "float") {
      std::string_view s = str(v, "\"inf\", \"-inf\" or \"nan\"");
      if (s == "inf") return Arg::ofFloat(std::numeric_limits<double>::infinity());
      if (s == "-inf") return Arg::ofFloat(-std::numeric_limits<double>::infinity());
      if (s == "nan") return Arg::ofFloat(std::numeric_limits<double>::quiet_NaN());
      fail("expected \"inf\", \"-inf\" or \"nan\", got " + quoteForMessage(s));
    }
    if (key == "dtype") {
      std::string_view s = str(v, "a dtype name");
      auto t = dtypeFromName(s);
      if (!t) fail("unknown dtype " + quoteForMessage(s));
      return Arg::ofDtype(*t);
    }
    if (key == "device") return Arg::ofDevice(str(v, "a device"));
    if (key == "layout") return Arg::ofLayout(str(v, "a layout"));
    if (key == "memory_format") return Arg::ofMemoryFormat(str(v, "a memory format"));
    if (key == "tuple") {
      if (!v.isArray())
        fail("expected the tuple's items (an array), got " + std::string(describe(v)));
      std::vector<Arg> items;
      items.reserve(v.size());
      for (JView item : v) {
        Scope k(this, items.size());
        items.push_back(arg(item));
      }
      return Arg::ofTuple(std::move(items));
    }
    if (key == "opaque") {
      if (!v.isObject())
        fail("expected {\"repr\": ..., \"type\": ...}, got " + std::string(describe(v)));
      onlyKeys(v, {"repr", "type"}, "an opaque value");
      std::string_view repr, type;
      {
        Scope k(this, "repr");
        repr = str(member(v, "repr", "the value's repr"), "the repr");
      }
      {
        Scope k(this, "type");
        type = str(member(v, "type", "the value's type name"), "the type name");
      }
      return Arg::ofOpaque(type, repr);
    }
    fail("unknown argument object key " + quoteForMessage(key) + " " + std::string(kExpected));
  }

  ValueMeta val(JView j) {
    ValueMeta v;
    switch (j.type()) {
      case JView::Type::Null:
        v.kind = ValueMeta::Kind::None;
        return v;
      case JView::Type::Bool:
        v.kind = ValueMeta::Kind::Bool;
        v.i = j.boolean() ? 1 : 0;
        return v;
      case JView::Type::Int:
      case JView::Type::Unsigned:
        v.kind = ValueMeta::Kind::Int;
        v.i = integer(j, "an integer");
        return v;
      case JView::Type::BigInt:  // as for arguments
      case JView::Type::Float:
        v.kind = ValueMeta::Kind::Float;
        v.f = j.floating();
        return v;
      case JView::Type::Array:
        v.kind = ValueMeta::Kind::List;
        v.items.reserve(j.size());
        for (JView item : j) {
          Scope at(this, v.items.size());
          v.items.push_back(val(item));
        }
        return v;
      case JView::Type::Object:
        if (j.size() == 1 && j.find("float")) {
          v.kind = ValueMeta::Kind::Float;
          v.f = boxedArg(j).toFloat();
          return v;
        }
        v.kind = ValueMeta::Kind::Tensor;
        v.tensor = tensor(j);
        return v;
      case JView::Type::String:
        break;
    }
    fail("expected a value meta (tensor object, array, null or scalar), got " +
         std::string(describe(j)));
  }

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

  TensorMeta tensor(JView j) {
    static constexpr std::array<std::string_view, 4> kKeys = {"device", "dtype", "shape", "stride"};
    const Keyed<4> k = keyed(j, kKeys);
    if (k.bad) onlyKeys(j, {"device", "dtype", "shape", "stride"}, "a tensor meta");
    TensorMeta t;
    {
      Scope at(this, "dtype");
      std::string_view s =
          str(present(k.at[1], "dtype", "a tensor meta needs a dtype"), "a dtype name");
      auto d = dtypeFromName(s);
      if (!d) fail("unknown dtype " + quoteForMessage(s));
      t.dtype = *d;
    }
    {
      Scope at(this, "shape");
      t.shape = ints(present(k.at[2], "shape", "a tensor meta needs a shape"), "the shape");
    }
    if (JView s = k.at[3]) {
      Scope at(this, "stride");
      t.stride = ints(s, "the stride");
      if (t.stride.size() != t.shape.size())
        fail("stride has " + std::to_string(t.stride.size()) + " dimensions but shape has " +
             std::to_string(t.shape.size()));
    } else {
      t.stride = TensorMeta::contiguousStride(t.shape);
    }
    if (std::string problem = t.sizeProblem(); !problem.empty()) {
      Scope at(this, "shape");
      fail(problem);
    }
    if (JView d = k.at[0]) {
      Scope at(this, "device");
      t.device = loader_.symbol(str(d, "a device"));
    }
    return t;
  }

  void meta(JView j, Node* n) {
    if (!j.isObject()) fail("expected meta to be an object, got " + std::string(describe(j)));
    NodeMeta& m = n->meta();
    std::string extra;
    auto extraKey = [&](std::string_view key) {
      extra += extra.empty() ? "{" : ",";
      appendJsonString(extra, key);
      extra += ':';
    };
    for (JView v : sortedMembers(j)) {  // sorted, so `extra` comes out sorted
      std::string_view key = v.key();
      Scope at(this, key);
      if (key == "val") {
        n->val() = val(v);
      } else if (key == "phase") {
        std::string_view s = str(v, "a phase");
        auto p = phaseFromName(s);
        if (!p || *p == Phase::Unknown)
          fail("unknown phase " + quoteForMessage(s) + " (expected forward, loss or backward)");
        m.phase = *p;
      } else if (key == "recompute") {
        int64_t r = integer(v, "a CheckpointPolicy value 0..3");
        if (r < 0 || r > 3)
          fail("recompute must be 0..3 (CheckpointPolicy), got " + std::to_string(r));
        m.recompute = static_cast<Recompute>(r);
      } else if ((key == "ac_graph_id" || key == "seq_nr") && v.isWideInteger()) {
        // Past what the typed field holds (seq_nr is 2^64-1 on nodes autograd numbers as
        // "none", e.g. a chunked loss's backward): jointfx reads neither beyond its value, so
        // the number rides along as extra meta, unchanged.
        extraKey(key);
        canonical(extra, v);
      } else if (key == "ac_graph_id") {
        m.ac_graph_id = optionalInteger(v, "the ac_graph_id");
      } else if (key == "seq_nr") {
        m.seq_nr = optionalInteger(v, "the seq_nr");
      } else if (key == "stack_trace") {
        m.stack_trace = str(v, "the stack trace");
      } else if (key == "custom" && v.isObject() && v.find("module_fqn")) {
        {
          Scope f(this, "module_fqn");
          m.module_fqn = loader_.symbol(str(v.find("module_fqn"), "the module FQN"));
        }
        if (m.module_fqn.empty()) {
          // An empty FQN is not typed (empty means absent); carry it verbatim instead.
          extraKey(key);
          canonical(extra, v);
        } else if (v.size() > 1) {
          extraKey(key);
          extra += '{';
          bool first = true;
          for (JView c : sortedMembers(v)) {
            if (c.key() == "module_fqn") continue;
            Scope k(this, c.key());
            extra += first ? "" : ",";
            first = false;
            appendJsonString(extra, c.key());
            extra += ':';
            canonical(extra, c);
          }
          extra += '}';
        }
      } else {
        extraKey(key);
        canonical(extra, v);
      }
    }
    if (!extra.empty()) {
      extra += '}';
      liftAttrs(extra, m.attrs);
      m.extra_json = extra;
    }
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

  std::string_view text_;
  const std::string& filename_;
  GraphLoader loader_;
  Graph* g_;
  uint32_t nodes_array_ = kNone;  // index of the open "nodes" array
  uint32_t node_start_ = 0;       // where the node being read starts in the tree
  uint32_t node_chars_ = 0;
  std::array<Step, kMaxPath> path_;
  size_t depth_ = 0;
  std::deque<std::vector<JView>> members_pool_;  // sortedMembers' buffers (a deque: they stay put)
  size_t members_depth_ = 0;                     // how many are lent out
  std::string node_name_;
  size_t node_index_ = 0;
  std::optional<BadRef> bad_ref_;
  std::optional<size_t> bad_ref_defined_at_;
  std::vector<std::string_view> pending_;  // operands read directly, not yet looked up
  std::string target_buf_;
  Symbol last_fqn_;
  Symbol last_device_;                             // directTensor's last device,
  ScalarType last_dtype_ = ScalarType::Undefined;  // dtype
  std::string_view last_dtype_name_;               // and its name (dtypeName's, or empty)
  struct TensorEntry {
    std::string_view text;  // in the input
    TensorMeta meta;
  };
  std::vector<TensorEntry> tensor_cache_ = std::vector<TensorEntry>(1024);  // cachedTensor's
  size_t direct_nodes_ = 0;
  // directList's and directVal's buffers, one per depth (references to them outlive deeper calls).
  std::vector<std::vector<Arg>> arg_buffers_ = std::vector<std::vector<Arg>>(kDirectDepth);
  std::vector<std::vector<ValueMeta>> val_buffers_ =
      std::vector<std::vector<ValueMeta>>(kDirectDepth);
  Kwargs kwargs_buffer_;

 public:
  size_t directNodes() const { return direct_nodes_; }
};

}  // namespace
}  // namespace json_detail

using namespace json_detail;

std::unique_ptr<Graph> readJsonGraph(std::string_view text, const std::string& filename) {
  try {
    return JsonReader(text, filename, Tokenizer::Fast).read();
  } catch (const ReadAgainWithNlohmann&) {
    // The fast tokenizer gave up part way (most likely on an error): nlohmann reads it all again
    // and reports what is wrong exactly as it always has. A text ends just past its first NUL
    // byte (readInputFile's rule; a mapped file is handed over whole, and the fast tokenizer
    // always stops at a NUL byte).
    if (const size_t nul = text.find('\0'); nul != std::string_view::npos)
      text = text.substr(0, nul + 1);
    return JsonReader(text, filename, Tokenizer::Nlohmann).read();
  }
}

bool fastJsonTokenizerAccepts(std::string_view text) {
  TreeBuilder b;
  try {
    return FastSax(text, b).run();
  } catch (const JfxError&) {
    return false;  // the builder's own limits (nesting, size)
  }
}

size_t jsonNodesReadDirectly(std::string_view text) {
  static const std::string kFile = "<test>";
  JsonReader r(text, kFile, Tokenizer::Fast);
  try {
    r.read();
  } catch (const ReadAgainWithNlohmann&) {
    return 0;
  }
  return r.directNodes();
}

std::unique_ptr<Graph> readJsonInto(std::string_view text, const std::string& filename,
                                    std::unique_ptr<Graph> g) {
  // nlohmann's tokenizer reads every document alone; the fast one may hand a document back to be
  // read again, which would need the graph as it was.
  return JsonReader(text, filename, Tokenizer::Nlohmann, std::move(g)).read();
}

std::unique_ptr<Graph> readJsonGraphWithNlohmann(std::string_view text,
                                                 const std::string& filename) {
  return JsonReader(text, filename, Tokenizer::Nlohmann).read();
}

}  // namespace jfx
