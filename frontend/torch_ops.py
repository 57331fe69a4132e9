"""The torch.export importer's op table and what its handlers share.

`handles(aten.add.Tensor, ...)` registers a function `(importer, node, args, kwargs) -> value`
in `HANDLERS`; the handlers live in torch_handlers.py and `infer.frontend.torch_import.Importer`
calls them for every FX node that is not folded at import time. Arguments are graph values
(`SSAValue`), tensors known at import time (`KnownTensor`) or Python values; a handler raises
`Unsupported("op:<name>")` for an op form it does not handle, `Unsupported(message)` for
anything else it cannot import.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import ml_dtypes
import numpy as np
import torch

from infer.frontend.model import ModelImportError

if TYPE_CHECKING:
    from infer.frontend.torch_import import Importer  # noqa: F401 (named in Handler)

aten = torch.ops.aten

_TORCH_TO_NUMPY = {
    torch.float32: np.float32,
    torch.float64: np.float64,
    torch.float16: np.float16,
    torch.bfloat16: ml_dtypes.bfloat16,
    torch.bool: np.bool_,
    torch.int8: np.int8,
    torch.int16: np.int16,
    torch.int32: np.int32,
    torch.int64: np.int64,
    torch.uint8: np.uint8,
}


def torch_numpy_dtype(dtype: torch.dtype) -> np.dtype:
    if dtype not in _TORCH_TO_NUMPY:
        raise ModelImportError(f"torch dtype {dtype} is not supported")
    return np.dtype(_TORCH_TO_NUMPY[dtype])


def to_numpy(t: torch.Tensor) -> np.ndarray:
    """A torch tensor as a numpy array (bf16 through ml_dtypes)."""
    t = t.detach().cpu().contiguous()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16).copy()
    return t.numpy().copy()


class KnownTensor:
    """A tensor known at import time; `name` is its state_dict name if any."""

    __slots__ = ("tensor", "name")

    def __init__(self, tensor: torch.Tensor, name: str | None = None):
        self.tensor = tensor
        self.name = name


class Unsupported(Exception):
    """A node cannot be imported: "op:NAME" for an unsupported op (collected per op), else
    the reason."""


Handler = Callable[["Importer", Any, list, dict], Any]
HANDLERS: dict[Any, Handler] = {}
"""ATen op overload (or Python callable) -> its handler."""


def handles(*targets: Any) -> Callable[[Handler], Handler]:
    """Register the decorated function for `targets` in HANDLERS."""

    def register(fn: Handler) -> Handler:
        for t in targets:
            HANDLERS[t] = fn
        return fn

    return register


def target_name(target: Any) -> str:
    """How messages name an FX call target: aten.add.Tensor, operator.getitem's name, ..."""
    if isinstance(target, torch._ops.OpOverload):
        return f"aten.{target._opname}.{target._overloadname}" if target.namespace == "aten" else str(target)
    return getattr(target, "__name__", str(target))


def normalize_dim(d: int, rank: int) -> int:
    """A torch dimension index (negative counts from the end) as 0..rank-1."""
    return d + rank if d < 0 else d
