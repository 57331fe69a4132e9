"""Hardware description: one `HardwareConfig` loaded from a TOML file (target/*.toml).

Every number the timing model and the compiler use comes from here.
`load_config("edge" | "server" | path)`; invalid configs raise `ConfigError` naming the field.

The `[energy]` and `[area]` sections (per-event energies and per-component area coefficients,
read by `infer.target.energy`) are optional, so a config written before they existed (e.g. one
stored in an older artifact) still loads; when a section is present every key is required and
checked like the other fields. The bundled configs have both.
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterable
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from infer.target import isa

_HERE = Path(__file__).resolve().parent


class ConfigError(ValueError):
    pass


@dataclass(frozen=True)
class MatrixConfig:
    rows: int
    cols: int
    dtypes: tuple[str, ...]
    fill_drain_cycles: int
    cycles_per_row: int
    weight_load_bytes_per_cycle: int
    weight_buffers: int
    queue_depth: int
    #: dtype -> MACs one PE completes per cycle on that dtype at the streaming rate (bf16, the
    #: base rate, is 1): the array does rows * cols * rate MACs per cycle, and a matmul of m
    #: rows streams in ceil(m * cycles_per_row / rate) cycles
    macs_per_pe: dict[str, int]

    def pe_macs(self, dtype: str) -> int:
        """MACs one PE completes per cycle on `dtype` operands (1 for the base rate)."""
        return self.macs_per_pe[dtype]

    def matmul_cycles(self, m: int, dtype: str) -> int:
        """Streaming cycles of an `mx.matmul` of m activation rows of `dtype` (its engine
        occupancy; fill and drain come on top)."""
        return -(-(m * self.cycles_per_row) // self.pe_macs(dtype))


@dataclass(frozen=True)
class VectorConfig:
    lanes: int
    latency: int
    queue_depth: int
    cost: dict[str, int]


@dataclass(frozen=True)
class MemoryConfig:
    scratchpad_bytes: int
    scratchpad_banks: int
    accumulator_bytes: int
    accumulator_banks: int
    dram_bytes: int


@dataclass(frozen=True)
class DramConfig:
    bytes_per_cycle: int
    latency_cycles: int
    burst_bytes: int


@dataclass(frozen=True)
class DmaConfig:
    channels: int
    setup_cycles: int
    queue_depth: int


@dataclass(frozen=True)
class ScalarConfig:
    registers: int
    semaphores: int
    loop_depth: int
    queue_depth: int
    #: front-end cycles an `lds` (an int32 read of the scratchpad into a register) takes beyond
    #: its dispatch cycle; `ld` of DRAM takes dram.latency_cycles
    local_load_cycles: int


@dataclass(frozen=True)
class EnergyConfig:
    """Energy per event, in picojoules at the config's technology node (infer.target.energy).

    SRAM energy per byte depends on the bank size, as CACTI-like models have it: a bank of B
    bytes costs `sram_pj_per_byte * (B / sram_reference_bank_bytes) ** sram_bank_exponent`
    per byte read or written, so a sweep over memory sizes sees the bigger banks' cost."""

    mac_pj: dict[str, float]  # one multiply-accumulate of the matrix unit, by input dtype
    vector_pj_per_element: float  # one element of a cost-1 vector op (x vector.cost[op])
    sram_pj_per_byte: float  # one byte read or written in a bank of the reference size
    sram_reference_bank_bytes: int
    sram_bank_exponent: float
    dram_pj_per_byte: float  # one byte moved between DRAM and the chip (both directions)
    static_mw_per_mm2: float  # leakage and idle clock power per mm^2 of the area model


@dataclass(frozen=True)
class AreaConfig:
    """Area coefficients in mm^2 at the config's technology node (infer.target.energy)."""

    pe_mm2: float  # one processing element of the systolic array (all of matrix.dtypes)
    vector_lane_mm2: float
    sram_mm2_per_kib: float  # scratchpad and accumulator SRAM (bit cells + periphery)
    fixed_mm2: float  # front end, DMA engines, DRAM controller and PHY


