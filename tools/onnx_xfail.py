"""Run the ONNX node tests on a backend; print pass counts per op; regenerate
the backend's expected-failure list.

    python -m infer.tools.onnx_xfail [--backend reference|npu] [--write] [-k REGEX] [-v]

Only the onnx *node* tests run (the installed onnx generates them in memory);
the real/simple/pytorch model tests need downloads and are excluded. The
expected-failure list is a JSON file in the repo (each failing test's name with the
reason it failed when the list was written), like IREE's per-backend xfail files:

    reference: infer/frontend/onnx_xfail_reference.json
    npu:       infer/tools/npu_xfail.json

`test/unit/frontend/test_onnx_backend.py` fails on an unexpected failure and
on an unexpected pass (regenerate with --write so the list stays exact).
"""

from __future__ import annotations

import argparse
import collections
import importlib
import json
import re
import sys
import time
import unittest
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BACKENDS = {
    "reference": ("infer.frontend.onnx_backend", "ReferenceBackend", "infer.frontend", "onnx_xfail_reference.json"),
    "npu": ("infer.tools.onnx_backend", "NpuBackend", "infer.tools", "npu_xfail.json"),
}

NODE_TEST_CLASS = "OnnxBackendNodeModelTest"


def backend_class(name: str) -> type:
    module, cls, _, _ = BACKENDS[name]
    return getattr(importlib.import_module(module), cls)


def xfail_path(name: str) -> Path:
    _, _, package, file = BACKENDS[name]
    pkg = importlib.import_module(package)
    return Path(pkg.__file__).resolve().parent / file


def load_xfail(name: str) -> set[str]:
    return set(load_xfail_reasons(name))


def load_xfail_reasons(name: str) -> dict[str, str]:
    """The backend's expected failures: test name -> the reason it fails (empty for a
    bare list of names, which `missing_reasons` reports)."""
    path = xfail_path(name)
    if not path.exists():
        return {}
    data = json.loads(path.read_text())
    entries = data["xfail"] if isinstance(data, dict) else data
    if isinstance(entries, dict):
        return {str(k): str(v or "") for k, v in entries.items()}
    return {str(k): "" for k in entries}


def missing_reasons(name: str) -> list[str]:
    """The listed tests whose entry gives no reason (the list must say why each fails)."""
    return sorted(t for t, why in load_xfail_reasons(name).items() if not why.strip())


def write_xfail(name: str, failing: dict[str, str]) -> Path:
    """Write the backend's list: failing test name -> the reason it failed (one line)."""
    path = xfail_path(name)
    data = {
        "comment": (
            f"ONNX node tests expected to fail on the {name} backend. Regenerate with "
            f"`python -m infer.tools.onnx_xfail --backend {name} --write`."
        ),
        "xfail": {test: failing[test] for test in sorted(failing)},
    }
    path.write_text(json.dumps(data, indent=1) + "\n")
    return path


def node_test_cases(backend: type, pattern: str | None = None) -> dict[str, unittest.TestCase]:
    """The onnx node tests for `backend` on the CPU, by test name (test_abs_cpu, ...)."""
    import onnx.backend.test

    with warnings.catch_warnings():
        # Generating the cases computes expected outputs with numpy; some of
        # them overflow on purpose.
        warnings.simplefilter("ignore")
        bt = onnx.backend.test.BackendTest(backend, __name__)
        suites = bt.test_cases
    cls = suites[NODE_TEST_CLASS]
    out: dict[str, unittest.TestCase] = {}
    for name in unittest.TestLoader().getTestCaseNames(cls):
        if name.endswith("_cpu") and (not pattern or re.search(pattern, name)):
            out[name] = cls(name)
    return out


def op_of_tests() -> dict[str, str]:
    """Test name (without _cpu) -> the ONNX op it tests."""
    import onnx.backend.test.loader as loader

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = loader.load_model_tests(kind="node")
    single: dict[str, str] = {}
    multi: dict[str, list[str]] = {}
    for c in cases:
        if c.model is None:
            continue
        ops = [n.op_type for n in c.model.graph.node if n.op_type != "Constant"] or ["Constant"]
        if len(set(ops)) == 1:
            single[c.name] = ops[0]
        else:
            multi[c.name] = ops
    out = dict(single)
    for name, ops in multi.items():
        base = re.sub(r"_expanded(_ver\d+)?$", "", name)
        out[name] = single.get(base) or _guess_op(name, ops)
    return out


