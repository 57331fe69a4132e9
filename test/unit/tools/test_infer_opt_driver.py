"""infer-opt's pass manager and documentation: stages of named pipelines, the checks
between stages, the pass descriptions --help prints, and the plugin example of
docs/writing-a-pass.md staying the one the lit test installs."""

from __future__ import annotations

import io
import re
from dataclasses import dataclass
from pathlib import Path

import pytest
from xdsl.context import Context
from xdsl.dialects.builtin import DenseIntOrFPElementsAttr, ModuleOp, TensorType, f32
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from infer.dialects import graph as g
from infer.dialects.diagnostics import Diagnostic, collect, parse_diagnostics, warn
from infer.dialects.ir_io import make_context, parse_ir, verify_module
from infer.passes import PassSpecError, build_pipeline, registered_passes
from infer.passes.pipelines import PipelinePass
from infer.tools.opt_diagnostics import check_diagnostics, expected_diagnostics
from infer.tools.opt_pipeline import (
    PrintIRAfterFailure,
    StageFailed,
    TimePasses,
    VerifyEach,
    expand,
    run_stages,
)
from infer.tools.pass_docs import pass_doc

ROOT = Path(__file__).resolve().parents[3]
PLUGIN = ROOT / "test/filecheck/infer-opt/Inputs/plugin"

IR = """func.func @main(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %0 = graph.relu %x : (tensor<2x3xf32>) -> tensor<2x3xf32>
  func.return %0 : tensor<2x3xf32>
}
"""


def _own_passes():
    return {n: e for n, e in registered_passes().items() if e.origin == "infer"}


@pytest.mark.parametrize("name", sorted(_own_passes()))
def test_every_pass_and_option_is_described(name: str) -> None:
    doc = pass_doc(name, _own_passes()[name].load())
    assert doc.summary and doc.summary != "(no description)"
    undocumented = [o.name for o in doc.options if not o.doc]
    assert not undocumented, f"{name}: describe option(s) {undocumented} (docs/writing-a-pass.md)"


@pytest.mark.parametrize("name", ["graph-optimize", "graph-prepare-tiling", "lower-to-tile", "compile-npu"])
def test_expanded_stages_are_flatten(name: str) -> None:
    pipeline = _own_passes()[name].load()()
    assert isinstance(pipeline, PipelinePass)
    stages, roots = expand([pipeline])
    assert [s.pass_ for s in stages] == list(pipeline.flatten())
    assert [r.name for r in roots] == [name] and all(s.path[0] == name for s in stages)
    assert [s.index for s in stages] == list(range(len(stages))) and {s.count for s in stages} == {len(stages)}


def test_pipeline_options_name_the_stage_they_reach() -> None:
    doc = pass_doc("lower-to-tile", _own_passes()["lower-to-tile"].load())
    target = next(o for o in doc.options if o.name == "target")
    assert target.doc.startswith("forwarded to graph-defer-paged-query, graph-merge-summed-convs, "
                              "graph-fuse-activation-prologue, graph-to-tile, tile-plan-memory: "
                              "the hardware config")


def test_bad_specs_name_the_fault() -> None:
    with pytest.raises(PassSpecError, match=r"pass 'graph-fuse': option 'max-epilogue' expects <int>, got 'x'"):
        build_pipeline("graph-fuse{max-epilogue=x}")
    with pytest.raises(PassSpecError, match=r"unknown pass 'graph-fus' \(did you mean 'graph-fuse'\?\)"):
        build_pipeline("graph-fus")
    with pytest.raises(PassSpecError, match="malformed pass pipeline"):
        build_pipeline("graph-fuse{")
    (p,) = build_pipeline("graph-fuse{max-epilogue=2 kinds=matmul,conv}")
    assert p.max_epilogue == 2 and p.kinds == ("matmul", "conv")


@dataclass(frozen=True)
class _BreaksTypes(ModulePass):
    """A broken pass (for the driver's checks): feeds graph.relu an operand of another shape."""

    name = "test-breaks-types"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        relu = next(o for o in op.walk() if isinstance(o, g.ReluOp))
        other = g.ConstantOp(DenseIntOrFPElementsAttr.from_list(TensorType(f32, [3, 2]), [0.0] * 6))
        Rewriter.insert_op(other, InsertPoint.before(relu))
        relu.operands = (other.results[0],)


