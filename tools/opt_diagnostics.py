"""`infer-opt --verify-diagnostics`: check the diagnostics against annotations.

As in mlir-opt, the input says which diagnostics it expects, in comments:

    // expected-error @+1 {{has shape 3x2 but the operands and attributes give 2x3}}
    %0 = graph.relu %x : (tensor<2x3xf32>) -> tensor<3x2xf32>

`expected-error`, `expected-warning`, `expected-note` and `expected-remark`
take the text between `{{` and `}}`, which must occur in the diagnostic's
message. The diagnostic is expected on the annotation's own line, or where a
designator puts it: `@+N` / `@-N` (N lines below / above), `@below` (the next
line that is not an annotation), `@above` (the previous such line) or
`@unknown` (a diagnostic without a location, e.g. a pass option refused when the
pass runs). With `--split-input-file` each chunk is checked against its own
annotations. Every expected diagnostic must appear and every diagnostic
produced (parse and verifier errors, pass errors and the warnings, remarks and
notes passes emit) must be expected; otherwise each mismatch is reported as an
error and the exit status is 1.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from infer.dialects.diagnostics import Diagnostic

_ANNOTATION = re.compile(
    r"expected-(?P<kind>error|warning|note|remark) *(?:@(?P<where>[+-]\d+|above|below|unknown))? *\{\{(?P<text>.*)\}\}")


@dataclass
class Expected:
    kind: str
    text: str
    line: int | None  # None: @unknown
    at_line: int  # where the annotation is written (in the whole file)
    at_col: int
    matched: bool = False

    def where(self, file: str) -> str:
        return f"{file}:{self.at_line}:{self.at_col}"


def expected_diagnostics(text: str, line_offset: int = 0) -> list[Expected]:
    """The annotations of `text` (a chunk whose first line is line `line_offset + 1`)."""
    found: list[Expected] = []
    pending_below: list[Expected] = []
    last_plain = 0
    lines = text.split("\n")
    for i, raw in enumerate(lines):
        number = i + 1 + line_offset
        m = _ANNOTATION.search(raw)
        if m is None:
            for e in pending_below:
                e.line = number
            pending_below.clear()
            last_plain = number
            continue
        where = m.group("where")
        e = Expected(m.group("kind"), m.group("text"), number, number, m.start() + 1)
        if where is None:
            pass
        elif where == "unknown":
            e.line = None
        elif where == "above":
            e.line = last_plain
        elif where == "below":
            pending_below.append(e)
            e.line = len(lines) + line_offset + 1  # dangling: after the last line
        else:
            e.line = number + int(where)
        found.append(e)
    return found


def check_diagnostics(text: str, line_offset: int, file: str,
                      produced: Sequence[Diagnostic]) -> list[str]:
    """Match the diagnostics of one chunk with its annotations; the mismatches as
    `file:line:col: error: ...` lines (empty: all as expected)."""
    expected = expected_diagnostics(text, line_offset)
    problems: list[str] = []
    flat: list[Diagnostic] = []
    for d in produced:
        flat.append(d)
        flat.extend(d.notes)
    for d in flat:
        candidates = [e for e in expected if not e.matched and e.text in d.message and (
            (e.line is None and d.line is None) or (d.line is not None and e.line == d.line and d.file == file))]
        exact = next((e for e in candidates if e.kind == d.severity), None)
        if exact is not None:
            exact.matched = True
            continue
        if candidates:
            near = candidates[0]
            problems.append(f"{near.where(file)}: error: '{d.severity}' diagnostic emitted when expecting a "
                            f"'{near.kind}': {d.message}")
            near.matched = True
            continue
        where = d.location or f"{file} (unknown location)"
        problems.append(f"{where}: error: unexpected {d.severity}: {d.message}")
    for e in expected:
        if not e.matched:
            at = "" if e.line is None or e.line == e.at_line else f" at line {e.line}"
            if e.line is None:
                at = " without a location"
            problems.append(f"{e.where(file)}: error: expected {e.kind} \"{e.text}\" was not produced{at}")
    return problems
