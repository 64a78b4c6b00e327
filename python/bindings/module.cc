// jointfx._C: the in-process bridge from Python to the C++ pass manager. Graphs go in as JSON
// strings in the interchange format (docs/graph-format.md), or built from the torch.fx objects
// into the graph reading that JSON would give (graph_from_fx, fx_export.cc): no files and no
// subprocesses, and the exporter stays the single definition of the mapping from torch.fx. They
// come back either as a whole document (run_pipeline_json) or as an edit script against the input
// (EditScript, of Python objects; run_pipeline_edits, of node JSON, the reference form), which
// Python applies to the caller's own fx.Graph (docs/pytorch-bridge.md, "In place").
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <bit>
#include <sstream>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "ir/error.h"
#include "ir/json_format.h"
#include "ir/verifier.h"
#include "passes/pass_manager.h"
#include "passes/registry.h"
#include "python/bindings/fx_export.h"

namespace py = pybind11;

namespace {

py::list passRecords(const jfx::PipelineResult& result) {
  py::list passes;
  for (const auto& rec : result.passes) {
    py::dict d;
    d["name"] = rec.name;
    d["options"] = rec.options;
    d["changed"] = rec.changed;
    d["seconds"] = rec.seconds;
    d["cpu_seconds"] = rec.cpu_seconds;
    d["stats"] = rec.stats;
    passes.append(d);
  }
  return passes;
}

// A node's args and kwargs as bytes, node references by id: equal codes mean equal arguments
// (Arg's operator==, floats bitwise) referring to the same nodes. Ids, not pointers: a pass may
// undo a rewrite (Graph::rollback, which removes the nodes it created and reuses their ids) or go
// back to an exact copy (Graph::copy / takeContents, same ids, new storage); ids stay meaningful
// through both, pointers need not.
class ArgCoder {
 public:
  const std::string& code(const jfx::Node* n) {
    out_.clear();
    count(n->args().size());
    for (const jfx::Arg& a : n->args())
      arg(a);
    count(n->kwargs().size());
    for (const auto& [key, a] : n->kwargs()) {
      text(key.str());
      arg(a);
    }
    return out_;
  }

 private:
  template <class T>
  void raw(T v) {
    out_.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  void count(size_t k) { raw(static_cast<uint32_t>(k)); }
  void text(std::string_view t) {
    count(t.size());
    out_.append(t);
  }
  void arg(const jfx::Arg& a) {
    using K = jfx::Arg::Kind;
    out_.push_back(static_cast<char>(a.kind()));
    switch (a.kind()) {
      case K::None:
        return;
      case K::Bool:
        out_.push_back(a.toBool() ? 1 : 0);
        return;
      case K::Int:
        raw(a.toInt());
        return;
      case K::Float:
        raw(std::bit_cast<uint64_t>(a.toFloat()));
        return;
      case K::Node:
        raw(a.node()->id());
        return;
      case K::Dtype:
        raw(a.dtype());
        return;
      case K::Str:
      case K::Device:
      case K::Layout:
      case K::MemoryFormat:
        text(a.str());
        return;
      case K::Opaque:
        text(a.str());
        text(a.opaqueRepr());
        return;
      case K::List:
      case K::Tuple:
        count(a.items().size());
        for (const jfx::Arg& item : a.items())
          arg(item);
        return;
    }
  }
  std::string out_;
};

// What an input node looked like before the pipeline, to tell kept-and-unchanged nodes from kept
// ones with new args or meta.
struct Snapshot {
  std::string args;  // ArgCoder's code
  jfx::ValueMeta val;
  jfx::NodeMeta meta;
  jfx::InputKind input_kind;
  std::string input_fqn;
  std::string name;
};

// The pipeline run both edit-script forms are made from: the graph after the passes, what its
// input nodes (ids below n0, in document order) looked like before, and for every node the
// input node it derives from.
struct PipelineRun {
  std::unique_ptr<jfx::Graph> g;
  uint32_t n0 = 0;
  std::vector<Snapshot> before;
  std::vector<int64_t> origin;  // by node id: an input node's id, or -1
  jfx::PipelineResult result;
  std::string log;
  ArgCoder coder;

