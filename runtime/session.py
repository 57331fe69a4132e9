"""`DeviceSession`: the entry points of one artifact on one simulated device, with buffers
that stay in device DRAM across calls.

    sess = DeviceSession(artifact)                       # one DRAM image: weights written once
    sess.resident                                        # e.g. ["k_0", "v_0", ...]: the KV pools
    outs = sess.run("decode", {"input_ids": ..., ...})   # the other inputs; {output name: array}
    sess.last_report.cycles, sess.last_report.seconds    # of that call, at the config clock

An `Executable` builds a fresh DRAM image for every run. A decoder's steps instead share
state: the artifact's entry points (runtime/artifact.py) read one copy of the weights at the
same addresses, and the KV-cache pools are arguments that every entry has at one address.
The session keeps ONE DRAM image for all entries (the size of the largest), writes the weights
into it once, and treats as *resident* every input that an output aliases (an output updated
in place: `aliases`, {output: input}) plus any it is told to (`resident=`): a resident input is
zero at the start, is not passed to `run` (`write` / `read` set or inspect it from the host), and
is never copied in or out per call. An output aliased to a resident input is not returned (it is
that buffer); an output with a resident buffer's name that the program wrote elsewhere (no
alias) is moved to the buffer within the DRAM image after the call (`copied_bytes` counts it:
0 when the compiler updated it in place). Every other input is written at its entry's address before the program runs, and
every other output read back after. A resident buffer must have one address, shape and dtype in
every entry that has it (checked when the session is built).

Imports only infer.target and numpy (through the runtime): no compiler needed.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from infer.runtime.artifact import Artifact, ArtifactError, np_dtype
from infer.runtime.boundary import BoundaryError, from_dram, paged_metadata, to_region
from infer.runtime.report import Report, build_report
from infer.target.layout import DramRegion


class SessionError(ArtifactError):
    """Bad inputs for a session call, or an artifact whose entries cannot share a device."""


class _Entry:
    def __init__(self, art: Artifact):
        self.artifact = art
        self.program = art.decode_program()
        self.layout = art.parsed_layout()
        self.aliases = {**self.layout.aliases, **art.aliases}
        self.inputs = {s.name: (s, r) for s, r in zip(art.inputs, self.layout.inputs, strict=True)}
        self.outputs = [(s, r) for s, r in zip(art.outputs, self.layout.outputs, strict=True)]


class DeviceSession:
    """The entry points of `artifact` on one simulated device (see the module docstring)."""

    def __init__(self, artifact: Artifact, resident: Iterable[str] = (), *, mode: str = "fast"):
        artifact.validate()
        self.artifact = artifact
        self.config = artifact.config()
        self.mode = mode
        self.entries = {name: _Entry(artifact.for_entry(name)) for name in artifact.entry_names()}
        names = set(resident) | {src for e in self.entries.values() for src in e.aliases.values()}
        self._resident: dict[str, DramRegion] = {}
        for name in sorted(names):
            places = [(entry, e.inputs[name][1]) for entry, e in self.entries.items() if name in e.inputs]
            if not places:
                raise SessionError(f"resident buffer '{name}' is an input of no entry point "
                                   f"({', '.join(self.entries)})")
            (first_entry, first), *others = places
            for entry, r in others:
                if (r.offset, r.shape, r.dtype) != (first.offset, first.shape, first.dtype):
                    raise SessionError(f"resident buffer '{name}' is {r.dtype}{list(r.shape)} at {r.offset} in entry "
                                       f"'{entry}' but {first.dtype}{list(first.shape)} at {first.offset} in "
                                       f"'{first_entry}': the entries cannot share it")
            self._resident[name] = first
        self.dram = np.zeros(max(e.layout.total_bytes for e in self.entries.values()), np.uint8)
        arrays = artifact.weight_arrays()
        placed: set[str] = set()
        for e in self.entries.values():
            for w in e.layout.weights:
                if w.name not in placed:  # one address in every entry (Artifact.validate)
                    placed.add(w.name)
                    self.dram[w.offset:w.offset + w.nbytes] = np.frombuffer(arrays[w.name].tobytes(), np.uint8)
        self.last_report: Report | None = None
        self._sim: Any = None  # `_simulator`
        self.calls = 0
        self.copied_bytes = 0  # resident buffers moved within DRAM (outputs not aliased to them)

    @property
    def resident(self) -> list[str]:
        return list(self._resident)

    # ---------------------------------------------------------------- resident buffers
    def _region(self, name: str) -> DramRegion:
        if name not in self._resident:
            raise SessionError(f"'{name}' is not a resident buffer (resident: {', '.join(self._resident) or 'none'})")
        return self._resident[name]

    def read(self, name: str) -> np.ndarray:
        """A resident buffer as DRAM holds it (a copy)."""
        r = self._region(name)
        return self.dram[r.offset:r.offset + r.nbytes].view(r.np_dtype).reshape(r.shape).copy()

    def write(self, name: str, value: np.ndarray) -> None:
        """Set a resident buffer from the host."""
        r = self._region(name)
        a = np.asarray(value)
        if a.shape != r.shape:
            raise SessionError(f"resident buffer '{name}': expected shape {list(r.shape)}, got {list(a.shape)}")
        self.dram[r.offset:r.offset + r.nbytes] = np.frombuffer(np.ascontiguousarray(a, r.np_dtype).tobytes(),
                                                                np.uint8)

    # ---------------------------------------------------------------- calls
    def _simulator(self) -> Any:
        """The session's simulator, cleared (`Simulator.reuse`): one for every call, so what it
        keeps from run to run (a decode step's expanded weights, `Simulator.dequant_memo`)
        serves the next step."""
        from infer.target.sim import Simulator

        self._sim = Simulator.reuse(self._sim, self.config)
        return self._sim

    def run(self, entry: str, inputs: Mapping[str, np.ndarray], *, trace: bool = False) -> dict[str, np.ndarray]:
        """Run entry point `entry` with its non-resident inputs (by name); returns its outputs
        that are not resident buffers, by name. `last_report` holds the call's cycles."""
        from infer.target.sim import SimFault

        if entry not in self.entries:
            raise SessionError(f"the artifact has no entry point '{entry}' (entry points: {', '.join(self.entries)})")
        e = self.entries[entry]
        wanted = [n for n in e.inputs if n not in self._resident]
        missing = [n for n in wanted if n not in inputs]
        extra = [n for n in inputs if n not in wanted]
        if missing or extra:
            raise SessionError(f"entry '{entry}' takes inputs {', '.join(wanted)}"
                               + (f"; missing {', '.join(missing)}" if missing else "")
                               + (f"; unexpected {', '.join(map(str, extra))}" if extra else ""))
        arrays: dict[str, np.ndarray] = {}
        for name in wanted:
            spec, r = e.inputs[name]
            a = np.asarray(inputs[name])
            if a.shape != spec.shape:
                raise SessionError(f"entry '{entry}': input '{name}' must have shape {list(spec.shape)}, got "
                                   f"{list(a.shape)}")
            arrays[name] = a.astype(spec.np_dtype, copy=False)
        try:  # the context lengths and block tables among them, before any input reaches DRAM
            paged_metadata([(e.inputs[n][1], n, arrays[n]) for n in wanted])
        except BoundaryError as err:
            raise SessionError(str(err)) from None
        for name in wanted:
            r = e.inputs[name][1]
            try:
                held = to_region(name, arrays[name], r)
            except BoundaryError as err:
                raise SessionError(str(err)) from None
            raw = np.frombuffer(np.ascontiguousarray(held).tobytes(), np.uint8)
            self.dram[r.offset:r.offset + raw.size] = raw
        t0 = time.perf_counter()
        try:
            counters = self._simulator().run(e.program, self.dram, trace=trace, mode=self.mode)
        except SimFault as err:
            raise SessionError(f"entry '{entry}' faulted on the simulator: {err}") from None
        wall = time.perf_counter() - t0
        outs: dict[str, np.ndarray] = {}
        for spec, r in e.outputs:
            if spec.name in e.aliases and e.aliases[spec.name] in self._resident:
                continue  # the output IS the resident buffer
            if spec.name in self._resident and spec.name not in e.aliases:
                # a new value of a resident buffer that the program wrote elsewhere (no alias):
                # moved within the DRAM image, never through the host arrays; counted
                home = self._resident[spec.name]
                if (r.shape, r.dtype) != (home.shape, home.dtype):
                    raise SessionError(f"entry '{entry}': output '{spec.name}' does not match resident buffer "
                                       f"'{spec.name}' ({r.dtype}{list(r.shape)} vs {home.dtype}{list(home.shape)})")
                self.dram[home.offset:home.offset + home.nbytes] = self.dram[r.offset:r.offset + r.nbytes].copy()
                self.copied_bytes += home.nbytes
                continue
            held = np_dtype(r.dtype)
            n = int(np.prod(spec.shape, dtype=np.int64)) * held.itemsize
            outs[spec.name] = from_dram(self.dram[r.offset:r.offset + n].view(held).reshape(spec.shape).copy(),
                                        spec.np_dtype)
        self.last_report = build_report(counters, e.program, e.artifact.ops if trace else None, self.config, wall,
                                        passes=3 if self.artifact.precision == "fp32" else 1)
        self.calls += 1
        return outs


__all__ = ["DeviceSession", "SessionError"]
