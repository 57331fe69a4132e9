"""Rules of the repository that tests can keep: import layering and test-file names.

The layering is the table in docs/architecture.md ("Layering rules"): one row per top-level
folder and the folders (infer packages) its modules may import. This test reads that table, so
the docs and the check cannot disagree; a new top-level folder with Python files (a future
`serving/` or `quant/`) fails here until it has a row. Every import counts: module level,
inside functions (lazy imports), under TYPE_CHECKING, relative, and
`importlib.import_module("infer...")` with a literal name.
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
DOC = ROOT / "docs" / "architecture.md"
SKIP = {"build", "dist", "docs"}  # folders that hold no code of ours (hidden ones and *.egg-info too)
ANY = "anything"  # a table entry: may import every folder
FOLDER = r"`([a-z_]+)/`|`(\.)`"  # how the table names a folder: `passes/`, or `.` for the package's own files


def layering_table() -> dict[str, set[str] | None]:
    """The docs' table: folder -> the folders it may import (None: anything)."""
    text = DOC.read_text()
    section = text.split("## Layering rules", 1)[1].split("\n## ", 1)[0]
    table: dict[str, set[str] | None] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.lstrip().startswith("|") else []
        head = re.match(FOLDER, cells[0]) if len(cells) >= 2 else None
        if head is None:
            continue
        folder = head.group(1) or head.group(2)
        may = cells[1]
        table[folder] = None if may.startswith(ANY) else {a or b for a, b in re.findall(FOLDER, may)} | {folder}
    assert table, f"{DOC.relative_to(ROOT)}: no layering table under '## Layering rules'"
    return table


def code_folders() -> list[str]:
    return sorted(p.name for p in ROOT.iterdir()
                  if p.is_dir() and not p.name.startswith(".") and not p.name.endswith(".egg-info")
                  and p.name not in SKIP and any(p.rglob("*.py")))


def _imports(source: str, where: Path) -> list[tuple[int, str]]:
    """(line, module) of every import in `source`, the file `where` (relative to the repo
    root); relative imports are made absolute."""
    package = ["infer", *where.parent.parts]
    found = []
    for node in ast.walk(ast.parse(source, str(where))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - node.level + 1]
                found.append((node.lineno, ".".join(base + ([node.module] if node.module else []))))
            elif node.module:
                found.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            found.extend((node.lineno, a.name) for a in node.names)
        elif (isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) == "import_module"
              and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            found.append((node.lineno, node.args[0].value))
    return found


def _folder_of(module: str) -> str | None:
    """The top-level folder an `infer...` module lives in ('.' for the package itself)."""
    parts = module.split(".")
    if parts[0] != "infer":
        return None
    return parts[1] if len(parts) > 1 else "."


def test_every_folder_is_in_the_table() -> None:
    table = layering_table()
    missing = [f for f in code_folders() if f not in table]
    assert not missing, (f"top-level folder(s) {missing} hold Python code but have no row in the layering table of "
                         f"{DOC.relative_to(ROOT)}: add one saying which folders they may import")
    stale = [f for f in table if f != "." and not (ROOT / f).is_dir()]
    assert not stale, f"the layering table names folders that do not exist: {stale}"


@pytest.mark.parametrize("folder", [".", *code_folders()])
def test_imports_point_down(folder: str) -> None:
    allowed = layering_table().get(folder, set())
    if allowed is None:
        return
    files = sorted(ROOT.glob("*.py")) if folder == "." else sorted((ROOT / folder).rglob("*.py"))
    bad = [
        f"{path.relative_to(ROOT)}:{line}: imports {module} (the {folder}/ row of the layering table allows "
        f"{', '.join(sorted(allowed))})"
        for path in files
        for line, module in _imports(path.read_text(), path.relative_to(ROOT))
        if (owner := _folder_of(module)) is not None and owner not in allowed
    ]
    assert not bad, "\n".join(bad)


def test_the_check_sees_lazy_and_relative_imports() -> None:
    """The import scan itself: a lazy import, a relative one and an import_module call in a
    runtime module are all seen, and all three break the runtime row."""
    code = ("def f():\n    from infer.dialects import graph\n"
            "from ..passes import pipelines\n"
            "import importlib\nimportlib.import_module('infer.tools.driver')\n")
    found = {m for _, m in _imports(code, Path("runtime/probe.py"))}
    assert found == {"infer.dialects", "infer.passes", "importlib", "infer.tools.driver"}
    allowed = layering_table()["runtime"]
    assert allowed is not None and {_folder_of(m) for m in found} - {None} - allowed == {"dialects", "passes", "tools"}


def test_test_file_basenames_are_unique() -> None:
    # test/unit has no __init__.py files, so pytest imports test modules by basename.
    names = Counter(p.name for p in (ROOT / "test" / "unit").rglob("test_*.py"))
    assert not [n for n, c in names.items() if c > 1]