  bool argsChanged(const jfx::Node* n) { return before[n->id()].args != coder.code(n); }
  bool metaChanged(const jfx::Node* n) const {
    const Snapshot& s = before[n->id()];
    return !(s.val == n->val()) || !(s.meta == n->meta()) || s.input_kind != n->inputKind() ||
           s.input_fqn != n->inputFqn() || s.name != n->name();
  }
};

// Call without the GIL.
PipelineRun runPipelineWithSnapshot(std::unique_ptr<jfx::Graph> input, const std::string& pipeline,
                                    bool verify, bool timing, bool expensive_checks = true) {
  PipelineRun run;
  run.g = std::move(input);
  jfx::Graph& g = *run.g;
  const uint32_t n0 = run.n0 = g.maxId();
  run.before.resize(n0);
  g.forEach([&](jfx::Node* n) {
    Snapshot& s = run.before[n->id()];
    s.args = run.coder.code(n);
    s.val = n->val();
    s.meta = n->meta();
    s.input_kind = n->inputKind();
    s.input_fqn = n->inputFqn();
    s.name = n->name();
  });
  std::ostringstream sink;
  jfx::PassManagerOptions opts;
  opts.verify_each = verify;
  opts.check_unchanged_hash = expensive_checks;
  opts.verify.ir_invariants = expensive_checks;
  opts.timing = timing;
  opts.out = &sink;
  run.result = jfx::runPipeline(g, jfx::resolvePipeline(pipeline), opts);
  run.log = sink.str();

  // A new node derives from its clone source, else from its first operand, followed through
  // other new nodes to an input node: deterministic, and what a remat clone or a bucket's
  // collective computes from.
  std::vector<int64_t>& origin = run.origin;
  origin.assign(g.maxId(), -1);
  for (uint32_t id = 0; id < n0; ++id)
    origin[id] = id;
  g.forEach([&](jfx::Node* n) {
    if (n->id() < n0) return;
    if (n->origin() != jfx::Node::kNoOrigin && n->origin() < origin.size()) {
      origin[n->id()] = origin[n->origin()];
    } else {
      for (const jfx::Node* in : n->inputs()) {
        origin[n->id()] = origin[in->id()];
        if (origin[n->id()] >= 0) break;
      }
    }
  });
  return run;
}

py::dict headerDict(const jfx::Graph& g) {
  py::list groups;
  for (const auto& pg : g.processGroups()) {
    py::dict d;
    d["name"] = pg.name;
    d["ranks"] = pg.ranks;
    d["size"] = pg.size;
    groups.append(d);
  }
  py::list outputs;
  for (const auto& spec : g.outputSpecs()) {
    py::dict d;
    d["kind"] = std::string(jfx::outputKindName(spec.kind));
    if (!spec.fqn.empty()) d["fqn"] = spec.fqn;
    outputs.append(d);
  }
  py::list inputs;
  for (const jfx::Node* n : g.placeholders()) {
    py::dict d;
    d["name"] = n->name();
    d["kind"] = std::string(jfx::inputKindName(n->inputKind()));
    if (!n->inputFqn().empty()) d["fqn"] = n->inputFqn();
    inputs.append(d);
  }
  py::dict header;
  header["process_groups"] = groups;
  header["inputs"] = inputs;
  header["outputs"] = outputs;
  header["meta"] = g.extraJson();
  return header;
}

py::dict reportDict(const jfx::PipelineResult& result, const std::string& log) {
  py::dict report;
  report["passes"] = passRecords(result);
  report["total_seconds"] = result.total_seconds;
  report["verify_seconds"] = result.verify_seconds;
  report["verify_between_seconds"] = result.verify_between_seconds;
  report["hash_seconds"] = result.hash_seconds;
  report["log"] = log;
  return report;
}

// The edit script with node JSON (docs/pytorch-bridge.md "In place", the reference form): in the
// new program order, an input node that is unchanged is its name (a str); a changed input node is
// ("keep", original name, node JSON, args changed, meta changed); a node the pipeline made is
// ("new", name, node JSON, derived-from name or None). Then the erased input nodes' names, in
// input order, and the header.
py::tuple runPipelineEdits(const std::string& doc, const std::string& pipeline, bool verify,
                           bool timing) {
  struct Entry {
    int kind;  // 0 unchanged, 1 changed keep, 2 new
    std::string name, json, origin;
    bool args_changed = false, meta_changed = false;
  };
  std::vector<Entry> entries;
  std::vector<std::string> erased;
  PipelineRun run;
  {
    py::gil_scoped_release release;
    run = runPipelineWithSnapshot(jfx::readJsonGraph(doc, "<python>"), pipeline, verify, timing);
    const jfx::Graph& g = *run.g;
    entries.reserve(g.size());
    g.forEach([&](jfx::Node* n) {
      Entry e;
      if (n->id() >= run.n0) {
        e.kind = 2;
        e.name = n->name();
        e.json = jfx::writeJsonNode(*n);
        if (run.origin[n->id()] >= 0) e.origin = run.before[run.origin[n->id()]].name;
      } else {
        e.name = run.before[n->id()].name;
        e.args_changed = run.argsChanged(n);
        e.meta_changed = run.metaChanged(n);
        e.kind = e.args_changed || e.meta_changed ? 1 : 0;
        if (e.kind) e.json = jfx::writeJsonNode(*n);
      }
      entries.push_back(std::move(e));
    });
    for (uint32_t id = 0; id < run.n0; ++id)
      if (g.nodeById(id)->isDead()) erased.push_back(run.before[id].name);
  }
  py::list script;
  for (const Entry& e : entries) {
    if (e.kind == 0)
      script.append(py::str(e.name));
    else if (e.kind == 1)
      script.append(py::make_tuple("keep", e.name, e.json, e.args_changed, e.meta_changed));
    else
      script.append(py::make_tuple("new", e.name, e.json,
                                   e.origin.empty() ? py::object(py::none()) : py::str(e.origin)));
  }
  return py::make_tuple(script, erased, headerDict(*run.g), reportDict(run.result, run.log));
}

py::str pyStr(std::string_view s) {
  return py::str(s.data(), s.size());
}

// The UTF-8 text of `s` (a str or bytes) without a copy (CPython keeps an ASCII str's UTF-8
// form in the object); valid while `s` lives.
std::string_view utf8(const py::object& s) {
  if (PyBytes_Check(s.ptr())) {
    char* data = nullptr;
    Py_ssize_t size = 0;
    if (PyBytes_AsStringAndSize(s.ptr(), &data, &size) != 0) throw py::error_already_set();
    return {data, static_cast<size_t>(size)};
  }
  if (!PyUnicode_Check(s.ptr())) throw py::type_error("doc must be str or bytes");
  Py_ssize_t size = 0;
  const char* data = PyUnicode_AsUTF8AndSize(s.ptr(), &size);
  if (data == nullptr) throw py::error_already_set();
  return {data, static_cast<size_t>(size)};
}

class EditScript {
 public:
  // `doc`: the document's JSON text (str or bytes), or an FxGraph (graph_from_fx), taken over.
  EditScript(const py::object& doc, const std::string& pipeline, bool verify, bool timing,
             bool expensive_checks) {
    std::unique_ptr<jfx::Graph> built;
    std::string_view text;
    if (py::isinstance<jfx::python::FxGraph>(doc)) {
      built = std::move(doc.cast<jfx::python::FxGraph&>().graph);
      if (!built) throw py::value_error("EditScript: this FxGraph was taken by another already");
    } else {
      text = utf8(doc);
    }
    Plan plan;
    {
      py::gil_scoped_release release;
      if (!built) built = jfx::readJsonGraph(text, "<python>");
      run_ = runPipelineWithSnapshot(std::move(built), pipeline, verify, timing, expensive_checks);
      plan = planSteps();
    }
    appendOps(plan.steps);
    for (uint32_t id : plan.dead)
      erased_.append(id);
    header_ = headerDict(*run_.g);
    report_ = reportDict(run_.result, run_.log);
    counts_["kept"] = plan.kept;
    counts_["changed"] = plan.changed;
    counts_["new"] = plan.added;
    counts_["erased"] = plan.dead.size();
    counts_["moved"] = plan.moved;
  }

