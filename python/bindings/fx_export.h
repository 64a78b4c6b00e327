// export_nodes for _jointfx_C: torch.fx nodes -> the JSON v1 "nodes" array (fx_export.cc).
#pragma once

#include <pybind11/pybind11.h>

namespace jfx::python {

void registerFxExport(pybind11::module_& m);

}  // namespace jfx::python
