"""`Executable`: a loaded artifact that runs on the instruction-set simulator.

    exe = infer.load("model.npu")          # or infer.compile(...)
    outs = exe.run([x])                    # list in signature order, or {"name": array}
    print(exe.last_report.summary())       # cycles, utilisation, stalls, per-op roofline
    rep = exe.check([x])                   # per-layer comparison with the reference interpreter
                                           # (infer.load / infer.compile executables: see check)
    print(rep.table()); rep.first_bad; rep.as_dict()

`run` builds the simulated DRAM image the way the artifact's layout says (weights
at the weight region, each input at its argument offset; the activation arena and
the outputs zeroed), runs the program on `infer.target.sim.Simulator` with the
artifact's own hardware config, and reads each output from its offset.

Imports only infer.target and numpy: no compiler needed at run time.

`INFER_SIM_CHECK_RACES=1` in the environment (or `run(..., check_races=True)`) runs the
simulator's data-race checker: an unsynchronised conflicting access between two engines is a
`RunError` naming both instructions (slower; for testing the compiler's synchronisation).

`run(..., mode=...)` picks the simulation mode (`infer.target.sim.MODES`, docs/simulator.md):
"fast" (default), "reference" (instruction by instruction), "functional" (outputs, no
timing) or "timing" (cycles and counters, no outputs).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from infer.runtime.artifact import Artifact, ArtifactError, np_dtype
from infer.runtime.boundary import BoundaryError, from_dram, paged_metadata, to_region
from infer.runtime.report import Report, build_report
from infer.target.layout import DramLayout, DramRegion

if TYPE_CHECKING:
    from infer.runtime.check import CheckReference, CheckReport
    from infer.target.hw import HardwareConfig


class RunError(ArtifactError):
    """Bad inputs for `Executable.run`, or a simulator fault while running."""


class Executable:
    """A validated artifact, ready to run. `reference` (optional) is what `check` compares
    with: the reference interpreter, compiler code that the runtime does not import
    (`infer.load` and `infer.compile` pass `infer.tools.reference.GraphReference()`)."""

    def __init__(self, artifact: Artifact, reference: CheckReference | None = None):
        artifact.validate()
        self.artifact = artifact
        self.reference = reference
        self.config = artifact.config()
        self.program = artifact.decode_program()
        self.layout: DramLayout = artifact.parsed_layout()
        self._report: Report | None = None
        self._report_of: Callable[[], Report] | None = None  # builds the last run's report
        self._image: np.ndarray | None = None
        #: the DRAM buffer of the last run and the ranges written into it (its inputs and
        #: Counters.dram_written): the next run restores those from the image instead of
        #: copying it all
        self._spare: tuple[np.ndarray, list[tuple[int, int]]] | None = None
        self._spare_lock = threading.Lock()
        #: the simulator of the last run, cleared before the next one takes it: with the same
        #: DRAM buffer it keeps the functional engine's operand views (Simulator.operand_views)
        self._sim: Any = None

    # ---------------------------------------------------------------- properties
    @property
    def last_report(self) -> Report | None:
        """The report of the last run (cycles, utilisation, per-op table, energy), built when
        first read: runs over many inputs whose reports nobody reads do not pay for them."""
        if self._report_of is not None:
            self._report, self._report_of = self._report_of(), None
        return self._report

    @last_report.setter
    def last_report(self, report: Report | None) -> None:
        self._report, self._report_of = report, None

    @property
    def input_names(self) -> list[str]:
        return [s.name for s in self.artifact.inputs]

    @property
    def output_names(self) -> list[str]:
        return [s.name for s in self.artifact.outputs]

    @property
    def target(self) -> str:
        return self.artifact.target_name

    def __repr__(self) -> str:
        sig = ", ".join(f"{s.name}: {s.dtype}{list(s.shape)}" for s in self.artifact.inputs)
        outs = ", ".join(f"{s.name}: {s.dtype}{list(s.shape)}" for s in self.artifact.outputs)
        return (f"<infer.Executable target={self.target} ({sig}) -> ({outs}), "
                f"{len(self.program)} instructions, {self.layout.total_bytes} bytes of DRAM>")

    # ---------------------------------------------------------------- persistence
    def save(self, path: str | Path) -> Path:
        return self.artifact.save(path)

    @staticmethod
    def load(path: str | Path, reference: CheckReference | None = None) -> Executable:
        return Executable(Artifact.load(path), reference)

    # ---------------------------------------------------------------- running
    def _base_image(self) -> np.ndarray:
        if self._image is None:
            lay = self.layout
            img = np.zeros(lay.total_bytes, np.uint8)
            arrays = self.artifact.weight_arrays()
            for w in lay.weights:
                img[w.offset:w.offset + w.nbytes] = np.frombuffer(arrays[w.name].tobytes(), np.uint8)
            img.flags.writeable = False
            self._image = img
        return self._image

    #: more written ranges than this: copy the whole image (merging them would cost more)
    MAX_RESTORED_RANGES = 1 << 15

    def _fresh_dram(self) -> np.ndarray:
        """A writable copy of the DRAM image: the last run's buffer with the ranges it wrote
        restored, when it left one (one run at a time takes it), else a copy of the image."""
        image = self._base_image()
        with self._spare_lock:
            spare, self._spare = self._spare, None
        if spare is None or len(spare[1]) > self.MAX_RESTORED_RANGES:
            return image.copy()
        dram, written = spare
        lo_run = hi_run = -1
        for lo, hi in sorted(written):  # merged: one copy per run of overlapping ranges
            if lo > hi_run:
                if hi_run > lo_run:
                    dram[lo_run:hi_run] = image[lo_run:hi_run]
                lo_run = lo
            hi_run = max(hi_run, hi)
        if hi_run > lo_run:
            dram[lo_run:hi_run] = image[lo_run:hi_run]
        return dram

    def _take_simulator(self, config: HardwareConfig | None = None) -> Any:
        """A simulator of `config` (default: the artifact's) with cleared local memories, as a
        new one has: the last run's, when nobody else took it and it runs on the threads and
        config a new one would (INFER_SIM_THREADS)."""
        from infer.target.sim import Simulator

        with self._spare_lock:
            sim, self._sim = self._sim, None
        return Simulator.reuse(sim, self.config if config is None else config)

    def _normalise_inputs(self, inputs: Any) -> list[np.ndarray]:
        specs = self.artifact.inputs
        names = [s.name for s in specs]
        if isinstance(inputs, Mapping):
            missing = [n for n in names if n not in inputs]
            if missing:
                raise RunError(f"missing input(s) {', '.join(missing)} (the model's inputs are {', '.join(names)})")
            extra = [k for k in inputs if k not in names]
            if extra:
                raise RunError(f"unknown input(s) {', '.join(map(str, extra))} (the model's inputs are "
                               f"{', '.join(names)})")
            arrays = [inputs[n] for n in names]
        elif isinstance(inputs, np.ndarray) and len(specs) == 1:
            arrays = [inputs]
        elif isinstance(inputs, Sequence):
            arrays = list(inputs)
        else:
            raise RunError(f"inputs must be a list of arrays or a dict by name, got {type(inputs).__name__}")
        if len(arrays) != len(specs):
            raise RunError(f"expected {len(specs)} input(s) ({', '.join(names)}), got {len(arrays)}")
        out = []
        for s, a in zip(specs, arrays, strict=True):
            a = np.asarray(a)
            if tuple(a.shape) != s.shape:
                raise RunError(f"input '{s.name}': expected shape {list(s.shape)}, got {list(a.shape)}")
            want = s.np_dtype
            if a.dtype != want:
                if not np.can_cast(a.dtype, want, casting="same_kind"):
                    raise RunError(f"input '{s.name}': expected {s.dtype}, got {a.dtype}")
                a = a.astype(want)
            out.append(np.ascontiguousarray(a))
        return out

    @staticmethod
    def _to_dram_dtype(name: str, a: np.ndarray, region: DramRegion) -> np.ndarray:
        """An input as DRAM `region` holds it (runtime/boundary.py: gather indices checked
        against their table, i64 narrowed to i32, integers, bools and f16/bf16/f64 held as
        f32); a value it cannot hold exactly is a RunError."""
        try:
            return to_region(name, a, region)
        except BoundaryError as e:
            raise RunError(str(e)) from None

    def run(self, inputs: Any = None, *, trace: bool = True,
            check_races: bool | None = None,
            on_pc: Mapping[int, Callable[[int, np.ndarray], None]] | None = None,
            mode: str = "fast", config: HardwareConfig | None = None) -> list[np.ndarray]:
        """Run on the simulator; returns the outputs in signature order.

        `trace=True` (default) records the engine timelines, needed for the per-op
        report and `last_report.to_chrome_trace`. `check_races` runs the simulator's race
        checker (default: on when the environment sets INFER_SIM_CHECK_RACES=1). `on_pc`
        is passed to `Simulator.run` (callbacks `f(pc, dram)` when the program reaches an
        instruction index at loop depth 0; `self.artifact.ops` gives each kernel's range).
        `mode`: "fast" (default), "reference", "functional" (outputs, the report has no
        cycles) or "timing" (cycles and counters only: returns no outputs). `config`: simulate
        on this hardware config instead of the artifact's (a what-if of the same program,
        `infer.target.hw.unlimited`; its memories must hold the program's)."""
        from infer.target.sim import MODES, SimFault

        if mode not in MODES:
            raise RunError(f"unknown simulation mode '{mode}' (modes: {', '.join(MODES)})")

        if inputs is None:
            inputs = []
        arrays = self._normalise_inputs(inputs)
        lay = self.layout
        try:
            paged_metadata([(p, s.name, a) for p, s, a in zip(lay.inputs, self.artifact.inputs, arrays, strict=True)])
        except BoundaryError as e:
            raise RunError(str(e)) from None
        dram = self._fresh_dram()
        for p, s, a in zip(lay.inputs, self.artifact.inputs, arrays, strict=True):
            a = self._to_dram_dtype(s.name, a, p)
            b = np.frombuffer(a.tobytes(), np.uint8)
            dram[p.offset:p.offset + b.size] = b
        if check_races is None:
            check_races = sim_check_races_from_env()
        config = self.config if config is None else config
        sim = self._take_simulator(config)
        t0 = time.perf_counter()
        try:
            # the weight region is the image's in every run (_fresh_dram restores what a run
            # wrote; inputs are written to their own regions): a replay keeps its conversions
            counters = sim.run(self.program, dram, trace=trace, check_races=check_races, on_pc=on_pc,
                               mode=mode, constant_dram=[(lay.weights_offset,
                                                          lay.weights_offset + lay.weights_bytes)])
        except SimFault as e:
            raise RunError(f"the program faulted on the simulator: {e}") from None
        wall = time.perf_counter() - t0
        outs = []
        if mode != "timing":  # timing mode computes no data
            for p, s in zip(lay.outputs, self.artifact.outputs, strict=True):
                held = np_dtype(p.dtype)
                n = int(np.prod(s.shape, dtype=np.int64)) * held.itemsize
                outs.append(from_dram(dram[p.offset:p.offset + n].view(held).reshape(s.shape).copy(), s.np_dtype))
        if counters.dram_written is not None and not on_pc:
            self._spare = (dram, counters.dram_written
                           + [(p.offset, p.offset + p.nbytes) for p in lay.inputs])
        self._sim = sim
        ops = self.artifact.ops if trace else None
        # the closure holds what the report needs, not `self`: an Executable referring to itself
        # through it would be freed only by the cycle collector, with its simulator's local
        # memories and DRAM buffers (a process compiling and running model after model kept
        # ~10 MB of them per model until a full collection)
        program = self.program
        passes = 3 if self.artifact.precision == "fp32" else 1
        output_bytes = sum(r.nbytes for r in lay.outputs)
        io_bytes = sum(r.nbytes for r in lay.inputs) + output_bytes
        self._report, self._report_of = None, lambda: build_report(
            counters, program, ops, config, wall, passes=passes, io_bytes=io_bytes,
            output_bytes=output_bytes)
        return outs

    def check(self, inputs: Any = None, *, trace: bool = True, check_races: bool | None = None,
              progress: Callable[[str], None] | None = None, min_cosine: float = 0.999,
              min_sqnr: float = 30.0,
              on_pc: Mapping[int, Callable[[int, np.ndarray], None]] | None = None,
              mode: str = "fast") -> CheckReport:
        """Run on the simulator and compare with the reference interpreter, layer by layer.

        Returns an `infer.runtime.check.CheckReport`: `.layers` (one row per graph-level
        kernel: name, kernel, kind, cosine, max_abs, sqnr_db; the DRAM bytes of the value
        each kernel defines, copied right after it ran), `.outputs` (per model output),
        `.first_bad`, `.ok()`, `.table()`, `.as_dict()` (JSON-able), `.sim_outputs`.
        `last_report` is set as by `run`. Needs the graph IR in the artifact and this
        Executable's `reference` (`infer.runtime.check.NoReferenceError` without one).
        `on_pc` callbacks run before the snapshots at the same pc. `mode` as for `run`, except
        "timing" (no data to compare)."""
        from infer.runtime.check import check_layers

        if mode == "timing":
            raise RunError("the per-layer check compares data: timing mode computes none")
        return check_layers(self, inputs, trace=trace, check_races=check_races, progress=progress,
                            min_cosine=min_cosine, min_sqnr=min_sqnr, on_pc=on_pc, reference=self.reference,
                            mode=mode)


def sim_check_races_from_env() -> bool:
    """INFER_SIM_CHECK_RACES: unset, empty or 0 = off; anything else = on."""
    return os.environ.get("INFER_SIM_CHECK_RACES", "").strip() not in ("", "0")


def load(path: str | Path) -> Executable:
    """Load a `.npu` artifact (validated) as an Executable that runs; checking it needs the
    reference interpreter, which `infer.load` (the compile driver's load) adds."""
    return Executable.load(path)
