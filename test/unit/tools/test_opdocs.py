"""The op reference (docs/dialects/*.md) is generated from the op definitions and
committed; these tests fail when it is stale or misses what a definition says."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from infer.dialects import infer_dialects
from infer.tools.opdocs import describe, pages

ROOT = Path(__file__).resolve().parents[3]
DOCS = ROOT / "docs/dialects"
GENERATED = pages()


@pytest.mark.parametrize("name", sorted(GENERATED))
def test_committed_op_reference_is_current(name: str) -> None:
    path = DOCS / name
    assert path.is_file() and path.read_text() == GENERATED[name], (
        f"{path.relative_to(ROOT)} is stale: run `.venv/bin/python -m infer.tools.opdocs -o docs/dialects/` "
        "and commit the result")


def _section(page: str, op_name: str) -> str:
    start = page.index(f"### `{op_name}` (")
    end = page.find("\n### ", start + 1)
    return page[start:] if end < 0 else page[start:end]


@pytest.mark.parametrize("dialect", sorted(infer_dialects()))
def test_every_op_has_a_section_with_its_definition(dialect: str) -> None:
    d = infer_dialects()[dialect]()
    page = GENERATED[f"{dialect}.md"]
    assert len(re.findall(r"^### `", page, re.M)) == len(list(d.operations))
    for op in d.operations:
        section = _section(page, op.name)
        assert "_(undocumented)_" not in section, f"{op.name} needs a docstring"
        defn = op.get_irdl_definition()
        for name, _ in [*defn.operands, *defn.results, *defn.regions]:
            assert f"| `{name}` |" in section, (op.name, name)
        if dialect != "npu":  # npu ops show their ISA fields instead of the properties
            for name, prop in defn.properties.items():
                if name not in ("operandSegmentSizes", "resultSegmentSizes"):
                    assert f"| `{name}` | {describe(prop.constr)}" in section, (op.name, name)
        if defn.assembly_format:
            assert defn.assembly_format in section
        assert "Verification:" in section, f"{op.name}: its verifier is undocumented"


def test_conv2d_reads_as_its_definition_says() -> None:
    section = _section(GENERATED["graph.md"], "graph.conv2d")
    assert "| `bias` | ranked tensor (optional) |" in section
    assert "| `groups` | i64 integer attribute | `1 : i64` |" in section
    assert "| `padding` | dense array (`array<i64: ...>`) | `array<i64: 0, 0, 0, 0>` |" in section
    assert "Traits: `GraphCanonicalizationPatterns`, `Pure`" in section
    assert "  - groups must be >= 1, got {groups}" in section
    assert "From `WindowedOp`: Shared attributes of conv and pooling" in section


def test_npu_ops_list_their_isa_fields_and_constraints() -> None:
    section = _section(GENERATED["npu.md"], "npu.mx.matmul")
    assert "Instruction `mx.matmul`: opcode `0x" in section
    assert re.search(r"\| `m` \| \d+ \| unsigned \| count \|", section)
    assert "- `m` is positive\n- `dtype` is one of int8, bf16" in section
    assert "- `acc` is a multiple of 4 bytes" in section