  py::list ops() const { return ops_; }
  py::list erased() const { return erased_; }
  py::dict header() const { return header_; }
  py::dict report() const { return report_; }
  py::dict counts() const { return counts_; }
  uint32_t nInput() const { return run_.n0; }

  // `slots`: the fx.Nodes by slot, which the caller extends as it makes new nodes; `decode(kind,
  // text)`: the Python value of a dtype / device / layout / memory_format argument; `opaque(type,
  // repr)`: the stand-in for an opaque argument.
  void bind(py::list slots, py::object decode, py::object opaque) {
    slots_ = std::move(slots);
    decode_ = std::move(decode);
    opaque_ = std::move(opaque);
  }

  // (args, kwargs, has_opaque) of the node args(k) stands for in the ops, kwargs in key order
  // (as the JSON writer sorts them). Every node they name must have its slot filled.
  py::tuple args(size_t k) {
    if (k >= arg_nodes_.size()) throw py::index_error("no such argument entry");
    const jfx::Node* n = arg_nodes_[k];
    bool opaque = false;
    py::tuple args(n->args().size());
    for (size_t i = 0; i < n->args().size(); ++i)
      args[i] = argObject(n->args()[i], opaque);
    std::vector<const std::pair<jfx::Symbol, jfx::Arg>*> sorted;
    sorted.reserve(n->kwargs().size());
    for (const auto& kv : n->kwargs())
      sorted.push_back(&kv);
    std::stable_sort(sorted.begin(), sorted.end(),
                     [](const auto* a, const auto* b) { return a->first.str() < b->first.str(); });
    py::dict kwargs;
    for (const auto* kv : sorted)
      kwargs[pyStr(kv->first.str())] = argObject(kv->second, opaque);
    return py::make_tuple(std::move(args), std::move(kwargs), opaque);
  }

