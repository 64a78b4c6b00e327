"""Process groups a pipeline added, registered so the transformed graph runs in Python.

Collectives in a traced graph name their process group by a string (`group_name`); c10d looks
that name up in its registry when the op runs. A pipeline can name groups nobody created:
`split-comm-groups` moves the FSDP reduce-scatters of group "0" to a new header group "0_rs"
(one more communicator, so they overlap with the all-gathers). The C++ executor creates every
header group; in Python, calling the GraphModule fails with
`Could not resolve the process group registered under the name 0_rs` until someone registers it.

`register_process_groups(gm)` does: for each group in the graph header (what `run_pipeline` /
`import_graph` keep in `gm.meta["jointfx"]`) that is not registered yet, it creates a process
group over the same ranks (`dist.new_group`, one communicator of its own, as the executor does)
and registers it under the header's name. Groups already registered (the default group "0",
the groups the model was traced with) are left alone. Every rank must call it, in the same order
relative to other group creation, like `dist.new_group` itself: the ranks first exchange which
groups their graphs want (a graph traced under a sub-mesh names its own slice's groups, which
differ from rank to rank), and every rank then makes all of them, in one order.

The header lists rank 0's members of each group; for a group that is one slice of a device mesh
(the graph header's `meta.mesh`, e.g. the TP rows of a 2 x 2 mesh), every slice is created and
this rank's slice is registered, as the executor works it out.
"""

from __future__ import annotations

import itertools
import math
import warnings
from collections.abc import Mapping
from typing import Any

import torch.fx as fx


def header_of(source: fx.GraphModule | Mapping[str, Any]) -> Mapping[str, Any]:
    """The graph header (process_groups, inputs, outputs, meta) of a GraphModule that
    run_pipeline or import_graph returned, or of a JSON document."""
    if isinstance(source, fx.GraphModule):
        from jointfx.export import GM_META_KEY

        header = source.meta.get(GM_META_KEY)
        if header is None:
            raise ValueError("the GraphModule carries no jointfx header (gm.meta['jointfx']): "
                             "pass the one run_pipeline or import_graph returned")
        return header
    return source


