"""What a pass is and which options it takes, read from its definition.

A pass's summary is the first paragraph of its class docstring; its options are
its dataclass fields (the `-p NAME{option=value}` spelling uses dashes), with
- the type and default from the field,
- the description from, in this order: the docstring written under the field
  (xDSL's style), a `# comment` at the end of the field's line, an entry
  `option-name: text` (continued on more deeply indented lines) in an
  `Options:` block of the class docstring or of the module docstring, and, for
  a named pipeline (`PipelinePass`), the option of the stage it is forwarded to
  (found by building the pipeline with a different value and seeing which stage
  receives it).

`infer-opt --help`, `--list-passes` and `--help-pass NAME` print these, and
`infer-opt` names the valid options when a `-p` option is wrong.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import io
import sys
import textwrap
import tokenize
import typing
from dataclasses import dataclass
from typing import Any

from xdsl.passes import ModulePass

from infer.passes import dashed, format_value, option_fields, type_name


@dataclass(frozen=True)
class OptionDoc:
    name: str  # as spelled on the command line (dashes)
    type: str
    default: str | None  # None: required
    doc: str

    def signature(self) -> str:
        default = "required" if self.default is None else f"default {self.default}"
        return f"{self.name}=<{self.type}> ({default})"


@dataclass(frozen=True)
class PassDoc:
    name: str
    origin: str  # "infer", "xdsl" or a plugin's distribution
    summary: str
    description: str
    options: tuple[OptionDoc, ...]
    stages: tuple[str, ...] = ()  # a named pipeline's passes with its default options
    expanded: tuple[str, ...] = ()  # ... and with nested pipelines expanded (flatten())

    def options_line(self) -> str:
        return ", ".join(o.signature() for o in self.options) or "none"


def _default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


def paragraphs(doc: str | None) -> list[str]:
    text = inspect.cleandoc(doc or "")
    return [p for p in (" ".join(line.strip() for line in block.splitlines()) for block in text.split("\n\n")) if p]


def own_doc(cls: type) -> str | None:
    """The class's own docstring (not the signature dataclasses write when there is none)."""
    doc = cls.__dict__.get("__doc__")
    return None if doc is None or doc.startswith(f"{cls.__name__}(") else doc


def summary_of(cls: type) -> str:
    own = own_doc(cls)
    paras = paragraphs(own)
    if paras:
        return paras[0]
    module = sys.modules.get(cls.__module__)
    paras = paragraphs(module.__doc__ if module else None)
    return paras[0] if paras else "(no description)"


# --------------------------------------------------------------------------- option text

def _class_source(cls: type) -> tuple[ast.ClassDef, list[str]] | None:
    try:
        lines, _ = inspect.getsourcelines(cls)
    except (OSError, TypeError):
        return None
    source = textwrap.dedent("".join(lines))
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    node = tree.body[0] if tree.body else None
    return (node, source.splitlines()) if isinstance(node, ast.ClassDef) else None


def _trailing_comment(line: str) -> str:
    try:
        for tok in tokenize.generate_tokens(io.StringIO(line + "\n").readline):
            if tok.type == tokenize.COMMENT:
                return tok.string.lstrip("#").strip()
    except (tokenize.TokenError, IndentationError):
        pass
    return ""


