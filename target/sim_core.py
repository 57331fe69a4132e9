"""What every simulator engine shares: faults, counters (with the lazily expanded event log and
the per-instruction profile), the DRAM bandwidth calendar and the numerics of the data path.

The numerics are defined here once, on arrays with any number of leading batch dimensions, so
the reference engine (one instruction at a time: 2-D tiles) and the fast engine (one
instruction over many loop iterations at once: the same tiles stacked) compute the same bits:
every function is elementwise, a reduction over the last (contiguous) axis, or a stacked
`matmul` whose every slice is the same BLAS call the reference makes.
"""

from __future__ import annotations

import json
import math
from bisect import bisect_left
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np

from infer.target import isa
from infer.target.special import erf, gelu_erf

ENGINES = isa.ENGINES
E_SCALAR, E_LOAD, E_STORE, E_MATRIX, E_VECTOR = range(5)
ENGINE_INDEX = {e: i for i, e in enumerate(ENGINES)}

NP_DTYPES: dict[int, Any] = {
    0: np.dtype(np.int8), 1: np.dtype(np.int32), 2: np.dtype(np.float32),
    3: np.dtype(ml_dtypes.bfloat16), 4: np.dtype(ml_dtypes.float8_e4m3fn),
    5: np.dtype(ml_dtypes.float8_e5m2),
}
INT_RANGE = {0: (-128, 127), 1: (-(2**31), 2**31 - 1)}


class SimFault(Exception):
    """A program fault: names the instruction index, its disassembly and the cause."""

    def __init__(self, index: int, text: str, cause: str, kind: str):
        self.index, self.text, self.cause, self.kind = index, text, cause, kind
        super().__init__(f"fault [{kind}] at instruction {index} ({text}): {cause}")


class Fault(Exception):
    """Raised inside an engine; the engine turns it into a SimFault naming the instruction."""

    def __init__(self, kind: str, cause: str):
        self.kind, self.cause = kind, cause


def deadlock(wait: int) -> Fault:
    return Fault("deadlock", f"wait on s{wait} can never be satisfied: no earlier instruction "
                 "signals it (or all its tokens were consumed)")


# ----------------------------------------------------------------------------- event log
class EventLog:
    """Engine timeline events `(engine, mnemonic, start, duration, pc)` in execution order.

    Engines append event tuples to `items`; a loop period whose timing the fast engine
    extrapolated is one `(lo, hi, k, delta)` list instead: the logical events [lo, hi) repeated
    k more times, shifted by delta, 2*delta, ... cycles. `expand()` materialises the list once,
    so recording costs nothing until someone reads the events."""

    def __init__(self) -> None:
        self.items: list[Any] = []
        self.offset = 0  # logical length - len(items)

    def __len__(self) -> int:
        return len(self.items) + self.offset

    def repeat(self, lo: int, hi: int, k: int, delta: int) -> None:
        if k > 0 and hi > lo:
            self.items.append([lo, hi, k, delta])
            self.offset += k * (hi - lo) - 1

    def expand(self) -> list[tuple[int, str, int, int, int]]:
        out: list[tuple[int, str, int, int, int]] = []
        for it in self.items:
            if type(it) is tuple:
                out.append(it)
                continue
            lo, hi, k, delta = it
            period = out[lo:hi]
            for j in range(1, k + 1):
                d = j * delta
                out.extend([(e, n, s + d, du, pc) for e, n, s, du, pc in period])
        return out


@dataclass
class PcProfile:
    """Per-instruction aggregates of the engine events (what the per-op report needs): how
    often each instruction ran, its first start, its last end (start + max(duration, 1)) and
    the MACs of its matmuls."""

    count: list[int]
    first: list[int]
    last: list[int]
    macs: list[int]

    @staticmethod
    def empty(n: int) -> PcProfile:
        return PcProfile([0] * n, [-1] * n, [0] * n, [0] * n)


