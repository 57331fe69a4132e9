"""Reading and writing textual IR: one MLIR context with every
dialect registered, a parser that records source locations, and verification
that names the file:line of the failing op.

Both `infer-opt` and the `infer` CLI go through here, so a bad file gives the
same one-line diagnostic everywhere.
"""

from __future__ import annotations

import bisect
import os
from dataclasses import dataclass
import re
import sys
import tempfile
from pathlib import Path

import numpy as np

from xdsl.context import Context
from xdsl.dialects.builtin import (
    BFloat16Type,
    FileLineColLoc,
    Float16Type,
    Float32Type,
    Float64Type,
    IntAttr,
    ModuleOp,
    NameLoc,
    StringAttr,
)
from xdsl.ir import Operation
from xdsl.parser import AttrParser, Parser
from xdsl.printer import Printer
from xdsl.universe import Universe
from xdsl.utils.exceptions import DiagnosticException, ParseError, VerifyException

from infer.dialects import infer_dialects
from infer.dialects.weights import WeightStoreError, save_weights, weights_of


class IRError(Exception):
    """Bad IR input: the message is one line, starting with `file:line:col:` when known."""


class LoweringError(IRError):
    """A lowering pass cannot lower an op: see `lowering_error`."""


def lowering_error(op: Operation, stage: str, msg: str) -> LoweringError:
    """`file:line:col: error: 'dialect.op' op STAGE: MSG`, the one-line form every pass uses."""
    return LoweringError(f"{describe_location(op)}: error: '{op.name}' op {stage}: {msg}")


def make_context(allow_unregistered: bool = False) -> Context:
    ctx = Context(allow_unregistered=allow_unregistered)
    for name, factory in Universe.get_multiverse().all_dialects.items():
        ctx.register_dialect(name, factory)
    for name, factory in infer_dialects().items():
        ctx.register_dialect(name, factory)
    return ctx


_FLOAT_BITS = {  # float element type -> (hex digits, how its bit pattern becomes the value)
    Float16Type: (4, lambda bits: float(np.uint16(bits).view(np.float16))),
    BFloat16Type: (4, lambda bits: float(np.uint32(bits << 16).view(np.float32))),
    Float32Type: (8, lambda bits: float(np.uint32(bits).view(np.float32))),
    Float64Type: (16, lambda bits: float(np.uint64(bits).view(np.float64))),
}


@dataclass
class _HexLiteral(AttrParser._TensorLiteralElement):
    """A hexadecimal element of a dense literal: for a float element type the bit pattern of
    the value, as MLIR reads it and as xDSL prints -inf, inf and NaN (`dense<0xff800000> :
    tensor<f32>`); xDSL 0.75 reads the integer 4286578688 instead (xdsl issue #3370), so IR
    it printed came back with every -inf mask turned into 4.3e9."""

    digits: str = ""

    def to_type(self, parser: AttrParser, type):  # noqa: A002 (xDSL's parameter name)
        layout = _FLOAT_BITS.get(type.__class__)
        if layout is None:
            return super().to_type(parser, type)
        width, value_of = layout
        if self.is_negative or len(self.digits) > width:
            parser.raise_error(f"a hexadecimal float literal of {type} has at most {width} digits and no sign",
                               at_position=self.span)
        return value_of(int(self.digits, 16))


class LocatingParser(Parser):
    """A parser that attaches `file:line:col` to every op written without `loc(...)`,
    so diagnostics after parsing (verification, passes) can point at the source, and reads
    a dense literal's hexadecimal elements of a float type as bit patterns (_HexLiteral)."""

    def __init__(self, ctx: Context, text: str, name: str, line_offset: int = 0):
        super().__init__(ctx, text, name)
        self._file_attr = StringAttr(name)
        self._line_offset = line_offset
        # Offsets of line starts, so an op's line is a bisection, not a rescan.
        self._line_starts = [0] + [m.end() for m in re.finditer("\n", text)]

    def _parse_tensor_literal_element(self) -> AttrParser._TensorLiteralElement:
        text = self._current_token.text
        element = super()._parse_tensor_literal_element()
        if text[:2] in ("0x", "0X") and isinstance(element.value, int) and not isinstance(element.value, bool):
            return _HexLiteral(element.is_negative, element.value, element.span, text[2:])
        return element

    def parse_operation(self) -> Operation:
        start = self._current_token.span.start
        line = bisect.bisect_right(self._line_starts, start)
        col = start - self._line_starts[line - 1] + 1
        try:
            op = super().parse_operation()
        except VerifyException as e:  # a declarative format checks property constraints while parsing
            raise IRError(f"{self._file_attr.data}:{line + self._line_offset}:{col}: error: {first_line(str(e))}") from None
        if not isinstance(op.location, FileLineColLoc):
            op.location = FileLineColLoc(
                self._file_attr, IntAttr(line + self._line_offset), IntAttr(col)
            )
        return op


