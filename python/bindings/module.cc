// _jointfx_C: the in-process bridge from Python to the C++ pass manager. Graphs go in as JSON
// strings in the interchange format (docs/graph-format.md): no files and no subprocesses, and the
// exporter stays the single definition of the mapping from torch.fx. They come back either as a
// whole document (run_pipeline_json) or as an edit script against the input (run_pipeline_edits),
// which Python applies to the caller's own fx.Graph (docs/pytorch-bridge.md, "In place").
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <sstream>
#include <string>

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

// What an input node looked like before the pipeline, to tell kept-and-unchanged nodes from kept
// ones with new args or meta. Node storage outlives erase (Note [Ids and deletion]), so the Arg
// trees' node pointers stay comparable.
struct Snapshot {
  std::vector<jfx::Arg> args;
  jfx::Kwargs kwargs;
  jfx::ValueMeta val;
  jfx::NodeMeta meta;
  jfx::InputKind input_kind;
  std::string input_fqn;
  std::string name;
};

// The edit script (docs/pytorch-bridge.md "In place"): in the new program order, an input node
// that is unchanged is its name (a str); a changed input node is ("keep", original name, node
// JSON, args changed, meta changed); a node the pipeline made is ("new", name, node JSON,
// derived-from name or None). Then the erased input nodes' names, in input order, and the header.
py::tuple runPipelineEdits(const std::string& doc, const std::string& pipeline, bool verify,
                           bool timing) {
  struct Entry {
    int kind;  // 0 unchanged, 1 changed keep, 2 new
    std::string name, json, origin;
    bool args_changed = false, meta_changed = false;
  };
  std::vector<Entry> entries;
  std::vector<std::string> erased;
  jfx::PipelineResult result;
  std::string log;
  std::unique_ptr<jfx::Graph> g;
  {
    py::gil_scoped_release release;
    g = jfx::readJsonGraph(doc, "<python>");
    const uint32_t n0 = g->maxId();
    std::vector<Snapshot> before(n0);
    g->forEach([&](jfx::Node* n) {
      Snapshot& s = before[n->id()];
      s.args = n->args();
      s.kwargs = n->kwargs();
      s.val = n->val();
      s.meta = n->meta();
      s.input_kind = n->inputKind();
      s.input_fqn = n->inputFqn();
      s.name = n->name();
    });
    std::ostringstream sink;
    jfx::PassManagerOptions opts;
    opts.verify_each = verify;
    opts.timing = timing;
    opts.out = &sink;
    result = jfx::runPipeline(*g, jfx::resolvePipeline(pipeline), opts);
    log = sink.str();

    // A new node derives from its clone source, else from its first operand, followed through
    // other new nodes to an input node: deterministic, and what a remat clone or a bucket's
    // collective computes from.
    std::vector<int64_t> origin(g->maxId(), -1);
    auto originOf = [&](const jfx::Node* n) -> int64_t {
      if (n->id() < n0) return n->id();
      return origin[n->id()];
    };
    g->forEach([&](jfx::Node* n) {
      if (n->id() < n0) return;
      if (n->origin() != jfx::Node::kNoOrigin && n->origin() < origin.size()) {
        const jfx::Node* src = g->nodeById(n->origin());
        origin[n->id()] = src->id() < n0 ? src->id() : origin[src->id()];
      } else {
        for (const jfx::Node* in : n->inputs()) {
          origin[n->id()] = originOf(in);
          if (origin[n->id()] >= 0) break;
        }
      }
    });
    entries.reserve(g->size());
    g->forEach([&](jfx::Node* n) {
      Entry e;
      if (n->id() >= n0) {
        e.kind = 2;
        e.name = n->name();
        e.json = jfx::writeJsonNode(*n);
        if (origin[n->id()] >= 0) e.origin = before[origin[n->id()]].name;
      } else {
        const Snapshot& s = before[n->id()];
        e.name = s.name;
        e.args_changed = !(s.args == n->args()) || !(s.kwargs == n->kwargs());
        e.meta_changed = !(s.val == n->val()) || !(s.meta == n->meta()) ||
                         s.input_kind != n->inputKind() || s.input_fqn != n->inputFqn() ||
                         s.name != n->name();
        e.kind = e.args_changed || e.meta_changed ? 1 : 0;
        if (e.kind) e.json = jfx::writeJsonNode(*n);
      }
      entries.push_back(std::move(e));
    });
    for (uint32_t id = 0; id < n0; ++id)
      if (g->nodeById(id)->isDead()) erased.push_back(before[id].name);
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
  py::list groups;
  for (const auto& pg : g->processGroups()) {
    py::dict d;
    d["name"] = pg.name;
    d["ranks"] = pg.ranks;
    d["size"] = pg.size;
    groups.append(d);
  }
  py::list outputs;
  for (const auto& spec : g->outputSpecs()) {
    py::dict d;
    d["kind"] = std::string(jfx::outputKindName(spec.kind));
    if (!spec.fqn.empty()) d["fqn"] = spec.fqn;
    outputs.append(d);
  }
  py::list inputs;
  for (const jfx::Node* n : g->placeholders()) {
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
  header["meta"] = g->extraJson();
  py::dict report;
  report["passes"] = passRecords(result);
  report["total_seconds"] = result.total_seconds;
  report["verify_seconds"] = result.verify_seconds;
  report["verify_between_seconds"] = result.verify_between_seconds;
  report["hash_seconds"] = result.hash_seconds;
  report["log"] = log;
  return py::make_tuple(script, erased, header, report);
}

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
  py::dict report;
  report["passes"] = passRecords(result);
  report["total_seconds"] = result.total_seconds;
  report["verify_seconds"] = result.verify_seconds;
  report["verify_between_seconds"] = result.verify_between_seconds;
  report["hash_seconds"] = result.hash_seconds;
  report["log"] = log;
  return py::make_tuple(out, report);
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

PYBIND11_MODULE(_jointfx_C, m) {
  m.doc() = "jointfx C++ pass manager, in process";
  // JfxError carries the located message; surface it as ValueError (bad graph or pipeline).
  py::register_exception<jfx::JfxError>(m, "JointfxError", PyExc_ValueError);
  m.def("run_pipeline_json", &runPipelineJson, py::arg("doc"), py::arg("pipeline"),
        py::arg("verify") = true, py::arg("timing") = false);
  m.def("run_pipeline_edits", &runPipelineEdits, py::arg("doc"), py::arg("pipeline"),
        py::arg("verify") = true, py::arg("timing") = false);
  m.def("verify_json", &verifyJson, py::arg("doc"), py::arg("one_gather_per_param") = false);
  m.def("pass_names", &passNames);
  jfx::python::registerFxExport(m);
}
