"""infer.generation sits above frontend and runtime: tools may import it, nothing below does,
and it imports no tools (test_repo_rules.py covers the older folders)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def _imported_modules(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return found


def test_generation_layering():
    bad = []
    for path in sorted((ROOT / "generation").glob("*.py")):
        bad += [f"{path.relative_to(ROOT)} imports {m}" for m in _imported_modules(path) if m.startswith("infer.tools")]
    for layer in ("target", "dialects", "passes", "frontend", "runtime"):
        for path in sorted((ROOT / layer).glob("*.py")):
            bad += [f"{path.relative_to(ROOT)} imports {m}" for m in _imported_modules(path)
                    if m.startswith("infer.generation")]
    assert not bad, "\n".join(bad)