# ----------------------------------------------------------------------------- counters
@dataclass
class Counters:
    config: str
    clock_ghz: float
    cycles: int = 0
    instructions: int = 0  # dynamic (executed) instruction count
    per_engine_instructions: list[int] = field(default_factory=lambda: [0] * 5)
    busy: list[int] = field(default_factory=lambda: [0] * 5)
    stalls: dict[str, int] = field(default_factory=dict)
    dram_read_bytes: int = 0
    dram_write_bytes: int = 0
    dram_busy_cycles: int = 0
    macs: int = 0
    peak_macs_per_cycle: int = 1  # the matrix unit's base (bf16) rate, the roofline's peak
    #: MACs by matmul operand dtype ("int8", "bf16", ...) and the array's MACs per cycle on
    #: each: utilisation measures every dtype against its own peak (int8 runs at twice the
    #: bf16 rate on the server config, so against the bf16 peak it could pass 100 %)
    macs_by_dtype: dict[str, int] = field(default_factory=dict)
    peak_macs_per_cycle_by_dtype: dict[str, int] = field(default_factory=dict)
    weight_load_cycles: int = 0
    vector_elements: int = 0
    acc_saturations: int = 0
    #: the simulation mode that produced these counters (see infer.target.sim.MODES)
    mode: str = "reference"
    #: per-instruction aggregates (runs with trace=True), for the per-op report
    profile: PcProfile | None = None
    log: EventLog = field(default_factory=EventLog, repr=False)
    _events: list[tuple[int, str, int, int, int]] | None = field(default=None, repr=False)
    #: the DRAM byte ranges [lo, hi) the run may have written (every dma.store's hull), when
    #: the engine knows them (fast and functional modes without faults or on_pc callbacks;
    #: [] in timing mode); None otherwise. What a caller reusing its DRAM buffer must restore.
    dram_written: list[tuple[int, int]] | None = field(default=None, repr=False, compare=False)

    @property
    def events(self) -> list[tuple[int, str, int, int, int]]:
        """Engine timeline events (runs with trace=True): (engine, mnemonic, start, duration,
        pc), expanded from the event log on first access."""
        if self._events is None:
            self._events = self.log.expand()
        return self._events

    @property
    def seconds(self) -> float:
        return self.cycles / (self.clock_ghz * 1e9)

    def busy_by_engine(self) -> dict[str, int]:
        return dict(zip(ENGINES, self.busy))

    def utilization(self, engine: str) -> float:
        return self.busy[ENGINE_INDEX[engine]] / self.cycles if self.cycles else 0.0

    @property
    def matrix_peak_cycles(self) -> float:
        """The cycles the executed MACs need with the array at its peak rate for each MAC's
        dtype (the base rate for MACs without a dtype breakdown)."""
        split = sum(self.macs_by_dtype.values())
        cycles = sum(v / self.peak_macs_per_cycle_by_dtype.get(d, self.peak_macs_per_cycle)
                     for d, v in self.macs_by_dtype.items())
        return cycles + (self.macs - split) / self.peak_macs_per_cycle

    @property
    def matrix_utilization(self) -> float:
        """Achieved fraction of the array's peak MAC rate over the whole run, each MAC
        against its dtype's own peak (at most 1)."""
        return self.matrix_peak_cycles / self.cycles if self.cycles else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "config": self.config, "cycles": self.cycles,
            "seconds": self.seconds, "instructions": self.instructions,
            "instructions_by_engine": dict(zip(ENGINES, self.per_engine_instructions)),
            "busy_cycles": self.busy_by_engine(),
            "utilization": {e: self.utilization(e) for e in ENGINES},
            "stall_cycles": dict(self.stalls), "dram_read_bytes": self.dram_read_bytes,
            "dram_write_bytes": self.dram_write_bytes, "dram_busy_cycles": self.dram_busy_cycles,
            "macs": self.macs, "macs_by_dtype": dict(self.macs_by_dtype),
            "peak_macs_per_cycle_by_dtype": dict(self.peak_macs_per_cycle_by_dtype),
            "matrix_utilization": self.matrix_utilization,
            "weight_load_cycles": self.weight_load_cycles,
            "vector_elements": self.vector_elements, "acc_saturations": self.acc_saturations,
        }

    def summary(self) -> str:
        timed = self.mode != "functional"
        lines = [f"config {self.config}: "
                 + (f"{self.cycles} cycles ({self.seconds * 1e6:.2f} us), " if timed else
                    "functional-only run (no timing), ")
                 + f"{self.instructions} instructions executed"]
        for e in ENGINES:
            lines.append(f"  {e:<9} busy {self.busy[ENGINE_INDEX[e]]:>12} cycles "
                         f"({100 * self.utilization(e):5.1f}%)  "
                         f"{self.per_engine_instructions[ENGINE_INDEX[e]]} instrs")
        lines.append(f"  MACs {self.macs} ({100 * self.matrix_utilization:.1f}% of peak), "
                     f"DRAM read {self.dram_read_bytes} B, written {self.dram_write_bytes} B")
        if self.stalls:
            lines.append("  stalls: " + ", ".join(f"{k} {v}" for k, v in sorted(self.stalls.items())))
        return "\n".join(lines)

    def to_chrome_trace(self, path: str | Path | None = None) -> dict[str, Any]:
        """Chrome-trace / Perfetto JSON of the engine timelines (needs run(trace=True))."""
        us = 1.0 / (self.clock_ghz * 1e3)
        evs: list[dict[str, Any]] = [
            {"name": "thread_name", "ph": "M", "pid": 0, "tid": i, "args": {"name": e}}
            for i, e in enumerate(ENGINES)]
        evs.append({"name": "process_name", "ph": "M", "pid": 0, "tid": 0,
                    "args": {"name": f"npu ({self.config})"}})
        for eng, name, start, dur, pc in self.events:
            evs.append({"name": name, "ph": "X", "pid": 0, "tid": eng, "ts": start * us,
                        "dur": max(dur, 1) * us, "args": {"pc": pc, "cycle": start}})
        doc = {"traceEvents": evs, "displayTimeUnit": "ns"}
        if path is not None:
            Path(path).write_text(json.dumps(doc))
        return doc


