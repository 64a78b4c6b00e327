"""jointfx: compiler passes over PyTorch joint forward+loss+backward FSDP graphs.

The pure-Python part bridges torch.fx and the C++ library's JSON interchange format
(jointfx.export) and traces joint graphs of any nn.Module (`jointfx.trace(model, loss_fn,
example_inputs, ...)`, docs/pytorch-bridge.md) and of the test models (jointfx.model,
jointfx.models). Tracing imports torch.distributed lazily, so `import jointfx` stays cheap:
`jointfx.trace` is the module jointfx/trace.py, loaded on first use and callable as its
`trace` function.
"""

import importlib
from typing import Any

from jointfx._version import __version__
from jointfx.export import (
    ExportError,
    InputSpec,
    Opaque,
    OutputSpec,
    ProcessGroupSpec,
    dumps_graph,
    export_graph,
    import_graph,
    infer_process_groups,
    load_graph,
    specs_from_traced,
    write_graph,
)
from jointfx.groups import register_process_groups
from jointfx.passes import (
    JointfxPass,
    PipelineError,
    graph_pass,
    pass_names,
    run_pipeline,
    run_pipeline_doc,
)
from jointfx.report import JointfxWarning, StrictCheckError

__all__ = [
    "__version__",
    "ExportError",
    "InputSpec",
    "Opaque",
    "OutputSpec",
    "ProcessGroupSpec",
    "dumps_graph",
    "export_graph",
    "import_graph",
    "load_graph",
    "infer_process_groups",
    "specs_from_traced",
    "write_graph",
    "JointfxPass",
    "PipelineError",
    "graph_pass",
    "pass_names",
    "run_pipeline",
    "run_pipeline_doc",
    "trace",
    "register_process_groups",
    "JointfxWarning",
    "StrictCheckError",
]


def __getattr__(name: str) -> Any:
    if name == "trace":
        return importlib.import_module("jointfx.trace")
    raise AttributeError(f"module 'jointfx' has no attribute {name!r}")