def test_invalid_ir_after_a_stage_is_reported_at_the_op_and_printed_generic() -> None:
    ctx = make_context()
    module = parse_ir(ctx, IR, "in.mlir")
    verify_module(module)
    stages, roots = expand([_BreaksTypes()])
    timer, printed = TimePasses(), io.StringIO()
    with pytest.raises(StageFailed) as failed:
        run_stages(ctx, module, stages, [timer, VerifyEach(timer), PrintIRAfterFailure(printed)],
                   lambda e, stage: parse_diagnostics(str(e))[0])
    d = failed.value.diagnostic
    assert (d.file, d.line, d.col) == ("in.mlir", 2, 3)
    assert "result #0 has shape 2x3 but the operands and attributes give 3x2" in d.message
    assert [n.message for n in d.notes] == [
        "the IR was valid before test-breaks-types ran: the pass produced invalid IR"]
    text = printed.getvalue()
    assert text.startswith("// IR after the failure of test-breaks-types (generic form: the IR does not verify):")
    assert '"graph.relu"(%' in text  # the generic form
    assert roots[0].seconds > 0 and timer.extra["verify"] > 0


def test_annotations_resolve_to_lines() -> None:
    text = "\n".join([
        "%a = x",                                   # 11
        "// expected-error @above {{A}}",           # 12 -> 11
        "// expected-warning @below {{B}}",         # 13 -> 15
        "// expected-note @below {{C}}",            # 14 -> 15
        "%b = y",                                   # 15
        "%c = z // expected-remark {{D}}",          # 16
        "// expected-error @-5 {{E}}",              # 17 -> 12
        "// expected-error @unknown {{F}}",         # 18 -> None
    ])
    found = expected_diagnostics(text, line_offset=10)
    assert [(e.kind, e.text, e.line) for e in found] == [
        ("error", "A", 11), ("warning", "B", 15), ("note", "C", 15), ("remark", "D", 16),
        ("error", "E", 12), ("error", "F", None)]
    produced = [Diagnostic("error", "xAx", "f", 11, 1), Diagnostic("warning", "B!", "f", 15, 2,
                notes=(Diagnostic("note", "C", "f", 15, 4),)), Diagnostic("remark", "D", "f", 16, 1),
                Diagnostic("error", "E", "f", 12, 1), Diagnostic("error", "F")]
    assert check_diagnostics(text, 10, "f", produced) == []
    assert check_diagnostics(text, 10, "g", produced[-1:])[0] == (
        "g:12:4: error: expected error \"A\" was not produced at line 11")


def test_error_text_with_notes_parses_back() -> None:
    (d,) = parse_diagnostics("a.mlir:3:5: error: 'x.y' op bad\n  context line\na.mlir:2:1: note: see here")
    assert (d.severity, d.message, d.line, d.col) == ("error", "'x.y' op bad", 3, 5)
    assert [(n.severity, n.message, n.line) for n in d.notes] == [("note", "see here", 2)]
    assert parse_diagnostics("error: compile-npu: no") == [Diagnostic("error", "compile-npu: no")]


def test_warnings_go_to_the_innermost_collector(capsys: pytest.CaptureFixture[str]) -> None:
    module = parse_ir(make_context(), IR, "w.mlir")
    relu = next(o for o in module.walk() if isinstance(o, g.ReluOp))
    with collect() as seen:
        warn(relu, "careful")
    assert [str(d) for d in seen] == ["w.mlir:2:3: warning: careful"]
    warn(relu, "loud")
    assert capsys.readouterr().err == "w.mlir:2:3: warning: loud\n"


def test_writing_a_pass_shows_the_installed_plugin_example() -> None:
    doc = (ROOT / "docs/writing-a-pass.md").read_text()
    blocks = re.findall(r"```(\w*)\n(.*?)```", doc, re.S)
    source = (PLUGIN / "infer_layer_names/__init__.py").read_text()
    assert ("python", source) in blocks, "docs/writing-a-pass.md must show the plugin example verbatim"
    (toml,) = [b for lang, b in blocks if lang == "toml"]
    entry_points = (PLUGIN / "infer_layer_names-0.1.dist-info/entry_points.txt").read_text()
    declared = re.search(r'\[project\.entry-points\."infer\.passes"\]\n(\S+) = "(\S+)"', toml)
    assert declared is not None
    assert f"[infer.passes]\n{declared.group(1)} = {declared.group(2)}\n" == entry_points
