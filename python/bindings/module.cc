// _jointfx_C: the in-process bridge from Python to the C++ pass manager. Graphs cross the
// boundary as JSON strings in the interchange format (docs/graph-format.md): no files and no
// subprocesses, and the exporter/importer stay the single definition of the mapping to torch.fx.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <sstream>
#include <string>

#include "ir/error.h"
#include "ir/json_format.h"
#include "ir/verifier.h"
#include "passes/pass_manager.h"
#include "passes/registry.h"

namespace py = pybind11;

namespace {

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
  py::list passes;
  for (const auto& rec : result.passes) {
    py::dict d;
    d["name"] = rec.name;
    d["options"] = rec.options;
    d["changed"] = rec.changed;
    d["seconds"] = rec.seconds;
    d["stats"] = rec.stats;
    passes.append(d);
  }
  py::dict report;
  report["passes"] = passes;
  report["total_seconds"] = result.total_seconds;
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
  m.def("verify_json", &verifyJson, py::arg("doc"), py::arg("one_gather_per_param") = false);
  m.def("pass_names", &passNames);
}
