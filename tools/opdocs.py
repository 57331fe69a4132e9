"""An op reference per dialect, generated from the op definitions (as MLIR's
`mlir-tblgen -gen-dialect-doc` does from ODS).

    python -m infer.tools.opdocs -o docs/dialects/      # writes graph.md, tile.md, npu.md
    python -m infer.tools.opdocs --check docs/dialects/ # exit 1 if a file differs (stale)

For each op: its docstring (the first paragraph is the summary) and those of
the abstract classes of the dialect it derives from, the assembly format,
traits, properties and attributes (constraint and default), operands, results
and regions (constraint, optional/variadic), and what its verifier checks
(the docstrings of `verify_` and, for graph ops, of the shape function
`infer_result_types`). npu ops add their ISA fields from `infer.target.isa`.
Nothing here is written by hand: change a docstring or a definition and run the
first command again (test/unit/tools/test_opdocs.py fails while the committed
files are stale).
"""

from __future__ import annotations

import argparse
import ast
import inspect
import re
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

from xdsl.ir import Dialect
from xdsl.irdl import IRDLOperation
from xdsl.irdl import constraints as c
from xdsl.irdl.operations import (
    OptionalDef,
    OptOperandDef,
    OptRegionDef,
    OptResultDef,
    VariadicDef,
)

# --------------------------------------------------------------------------- constraints

# Attribute/type classes by the words a reader knows them by.
_FRIENDLY = {
    "TensorType": "ranked tensor",
    "MemRefType": "memref",
    "IndexType": "index",
    "IntegerAttr": "integer attribute",
    "FloatAttr": "float attribute",
    "StringAttr": "string attribute",
    "DenseArrayBase": "dense array (`array<i64: ...>`)",
    "DenseIntOrFPElementsAttr": "dense elements attribute",
    "SymbolRefAttr": "symbol reference (`@name`)",
    "ArrayAttr": "array attribute",
    "UnitAttr": "unit attribute",
    "IntAttr": "integer",
}


def _base_name(cls: type) -> str:
    return _FRIENDLY.get(cls.__name__, f"`{getattr(cls, 'name', cls.__name__)}`")


def _param(constr: object) -> str:
    return describe(constr)


def _param_attr(k: c.ParamAttrConstraint) -> str:
    base = k.base_attr
    params = list(k.param_constrs)
    if base.__name__ in ("IntegerAttr", "FloatAttr") and len(params) == 2 and isinstance(params[1], c.EqAttrConstraint):
        return f"{params[1].attr} {_base_name(base)}"
    if base.__name__ == "DenseIntOrFPElementsAttr" and params:
        return f"{_base_name(base)} of type {_param(params[0])}"
    inner = ", ".join(_param(p) for p in params if not isinstance(p, c.AnyAttr))
    return _base_name(base) + (f" of {inner}" if inner else "")


_DESCRIBE: dict[type, Callable[[object], str]] = {
    c.AnyAttr: lambda k: "any",
    c.BaseAttr: lambda k: _base_name(k.attr),
    c.EqAttrConstraint: lambda k: f"`{k.attr}`",
    c.ParamAttrConstraint: _param_attr,
    c.VarConstraint: lambda k: f"`{k.name}` ({describe(k.constraint)}, the same wherever `{k.name}` appears)",
    c.RangeOf: lambda k: describe(k.constr),
    c.RangeLengthConstraint: lambda k: describe(k.constraint),
    c.AnyOf: lambda k: " or ".join(describe(a) for a in k.attr_constrs),
}


def describe(constr: object) -> str:
    """An IRDL constraint in words ("ranked tensor", "i64 integer attribute", ...)."""
    for kind in type(constr).__mro__:
        if kind in _DESCRIBE:
            return _DESCRIBE[kind](constr)
    return f"`{constr}`"


def _with_arity(text: str, d: object) -> str:
    if isinstance(d, OptOperandDef | OptResultDef | OptRegionDef | OptionalDef):
        return f"{text} (optional)"
    if isinstance(d, VariadicDef):
        return f"variadic of {text}"
    return text


# --------------------------------------------------------------------------- docstrings

def _clean(doc: str | None) -> str:
    return inspect.cleandoc(doc) if doc else ""