# ----------------------------------------------------------------------------- DRAM calendar
class Calendar:
    """Busy intervals of the shared DRAM channel; transfers take the earliest free gap.
    The intervals stay sorted, disjoint and never adjacent (reserve merges neighbours)."""

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.ends: list[int] = []

    def reserve(self, t: int, dur: int) -> int:
        s, e = self.starts, self.ends
        i = bisect_left(e, t + 1)  # first interval ending after t
        while i < len(s):
            if s[i] >= t + dur:
                break
            t = max(t, e[i])
            i += 1
        # insert [t, t+dur) at i, merging with neighbours
        end = t + dur
        if i > 0 and e[i - 1] == t:
            e[i - 1] = end
            if i < len(s) and s[i] == end:
                e[i - 1] = e[i]
                del s[i], e[i]
        elif i < len(s) and s[i] == end:
            s[i] = t
        else:
            s.insert(i, t)
            e.insert(i, end)
        return t

    def prune(self, t: int) -> None:
        k = bisect_left(self.ends, t)
        if k > 64:
            del self.starts[:k], self.ends[:k]


# ----------------------------------------------------------------------------- numerics
#: the default NaN: a float result of the vector or matrix unit that is NaN is this quiet NaN
#: (which NaN operand an IEEE operation propagates is not specified, and numpy's loops order
#: operands differently for different memory layouts)
DEFAULT_NAN = np.array(0x7FC00000, np.uint32).view(np.float32)[()]


_max_reduce = np.maximum.reduce
_NEG_INF = np.float32(-np.inf)


