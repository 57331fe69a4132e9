"""Diagnostics: errors, warnings, notes and remarks with a source location.

Errors stop the work and travel as exceptions (`infer.dialects.ir_io.IRError`,
whose message is `file:line:col: error: ...`; further lines
`file:line:col: note: ...` are notes attached to it, see `note_line`).
Warnings and remarks do not stop anything: a pass reports them with

    from infer.dialects.diagnostics import warn
    warn(op, "not folded: integer division by zero")

and whoever runs the pass decides what happens to them. By default they are
printed to stderr as `file:line:col: warning: ...`; a driver that wants them
(`infer-opt` checks them against `expected-warning` annotations under
`--verify-diagnostics`) collects them with `collect()`.
"""

from __future__ import annotations

import contextlib
import contextvars
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass

from xdsl.ir import Operation

SEVERITIES = ("error", "warning", "note", "remark")

_LOCATION = re.compile(r"^(?P<file>.+?):(?P<line>\d+)(?::(?P<col>\d+))?$")
# `file:line[:col]: severity: message`, or `severity: message` without a location.
_LINE = re.compile(r"^(?:(?P<loc>.+?:\d+(?::\d+)?): )?(?P<sev>error|warning|note|remark): (?P<msg>.*)$")


@dataclass(frozen=True)
class Diagnostic:
    """One diagnostic. `file`/`line`/`col` are None when the location is unknown;
    `notes` are the notes attached to it (each a Diagnostic of severity "note")."""

    severity: str
    message: str
    file: str | None = None
    line: int | None = None
    col: int | None = None
    notes: tuple[Diagnostic, ...] = ()

    @property
    def location(self) -> str | None:
        if self.file is None:
            return None
        if self.line is None:
            return self.file
        return f"{self.file}:{self.line}" + (f":{self.col}" if self.col is not None else "")

    def format(self, unknown: str | None = None) -> str:
        """`loc: severity: message` and one line per note; `unknown` names the
        location of a diagnostic that has none (e.g. the input file)."""
        loc = self.location or unknown
        head = f"{loc}: {self.severity}: {self.message}" if loc else f"{self.severity}: {self.message}"
        return "\n".join([head] + [n.format(unknown) for n in self.notes])

    def __str__(self) -> str:
        return self.format()


def location_of(op: Operation | None) -> tuple[str | None, int | None, int | None]:
    """(file, line, col) of an op (or its nearest located parent), Nones if unknown."""
    from infer.dialects.ir_io import describe_location

    if op is None:
        return None, None, None
    m = _LOCATION.match(describe_location(op))
    if m is None:
        return None, None, None
    col = m.group("col")
    return m.group("file"), int(m.group("line")), int(col) if col else None


def diagnostic_at(severity: str, op: Operation | None, message: str,
                  notes: tuple[Diagnostic, ...] = ()) -> Diagnostic:
    assert severity in SEVERITIES, severity
    file, line, col = location_of(op)
    return Diagnostic(severity, message, file, line, col, notes)


def note_line(op: Operation | None, message: str) -> str:
    """A note line to append (after a newline) to an error message: the tools
    report it as a note attached to the error."""
    return diagnostic_at("note", op, message).format()


def parse_diagnostics(text: str) -> list[Diagnostic]:
    """Diagnostics printed as text (an error message: `loc: error: msg` lines, each
    followed by its `loc: note: msg` lines) -> Diagnostic objects. A text that is not
    in that form is one error at an unknown location (its first line)."""
    out: list[Diagnostic] = []
    for raw in text.strip().splitlines():
        m = _LINE.match(raw.strip())
        if m is None:
            if not out:  # free text: one error without location
                out.append(Diagnostic("error", raw.strip()))
            continue  # continuation lines of a message are kept in the printed form only
        file = line = col = None
        if m.group("loc"):
            lm = _LOCATION.match(m.group("loc"))
            assert lm is not None
            file, line = lm.group("file"), int(lm.group("line"))
            col = int(lm.group("col")) if lm.group("col") else None
        d = Diagnostic(m.group("sev"), m.group("msg"), file, line, col)
        if d.severity == "note" and out:
            last = out[-1]
            out[-1] = Diagnostic(last.severity, last.message, last.file, last.line, last.col, last.notes + (d,))
        else:
            out.append(d)
    return out or [Diagnostic("error", text.strip() or "(no message)")]


# --------------------------------------------------------------------------- reporting

_collector: contextvars.ContextVar[list[Diagnostic] | None] = contextvars.ContextVar(
    "infer_diagnostics", default=None)


def emit(diagnostic: Diagnostic) -> None:
    """Report a warning or remark: to the innermost `collect()`, else to stderr."""
    sink = _collector.get()
    if sink is not None:
        sink.append(diagnostic)
    else:
        print(diagnostic.format(), file=sys.stderr)


def warn(op: Operation | None, message: str, notes: tuple[Diagnostic, ...] = ()) -> None:
    """A warning at `op`'s location: the input is accepted but probably not what was meant."""
    emit(diagnostic_at("warning", op, message, notes))


def remark(op: Operation | None, message: str) -> None:
    """A remark at `op`'s location: information about what a pass did (or did not do)."""
    emit(diagnostic_at("remark", op, message))


@contextlib.contextmanager
def collect() -> Iterator[list[Diagnostic]]:
    """Within the block, warnings and remarks go to the returned list instead of stderr."""
    sink: list[Diagnostic] = []
    token = _collector.set(sink)
    try:
        yield sink
    finally:
        _collector.reset(token)
