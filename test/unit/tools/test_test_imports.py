"""Test modules share helpers through test/unit/helpers (`from helpers.x import ...`), never by
editing sys.path, loading files by path, or importing another test module or a conftest:
test/unit has no __init__.py, so pytest imports those by basename and such an import can
silently pick another folder's module."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
TESTS = ROOT / "test" / "unit"


def _offences(path: Path, root: Path = ROOT) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        where = f"{path.relative_to(root)}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Attribute) and node.attr == "path" and isinstance(node.value, ast.Name) and node.value.id == "sys":
            found.append(f"{where}: uses sys.path")
        elif isinstance(node, ast.Attribute | ast.Name) and "spec_from_file_location" in (getattr(node, "attr", None), getattr(node, "id", None)):
            found.append(f"{where}: loads a module by file path")
        elif isinstance(node, ast.ImportFrom | ast.Import):
            modules = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
            for module in modules:
                first = module.split(".")[0]
                if first == "conftest" or first.startswith("test_"):
                    found.append(f"{where}: imports {module} (move what it shares to test/unit/helpers)")
    return found


def test_tests_import_shared_helpers_normally() -> None:
    bad = [o for path in sorted(TESTS.rglob("*.py")) for o in _offences(path)]
    assert not bad, "\n".join(bad)


def test_the_rule_sees_each_kind_of_offence(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import sys, importlib.util\nsys.path.insert(0, '.')\n"
        "spec = importlib.util.spec_from_file_location('m', 'm.py')\n"
        "from test_other import helper\nfrom conftest import fixture\n"
    )
    offences = _offences(sample, tmp_path)
    assert sorted(offences) == [
        "sample.py:2: uses sys.path",
        "sample.py:3: loads a module by file path",
        "sample.py:4: imports test_other (move what it shares to test/unit/helpers)",
        "sample.py:5: imports conftest (move what it shares to test/unit/helpers)",
    ]