def may_hold_nan(x: np.ndarray) -> bool:
    """Whether the float array x holds a NaN: its maximum is NaN (np.maximum propagates NaNs;
    -inf as the initial value makes an empty array's maximum -inf). One reduction called
    directly (ndarray.max's Python wrapper and np.isnan of the scalar cost more than a small
    tile's maximum: this runs after every matmul and vector op). The maximum is numpy's SIMD
    reduction: a (512, 128) fp32 tile 7 us against 20 us for np.add.reduce, the test this
    replaced."""
    s = _max_reduce(x, None, initial=_NEG_INF)
    return s != s


def default_nan(x: np.ndarray) -> None:
    """Replace every NaN of the float array x (in place) by DEFAULT_NAN."""
    nan = np.isnan(x)
    if nan.any():
        x[nan] = DEFAULT_NAN


def canonical_nans(x: np.ndarray) -> None:
    """default_nan(x) after the cheap test of may_hold_nan (what accumulate_into does after
    each float accumulation when asked to). A float tile that several matmuls accumulate into
    in a row, read by nothing in between, may be canonicalised once after the last one: the
    sums that are not NaN do not depend on NaN payloads, and NaN stays NaN under addition."""
    if may_hold_nan(x):
        default_nan(x)


def store_converted(dst: np.ndarray, r: Any, dt: int) -> None:
    """Write r into dst with the hardware's conversion: float -> int rounds half to even and
    saturates (NaN -> 0); int -> int saturates; float -> bf16/fp8 rounds to nearest even (numpy
    astype), NaN -> the default NaN."""
    r = np.asarray(r)
    if dt in INT_RANGE:
        lo, hi = INT_RANGE[dt]
        if r.dtype.kind == "f":
            # float64: fp32 cannot hold 2**31 - 1, so clipping in fp32 would wrap to -2**31
            r = np.nan_to_num(np.rint(r.astype(np.float64)), nan=0.0)
        dst[...] = np.clip(r, lo, hi).astype(dst.dtype)
    else:
        if r.dtype.kind == "f" and may_hold_nan(r):
            r = np.where(np.isnan(r), DEFAULT_NAN, r)
        np.copyto(dst, r, casting="unsafe")


def _gelu(a: np.ndarray) -> np.ndarray:
    k = np.float32(math.sqrt(2.0 / math.pi))
    return np.float32(0.5) * a * (np.float32(1) + np.tanh(k * (a + np.float32(0.044715) * a**3)))


def _erf(a: np.ndarray) -> np.ndarray:
    return erf(a).astype(np.float32)


def _sigmoid(a: np.ndarray) -> np.ndarray:
    return np.float32(1) / (np.float32(1) + np.exp(-a))


#: vector op -> numpy function of the operands in the compute type (fp32 or int64). Tiles may
#: carry leading batch dimensions: reductions are over the last axis.
VECTOR_FUNCTIONS: dict[str, Any] = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "max": np.maximum,
    "min": np.minimum, "copy": lambda a: a, "neg": np.negative, "abs": np.abs,
    "relu": lambda a: np.maximum(a, 0), "gelu": _gelu, "silu": lambda a: a * _sigmoid(a),
    "sigmoid": _sigmoid, "tanh": np.tanh, "exp": np.exp, "sqrt": np.sqrt,
    "rsqrt": lambda a: np.float32(1) / np.sqrt(a), "recip": lambda a: np.float32(1) / a,
    # the ufuncs' reductions that ndarray.sum / ndarray.max call, without their Python wrappers
    "rsum": lambda a: np.add.reduce(a, axis=-1, keepdims=True),
    "rmax": lambda a: np.maximum.reduce(a, axis=-1, keepdims=True),
    # the fp32 products (a temporary in C order, as `mul` then `rsum` reads them), then rsum's sum
    "rdot": lambda a, b: np.add.reduce(np.multiply(a, b), axis=-1, keepdims=True),
    "requant": lambda a, b: a * b,
    "log": np.log, "erf": _erf, "gelu_erf": gelu_erf,
    # comparisons: 1 where a op b holds, else 0, in the compute type (false when either is NaN)
    "eq": lambda a, b: (a == b).astype(np.result_type(a, b)),
    "lt": lambda a, b: (a < b).astype(np.result_type(a, b)),
    "le": lambda a, b: (a <= b).astype(np.result_type(a, b)),
    # a where b is nonzero, else -0 (0 in integer math), in a's compute type
    "mask": lambda a, b: np.where(b != 0, a, np.negative(np.zeros((), a.dtype))),
    # the sum in the compute type, then relu's maximum on it (add then relu, one pass)
    "add_relu": lambda a, b: np.maximum(np.add(a, b), 0),
}
#: elementwise vector ops whose every result element IEEE arithmetic defines exactly (no
#: library approximation whose code path could depend on the operands' strides)
LAYOUT_FREE = frozenset(("add", "sub", "mul", "max", "min", "copy", "neg", "abs", "relu", "mask",
                         "add_relu"))