def mesh_slices(ranks: list[int], shape: list[int]) -> list[list[int]] | None:
    """If `ranks` (rank 0's members of a group) is a sub-mesh of a row-major mesh of `shape`
    (all ranks that differ only along some dims), every slice of that sub-mesh, one per
    coordinate of the other dims; else None."""
    dims = len(shape)
    strides = [1] * dims
    for d in range(dims - 2, -1, -1):
        strides[d] = strides[d + 1] * shape[d + 1]
    world = strides[0] * shape[0] if dims else 1
    for mask in range(1, 1 << dims):
        along = [d for d in range(dims) if mask >> d & 1]

        def members(base: int, along: list[int] = along) -> list[int]:
            return sorted(base + sum(k * strides[d] for d, k in zip(along, ks))
                          for ks in itertools.product(*(range(shape[d]) for d in along)))

        if members(0) != sorted(ranks):
            continue
        bases = [r for r in range(world) if all((r // strides[d]) % shape[d] == 0 for d in along)]
        return [members(b) for b in bases]
    return None


def register_process_groups(source: fx.GraphModule | Mapping[str, Any], *,
                            replace: bool = False) -> dict[str, Any]:
    """Creates and registers every header group of `source` that c10d does not know by name
    (all of them with `replace=True`, except the default group's own name). Returns
    {name: ProcessGroup} of the groups registered by this call. Needs an initialized default
    group whose world matches the graph's mesh."""
    import torch.distributed as dist
    from torch._C._distributed_c10d import (
        _is_process_group_registered,
        _register_process_group,
        _unregister_process_group,
    )

    if not dist.is_initialized():
        raise RuntimeError("register_process_groups: torch.distributed is not initialized "
                           "(call dist.init_process_group first, on every rank)")
    if (threads := gloo_worker_threads()) is not None and threads > 1:
        from jointfx.report import JointfxWarning

        warnings.warn(f"register_process_groups: the gloo groups run on {threads} worker "
                      "threads; with several collectives of one group in flight (what jointfx's "
                      "plans do) PyTorch 2.15 corrupts the heap now and then: call "
                      "jointfx.groups.use_one_gloo_worker_thread() before "
                      "dist.init_process_group (docs/executor.md, Limits)", JointfxWarning,
                      stacklevel=2)
    header = header_of(source)
    world, rank = dist.get_world_size(), dist.get_rank()
    shape = list(header.get("meta", {}).get("mesh", {}).get("shape", [world]))
    if math.prod(shape) != world:
        raise RuntimeError(f"graph mesh {shape} does not fit a world of {world} ranks")
    default_name = dist.group.WORLD.group_name
    wanted: list[tuple[str, list[tuple[int, ...]]]] = []
    for pg in header.get("process_groups", []):
        name = pg["name"]
        if name == default_name or (_is_process_group_registered(name) and not replace):
            continue
        ranks = [int(r) for r in (pg.get("ranks") or range(pg["size"]))]
        if any(r < 0 or r >= world for r in ranks):
            raise RuntimeError(f"process group {name!r}: ranks {ranks} outside a world of "
                               f"{world}")
        wanted.append((name, [tuple(m) for m in mesh_slices(ranks, shape) or [sorted(ranks)]]))
    # dist.new_group is collective over the world, but ranks' graphs may want different groups:
    # traced under a sub-mesh, rank 0's graph names its own replica's group ([0, 1]) where rank
    # 2's names [2, 3] (under torchtitan's HSDP, with c10d names that differ too). So every rank
    # makes every group any rank wants, in one order. A group is (members, k): a graph wanting
    # two groups over the same members (split-comm-groups' copy) gets two communicators.
    keys: list[list[tuple[tuple[int, ...], int]]] = []
    seen: dict[tuple[int, ...], int] = {}
    for _, slices in wanted:
        keys.append([])
        for members in slices:
            keys[-1].append((members, seen.get(members, 0)))
        for members in set(slices):
            seen[members] = seen.get(members, 0) + 1
    needed = sorted({k for ks in keys for k in ks})
    if world > 1:
        everyone: list[Any] = [None] * world
        dist.all_gather_object(everyone, needed)
        needed = sorted({(tuple(m), k) for ks in everyone for m, k in ks})
    groups = {key: dist.new_group(list(key[0])) for key in needed}
    made: dict[str, Any] = {}
    for (name, _), ks in zip(wanted, keys):
        mine = next((groups[key] for key in ks if rank in key[0]), None)
        if mine is None:
            continue
        if _is_process_group_registered(name):
            _unregister_process_group(name)
        _register_process_group(name, mine)
        made[name] = mine
    return made


def use_one_gloo_worker_thread() -> bool:
    """Makes every gloo process group created from now on in this process run its collectives on
    one worker thread instead of PyTorch's two: in PyTorch 2.15 two collectives of one group in
    flight on two threads corrupt the heap now and then (a double free in ProcessGroupGloo's
    runLoop; docs/executor.md, Limits), and jointfx's plans (prefetched, bucketed all-gathers)
    are what puts several in flight. Results are the same; the price is the overlap of those
    collectives on CPU. Re-registers c10d's "gloo" backend through
    `torch.distributed.Backend.register_backend`; options a caller passes (`pg_options`) are
    kept, with one thread. Call it before `init_process_group`, on every rank. Returns False
    (and changes nothing) where this torch has no gloo."""
    import torch.distributed as dist
    from torch.distributed import Backend, ProcessGroup

    if not dist.is_available() or not dist.is_gloo_available():
        return False
    gloo = dist.ProcessGroupGloo

    def create(opts: Any, backend_options: Any) -> Any:
        options = backend_options if isinstance(backend_options, gloo._Options) else \
            gloo._Options()
        if not options._devices:
            options._devices = [gloo.create_default_device()]
        options._threads = 1
        options._timeout = opts.timeout
        options.global_ranks_in_group = opts.global_ranks_in_group
        options.group_name = opts.group_id
        return gloo(opts.store, opts.group_rank, opts.group_size, options)

    Backend.register_backend(Backend.GLOO, create, extended_api=True,
                             devices=Backend.backend_capability[Backend.GLOO],
                             _backend_type=ProcessGroup.BackendType.GLOO)
    return True


def gloo_worker_threads(group: Any = None) -> int | None:
    """The worker threads of `group`'s gloo backend (default: the world), or None where it has
    none."""
    import torch
    import torch.distributed as dist

    try:
        backend = (group or dist.group.WORLD)._get_backend(torch.device("cpu"))
    except RuntimeError:
        return None
    options = getattr(backend, "options", None)
    return getattr(options, "_threads", None)