def _split(doc: str) -> tuple[str, str]:
    """(summary = first paragraph on one line, the rest)."""
    parts = doc.split("\n\n", 1)
    summary = " ".join(line.strip() for line in parts[0].splitlines())
    return summary, parts[1].strip("\n").rstrip() if len(parts) > 1 else ""


def _defined_in(klass: type, module: str) -> bool:
    """Is `klass` defined in the dialect's module (or, for a package, one of its modules)?"""
    return klass.__module__ == module or klass.__module__.startswith(module + ".")


def _family(op: type, module: str) -> list[type]:
    """The abstract classes of the dialect's module between the op and IRDLOperation."""
    return [k for k in op.__mro__[1:] if _defined_in(k, module) and k is not op and issubclass(k, IRDLOperation)
            and _clean(k.__dict__.get("__doc__"))]


def _user_function(fn: object) -> Callable | None:
    """The function as written in the dialect: IRDL wraps an op's `verify_` in a generated
    function that holds the original in its closure."""
    if not callable(fn):
        return None
    if "<locals>" not in getattr(fn, "__qualname__", ""):
        return fn  # type: ignore[return-value]
    for cell in getattr(fn, "__closure__", None) or ():
        inner = cell.cell_contents
        if callable(inner) and getattr(inner, "__name__", "") == getattr(fn, "__name__", None):
            return _user_function(inner)
    return None


def _method_doc(op: type, method: str) -> tuple[str, str] | None:
    """(defining class name, docstring) of a method, if it has a docstring."""
    fn = _user_function(getattr(op, method, None))
    if fn is None or not _clean(fn.__doc__):
        return None
    owner = fn.__qualname__.split(".")[0]
    if owner in ("IRDLOperation", "Operation"):
        return None
    return owner, _clean(fn.__doc__)


def _message(node: ast.expr) -> str | None:
    """A VerifyException's message as a template: `{name}` for a variable, `{...}` otherwise."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        parts = []
        for v in node.values:
            if isinstance(v, ast.Constant):
                parts.append(str(v.value))
            elif isinstance(v, ast.FormattedValue):
                parts.append(f"{{{v.value.id}}}" if isinstance(v.value, ast.Name) else "{...}")
        return "".join(parts)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _message(node.left), _message(node.right)
        return left + right if left is not None and right is not None else None
    return None


def _verifier_messages(op: type, module: str) -> list[str]:
    """The messages of `raise VerifyException(...)` in the methods of the op and of the
    dialect classes it derives from (helpers outside the classes are not read)."""
    found: list[str] = []
    for klass in op.__mro__:
        if not _defined_in(klass, module):
            continue
        for attr in klass.__dict__.values():
            fn = _user_function(attr.__func__ if isinstance(attr, staticmethod | classmethod) else attr)
            if fn is None or not inspect.isfunction(fn):
                continue
            try:
                tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
            except (OSError, TypeError, SyntaxError):
                continue
            for node in ast.walk(tree):
                if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and node.exc.args:
                    callee = node.exc.func
                    name = callee.id if isinstance(callee, ast.Name) else getattr(callee, "attr", "")
                    text = _message(node.exc.args[0]) if name == "VerifyException" else None
                    if text and text not in found:
                        found.append(text)
    return found


def _anchor(title: str) -> str:
    """GitHub's anchor for a heading."""
    return re.sub(r"[^a-z0-9 _-]", "", title.lower()).replace(" ", "-")


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    out += ["| " + " | ".join(_cell(x) for x in row) + " |" for row in rows]
    return out + [""]


def _trait(t: object) -> str:
    name = type(t).__name__
    parents = getattr(t, "op_types", None)
    if parents:
        return f"`{name}<{', '.join(getattr(p, 'name', str(p)) for p in parents)}>`"
    return f"`{name}`"


# --------------------------------------------------------------------------- extras per dialect

def _closure(fn: Callable) -> dict[str, object]:
    cells = getattr(fn, "__closure__", None) or ()
    return {name: cell.cell_contents for name, cell in zip(fn.__code__.co_freevars, cells, strict=True)}