#: layout-free ops whose every fp32 result (signed zeros included) IEEE defines whatever
#: loop numpy picks, so they may write an fp32 destination in place of a temporary
#: (vector_compute_fast); max, min and relu are left out: which of -0 and +0 numpy's maximum
#: returns may depend on the loop
INTO: dict[str, Any] = {"add": np.add, "sub": np.subtract, "mul": np.multiply,
                        "neg": np.negative, "abs": np.absolute, "copy": np.copyto}
TRANSCENDENTAL = frozenset(("gelu", "silu", "sigmoid", "tanh", "exp", "sqrt", "rsqrt", "recip", "log",
                            "erf", "gelu_erf"))


@dataclass(frozen=True)
class VectorSpec:
    """How a vector instruction computes, from its static fields (shared by the engines)."""

    fn: Any
    binary: bool
    reduce: bool
    ctype: Any  # np.float32 or np.int64
    imm: Any  # operand b for bmode=imm, in the compute type
    #: the result does not depend on operand a's value (an integer multiply by an immediate
    #: 0: how programs clear a tile), so reading it carries no data
    a_is_dead: bool = False
    #: an elementwise operation IEEE defines exactly (add, sub, mul, max, min, copy, neg, abs,
    #: relu, mask): its bits do not depend on the operands' memory layout, so operands already in
    #: the compute type are used in place instead of copied to C order (vector_compute)
    layout_free: bool = False
    #: the ufunc that computes this operation straight into an fp32 destination (add, sub,
    #: mul, neg, abs; np.copyto for copy), or None (see vector_compute_fast)
    into: Any = None

    def compute(self, a: np.ndarray, b: np.ndarray | None, dst: np.ndarray, dt: int) -> None:
        vector_compute_fast(self, a, b, dst, dt)

    @staticmethod
    def of(ins: isa.Instr) -> VectorSpec:
        vop = ins.d.vop
        assert vop is not None
        v = ins.as_dict()
        binary = vop.reads_b
        imm = np.float32(isa.bits_f32(v["imm"])) if binary else np.float32(0)
        float_in = v["at"] >= 2 or (binary and (v["bt"] >= 2 or (
            v["bmode"] == 3 and not float(imm).is_integer())))
        use_float = float_in or vop.name in TRANSCENDENTAL or vop.name == "requant"
        ctype = np.float32 if use_float else np.int64
        dead = (not use_float and vop.name == "mul" and v["bmode"] == 3 and int(imm) == 0)
        return VectorSpec(VECTOR_FUNCTIONS[vop.name], binary, vop.reduces_rows, ctype,
                          imm if use_float else np.int64(int(imm)), dead,
                          vop.name in LAYOUT_FREE and not vop.reduces_rows,
                          INTO.get(vop.name) if use_float else None)