def _guess_op(name: str, ops: list[str]) -> str:
    words = name.removeprefix("test_").split("_")
    for op in dict.fromkeys(ops):
        if op.lower() in "".join(words):
            return op
    return ops[-1]


@dataclass
class Outcome:
    name: str
    passed: bool
    reason: str
    seconds: float


class _Recorder(unittest.TestResult):
    def __init__(self) -> None:
        super().__init__()
        self.outcomes: list[Outcome] = []
        self._start = 0.0

    def startTest(self, test: unittest.TestCase) -> None:
        super().startTest(test)
        self._start = time.perf_counter()

    def _record(self, test: Any, passed: bool, reason: str) -> None:
        self.outcomes.append(Outcome(test._testMethodName, passed, reason, time.perf_counter() - self._start))

    def addSuccess(self, test: unittest.TestCase) -> None:
        self._record(test, True, "")

    def addFailure(self, test: unittest.TestCase, err: Any) -> None:
        self._record(test, False, _reason(err))

    def addError(self, test: unittest.TestCase, err: Any) -> None:
        self._record(test, False, _reason(err))

    def addSkip(self, test: unittest.TestCase, reason: str) -> None:
        self._record(test, False, f"skipped: {reason}")


def _reason(err: Any) -> str:
    etype, value, _ = err
    text = " ".join(str(value).split())
    return f"{etype.__name__}: {text[:300]}"


def run_node_tests(backend: type, pattern: str | None = None, verbose: bool = False) -> list[Outcome]:
    cases = node_test_cases(backend, pattern)
    rec = _Recorder()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for name in sorted(cases):
            cases[name].run(rec)
            if verbose:
                o = rec.outcomes[-1]
                print(f"{'PASS' if o.passed else 'FAIL'} {o.name} {o.seconds:.2f}s {o.reason}", flush=True)
    return rec.outcomes


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m infer.tools.onnx_xfail", description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", choices=sorted(BACKENDS), default="reference")
    p.add_argument("--write", action="store_true", help="rewrite the backend's xfail JSON from this run")
    p.add_argument("-k", "--filter", help="only tests whose name matches this regex (never with --write)")
    p.add_argument("-v", "--verbose", action="store_true", help="print every test with its failure reason")
    p.add_argument("--reasons", action="store_true", help="print the failure reasons grouped by op")
    args = p.parse_args(argv)
    if args.write and args.filter:
        p.error("--write needs the full run (no -k)")
    backend = backend_class(args.backend)
    t0 = time.perf_counter()
    outcomes = run_node_tests(backend, args.filter, args.verbose)
    elapsed = time.perf_counter() - t0
    ops = op_of_tests()
    per_op: dict[str, list[Outcome]] = collections.defaultdict(list)
    for o in outcomes:
        per_op[ops.get(o.name.removesuffix("_cpu"), "?")].append(o)
    print(f"{'op':32} pass / total")
    for op in sorted(per_op):
        os_ = per_op[op]
        n = sum(o.passed for o in os_)
        print(f"{op:32} {n:4} / {len(os_):<4}")
        if args.reasons:
            for o in os_:
                if not o.passed:
                    print(f"    {o.name}: {o.reason}")
    passed = {o.name for o in outcomes if o.passed}
    failing = {o.name for o in outcomes if not o.passed}
    print(f"\n{args.backend}: {len(passed)} / {len(outcomes)} node tests pass, {len(failing)} fail ({elapsed:.1f} s)")
    slow = sorted(outcomes, key=lambda o: -o.seconds)[:5]
    print("slowest: " + ", ".join(f"{o.name} {o.seconds:.2f}s" for o in slow))
    if args.write:
        path = write_xfail(args.backend, {o.name: o.reason for o in outcomes if not o.passed})
        print(f"wrote {path} ({len(failing)} expected failures)")
    elif not args.filter:
        expected = load_xfail(args.backend)
        new_fail = sorted(failing - expected)
        new_pass = sorted(passed & expected)
        for what, names in (("unexpected failures", new_fail), ("unexpected passes", new_pass)):
            if names:
                more = f", ... ({len(names) - 20} more)" if len(names) > 20 else ""
                print(f"{what} ({len(names)}): " + ", ".join(names[:20]) + more)
        if new_fail or new_pass:
            print(f"regenerate the list with: python -m infer.tools.onnx_xfail --backend {args.backend} --write")
        return 1 if new_fail or new_pass else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
