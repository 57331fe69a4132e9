"""Rules of the repository that tests can keep: import layering and test-file names."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]

# Imports point down: tools -> frontend, passes, runtime, serving -> dialects, target.
FORBIDDEN = {
    "target": ("infer.dialects", "infer.passes", "infer.frontend", "infer.runtime", "infer.tools"),
    "dialects": ("infer.passes", "infer.frontend", "infer.runtime", "infer.tools"),
    "passes": ("infer.frontend", "infer.runtime", "infer.tools"),
    # serving imports the runtime and target; models come through the public infer.import_model
    "serving": ("infer.passes", "infer.frontend", "infer.dialects", "infer.tools"),
}


def _imports(path: Path) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            found.extend((node.lineno, a.name) for a in node.names)
    return found


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_imports_point_down(layer: str) -> None:
    bad = [
        f"{path.relative_to(ROOT)}:{line}: imports {module}"
        for path in sorted((ROOT / layer).glob("*.py"))
        for line, module in _imports(path)
        if module.startswith(FORBIDDEN[layer])
    ]
    assert not bad, "\n".join(bad)


def test_test_file_basenames_are_unique() -> None:
    # test/unit has no __init__.py files, so pytest imports test modules by basename.
    names = Counter(p.name for p in (ROOT / "test" / "unit").rglob("test_*.py"))
    assert not [n for n, c in names.items() if c > 1]