 private:
  py::object argObject(const jfx::Arg& a, bool& opaque) {
    using K = jfx::Arg::Kind;
    switch (a.kind()) {
      case K::None:
        return py::none();
      case K::Bool:
        return py::bool_(a.toBool());
      case K::Int:
        return py::int_(a.toInt());
      case K::Float:
        return py::float_(a.toFloat());
      case K::Str:
        return pyStr(a.str());
      case K::Node: {
        const uint32_t s = slot_[a.node()->id()];
        if (s >= static_cast<size_t>(PyList_GET_SIZE(slots_.ptr())))
          throw jfx::JfxError({}, "edit script: node " + jfx::quoteForMessage(a.node()->name()) +
                                      " is used before it was made");
        return py::reinterpret_borrow<py::object>(PyList_GET_ITEM(slots_.ptr(), s));
      }
      case K::Dtype:
        return decoded("dtype", jfx::dtypeName(a.dtype()));
      case K::Device:
        return decoded("device", a.str());
      case K::Layout:
        return decoded("layout", a.str());
      case K::MemoryFormat:
        return decoded("memory_format", a.str());
      case K::List: {
        py::list out(a.items().size());
        for (size_t i = 0; i < a.items().size(); ++i)
          out[i] = argObject(a.items()[i], opaque);
        return out;
      }
      case K::Tuple: {
        py::tuple out(a.items().size());
        for (size_t i = 0; i < a.items().size(); ++i)
          out[i] = argObject(a.items()[i], opaque);
        return out;
      }
      case K::Opaque:
        opaque = true;
        return opaque_(pyStr(a.str()), pyStr(a.opaqueRepr()));
    }
    return py::none();
  }

  py::object decoded(std::string_view kind, std::string_view text) {
    std::string key;
    key.reserve(kind.size() + 1 + text.size());
    key.append(kind).push_back('\0');
    key.append(text);
    auto it = decoded_.find(key);
    if (it != decoded_.end()) return it->second;
    py::object v = decode_(pyStr(kind), pyStr(text));
    decoded_.emplace(std::move(key), v);
    return v;
  }

  // A value meta: a tensor is the tuple (shape, stride, dtype, device), plus the slot of the node
  // whose FakeTensor it may share when `share` >= 0; a tuple of values is a list; None, ints,
  // floats and bools are themselves.
  py::object valObject(const jfx::ValueMeta& v, int64_t share = -1) {
    using K = jfx::ValueMeta::Kind;
    switch (v.kind) {
      case K::Absent:
      case K::None:
        return py::none();
      case K::Tensor: {
        const jfx::TensorMeta& t = v.tensor;
        py::tuple shape(t.shape.size()), stride(t.stride.size());
        for (size_t i = 0; i < t.shape.size(); ++i)
          shape[i] = py::int_(t.shape[i]);
        for (size_t i = 0; i < t.stride.size(); ++i)
          stride[i] = py::int_(t.stride[i]);
        py::str dtype = pyStr(jfx::dtypeName(t.dtype));
        py::str device = pyStr(t.device.str());
        if (share >= 0) return py::make_tuple(shape, stride, dtype, device, share);
        return py::make_tuple(shape, stride, dtype, device);
      }
      case K::List: {
        py::list out(v.items.size());
        for (size_t i = 0; i < v.items.size(); ++i)
          out[i] = valObject(v.items[i]);
        return out;
      }
      case K::Int:
        return py::int_(v.i);
      case K::Float:
        return py::float_(v.f);
      case K::Bool:
        return py::bool_(v.i != 0);
    }
    return py::none();
  }