@dataclass(frozen=True)
class HardwareConfig:
    name: str
    clock_ghz: float
    matrix: MatrixConfig
    vector: VectorConfig
    memory: MemoryConfig
    dram: DramConfig
    dma: DmaConfig
    scalar: ScalarConfig
    source: str = "<dict>"
    energy: EnergyConfig | None = None  # None: the config has no [energy] section
    area: AreaConfig | None = None  # None: the config has no [area] section

    @property
    def peak_macs_per_cycle(self) -> int:
        """The matrix unit's bf16 (base) rate, the roofline reports and utilization use; a
        dtype's own rate is `macs_per_cycle(dtype)`."""
        return self.matrix.rows * self.matrix.cols

    @property
    def peak_macs_per_cycle_by_dtype(self) -> dict[str, int]:
        """The matrix unit's MACs per cycle on each of its dtypes."""
        return {d: self.macs_per_cycle(d) for d in self.matrix.macs_per_pe}

    def macs_per_cycle(self, dtype: str) -> int:
        """MACs per cycle of the matrix unit on `dtype` operands ("int8", "bf16", ...)."""
        return self.matrix.rows * self.matrix.cols * self.matrix.macs_per_pe[dtype]

    def queue_depth(self, engine: str) -> int:
        return {"scalar": self.scalar.queue_depth, "dma_load": self.dma.queue_depth,
                "dma_store": self.dma.queue_depth, "matrix": self.matrix.queue_depth,
                "vector": self.vector.queue_depth}[engine]

    def cycles_to_seconds(self, cycles: float) -> float:
        return cycles / (self.clock_ghz * 1e9)


#: What-if resources (`unlimited`): each made as fast as the timing model allows, so the same
#: program simulated again shows what that resource costs it (`runtime/what_if.py`,
#: docs/hardware-feedback.md "What bounds a program"). A bound to reason with, not a part.
UNLIMITED = 1 << 30
WHAT_IF_RESOURCES = {"dram": "DRAM", "weight_path": "weight path", "vector": "vector unit",
                     "drain": "fill/drain"}  # name -> label


def unlimited(cfg: HardwareConfig, resources: Iterable[str]) -> HardwareConfig:
    """`cfg` with each of `resources` (keys of WHAT_IF_RESOURCES) unlimited: DRAM moves any
    transfer in a cycle after a one-cycle latency; `mx.loadw` loads any tile in a cycle; a
    vector op is one group of lanes (its `cost` cycles) with a one-cycle latency; a matmul
    completes a cycle after its rows stream. A program compiled for `cfg` runs unchanged on
    the result (sizes, queues and the ISA are the same): only the timing differs."""
    out = cfg
    for resource in resources:
        if resource == "dram":
            out = replace(out, dram=replace(out.dram, bytes_per_cycle=UNLIMITED, latency_cycles=1))
        elif resource == "weight_path":
            out = replace(out, matrix=replace(out.matrix, weight_load_bytes_per_cycle=UNLIMITED))
        elif resource == "vector":
            out = replace(out, vector=replace(out.vector, lanes=UNLIMITED, latency=1))
        elif resource == "drain":
            out = replace(out, matrix=replace(out.matrix, fill_drain_cycles=1))
        else:
            raise ConfigError(f"unknown what-if resource '{resource}' (known: {', '.join(WHAT_IF_RESOURCES)})")
    return out


_SECTIONS = {"matrix": MatrixConfig, "vector": VectorConfig, "memory": MemoryConfig,
             "dram": DramConfig, "dma": DmaConfig, "scalar": ScalarConfig}


def _pow2(x: int) -> bool:
    return x > 0 and x & (x - 1) == 0


