"""PyTorch frontend: torch.export programs into the graph dialect.

    module = import_torch(nn_module, example_inputs)     # exports, then imports
    module = import_torch(exported_program)
    module = import_pt2("model.pt2")                      # torch.export.save output

Pipeline
1. `torch.export.export(module, args, kwargs, strict=False)` (the module is put
   in eval mode first).
2. `ep.run_decompositions(table)` down to core ATen, except for a few ops that
   map one-to-one onto graph ops and would otherwise explode into many small
   ones: `aten.linear` (-> graph.linear, no transposed weight copies),
   `aten.scaled_dot_product_attention` (-> graph.attention) and `aten.silu`.
3. A walk over the FX graph. Parameters, buffers and lifted constants become
   `graph.weight` ops named by their state_dict names. Every node whose tensor
   inputs are all known at import time (parameters, buffers, constants and
   what is computed from them only: causal masks, position ids, RoPE cos/sin
   tables, ...) is evaluated with torch right away (constant folding), so the
   IR keeps only the computation that depends on the model inputs. Shapes are
   static (those of the example inputs). Every other node goes to its handler
   (torch_handlers.py, and torch_experts.py for mixture-of-experts layers, registered in the
   table of torch_ops.py).

Unsupported ATen ops raise one `ModelImportError` listing every such op with the
FX node names that use it.

Safety of .pt2 files: in torch 2.13 `torch.export.load` is NOT a weights-only
loader. Pickled weights/constants are read with `torch.load(weights_only=False)`,
opaque constants with `pickle.loads`, script objects with
`torch._C._pickle_load_obj`, and an AOTInductor package loads a shared library;
the sample inputs fall back to `weights_only=False` when the safe load fails.
`import_pt2` therefore inspects the archive first and refuses any file that
holds pickled payloads, custom/opaque objects, AOTInductor code or the legacy
(pre-2.8) layout, and while torch deserializes the archive it forces every
`torch.load` to `weights_only=True` and makes `pickle.loads` fail.
"""

from __future__ import annotations

import contextlib
import json
import operator
import os
import pickle
import threading
import warnings
import zipfile
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Block, SSAValue

from infer.frontend import torch_experts, torch_handlers
from infer.frontend.builder import GraphBuilder
from infer.frontend.model import ModelImportError
from infer.frontend.torch_ops import (
    HANDLERS,
    KnownTensor,
    Unsupported,
    aten,
    target_name,
    to_numpy,
    torch_numpy_dtype,
)

_HANDLER_MODULES = (torch_handlers, torch_experts)
"""Imported for their `handles` registrations in HANDLERS."""

KEPT_OPS = (
    aten.linear.default,
    aten.scaled_dot_product_attention.default,
    aten.silu.default,
    *torch_handlers.RESAMPLING_OVERLOADS,
)
"""Ops kept out of the core-ATen decomposition because they map onto one graph op (or, the
resampling ops, one product per axis)."""


# --------------------------------------------------------------------------
# Entry points
# --------------------------------------------------------------------------


def export_program(module: torch.nn.Module, example_inputs: Any) -> torch.export.ExportedProgram:
    if example_inputs is None:
        raise ModelImportError(
            "importing a torch.nn.Module needs example_inputs (a tensor, a tuple of "
            "positional inputs, or a dict of keyword inputs)"
        )
    if isinstance(example_inputs, torch.Tensor):
        args, kwargs = (example_inputs,), {}
    elif isinstance(example_inputs, dict):
        args, kwargs = (), dict(example_inputs)
    elif isinstance(example_inputs, list | tuple) and len(example_inputs) == 2 and isinstance(example_inputs[1], dict) and isinstance(example_inputs[0], list | tuple):
        args, kwargs = tuple(example_inputs[0]), dict(example_inputs[1])
    else:
        args, kwargs = tuple(example_inputs), {}
    module.eval()
    try:
        with torch.no_grad(), _torch_internal_warnings():
            return torch.export.export(module, args, kwargs, strict=False)
    except Exception as e:  # torch raises many types; report one clear message
        raise ModelImportError(f"torch.export failed for {type(module).__name__}: {type(e).__name__}: {e}") from e