  static bool hasExtra(const jfx::NodeMeta& m) { return !m.extra_json.empty() || !m.attrs.empty(); }

  // The typed meta keys of `n` in the JSON writer's (sorted) order, for a node with no other meta.
  py::dict typedMeta(const jfx::Node* n, int64_t share) {
    const jfx::NodeMeta& m = n->meta();
    py::dict d;
    if (m.ac_graph_id) d["ac_graph_id"] = *m.ac_graph_id;
    if (!m.module_fqn.empty()) {
      py::dict custom;
      custom["module_fqn"] = pyStr(m.module_fqn.str());
      d["custom"] = custom;
    }
    if (m.phase != jfx::Phase::Unknown) d["phase"] = pyStr(jfx::phaseName(m.phase));
    if (m.recompute != jfx::Recompute::Unset) d["recompute"] = static_cast<int>(m.recompute);
    if (m.seq_nr) d["seq_nr"] = *m.seq_nr;
    if (!m.stack_trace.empty()) d["stack_trace"] = m.stack_trace;
    if (n->val().kind != jfx::ValueMeta::Kind::Absent) d["val"] = valObject(n->val(), share);
    return d;
  }

  int64_t argEntry(const jfx::Node* n) {
    arg_nodes_.push_back(n);
    return static_cast<int64_t>(arg_nodes_.size() - 1);
  }

  // (2, slot, moved, args entry or -1, meta to set or None, meta keys to drop or None, node JSON
  // or None). Meta goes as the typed keys that changed when nothing else in it did (extra keys
  // and custom the same); otherwise as the node's JSON for Python to compare with the document.
  py::tuple changedOp(const jfx::Node* n, bool moved) {
    const Snapshot& s = run_.before[n->id()];
    const bool args_changed = run_.argsChanged(n);
    const jfx::NodeMeta& a = s.meta;
    const jfx::NodeMeta& b = n->meta();
    // A new recompute tag alone (tag-fsdp's edit on most nodes it changes): the short form.
    if (!args_changed && b.recompute != jfx::Recompute::Unset && s.val == n->val() &&
        s.name == n->name() && s.input_kind == n->inputKind() && s.input_fqn == n->inputFqn()) {
      jfx::NodeMeta tagged = a;
      tagged.recompute = b.recompute;
      if (tagged == b)
        return py::make_tuple(4, slot_[n->id()], moved, static_cast<int>(b.recompute));
    }
    const int64_t args = args_changed ? argEntry(n) : -1;
    py::object set = py::none(), drop = py::none(), json = py::none();
    if (!(s.val == n->val()) || !(a == b)) {
      if (a.extra_json != b.extra_json || !(a.attrs == b.attrs) || a.module_fqn != b.module_fqn) {
        json = py::str(jfx::writeJsonNode(*n));
      } else {
        py::dict sd;
        py::list dl;
        auto field = [&](const char* key, bool had, bool has, bool same, auto value) {
          if (has && !same)
            sd[key] = value();
          else if (had && !has)
            dl.append(key);
        };
        field("ac_graph_id", a.ac_graph_id.has_value(), b.ac_graph_id.has_value(),
              a.ac_graph_id == b.ac_graph_id, [&] { return py::int_(*b.ac_graph_id); });
        field("phase", a.phase != jfx::Phase::Unknown, b.phase != jfx::Phase::Unknown,
              a.phase == b.phase, [&] { return pyStr(jfx::phaseName(b.phase)); });
        field("recompute", a.recompute != jfx::Recompute::Unset,
              b.recompute != jfx::Recompute::Unset, a.recompute == b.recompute,
              [&] { return py::int_(static_cast<int>(b.recompute)); });
        field("seq_nr", a.seq_nr.has_value(), b.seq_nr.has_value(), a.seq_nr == b.seq_nr,
              [&] { return py::int_(*b.seq_nr); });
        field("stack_trace", !a.stack_trace.empty(), !b.stack_trace.empty(),
              a.stack_trace == b.stack_trace,
              [&] { return py::str(b.stack_trace.data(), b.stack_trace.size()); });
        field("val", s.val.kind != jfx::ValueMeta::Kind::Absent,
              n->val().kind != jfx::ValueMeta::Kind::Absent, s.val == n->val(),
              [&] { return valObject(n->val()); });
        if (py::len(sd)) set = std::move(sd);
        if (py::len(dl)) drop = py::tuple(dl);
      }
    }
    return py::make_tuple(2, slot_[n->id()], moved, args, set, drop, json);
  }