def from_dict(data: dict[str, Any], source: str = "<dict>") -> HardwareConfig:
    """Validate and build a config from parsed TOML."""

    def err(path: str, msg: str) -> ConfigError:
        return ConfigError(f"{source}: {path} {msg}")

    def get_int(sec: dict[str, Any], path: str, key: str, lo: int = 1) -> int:
        if key not in sec:
            raise err(f"{path}.{key}", "is missing")
        v = sec[key]
        if isinstance(v, bool) or not isinstance(v, int):
            raise err(f"{path}.{key}", f"must be an integer, got {v!r}")
        if v < lo:
            raise err(f"{path}.{key}", f"must be >= {lo}, got {v}")
        return v

    name = data.get("name")
    if not isinstance(name, str) or not name:
        raise err("name", f"must be a non-empty string, got {name!r}")
    clock = data.get("clock_ghz")
    if isinstance(clock, bool) or not isinstance(clock, int | float) or clock <= 0:
        raise err("clock_ghz", f"must be a positive number, got {clock!r}")
    unknown = set(data) - {"name", "clock_ghz", *_SECTIONS, "energy", "area"}
    if unknown:
        raise err(sorted(unknown)[0], "is not a known config field")

    built: dict[str, Any] = {}
    for secname, cls in _SECTIONS.items():
        sec = data.get(secname)
        if not isinstance(sec, dict):
            raise err(secname, "section is missing")
        known = {f.name for f in fields(cls)}
        extra = set(sec) - known
        if extra:
            raise err(f"{secname}.{sorted(extra)[0]}", "is not a known config field")
        kw: dict[str, Any] = {}
        for f in fields(cls):
            p = f"{secname}.{f.name}"
            if f.name == "dtypes":
                v = sec.get("dtypes")
                if not isinstance(v, list) or not v or any(x not in isa.MATMUL_DTYPES[:-1]
                                                           for x in v):
                    raise err(p, f"must be a non-empty list from {list(isa.MATMUL_DTYPES[:-1])},"
                              f" got {v!r}")
                kw[f.name] = tuple(v)
            elif f.name == "macs_per_pe":
                v = sec.get("macs_per_pe")
                if not isinstance(v, dict):
                    raise err(p, "section is missing (MACs per PE per cycle of each of matrix.dtypes)")
                for dt in kw.get("dtypes", ()):
                    get_int(v, p, dt)
                extra = set(v) - set(kw.get("dtypes", ()))
                if extra:
                    raise err(f"{p}.{sorted(extra)[0]}", "is not one of matrix.dtypes")
                kw[f.name] = dict(v)
            elif f.name == "cost":
                v = sec.get("cost")
                if not isinstance(v, dict):
                    raise err(p, "section is missing")
                v = dict(v)
                for op in isa.VECTOR_UNIT_OPS:
                    # an op added to the ISA after a config was written costs what its
                    # `cost_default` op costs there
                    if op.name not in v and op.cost_default is not None and op.cost_default in v:
                        v[op.name] = v[op.cost_default]
                    get_int(v, p, op.name)
                extra = set(v) - {o.name for o in isa.VECTOR_UNIT_OPS}
                if extra:
                    raise err(f"{p}.{sorted(extra)[0]}", "is not a vector op")
                kw[f.name] = dict(v)
            else:
                lo = 0 if f.name in ("latency", "latency_cycles", "setup_cycles",
                                     "fill_drain_cycles") else 1
                kw[f.name] = get_int(sec, secname, f.name, lo)
        built[secname] = cls(**kw)

    m, mem, sc = built["matrix"], built["memory"], built["scalar"]
    for key in ("rows", "cols"):
        if not _pow2(getattr(m, key)) or getattr(m, key) > 4095:
            raise err(f"matrix.{key}", f"must be a positive power of two <= 2048, got "
                      f"{getattr(m, key)}")
    if not _pow2(built["vector"].lanes):
        raise err("vector.lanes", f"must be a positive power of two, got {built['vector'].lanes}")
    for key in ("scratchpad_bytes", "accumulator_bytes"):
        v = getattr(mem, key)
        if v > isa.ACC_BASE:
            raise err(f"memory.{key}", f"must be <= {isa.ACC_BASE} (local address map), got {v}")
        if v % 64:
            raise err(f"memory.{key}", f"must be a multiple of 64, got {v}")
    for key in ("scratchpad_banks", "accumulator_banks"):
        if not _pow2(getattr(mem, key)):
            raise err(f"memory.{key}", f"must be a positive power of two, got {getattr(mem, key)}")
    if sc.registers > isa.MAX_REGISTERS:
        raise err("scalar.registers", f"must be <= {isa.MAX_REGISTERS}, got {sc.registers}")
    if sc.semaphores > isa.MAX_SEMAPHORES:
        raise err("scalar.semaphores", f"must be <= {isa.MAX_SEMAPHORES}, got {sc.semaphores}")
    if m.macs_per_pe.get("bf16", 1) != 1:
        raise err("matrix.macs_per_pe.bf16", f"must be 1 (the base rate: one bf16 MAC per PE per cycle), "
                  f"got {m.macs_per_pe['bf16']}")
    if m.weight_buffers > 2:
        raise err("matrix.weight_buffers", f"must be 1 or 2, got {m.weight_buffers}")
    energy = _energy_section(data["energy"], built["matrix"], err) if "energy" in data else None
    area = _area_section(data["area"], err) if "area" in data else None
    return HardwareConfig(name=name, clock_ghz=float(clock), source=source, energy=energy, area=area,
                          **built)