def _names(names: tuple[str, ...]) -> str:
    quoted = [f"`{n}`" for n in names]
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " and " + quoted[-1]


def _aligned_text(v: dict[str, object]) -> str:
    size = f"{v['fixed']} bytes" if v.get("fixed") else f"the size of the `{v['dtype_field']}` element type"
    return f"`{v['fieldname']}` is a multiple of {size}"


# ISA constraint factories (closures in infer.target.isa) -> their meaning.
_ISA_CONSTRAINTS: dict[str, Callable[[dict[str, object]], str]] = {
    "_aligned": _aligned_text,
    "_dtype_in": lambda v: f"`{v['fieldname']}` is one of {', '.join(v['allowed'])}",  # type: ignore[arg-type]
    "_positive": lambda v: _names(v["names"]) + (" are" if len(v["names"]) > 1 else " is") + " positive",  # type: ignore[arg-type]
    "_vec_constraints": lambda v: "requant: `dt` is int8, `bt` fp32 and `bmode` row or imm",
}


def _isa_constraint(fn: Callable) -> str:
    factory = fn.__qualname__.split(".<locals>")[0]
    describe_fn = _ISA_CONSTRAINTS.get(factory)
    return describe_fn(_closure(fn)) if describe_fn else f"`{factory}`"


def _npu_fields(op: type) -> list[str]:
    """The instruction's ISA fields, constraints and an example of the syntax."""
    from infer.target.asm import format_operands
    from infer.target.isa import Instr

    d = op.ISA_DEF
    out = [f"Instruction `{d.name}`: opcode `{d.opcode:#04x}`, {d.engine} engine; each field is an i64 "
           "property, `wait` / `signal` / `signal2` are optional semaphore properties (absent = 0).", ""]
    if d.fields:
        example = format_operands(Instr(d, tuple(0 for _ in d.fields)))
        out += ["Syntax (all fields zero):", "", "```", f"{op.name} {example}".rstrip(), "```", ""]
        rows = [[f"`{f.name}`", str(f.bits), "signed" if f.signed else "unsigned", f.kind, f.doc] for f in d.fields]
        out += ["Fields:", ""] + _table(["field", "bits", "sign", "kind", "meaning"], rows)
    else:
        out += ["Syntax:", "", "```", op.name, "```", ""]
    if d.constraints:
        out += ["Checked by the verifier (`infer.target.isa.check`):", ""]
        out += [f"- {_isa_constraint(k)}" for k in d.constraints] + [""]
    return out


def _extras(op: type) -> tuple[list[str], bool]:
    """More sections for the ops of some dialects, and whether they replace the
    properties table (npu: the ISA fields are the properties)."""
    from infer.dialects.npu import NpuInstrOp

    extras: dict[type, Callable[[type], list[str]]] = {NpuInstrOp: _npu_fields}
    for base, fn in extras.items():
        if issubclass(op, base) and op is not base:
            return fn(op), True
    return [], False


# --------------------------------------------------------------------------- pages

# Properties xDSL adds for its own bookkeeping (sizes of variadic operand groups).
_INTERNAL = ("operandSegmentSizes", "resultSegmentSizes")


