"""infer-opt's pass manager: a `-p` spec -> stages -> run with instrumentation.

Building: `infer.passes.build_pipeline` turns the spec into passes (an error
names the pass or option at fault and lists the valid ones). A named pipeline
(`PipelinePass`) is expanded into its stages (`passes()`, recursively: the same sequence as its
`flatten()`), so every stage is verified, printed and timed on its own.

Running: `run_stages` applies the stages in order and calls each
`Instrumentation` before and after every stage and when one fails. The drivers'
flags are instrumentations: verification after each stage, `--print-between-passes`,
`--time-passes`, `--print-ir-after-failure`. A flag that checks something
between stages (such as a per-stage numeric check against the interpreter of the
level) is one more `Instrumentation` added to the list: `before_pass` sees the
module each stage receives, `after_pass` the module it leaves.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import IO

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass
from xdsl.printer import Printer

from infer.dialects.diagnostics import Diagnostic
from infer.dialects.ir_io import IRError, first_line, verify_module
from infer.passes import PassSpecError


# --------------------------------------------------------------------------- building

@dataclass
class Node:
    """A pass in the expanded pipeline: a stage (leaf) or a named pipeline whose
    children are its stages. Timing accumulates on the leaves."""

    name: str
    children: list[Node] = field(default_factory=list)
    seconds: float = 0.0
    cpu_seconds: float = 0.0  # (this process's CPU time, for reports that show it)

    def total(self) -> float:
        return self.seconds + sum(c.total() for c in self.children)

    def cpu_total(self) -> float:
        return self.cpu_seconds + sum(c.cpu_total() for c in self.children)


@dataclass(frozen=True)
class Stage:
    """One pass that runs: `path` = the names of the pipelines it is part of,
    outermost first; `index` counts the stages of the whole expanded pipeline."""

    pass_: ModulePass
    path: tuple[str, ...]
    index: int
    count: int
    node: Node = field(compare=False)

    @property
    def name(self) -> str:
        return self.pass_.name

    def label(self) -> str:
        where = f" (in {' > '.join(self.path)})" if self.path else ""
        return f"{self.name}{where}"


def expand(passes: Sequence[ModulePass]) -> tuple[list[Stage], list[Node]]:
    """Named pipelines -> their stages (recursively, the order of `flatten()`)."""
    leaves: list[tuple[ModulePass, tuple[str, ...], Node]] = []

    def visit(p: ModulePass, path: tuple[str, ...]) -> Node:
        node = Node(p.name)
        if is_pipeline(p):
            try:
                inner = p.passes()
            except IRError as e:
                raise PassSpecError(first_line(str(e)).removeprefix("error: ")) from None
            node.children = [visit(q, path + (p.name,)) for q in inner]
        else:
            leaves.append((p, path, node))
        return node

    roots = [visit(p, ()) for p in passes]
    stages = [Stage(p, path, i, len(leaves), node) for i, (p, path, node) in enumerate(leaves)]
    return stages, roots


def is_pipeline(p: ModulePass) -> bool:
    # A PipelinePass instance means its module is loaded: no need to import it (and the
    # graph passes it imports) just to ask.
    module = sys.modules.get("infer.passes.pipelines")
    return module is not None and isinstance(p, module.PipelinePass)


# --------------------------------------------------------------------------- running

class Instrumentation:
    """Hooks around each stage; the default hooks do nothing."""

    def before_pass(self, stage: Stage, module: ModuleOp) -> None:
        pass

    def after_pass(self, stage: Stage, module: ModuleOp) -> None:
        pass

    def after_failure(self, stage: Stage, module: ModuleOp, error: BaseException) -> None:
        pass


class StageFailed(Exception):
    """A stage raised (or an instrumentation refused what it left, e.g. IR that does
    not verify): `diagnostic` says what and where."""

    def __init__(self, stage: Stage, diagnostic: Diagnostic, cause: BaseException):
        super().__init__(diagnostic.format())
        self.stage, self.diagnostic, self.cause = stage, diagnostic, cause


def run_stages(ctx: Context, module: ModuleOp, stages: Sequence[Stage],
               instrumentations: Sequence[Instrumentation],
               to_diagnostic: Callable[[BaseException, Stage], Diagnostic]) -> None:
    """Apply each stage; `after_pass` hooks run in list order and may raise (a check
    that fails), which counts as a failure of the stage."""
    for stage in stages:
        for ins in instrumentations:
            ins.before_pass(stage, module)
        try:
            stage.pass_.apply(ctx, module)
            for ins in instrumentations:
                ins.after_pass(stage, module)
        except Exception as e:
            for ins in instrumentations:
                ins.after_failure(stage, module, e)
            raise StageFailed(stage, to_diagnostic(e, stage), e) from e


class InvalidAfterPass(IRError):
    """The IR was valid before a stage and is not after it: a bug in the pass."""


# --------------------------------------------------------------------------- instrumentations

def print_module(module: ModuleOp, stream: IO[str], generic: bool = False) -> None:
    Printer(stream=stream, print_generic_format=generic).print_op(module)
    stream.write("\n")


class VerifyEach(Instrumentation):
    """Verify the module after every stage (mlir-opt's default; `--disable-verify` turns
    it off): invalid IR is reported at the op, with a note naming the stage that left it."""

    def __init__(self, timer: TimePasses | None = None):
        self.timer = timer

    def after_pass(self, stage: Stage, module: ModuleOp) -> None:
        start = time.perf_counter()
        try:
            verify_module(module)
        except IRError as e:
            text = str(e)
            note = f"note: the IR was valid before {stage.label()} ran: the pass produced invalid IR"
            loc = text.split(": error: ", 1)[0] if ": error: " in text else None
            raise InvalidAfterPass(f"{text}\n{loc}: {note}" if loc else f"{text}\n{note}") from None
        finally:
            if self.timer is not None:
                self.timer.add("verify", time.perf_counter() - start)


class PrintBetweenPasses(Instrumentation):
    """`--print-between-passes`: the IR after every stage but the last (whose
    result is the output), each stage of a named pipeline included."""

    def __init__(self, stream: IO[str]):
        self.stream = stream

    def after_pass(self, stage: Stage, module: ModuleOp) -> None:
        if stage.index + 1 < stage.count:
            self.stream.write(f"IR after {stage.label()}:\n")
            print_module(module, self.stream)
            self.stream.write("\n\n")
            self.stream.flush()


class PrintIRAfterFailure(Instrumentation):
    """`--print-ir-after-failure`: the module as the failing stage left it (on stderr);
    in the generic form when it no longer verifies, as custom printers may assume valid IR."""

    def __init__(self, stream: IO[str]):
        self.stream = stream

    def after_failure(self, stage: Stage, module: ModuleOp, error: BaseException) -> None:
        sys.stdout.flush()
        try:
            verify_module(module)
            generic = False
        except Exception:
            generic = True
        form = " (generic form: the IR does not verify)" if generic else ""
        self.stream.write(f"// IR after the failure of {stage.label()}{form}:\n")
        try:
            print_module(module, self.stream, generic=generic)
        except Exception as e:  # a half-rewritten module the printer cannot walk
            self.stream.write(f"// (the module cannot be printed: {type(e).__name__}: {first_line(str(e))})\n")
        self.stream.flush()


class TimePasses(Instrumentation):
    """`--time-passes`: wall time of every stage, reported as a tree (named pipelines
    with their stages) by `report`, with the parsing, verification and output times.
    `leading` names the phases reported before the passes (infer-opt: parsing; the compile
    driver: import), the other phases `add`ed are reported after them. `cpu` adds a column of
    this process's CPU time (mlir-opt's "User Time"), the figure that means something on a
    loaded machine where wall time includes waiting for a core."""

    def __init__(self, leading: Sequence[str] = ("parse",), cpu: bool = False) -> None:
        self._start: float | None = None
        self.leading = tuple(leading)
        self.cpu = cpu
        self.extra: dict[str, float] = {name: 0.0 for name in self.leading}
        self.extra_cpu: dict[str, float] = {name: 0.0 for name in self.leading}

    def before_pass(self, stage: Stage, module: ModuleOp) -> None:
        self._start = time.perf_counter()

    def after_pass(self, stage: Stage, module: ModuleOp) -> None:
        if self._start is not None:
            stage.node.seconds += time.perf_counter() - self._start
            self._start = None

    def after_failure(self, stage: Stage, module: ModuleOp, error: BaseException) -> None:
        self.after_pass(stage, module)

    def add(self, what: str, seconds: float, cpu_seconds: float = 0.0) -> None:
        self.extra[what] = self.extra.get(what, 0.0) + seconds
        self.extra_cpu[what] = self.extra_cpu.get(what, 0.0) + cpu_seconds

    def report(self, roots: Sequence[Node], stream: IO[str]) -> None:
        rows: list[tuple[float, float, str]] = [(self.extra[name], self.extra_cpu.get(name, 0.0), name)
                                                for name in self.leading]

        def visit(node: Node, depth: int) -> None:
            rows.append((node.total(), node.cpu_total(), "  " * depth + node.name))
            for child in node.children:
                visit(child, depth + 1)

        for root in roots:
            visit(root, 0)
        rows += [(v, self.extra_cpu.get(k, 0.0), k) for k, v in self.extra.items() if k not in self.leading]
        total = sum(r.total() for r in roots) + sum(self.extra.values())
        total_cpu = sum(r.cpu_total() for r in roots) + sum(self.extra_cpu.values())
        rule = "===" + "-" * 73 + "==="
        title = "... Pass execution timing report ...".center(79).rstrip()
        stream.write(f"{rule}\n{title}\n{rule}\n")
        stream.write(f"  Total Execution Time: {total:.4f} seconds\n\n")
        cpu_head = "  ---User Time (CPU)---" if self.cpu else ""
        stream.write(f"{cpu_head}  ----Wall Time----  ----Name----\n")
        for seconds, cpu_seconds, name in rows + [(total, total_cpu, "Total")]:
            share = 100.0 * seconds / total if total > 0 else 0.0
            if self.cpu:
                cpu_share = 100.0 * cpu_seconds / total_cpu if total_cpu > 0 else 0.0
                stream.write(f"    {cpu_seconds:8.4f} ({cpu_share:5.1f}%)")
            stream.write(f"  {seconds:8.4f} ({share:5.1f}%)  {name}\n")
        stream.flush()