  // (3, name, op, target, origin slot or -1, moved, args entry, meta or None, node JSON or None).
  // A clone whose value meta is its source's (remat's recomputed nodes) may share the source's
  // FakeTensor: val's tuple then carries the source's slot.
  py::tuple newOp(const jfx::Node* n, bool moved) {
    const int64_t origin = run_.origin[n->id()];
    int64_t share = -1;
    if (n->origin() != jfx::Node::kNoOrigin && n->origin() < run_.n0 && n->val().isTensor()) {
      const jfx::Node* src = run_.g->nodeById(n->origin());
      if (run_.before[src->id()].val == n->val() && src->val() == n->val()) share = src->id();
    }
    py::object meta = py::none(), json = py::none();
    if (hasExtra(n->meta()))
      json = py::str(jfx::writeJsonNode(*n));
    else
      meta = typedMeta(n, share);
    return py::make_tuple(3, n->name(), pyStr(jfx::opKindName(n->op())), pyStr(n->target().str()),
                          origin, moved, argEntry(n), meta, json);
  }

  // A node of the result, in order: whether it is an input node left as it was, one whose
  // arguments or meta changed, or a new one, and whether Python's list must move it.
  struct Step {
    enum Kind : uint8_t { Untouched, Changed, New } kind;
    const jfx::Node* n;
    bool moved;
  };
  struct Plan {
    std::vector<Step> steps;
    std::vector<uint32_t> dead;  // the erased input nodes' ids
    size_t kept = 0, changed = 0, added = 0, moved = 0;
  };

  // Over run_'s result, without Python objects (the GIL may be released): fills slot_ and says
  // what the script does with each node.
  Plan planSteps() {
    Plan plan;
    const jfx::Graph& g = *run_.g;
    const uint32_t n0 = run_.n0;
    slot_.assign(g.maxId(), UINT32_MAX);
    for (uint32_t id = 0; id < n0; ++id) {
      slot_[id] = id;
      if (g.nodeById(id)->isDead()) plan.dead.push_back(id);
    }
    // Where Python's list stands while it applies the script: the nodes placed so far, then
    // the input nodes not reached yet (erased ones included) in input order. A node needs no
    // move exactly when it is the first live one of those; a new node is made at the end of
    // the list, so it moves unless nothing live is left after the cursor.
    std::vector<bool> reached(n0, false);
    uint32_t next = 0;  // the first input node not reached, skipping erased ones
    auto advance = [&] {
      while (next < n0 && (reached[next] || g.nodeById(next)->isDead()))
        ++next;
    };
    plan.steps.reserve(g.size());
    g.forEach([&](jfx::Node* n) {
      advance();
      Step s{Step::Untouched, n, false};
      if (n->id() >= n0) {
        s.kind = Step::New;
        s.moved = next < n0;
        slot_[n->id()] = n0 + static_cast<uint32_t>(plan.added++);
      } else {
        s.moved = next != n->id();
        reached[n->id()] = true;
        if (run_.argsChanged(n) || run_.metaChanged(n)) s.kind = Step::Changed;
      }
      if (s.kind == Step::Untouched)
        ++plan.kept;
      else if (s.kind == Step::Changed)
        ++plan.changed;
      plan.moved += s.moved;
      plan.steps.push_back(s);
    });
    return plan;
  }