def vector_compute(spec: VectorSpec, a: np.ndarray, b: np.ndarray | None, dst: np.ndarray,
                   dt: int) -> None:
    """dst = op(a, b) converted to dt. a and b are operand views in their storage type (b None
    for unary ops and bmode=imm), converted to the compute type in C order, so a row
    reduction runs over contiguous rows of the same length however many tiles are stacked."""
    ct = spec.ctype
    # a C-ordered operand of the compute type is what converted() would copy it to
    x = a if a.dtype == ct and (spec.layout_free or a.flags.c_contiguous) else converted(a, ct)
    if spec.binary:
        r = spec.fn(x, spec.imm if b is None else (
            b if spec.layout_free and b.dtype == ct else b.astype(ct)))
    else:
        r = spec.fn(x)
    store_converted(dst, r, dt)


_BF16 = np.dtype(ml_dtypes.bfloat16)
#: DEFAULT_NAN rounded to bf16 (its upper half)
_BF16_DEFAULT_NAN = np.array(0x7FC0, np.uint16).view(_BF16)[()]
_ZERO_U16 = np.uint16(0)


def vector_compute_fast(spec: VectorSpec, a: np.ndarray, b: np.ndarray | None,
                        dst: np.ndarray, dt: int) -> None:
    """vector_compute's bits (the reference engine's definition) with fewer passes, for the
    fast and functional engines (test_sim_core checks them against it):
    - an integer multiply by an immediate 0 (how programs clear a tile) writes zeros: every
      int64 product is 0, and 0 converts to +0 in every destination type;
    - an op of INTO with an fp32 destination computes into it (numpy makes overlapping
      operands safe), then makes its NaNs the default NaN: store_converted without the
      temporary and the copy;
    - a bf16 -> bf16 copy copies the bits and makes NaNs the bf16 default NaN: the round trip
      through fp32 is exact for every other value (bf16 is fp32's upper half), so it skips both
      conversions (the fp32 -> bf16 cast is the slow one);
    - an fp32 -> bf16 copy without NaNs casts straight into the destination (no C-order copy
      of the operand first: the cast rounds element by element)."""
    if spec.a_is_dead:
        dst[...] = 0
        return
    into = spec.into
    if into is None:
        vector_compute(spec, a, b, dst, dt)
        return
    if dt == 2:
        x = a if a.dtype == np.float32 else converted(a, np.float32)
        if into is np.copyto:
            np.copyto(dst, x)
        elif spec.binary:
            into(x, spec.imm if b is None else (
                b if b.dtype == np.float32 else b.astype(np.float32)), out=dst)
        else:
            into(x, out=dst)
        if may_hold_nan(dst):
            default_nan(dst)
    elif into is np.copyto and dt == 3 and a.dtype == np.float32 and not may_hold_nan(a):
        # fp32 -> bf16 (the hi half of fp32 emulation's split): ml_dtypes' cast rounds each
        # element to nearest even, as store_converted's does after its C-order copy; only NaNs
        # need the default NaN (vector_compute, below)
        np.copyto(dst, a, casting="unsafe")
    elif into is np.copyto and dt == 3 and a.dtype == _BF16:
        np.copyto(dst, a)
        # a bf16 NaN has all exponent bits set and a nonzero fraction
        bits = np.bitwise_and(dst.view(np.uint16), np.uint16(0x7FFF))
        if _max_reduce(bits, None, initial=_ZERO_U16) > 0x7F80:
            dst[bits > 0x7F80] = _BF16_DEFAULT_NAN
    else:
        vector_compute(spec, a, b, dst, dt)


