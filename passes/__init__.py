"""infer.passes: transformations between and within the IR levels.

`infer_passes()` maps every registered pass name (its `-p` spelling) to a
factory, the way xDSL's multiverse does, so `infer-opt -p NAME{opt=val}` and
Python pipelines find the same passes. Named pipelines are passes too: each
runs a fixed list of passes (see `infer.passes.pipelines`).
"""

from collections.abc import Callable

from xdsl.passes import ModulePass

# name -> "module:ClassName"; imported lazily so infer-opt starts fast.
_PASSES: dict[str, str] = {
}


def _loader(spec: str) -> Callable[[], type[ModulePass]]:
    def load() -> type[ModulePass]:
        import importlib

        module, cls = spec.split(":")
        return getattr(importlib.import_module(module), cls)

    return load


def infer_passes() -> dict[str, Callable[[], type[ModulePass]]]:
    return {name: _loader(spec) for name, spec in _PASSES.items()}