def _op_section(op: type[IRDLOperation], module: str, common: tuple[type, ...] = ()) -> list[str]:
    d = op.get_irdl_definition()
    title = f"`{op.name}` ({op.__name__})"
    summary, rest = _split(_clean(op.__dict__.get("__doc__")))
    out = [f"### {title}", "", f"_{summary}_" if summary else "_(undocumented)_", ""]
    if rest:
        out += [rest, ""]
    for base in _family(op, module):
        if base in common:
            continue
        out += [f"From `{base.__name__}`: {_clean(base.__doc__)}", ""]
    if d.assembly_format:
        out += ["Syntax:", "", "```", f"operation ::= `{op.name}` {d.assembly_format}", "```", ""]
    extra, skip_properties = _extras(op)
    if not d.assembly_format and not extra:
        out += ["Syntax: the generic form, or the op's own `parse` / `print`.", ""]
    out += extra
    traits = sorted(_trait(t) for t in d.traits)  # OpTraits is a set: sorted for stable output
    if traits:
        out += ["Traits: " + ", ".join(traits), ""]
    for kind, defs in (("Properties", {} if skip_properties else d.properties), ("Attributes", d.attributes)):
        rows = []
        for name, pd in defs.items():
            if name in _INTERNAL:
                continue
            default = getattr(pd, "default_value", None)
            rows.append([f"`{name}`", _with_arity(describe(pd.constr), pd), "" if default is None else f"`{default}`"])
        if rows:
            out += [f"{kind}:", ""] + _table(["name", "constraint", "default"], rows)
    for kind, defs in (("Operands", d.operands), ("Results", d.results)):
        if defs:
            rows = [[f"`{name}`", _with_arity(describe(od.constr), od)] for name, od in defs]
            out += [f"{kind}:", ""] + _table(["name", "constraint"], rows)
    if d.regions:
        rows = [[f"`{name}`", _with_arity("single-block region" if "SingleBlock" in type(rd).__name__ else "region", rd)]
                for name, rd in d.regions]
        out += ["Regions:", ""] + _table(["name", "kind"], rows)
    checks = [(m, x) for m in ("verify_", "infer_result_types") if (x := _method_doc(op, m))]
    messages = _verifier_messages(op, module)
    if checks or messages:
        out += ["Verification:", ""]
        out += [f"- {' '.join(text.split())} (`{owner}.{method}`)" for method, (owner, text) in checks]
        if messages:
            out += ["- The verifier's messages (`{name}` / `{...}` stand for values):"]
            out += [f"  - {_cell(m).replace('<', '&lt;')}" for m in messages]
        out += [""]
    return out


def dialect_page(dialect: Dialect, module: str) -> str:
    """The markdown reference of one dialect; `module` is where its ops are defined."""
    mod = sys.modules[module]
    ops = sorted(dialect.operations, key=lambda o: o.name)
    source = module.removeprefix('infer.').replace('.', '/') + ("/" if hasattr(mod, "__path__") else ".py")
    out = [f"<!-- Generated by `python -m infer.tools.opdocs -o docs/dialects/` from {source}; do not edit. -->", "",
           f"# '{dialect.name}' dialect", ""]
    out += [_clean(mod.__doc__), "", "## Operations", ""]
    # Bases most ops share are described once, here.
    counts: dict[type, int] = {}
    for o in ops:
        for base in _family(o, module):
            counts[base] = counts.get(base, 0) + 1
    common = tuple(sorted((b for b, n in counts.items() if 2 * n > len(ops)), key=lambda k: k.__name__))
    for base in common:
        share = "Every op" if counts[base] == len(ops) else "Most ops"
        out += [f"{share} derive{'s' if share == 'Every op' else ''} from `{base.__name__}`: {_clean(base.__doc__)}", ""]
    out += [f"- [`{o.name}`](#{_anchor(f'`{o.name}` ({o.__name__})')})" for o in ops] + [""]
    for op in ops:
        out += _op_section(op, module, common)
    return "\n".join(out).rstrip() + "\n"


def pages() -> dict[str, str]:
    """File name -> content for every infer dialect."""
    from infer.dialects import infer_dialects

    out = {}
    for name, factory in infer_dialects().items():
        dialect = factory()
        # the dialect's module: infer.dialects.<name>, a module or a package of op families
        module = ".".join(next(iter(dialect.operations)).__module__.split(".")[:3])
        out[f"{name}.md"] = dialect_page(dialect, module)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infer.tools.opdocs", description=__doc__.split("\n\n")[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("-o", "--output", metavar="DIR", help="write one <dialect>.md per dialect here")
    group.add_argument("--check", metavar="DIR", help="exit 1 if the files in DIR differ from what would be written")
    args = parser.parse_args(argv)
    generated = pages()
    if args.output:
        out = Path(args.output)
        out.mkdir(parents=True, exist_ok=True)
        for name, text in generated.items():
            (out / name).write_text(text)
            print(f"wrote {out / name}", file=sys.stderr)
        return 0
    stale = [name for name, text in generated.items()
             if not (Path(args.check) / name).is_file() or (Path(args.check) / name).read_text() != text]
    for name in stale:
        print(f"{Path(args.check) / name} is stale: run python -m infer.tools.opdocs -o {args.check}", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