def vector_occupancy(cfg: Any, ins: isa.Instr) -> int:
    """Cycles a vector instruction occupies the vector unit (docs/isa.md, "Timing model"):
    ceil(rows*cols / lanes) * cost[op]; `vec.dequant` is counted in groups of 4*lanes bytes
    of output (two bf16 or one fp32 weight per lane per cycle)."""
    vop = ins.d.vop
    assert vop is not None
    v = ins.as_dict()
    n, lanes = v["rows"] * v["cols"], cfg.vector.lanes
    if vop.form == "dequant":
        return dequant_occupancy(cfg, n, NP_DTYPES[v["dt"]].itemsize)
    return -(-n // lanes) * cfg.vector.cost[vop.name]


def dequant_occupancy(cfg: Any, elements: int, itemsize: int) -> int:
    """Cycles a `vec.dequant` writing `elements` values of `itemsize` bytes occupies the vector
    unit: ceil(bytes / (4 * lanes)) * cost[dequant] (what compilers estimate with, too)."""
    return -(-(elements * itemsize) // (4 * cfg.vector.lanes)) * cfg.vector.cost["dequant"]


_NIBBLE_SHIFTS = np.array([0, 4], np.uint8)


@dataclass(frozen=True)
class DequantSpec:
    """How a `vec.dequant` computes, from its static fields (shared by the engines)."""

    fmt: int
    axis: int  # isa.QAXES: 0 = a block runs down a column, 1 = along a row

    @staticmethod
    def of(ins: isa.Instr) -> DequantSpec:
        v = ins.as_dict()
        return DequantSpec(v["fmt"], v["blocks"])

    @property
    def code_dtype(self) -> Any:
        """The storage type of the codes operand: int8 (q8_0) or packed bytes."""
        return np.dtype(np.int8) if isa.qformat_bits(self.fmt) == 8 else np.dtype(np.uint8)

    @property
    def scale_entry(self) -> int:
        """fp16 values per block in the scales operand: 1 (d) or 2 (d, m)."""
        return isa.qscale_bytes(self.fmt) // 2

    def compute(self, q: np.ndarray, s: np.ndarray, dst: np.ndarray, dt: int) -> None:
        dequant_compute(self, q, s, dst, dt)


def dequant_codes(spec: DequantSpec, q: np.ndarray) -> np.ndarray:
    """The codes of a (..., rows, cols) tile as fp32: q8_0's int8 values; a q4 tile's
    nibbles in llama.cpp's order (in the 16 bytes of a block's codes, the low nibbles are
    elements 0..15 and the high nibbles elements 16..31), minus 8 for q4_0."""
    if isa.qformat_bits(spec.fmt) == 8:
        return q.astype(np.float32)
    lead = q.shape[:-2]
    r, c = q.shape[-2:]
    h = isa.QBLOCK // 2
    if spec.axis == 0:  # packed rows 16g..16g+15 hold rows 32g..32g+31 of every column
        x = q.reshape(lead + (r // h, 1, h, c)) >> _NIBBLE_SHIFTS.reshape(2, 1, 1)
        nib = (x & np.uint8(0x0F)).reshape(lead + (2 * r, c))
    else:  # bytes 16g..16g+15 of a row hold its columns 32g..32g+31
        x = q.reshape(lead + (r, c // h, 1, h)) >> _NIBBLE_SHIFTS.reshape(2, 1)
        nib = (x & np.uint8(0x0F)).reshape(lead + (r, 2 * c))
    if isa.QFORMATS[spec.fmt] == "q4_0":
        return (nib.astype(np.int8) - np.int8(8)).astype(np.float32)
    return nib.astype(np.float32)


def dequant_compute(spec: DequantSpec, q: np.ndarray, s: np.ndarray, dst: np.ndarray,
                    dt: int) -> None:
    """dst = codes * d (+ m) converted to dt. q: the codes tile (..., code rows, code bytes) in
    spec.code_dtype; s: the scales (..., scale rows, entries * scale_entry) as fp16. The
    product of a code (<= 8 bits) and an fp16 scale (11-bit significand) is exact in fp32, so
    only q4_1's add rounds (once, to nearest even): the numerics of llama.cpp's and gguf's
    dequantization in fp32, fused multiply-add or not."""
    codes = dequant_codes(spec, q)
    p = spec.scale_entry
    lead, (rows, cols) = codes.shape[:-2], codes.shape[-2:]
    # each block's scale (and minimum) broadcast over its 32 codes (np.repeat would write them
    # out 32 times first): the same products and sums, element by element, in place in the new
    # array `codes` (`blocks` splits one of its axes: a view whatever its layout)
    if spec.axis == 0:
        blocks = codes.reshape(lead + (rows // isa.QBLOCK, isa.QBLOCK, cols))
        per_block = (Ellipsis, slice(None), None, slice(None))
    else:
        blocks = codes.reshape(lead + (rows, cols // isa.QBLOCK, isa.QBLOCK))
        per_block = (Ellipsis, None)
    np.multiply(blocks, s[..., 0::p].astype(np.float32)[per_block], out=blocks)
    if p == 2:
        np.add(blocks, s[..., 1::p].astype(np.float32)[per_block], out=blocks)
    store_converted(dst, codes, dt)


def weights_dtype(dt: int, rows: int) -> Any:
    """The compute type the matrix unit's weights are held in: fp32 (exact for int8 products
    summed over up to 1024 rows, and the fp32 accumulation of bf16/fp8), else float64."""
    return np.float32 if (dt != 0 or rows <= 1024) else np.float64


def converted(a: np.ndarray, dtype: Any) -> np.ndarray:
    """a.astype(dtype) in C order, converting a broadcast leading dimension (stride 0: the
    same tile for every lane) once; every (..., rows, cols) slice of the result is C-ordered
    either way."""
    lead = a.strides[:-2]
    if 0 in lead:
        c = a[tuple(0 if s == 0 else slice(None) for s in lead)].astype(dtype, order="C")
        kept = iter(c.strides)
        # the strides np.broadcast_to would give, without its Python-level overhead (read-only
        # like its result: nothing may write through the stride-0 dimensions)
        r = np.ndarray(a.shape, c.dtype, c, 0,
                       tuple(0 if s == 0 else next(kept) for s in lead) + c.strides[-2:])
        r.flags.writeable = False
        return r
    return a.astype(dtype, order="C")


def matmul_product(a: np.ndarray, w: np.ndarray) -> np.ndarray:
    """act @ weights as the matrix unit computes it before accumulating: a (..., m, k)
    activation view, w (..., k, n) weights in their compute type (C order). One BLAS call per
    (m, k) x (k, n) slice, whatever the leading dimensions."""
    return converted(a, w.dtype) @ w


def accumulate_into(out: np.ndarray, r: np.ndarray, is_int: bool, accum: bool,
                    nan_check: bool = True) -> int:
    """out (+)= r with `mx.matmul`'s numerics: int8 products are exact and the sum saturates to
    int32 (returns the number of saturated elements); bf16/fp8 products accumulate in fp32 and a
    NaN result is the default NaN (`nan_check=False` leaves that to the caller: a sum that is
    NaN at the end was NaN from the step that made it NaN on, NaN being absorbing). The simulator engines call these
functions with numpy's floating-point errors ignored (inf and NaN are data, as on the
hardware)."""
    if is_int:
        r = r.astype(np.int64)
        if accum:
            r += out
        lo, hi = INT_RANGE[1]
        mx, mn = r.max(), r.min()
        sat = 0
        if mx > hi or mn < lo:
            sat = int(np.count_nonzero((r > hi) | (r < lo)))
            np.clip(r, lo, hi, out=r)
        out[...] = r
        return sat
    if accum:
        out += r
    else:
        out[...] = r
    if nan_check and may_hold_nan(out):
        default_nan(out)
    return 0


def matmul_into(a: np.ndarray, w: np.ndarray, out: np.ndarray, is_int: bool,
                accum: bool) -> int:
    """out (+)= a @ w (matmul_product, then accumulate_into); returns the saturations."""
    return accumulate_into(out, matmul_product(a, w), is_int, accum)