  // The script's operations into ops_: an untouched node left in place is named only at the end
  // of its run.
  void appendOps(const std::vector<Step>& steps) {
    for (size_t i = 0; i < steps.size(); ++i) {
      const Step& s = steps[i];
      const jfx::Node* n = s.n;
      if (s.kind == Step::Untouched) {
        if (s.moved) {
          ops_.append(py::make_tuple(1, slot_[n->id()]));
        } else if (i + 1 == steps.size() || steps[i + 1].kind != Step::Untouched ||
                   steps[i + 1].moved) {
          ops_.append(py::make_tuple(0, slot_[n->id()]));  // the end of a run left in place
        }
      } else if (s.kind == Step::Changed) {
        ops_.append(changedOp(n, s.moved));
      } else {
        ops_.append(newOp(n, s.moved));
      }
    }
  }

  PipelineRun run_;
  std::vector<uint32_t> slot_;  // by node id
  std::vector<const jfx::Node*> arg_nodes_;
  py::list ops_, erased_;
  py::dict header_, report_, counts_;
  py::list slots_;
  py::object decode_, opaque_;
  std::unordered_map<std::string, py::object> decoded_;
};

// Runs `pipeline` on the graph in `doc`; returns (graph JSON, report dict).
py::tuple runPipelineJson(const std::string& doc, const std::string& pipeline, bool verify,
                          bool timing) {
  std::string out;
  jfx::PipelineResult result;
  std::string log;
  {
    py::gil_scoped_release release;
    std::unique_ptr<jfx::Graph> g = jfx::readJsonGraph(doc, "<python>");
    std::ostringstream sink;
    jfx::PassManagerOptions opts;
    opts.verify_each = verify;
    opts.timing = timing;
    opts.out = &sink;
    result = jfx::runPipeline(*g, jfx::resolvePipeline(pipeline), opts);
    out = jfx::writeJsonGraph(*g);
    log = sink.str();
  }
  return py::make_tuple(out, reportDict(result, log));
}

std::vector<std::string> verifyJson(const std::string& doc, bool one_gather_per_param) {
  std::unique_ptr<jfx::Graph> g = jfx::readJsonGraph(doc, "<python>");
  jfx::VerifyOptions opts;
  opts.one_gather_per_param_per_phase = one_gather_per_param;
  std::vector<std::string> out;
  for (const auto& issue : jfx::verifyGraph(*g, opts))
    out.push_back(issue.str());
  return out;
}

std::vector<std::string> passNames() {
  std::vector<std::string> out;
  for (const auto& reg : jfx::passRegistry())
    out.emplace_back(reg.name);
  return out;
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "jointfx C++ pass manager, in process";
  // JfxError carries the located message; surface it as ValueError (bad graph or pipeline).
  py::register_exception<jfx::JfxError>(m, "JointfxError", PyExc_ValueError);
  m.def("run_pipeline_json", &runPipelineJson, py::arg("doc"), py::arg("pipeline"),
        py::arg("verify") = true, py::arg("timing") = false);
  m.def("run_pipeline_edits", &runPipelineEdits, py::arg("doc"), py::arg("pipeline"),
        py::arg("verify") = true, py::arg("timing") = false);
  py::class_<EditScript>(m, "EditScript")
      .def(py::init<const py::object&, const std::string&, bool, bool, bool>(), py::arg("doc"),
           py::arg("pipeline"), py::arg("verify") = true, py::arg("timing") = false,
           py::arg("expensive_checks") = true,
           "expensive_checks: the checks on the passes and the IR rather than on the graph: the "
           "pass manager's unchanged-graph hash (two whole-graph hashes per changing pass) and "
           "the verifier's ir_invariants (name index, use lists)")
      .def_property_readonly("ops", &EditScript::ops)
      .def_property_readonly("erased", &EditScript::erased)
      .def_property_readonly("header", &EditScript::header)
      .def_property_readonly("report", &EditScript::report)
      .def_property_readonly("counts", &EditScript::counts)
      .def_property_readonly("n_input", &EditScript::nInput)
      .def("bind", &EditScript::bind, py::arg("slots"), py::arg("decode"), py::arg("opaque"))
      .def("args", &EditScript::args, py::arg("k"));
  m.def("verify_json", &verifyJson, py::arg("doc"), py::arg("one_gather_per_param") = false);
  m.def("pass_names", &passNames);
  jfx::python::registerFxExport(m);
}