def _number(sec: Any, path: str, key: str, err) -> float:
    if not isinstance(sec, dict):
        raise err(path, "section is missing")
    if key not in sec:
        raise err(f"{path}.{key}", "is missing")
    v = sec[key]
    if isinstance(v, bool) or not isinstance(v, int | float) or v < 0:
        raise err(f"{path}.{key}", f"must be a non-negative number, got {v!r}")
    return float(v)


def _check_keys(sec: Any, path: str, known: set[str], err) -> None:
    if not isinstance(sec, dict):
        raise err(path, "section is missing")
    extra = set(sec) - known
    if extra:
        raise err(f"{path}.{sorted(extra)[0]}", "is not a known config field")


def _energy_section(sec: Any, matrix: MatrixConfig, err) -> EnergyConfig:
    names = [f.name for f in fields(EnergyConfig)]
    _check_keys(sec, "energy", set(names), err)
    macs = sec.get("mac_pj")
    if not isinstance(macs, dict):
        raise err("energy.mac_pj", "section is missing (pJ per MAC by matmul dtype)")
    _check_keys(macs, "energy.mac_pj", set(isa.MATMUL_DTYPES[:-1]), err)
    for dt in matrix.dtypes:  # every dtype the array implements needs its MAC energy
        _number(macs, "energy.mac_pj", dt, err)
    kw: dict[str, Any] = {"mac_pj": {dt: _number(macs, "energy.mac_pj", dt, err) for dt in macs}}
    for key in names[1:]:  # after mac_pj, in field order
        if key == "sram_reference_bank_bytes":
            if key not in sec:
                raise err(f"energy.{key}", "is missing")
            v = sec[key]
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise err(f"energy.{key}", f"must be a positive integer, got {v!r}")
            kw[key] = v
        else:
            kw[key] = _number(sec, "energy", key, err)
    return EnergyConfig(**kw)


def _area_section(sec: Any, err) -> AreaConfig:
    names = [f.name for f in fields(AreaConfig)]
    _check_keys(sec, "area", set(names), err)
    return AreaConfig(**{key: _number(sec, "area", key, err) for key in names})


def bundled_configs() -> list[str]:
    return sorted(p.stem for p in _HERE.glob("*.toml"))


def config_path(name_or_path: str | Path) -> Path:
    """The TOML file `"edge"`, `"server"` (bundled target/<name>.toml) or a path names."""
    s = str(name_or_path)
    path = Path(s)
    if not s.endswith(".toml") and (_HERE / f"{s}.toml").is_file():
        path = _HERE / f"{s}.toml"
    if not path.is_file():
        raise ConfigError(f"unknown hardware config '{s}' (bundled: "
                          f"{', '.join(bundled_configs())}; or give a .toml path)")
    return path


def load_config(name_or_path: str | Path | HardwareConfig) -> HardwareConfig:
    """`"edge"`, `"server"` (bundled target/<name>.toml) or a path to a TOML file."""
    if isinstance(name_or_path, HardwareConfig):
        return name_or_path
    path = config_path(name_or_path)
    try:
        data = tomllib.loads(path.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:  # (a binary file is not UTF-8)
        raise ConfigError(f"{path}: invalid TOML: {e}") from None
    return from_dict(data, path.name)