def _field_docs_in_class(cls: type) -> dict[str, str]:
    """Field docstrings and end-of-line comments of the class body (and its bases)."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if klass in (object, ModulePass) or not dataclasses.is_dataclass(klass):
            continue
        parsed = _class_source(klass)
        if parsed is None:
            continue
        node, lines = parsed
        body = node.body
        for i, stmt in enumerate(body):
            if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
                continue
            name = stmt.target.id
            nxt = body[i + 1] if i + 1 < len(body) else None
            if isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant) and isinstance(nxt.value.value, str):
                docs[name] = " ".join(inspect.cleandoc(nxt.value.value).split())
            else:
                comment = _trailing_comment(lines[stmt.lineno - 1])
                if comment:
                    docs[name] = comment
    return docs


def _options_block(doc: str | None) -> dict[str, str]:
    """`Options:` entries of a docstring: `  name: text` (name with dashes or
    underscores), continued on more deeply indented lines."""
    out: dict[str, str] = {}
    lines = inspect.cleandoc(doc or "").splitlines()
    in_block, indent, current = False, 0, None
    for line in lines:
        stripped = line.strip()
        if not in_block:
            if stripped.rstrip(":") == "Options" or stripped == "Options:":
                in_block, indent, current = True, -1, None
            continue
        if not stripped:
            if current is not None:
                break
            continue
        level = len(line) - len(line.lstrip())
        head, sep, text = stripped.partition(":")
        is_entry = sep and " " not in head.strip() and (indent < 0 or level == indent)
        if is_entry:
            indent = level
            current = head.strip().replace("-", "_")
            out[current] = text.strip()
        elif current is not None and level > indent:
            out[current] = f"{out[current]} {stripped}".strip()
        else:
            break
    return out


def _forwarded_to(cls: type[ModulePass], field: dataclasses.Field) -> list[tuple[str, str]]:
    """For a named pipeline: the (stage pass name, field) pairs its option reaches."""
    from infer.passes.pipelines import PipelinePass

    if not issubclass(cls, PipelinePass):
        return []
    default = _default(field)
    if isinstance(default, bool):
        variant: Any = not default
    elif isinstance(default, int):
        variant = default + 1
    elif isinstance(default, float):
        variant = default + 1.0
    elif isinstance(default, str):
        variant = default + "-changed"
    elif isinstance(default, tuple):
        variant = default[:-1] if default else ("changed",)
    else:
        return []
    try:
        base = cls().flatten()
        changed = cls(**{field.name: variant}).flatten()
    except Exception:  # the pipeline validates the value: no automatic description
        return []
    found = []
    for a, b in zip(base, changed, strict=False):
        for f in option_fields(type(a)):
            if getattr(a, f.name) != getattr(b, f.name):
                found.append((a.name, f.name))
    return list(dict.fromkeys(found))


def pass_doc(name: str, cls: type[ModulePass], origin: str = "infer") -> PassDoc:
    own = _field_docs_in_class(cls)
    blocks = {**_options_block(sys.modules[cls.__module__].__doc__ if cls.__module__ in sys.modules else None),
              **_options_block(own_doc(cls))}
    try:
        hints = typing.get_type_hints(cls)
    except Exception:
        hints = {}
    options = []
    for f in option_fields(cls):
        doc = own.get(f.name) or blocks.get(f.name, "")
        if not doc:
            targets = _forwarded_to(cls, f)
            if targets:
                stage_docs = []
                for stage, fname in targets:
                    stage_cls = _stage_class(cls, stage)
                    sub = pass_doc(stage, stage_cls) if stage_cls is not None else None
                    text = next((o.doc for o in sub.options if o.name == dashed(fname)), "") if sub else ""
                    stage_docs.append((stage, text))
                where = ", ".join(f"{s}" for s, _ in stage_docs)
                first = next((t for _, t in stage_docs if t), "")
                doc = f"forwarded to {where}" + (f": {first}" if first else "")
        default = _default(f)
        options.append(OptionDoc(dashed(f.name), type_name(hints.get(f.name, f.type)),
                                 None if default is dataclasses.MISSING else format_value(default), doc))
    stages: tuple[str, ...] = ()
    expanded: tuple[str, ...] = ()
    from infer.passes.pipelines import PipelinePass

    if issubclass(cls, PipelinePass):
        try:
            stages = tuple(str(p) for p in cls().passes())
            expanded = tuple(str(p) for p in cls().flatten())
        except Exception as e:
            stages = (f"(cannot list the stages with the default options: {e})",)
    module = sys.modules.get(cls.__module__)
    module_doc = inspect.cleandoc(module.__doc__) if module is not None and module.__doc__ else ""
    class_doc = inspect.cleandoc(own_doc(cls) or "")
    # A module that holds just this pass documents it at length in its docstring.
    description = module_doc if module_doc.startswith(f"`{name}") else class_doc
    return PassDoc(name, origin, summary_of(cls), description, tuple(options), stages, expanded)


def _stage_class(pipeline: type[ModulePass], stage: str) -> type[ModulePass] | None:
    try:
        for p in pipeline().flatten():
            if p.name == stage:
                return type(p)
    except Exception:
        return None
    return None


# --------------------------------------------------------------------------- rendering

WIDTH = 100


def _wrap(text: str, indent: int) -> list[str]:
    return textwrap.wrap(text, WIDTH, initial_indent=" " * indent, subsequent_indent=" " * (indent + 2),
                         break_on_hyphens=False) or [""]  # pass names stay whole


def render_entry(doc: PassDoc) -> list[str]:
    """A pass as listed by `--help` and `--list-passes`: name, summary, options, stages."""
    lines = [f"  {doc.name}"] + _wrap(doc.summary, 6)
    if doc.stages:
        lines += _wrap("runs: " + ", ".join(doc.stages), 6)
    for o in doc.options:
        lines += _wrap(f"{o.signature()}" + (f": {o.doc}" if o.doc else ""), 6)
    return lines


def render_list(docs: list[PassDoc], upstream: list[tuple[str, str]] | None, upstream_count: int) -> str:
    """infer's passes and named pipelines first, then plugins, then upstream passes
    (their names and summaries when `upstream` is given, else only how many)."""
    own = [d for d in docs if d.origin == "infer"]
    passes = [d for d in own if not d.stages]
    pipelines = [d for d in own if d.stages]
    plugins = [d for d in docs if d.origin not in ("infer", "xdsl")]
    out = ["infer's passes (-p 'NAME{option=value ...}', several separated by commas; "
           "infer-opt --help-pass NAME for one in full):"]
    for d in passes:
        out += render_entry(d)
    out += ["", "named pipelines (each runs its stages; --print-between-passes and --time-passes see every stage):"]
    for d in pipelines:
        out += render_entry(d)
    out += ["", "passes from plugins (entry point group 'infer.passes'; see docs/writing-a-pass.md):"]
    if plugins:
        for d in plugins:
            out += render_entry(d)
            out += _wrap(f"(from the distribution '{d.origin}')", 6)
    else:
        out.append("  (none installed)")
    out.append("")
    if upstream is None:
        out.append(f"and {upstream_count} upstream xDSL passes (canonicalize, cse, dce, ...): "
                   "infer-opt --list-passes=all")
    else:
        out.append(f"upstream xDSL passes ({len(upstream)}):")
        for name, summary in upstream:
            out += _wrap(f"{name}: {summary}", 2)
    return "\n".join(out) + "\n"


def render_pass_help(doc: PassDoc) -> str:
    """`--help-pass NAME`: the pass's summary, options, stages and description."""
    origin = {"infer": "infer", "xdsl": "upstream xDSL"}.get(doc.origin, f"plugin from the distribution '{doc.origin}'")
    kind = "named pipeline" if doc.stages else "pass"
    out = [f"{doc.name} ({origin} {kind})", ""] + _wrap(doc.summary, 2) + ["", "options:"]
    if not doc.options:
        out.append("  (none)")
    for o in doc.options:
        out.append(f"  {o.signature()}")
        out += _wrap(o.doc or "(not documented)", 6)
    if doc.stages:
        out += ["", "runs (with the default options):"] + _wrap(", ".join(doc.stages), 2)
        if doc.expanded != doc.stages:
            out += ["", "stages, nested pipelines expanded:"] + _wrap(", ".join(doc.expanded), 2)
    if doc.description and paragraphs(doc.description) != [doc.summary]:
        out += ["", "description:"] + ["  " + line if line else "" for line in doc.description.splitlines()]
    return "\n".join(out) + "\n"