@contextlib.contextmanager
def _torch_internal_warnings():
    """Silence deprecation warnings torch 2.13 raises against its own internals
    (deep-copying a pytree `LeafSpec` inside export/run_decompositions); they
    are not about the user's model and would fail runs under `-W error`."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)", category=FutureWarning)
        yield


def decomposition_table() -> dict:
    table = torch.export.default_decompositions()
    for op in KEPT_OPS:
        table.pop(op, None)
    return table


def import_torch(module_or_ep: Any, example_inputs: Any = None, **options: Any) -> ModuleOp:
    """Import a torch.nn.Module (exported with `example_inputs`) or an ExportedProgram."""
    if options:
        raise ModelImportError(f"import_torch: unknown options {sorted(options)}")
    if isinstance(module_or_ep, torch.export.ExportedProgram):
        ep = module_or_ep
    elif isinstance(module_or_ep, torch.nn.Module):
        ep = export_program(module_or_ep, example_inputs)
    else:
        raise ModelImportError(
            f"import_torch: expected a torch.nn.Module or torch.export.ExportedProgram, got "
            f"{type(module_or_ep).__name__}"
        )
    try:
        with _torch_internal_warnings():
            ep = ep.run_decompositions(decomposition_table())
    except Exception as e:
        raise ModelImportError(f"decomposing the exported program to core ATen failed: {type(e).__name__}: {e}") from e
    return Importer(ep).run()


# -- .pt2 ------------------------------------------------------------------

_LOAD_LOCK = threading.Lock()


def check_pt2_archive(path: Path) -> None:
    """Refuse archives whose loading would unpickle arbitrary objects or load code."""
    try:
        zf = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as e:
        raise ModelImportError(f"{path}: not a torch.export archive (.pt2 is a zip file): {e}") from None
    with zf:
        names = zf.namelist()
        if not any(n.endswith("archive_version") for n in names):
            raise ModelImportError(
                f"{path}: legacy or unknown .pt2 layout (no archive_version); refusing to load it "
                "because torch would unpickle its contents (save it again with torch >= 2.8)"
            )
        if not any("/models/" in n or n.startswith("models/") for n in names):
            raise ModelImportError(f"{path}: the archive holds no exported program (models/*.json)")
        reasons = []
        for n in names:
            if "/data/aotinductor/" in n or n.startswith("data/aotinductor/"):
                reasons.append(f"AOTInductor code ({n})")
            if n.endswith("_weights_config.json") or n.endswith("_constants_config.json"):
                try:
                    cfg = json.loads(zf.read(n))
                except ValueError as e:
                    raise ModelImportError(f"{path}: {n} is not valid JSON: {e}") from None
                for fqn, meta in (cfg.get("config") or {}).items():
                    if meta.get("use_pickle"):
                        reasons.append(f"pickled tensor '{fqn}'")
                    pn = str(meta.get("path_name", ""))
                    if n.endswith("_constants_config.json") and not pn.startswith("tensor"):
                        reasons.append(f"custom/opaque object constant '{fqn}' ({pn})")
        if reasons:
            raise ModelImportError(
                f"{path}: refusing to load: torch.export.load would unpickle or run code for "
                + ", ".join(sorted(set(reasons))[:10])
            )


@contextlib.contextmanager
def _weights_only_loading():
    """While active, every torch.load is weights_only=True and pickle.loads fails."""
    real_load, real_loads = torch.load, pickle.loads

    def safe_load(*args, **kwargs):
        kwargs["weights_only"] = True
        return real_load(*args, **kwargs)

    def no_loads(*args, **kwargs):
        raise pickle.UnpicklingError("pickle.loads is disabled while loading a .pt2 file")

    with _LOAD_LOCK:
        torch.load = safe_load
        pickle.loads = no_loads
        try:
            yield
        finally:
            torch.load = real_load
            pickle.loads = real_loads


def import_pt2(path: str | os.PathLike[str], **options: Any) -> ModuleOp:
    path = Path(path)
    if not path.is_file():
        raise ModelImportError(f"{path}: no such file")
    check_pt2_archive(path)
    try:
        with _weights_only_loading():
            ep = torch.export.load(str(path))
    except ModelImportError:
        raise
    except Exception as e:
        raise ModelImportError(f"{path}: cannot load the exported program: {type(e).__name__}: {e}") from None
    return import_torch(ep, **options)


# --------------------------------------------------------------------------
# The FX walk
# --------------------------------------------------------------------------

_IGNORED = {
    aten._assert_tensor_metadata.default,
    aten.sym_constrain_range_for_size.default,
    aten._assert_scalar.default,
}
_NEVER_FOLD = {aten.rand.default, aten.randn.default, aten.bernoulli.default, aten.native_dropout.default}
_EMPTY = {aten.empty.memory_format, aten.empty_permuted.default, aten.empty_strided.default,
          aten.new_empty.default, aten.empty_like.default}
"""Uninitialized tensors: folded as zeros, so a program does not depend on the memory torch
handed out at import time (transformers' MoE fills one by index_put)."""


class Importer:
    """The import of one exported program: `env` maps each FX node to its value (a graph
    value, a KnownTensor or a Python value), `b` is the GraphBuilder handlers emit through,
    `node` the node being imported (its `meta["val"]` gives the result dtype and shape)."""

    def __init__(self, ep: torch.export.ExportedProgram):
        self.ep = ep
        self.b = GraphBuilder()
        self.env: dict[Any, Any] = {}
        self.materialized: dict[int, SSAValue] = {}
        self.node: Any = None

    # -- values ------------------------------------------------------------
    def value(self, x: Any) -> SSAValue:
        """An SSA value for a node value (materializing constants)."""
        if isinstance(x, SSAValue):
            return x
        if isinstance(x, KnownTensor):
            key = id(x)
            if key not in self.materialized:
                arr = to_numpy(x.tensor)
                if x.name is not None:
                    self.materialized[key] = self.b.weight(x.name, arr)
                else:
                    self.materialized[key] = self.b.constant(arr, name=_clean(self.node.name) if self.node is not None else "const")
            return self.materialized[key]
        raise Unsupported(f"expected a tensor, got {type(x).__name__}")

    def out_dtype(self) -> np.dtype:
        return torch_numpy_dtype(self.node.meta["val"].dtype)

    def out_shape(self) -> tuple[int, ...]:
        return tuple(int(d) for d in self.node.meta["val"].shape)

    def operand(self, x: Any, dtype: np.dtype) -> SSAValue:
        """A tensor or Python scalar as an SSA value of `dtype`."""
        if isinstance(x, bool | int | float):
            return self.b.constant(np.asarray(x, dtype=dtype))
        return self.b.cast(self.value(x), dtype)

    # -- walk --------------------------------------------------------------
    def run(self) -> ModuleOp:
        ep = self.ep
        sig = ep.graph_signature
        specs = {s.arg.name: s for s in sig.input_specs if hasattr(s.arg, "name")}
        state = ep.state_dict
        constants = getattr(ep, "constants", {}) or {}
        unsupported: dict[str, list[str]] = defaultdict(list)
        errors: list[str] = []
        outputs: list[Any] = []
        failed: set[Any] = set()
        for node in ep.graph.nodes:
            self.node = node
            if node.op == "placeholder":
                spec = specs.get(node.name)
                kind = spec.kind.name if spec is not None else "USER_INPUT"
                if kind in ("PARAMETER", "BUFFER", "CONSTANT_TENSOR"):
                    target = spec.target
                    tensor = state[target] if target in state else constants[target]
                    if not isinstance(tensor, torch.Tensor):
                        unsupported[f"non-tensor constant {type(tensor).__name__}"].append(node.name)
                        continue
                    self.env[node] = KnownTensor(tensor.detach(), target)
                elif kind == "USER_INPUT":
                    val = node.meta.get("val")
                    if isinstance(val, torch.Tensor):
                        shape = tuple(int(d) for d in val.shape)
                        self.env[node] = self.b.input(node.name, shape, torch_numpy_dtype(val.dtype))
                    else:
                        self.env[node] = val  # a Python constant input (e.g. use_cache=False)
                else:
                    unsupported[f"input kind {kind}"].append(node.name)
            elif node.op == "call_function":
                if any(a in failed for a in node.all_input_nodes):
                    failed.add(node)  # already reported at its failing input
                    continue
                try:
                    self.env[node] = self.call(node)
                except Unsupported as e:
                    failed.add(node)
                    msg = str(e)
                    if msg.startswith("op:"):
                        unsupported[msg[3:]].append(node.name)
                    else:
                        errors.append(f"{node.name} ({target_name(node.target)}): {msg}")
                except Exception as e:  # a verifier error for an op we emitted
                    failed.add(node)
                    errors.append(f"{node.name} ({target_name(node.target)}): {type(e).__name__}: {e}")
            elif node.op == "output":
                outputs = list(node.args[0])
                kinds = [spec.kind.name for spec in sig.output_specs]
                mutated = [spec.target for spec in sig.output_specs if spec.kind.name != "USER_OUTPUT"]
                if mutated:
                    errors.append(
                        "the program mutates state (" + ", ".join(map(str, mutated[:5]))
                        + "): stateful modules (a StaticCache, BatchNorm in training mode, ...) are not "
                        "supported; pass the state as explicit inputs and outputs"
                    )
                outputs = [o for o, k in zip(outputs, kinds, strict=True) if k == "USER_OUTPUT"]
            elif node.op == "get_attr":
                obj = getattr(ep.graph_module, node.target)
                if isinstance(obj, torch.Tensor):
                    self.env[node] = KnownTensor(obj.detach(), None)
                else:
                    unsupported[f"get_attr of {type(obj).__name__}"].append(node.name)
            else:
                unsupported[f"FX node kind {node.op}"].append(node.name)
        if unsupported or errors:
            parts = []
            if unsupported:
                parts.append(
                    "unsupported ops: "
                    + "; ".join(f"{op} (nodes: {', '.join(ns[:5])}{', ...' if len(ns) > 5 else ''})" for op, ns in unsupported.items())
                )
            parts.extend(errors[:10])
            raise ModelImportError("cannot import the exported program: " + "; ".join(parts))
        self.node = None
        out_values, out_names = [], []
        names = _output_names(ep, len(outputs))
        for i, o in enumerate(outputs):
            if o is None:
                continue
            v = self.env.get(o, o) if hasattr(o, "op") else o
            if isinstance(v, bool | int | float):
                v = KnownTensor(torch.tensor(v))
            out_values.append(self.value(v))
            out_names.append(names[i])
        keep = {id(v.owner) for v in out_values if not isinstance(v.owner, Block)}
        _erase_dead(self.b.block, keep)
        return self.b.finish(out_values, out_names)

    def call(self, node) -> Any:
        target = node.target
        if target in _IGNORED:
            return None
        args = [self._arg(a) for a in node.args]
        kwargs = {k: self._arg(v) for k, v in node.kwargs.items()}
        if target is operator.getitem:
            seq, i = args
            if isinstance(seq, list | tuple):
                if seq[i] is None:
                    raise Unsupported(f"output #{i} of a multi-output op is not supported (only the main result)")
                return seq[i]
            raise Unsupported("getitem on a non-tuple")
        if target in _EMPTY:
            val = node.meta["val"]
            return KnownTensor(torch.zeros(tuple(int(d) for d in val.shape), dtype=val.dtype))
        if target not in _NEVER_FOLD and _foldable(args) and _foldable(list(kwargs.values())):
            with torch.no_grad():
                res = target(*_unwrap(args), **_unwrap(kwargs))
            return _wrap(res)
        handler = HANDLERS.get(target) or HANDLERS.get(target_name(target))  # (others' ops by name)
        if handler is None:
            raise Unsupported("op:" + target_name(target))
        return handler(self, node, args, kwargs)

    def _arg(self, a: Any) -> Any:
        if hasattr(a, "op") and hasattr(a, "target"):  # an fx.Node
            return self.env.get(a)
        if isinstance(a, list | tuple):
            return type(a)(self._arg(x) for x in a)
        return a


def _erase_dead(block: Block, keep: set[int]) -> None:
    """Drop ops whose results are unused (left behind by the fusions below)."""
    for op in reversed(list(block.ops)):
        if id(op) not in keep and all(not r.uses for r in op.results):
            block.erase_op(op)


def _clean(name: str) -> str:
    return "".join(c if c.isalnum() or c in "._" else "_" for c in name)


def _output_names(ep, n: int) -> list[str]:
    names = [f"output{i}" for i in range(n)]
    try:
        from torch.utils._pytree import keystr, tree_flatten_with_path, tree_unflatten

        tree = tree_unflatten(list(range(n)), ep.call_spec.out_spec)
        leaves, _ = tree_flatten_with_path(tree)
        for path, idx in leaves:
            key = keystr(path)
            key = key.strip("[]'\".").replace("']['", ".").replace("[", ".").replace("]", "").replace("'", "").replace('"', "")
            if key:
                names[idx] = key if not key.isdigit() else f"output{key}"
    except Exception:
        pass
    seen: set[str] = set()
    for i, nm in enumerate(names):
        if nm in seen:
            names[i] = f"{nm}_{i}"
        seen.add(names[i])
    return names


def _foldable(args: Sequence[Any]) -> bool:
    for a in args:
        if isinstance(a, SSAValue):
            return False
        if isinstance(a, list | tuple) and not _foldable(a):
            return False
    return True


def _unwrap(x: Any) -> Any:
    if isinstance(x, KnownTensor):
        return x.tensor
    if isinstance(x, list | tuple):
        return type(x)(_unwrap(a) for a in x)
    if isinstance(x, dict):
        return {k: _unwrap(v) for k, v in x.items()}
    return x


def _wrap(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return KnownTensor(x)
    if isinstance(x, list | tuple):
        return type(x)(_wrap(a) for a in x)
    return x