def decode_source(data: bytes, name: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise IRError(f"{name}:{line}: error: input is not valid UTF-8 (byte 0x{data[e.start]:02x})") from None


def parse_ir(ctx: Context, text: str, name: str, line_offset: int = 0) -> ModuleOp:
    """Parse one module; every failure becomes an IRError with file:line:col.
    An input of only whitespace and comments is an empty module, as in mlir-opt."""
    if all(not line.strip() or line.lstrip().startswith("//") for line in text.splitlines()):
        return ModuleOp([])
    try:
        return LocatingParser(ctx, text, name, line_offset).parse_module()
    except ParseError as e:
        _, line, col = e.span.get_location()
        raise IRError(f"{name}:{line + line_offset}:{col}: error: {e.msg}") from None
    except RecursionError:
        raise IRError(
            f"{name}: error: the input nests regions or attributes too deeply for the parser "
            f"(Python recursion limit {sys.getrecursionlimit()})"
        ) from None


def describe_location(op: Operation) -> str:
    """`file:line:col` of op (parsed IR), the label of the model node it was imported from
    (a NameLoc: `model.onnx: Conv node 'conv1'`), or its parent's location."""
    loc = op.location
    if isinstance(loc, FileLineColLoc):
        return f"{loc.filename.data}:{loc.line.data}:{loc.column.data}"
    if isinstance(loc, NameLoc):
        return loc.desc.data
    parent = op.parent_op()
    return describe_location(parent) if parent is not None else "<unknown location>"


def first_line(message: str) -> str:
    return message.strip().splitlines()[0] if message.strip() else message


def verify_module(module: ModuleOp) -> None:
    """Verify op by op so the error names the op that failed and where it is."""
    for op in module.walk():
        try:
            op.verify(verify_nested_ops=False)
        except DiagnosticException as e:
            cause = e.__cause__ if e.__cause__ is not None else e
            raise IRError(
                f"{describe_location(op)}: error: '{op.name}' op {first_line(str(cause))}"
            ) from None
        except RecursionError:
            raise IRError(f"{describe_location(op)}: error: '{op.name}' op nests too deeply to verify") from None


def load_ir_file(path: str | os.PathLike[str], ctx: Context | None = None) -> ModuleOp:
    """Parse and verify an IR file; its weights resolve relative to its folder."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise IRError(f"{path}: error: cannot read file: {e.strerror}") from None
    module = parse_ir(ctx or make_context(), decode_source(data, str(path)), str(path))
    verify_module(module)
    bind_weights(module, path.parent)
    return module


def bind_weights(module: ModuleOp, base_dir: str | os.PathLike[str]) -> None:
    try:
        weights_of(module, base_dir)
    except WeightStoreError as e:
        raise IRError(f"error: {e}") from None


def check_weights_present(module: ModuleOp) -> None:
    """Every weight op (graph.weight, tile.weight) must name a tensor the module's
    store has. A module with no weights at all (no `graph.weights` file, nothing
    in memory) is hand-written IR whose references stay unresolved until a value
    is needed, as MLIR does with external resources."""
    from infer.dialects.weights import weight_op_types

    store = weights_of(module)
    if store.file is None and not store.has_local:
        return
    for op in module.walk():
        if not isinstance(op, weight_op_types()):
            continue
        try:
            present = op.weight_key in store
        except WeightStoreError as e:
            raise IRError(f"{describe_location(op)}: error: '{op.name}' op {e}") from None
        if not present:
            where = f"'{store.file}'" if store.file else "the module's in-memory weights"
            raise IRError(f"{describe_location(op)}: error: '{op.name}' op weight '{op.weight_key}' not found in {where}")


def module_to_text(module: ModuleOp, out_path: str | os.PathLike[str] | None = None, stem: str = "module") -> str:
    """Print a module, first writing any weights created in memory beside `out_path`,
    or, when printing to stdout, to `<tmp>/infer-weights/` (content-addressed, referred
    to by absolute path, so pipes work and source trees stay clean)."""
    check_weights_present(module)
    if out_path is not None:
        out_dir = Path(out_path).resolve().parent
        save_weights(module, out_dir, Path(out_path).stem, relative_to=out_dir)
    else:
        out_dir = Path(tempfile.gettempdir()) / "infer-weights"
        out_dir.mkdir(exist_ok=True)
        save_weights(module, out_dir, stem)
    import io

    stream = io.StringIO()
    Printer(stream=stream).print_op(module)
    stream.write("\n")
    return stream.getvalue()
