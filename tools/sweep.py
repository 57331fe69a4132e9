"""Hardware design-space sweeps: a grid of configs derived from a base TOML, each point
recompiled and simulated (timing only) on Ray, with a cache (docs/hardware-feedback.md).

    params = parse_params(["matrix.rows=16,32", "memory.scratchpad_bytes=131072,262144"], base_text)
    result = run_sweep("model.onnx", "edge", params, out_dir="sweep/")
    result.rows                   # one dict per grid point (SWEEP_COLUMNS), also in sweep/sweep.csv

`--param KEY=V1,V2,...`: KEY is a dotted key of the base TOML (`matrix.rows`,
`memory.scratchpad_bytes`, `dram.bytes_per_cycle`, `energy.mac_pj.bf16`, ...); values take the
type of the base's value (integers, numbers). `K1+K2=V1,V2` sets both keys to each value (a
square array: `matrix.rows+matrix.cols=16,32`). Every other number stays the base's. A point
whose config does not validate (e.g. a non-power-of-two array) is reported and skipped with the
reason; a point that does not compile for its config (e.g. a scratchpad too small for the
tiles) is kept in the table with status "failed" and the compiler's message.

Each point is one Ray task (a local Ray instance unless `ray_address` names a cluster, whose
workers need infer installed and the model path visible): compile the model's graph IR (imported
once, by the driver) for the point's config, then `Executable.run(zeros, mode="timing")`:
cycles, energy by component, average power and area. Results are cached in `out_dir/cache/` as
one JSON file per (model hash, config, precision, compiler version): a re-run computes only new
points. The compiler version is the package version plus a hash of the package's source files,
so a changed compiler recomputes everything.
"""

from __future__ import annotations

import csv
import difflib
import hashlib
import itertools
import json
import os
import re
import shutil
import sys
import tempfile
import time
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from infer.target.energy import AREA_COMPONENTS, COMPONENTS

#: columns of sweep.csv after the parameter columns (one per swept key)
SWEEP_COLUMNS = (["status", "cycles", "latency_us", "energy_uj", "power_mw", "area_mm2"]
                 + [f"energy_{c}_uj" for c in COMPONENTS] + [f"area_{c}_mm2" for c in AREA_COMPONENTS]
                 + ["macs", "dram_bytes", "matrix_utilization", "instructions", "pareto_energy",
                    "pareto_area", "cached", "compile_s", "simulate_s", "reason"])
PRECISIONS = ("fp32", "bf16")


class SweepError(Exception):
    """Bad sweep input (a --param, the base config, the model): one line, exit status 1."""


@dataclass(frozen=True)
class Param:
    keys: tuple[str, ...]  # tied keys take the same value
    values: tuple[Any, ...]


# ------------------------------------------------------------------------------ parameters
def _lookup(data: dict[str, Any], key: str) -> Any:
    node: Any = data
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            raise KeyError(key)
        node = node[part]
    return node


def _scalar_keys(data: dict[str, Any], prefix: str = "") -> list[str]:
    out = []
    for k, v in data.items():
        if isinstance(v, dict):
            out += _scalar_keys(v, f"{prefix}{k}.")
        elif isinstance(v, int | float) and not isinstance(v, bool):
            out.append(prefix + k)
    return out


def _parse_value(key: str, text: str, like: Any) -> Any:
    text = text.strip().replace("_", "")
    try:
        if isinstance(like, int):
            return int(text, 0)
        return float(text)
    except ValueError:
        kind = "an integer" if isinstance(like, int) else "a number"
        raise SweepError(f"--param {key}: '{text}' is not {kind} (the base config's value is {like!r})") from None


def parse_params(specs: list[str], base_text: str, base_name: str = "the base config") -> list[Param]:
    """`["KEY=V1,V2", "K1+K2=V1,V2", ...]` -> Params, checked against the base TOML text."""
    if not specs:
        raise SweepError("give at least one --param KEY=V1,V2,...")
    data = tomllib.loads(base_text)
    known = _scalar_keys(data)
    params, seen = [], set()
    for spec in specs:
        lhs, eq, rhs = spec.partition("=")
        if not eq or not lhs.strip() or not rhs.strip():
            raise SweepError(f"--param '{spec}': expected KEY=V1,V2,... (e.g. matrix.rows=16,32,64)")
        keys = tuple(k.strip() for k in lhs.split("+"))
        for key in keys:
            try:
                like = _lookup(data, key)
            except KeyError:
                near = difflib.get_close_matches(key, known, n=3)
                hint = f" (did you mean {', '.join(near)}?)" if near else ""
                raise SweepError(f"--param {key}: not a key of {base_name}{hint}; sweepable keys are the numbers "
                                 f"in the config, e.g. matrix.rows, memory.scratchpad_bytes, dram.bytes_per_cycle") from None
            if isinstance(like, dict):
                raise SweepError(f"--param {key}: a section of {base_name}, not a value (e.g. {key}.{next(iter(like))})")
            if isinstance(like, bool) or not isinstance(like, int | float):
                raise SweepError(f"--param {key}: only numbers can be swept ({key} is {like!r} in {base_name})")
            if key in seen:
                raise SweepError(f"--param {key}: given twice")
            seen.add(key)
        types = {type(_lookup(data, k)) for k in keys}
        like = _lookup(data, keys[0]) if len(types) == 1 else 0.0
        texts = rhs.split(",")
        if any(not t.strip() for t in texts):
            raise SweepError(f"--param '{spec}': empty value in the list")
        values = tuple(dict.fromkeys(_parse_value("+".join(keys), t, like) for t in texts))
        params.append(Param(keys, values))
    return params


def grid(params: list[Param]) -> list[dict[str, Any]]:
    """Every combination: [{key: value}] (tied keys share their value), first param slowest."""
    points = []
    for combo in itertools.product(*(p.values for p in params)):
        points.append({k: v for p, v in zip(params, combo, strict=True) for k in p.keys})
    return points


def _format(value: Any) -> str:
    return str(value) if isinstance(value, int) else repr(float(value))


def derive_toml(base_text: str, point: dict[str, Any], name: str | None = None) -> str:
    """The base TOML text with each key's value replaced (comments and layout kept)."""
    lines = base_text.splitlines()
    edits = dict(point)
    if name is not None:
        edits["name"] = name
    table = ""
    for i, line in enumerate(lines):
        header = re.match(r"\s*\[([^\[\]]+)\]\s*(#.*)?$", line)
        if header:
            table = header.group(1).strip()
            continue
        m = re.match(r"(\s*)([A-Za-z0-9_]+)(\s*=\s*)([^#]*?)(\s*#.*)?$", line)
        if not m:
            continue
        key = f"{table}.{m.group(2)}" if table else m.group(2)
        if key in edits:
            v = edits.pop(key)
            text = json.dumps(v) if isinstance(v, str) else _format(v)
            lines[i] = f"{m.group(1)}{m.group(2)}{m.group(3)}{text}{m.group(5) or ''}"
    if edits:  # keys the line scan did not find (inline tables): refuse rather than guess
        raise SweepError(f"cannot set {', '.join(edits)} in the base TOML text (only 'key = value' lines)")
    text = "\n".join(lines) + "\n"
    data = tomllib.loads(text)
    for k, v in point.items():
        assert _lookup(data, k) == v, (k, v)
    return text


def point_label(point: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in point.items())


# ------------------------------------------------------------------------------ cache keys
#: tools/ modules that do not change a point's result (command lines, plots, docs generators)
_NOT_COMPILER = re.compile(r"tools/(cli|demo|opdocs|pass_docs|infer_opt|opt_.*|sweep_plots|.*_cmds)\.py$")


def compiler_version() -> str:
    """The package version + a hash of the source files of the compiler, the simulator, the
    runtime and this module (run_point makes the rows)."""
    import infer

    root = Path(infer.__file__).resolve().parent
    h = hashlib.sha256()
    for sub in ("__init__.py", "dialects", "frontend", "passes", "runtime", "target", "tools"):
        p = root / sub
        files = [p] if p.is_file() else sorted(x for x in p.rglob("*.py") if "__pycache__" not in x.parts)
        for f in files:
            if _NOT_COMPILER.search(f.relative_to(root).as_posix()):
                continue
            h.update(str(f.relative_to(root)).encode())
            h.update(f.read_bytes())
    return f"{infer.__version__}+{h.hexdigest()[:16]}"


def model_hash(path: Path) -> str:
    h = hashlib.sha256()
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    for f in files:
        h.update(str(f.relative_to(path) if f != path else f.name).encode())
        with open(f, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()


def point_key(model: str, config_text: str, precision: str, version: str,
              input_shapes: dict[str, Any]) -> str:
    data = tomllib.loads(config_text)
    data.pop("name", None)  # the name does not change the hardware
    doc = {"model": model, "config": data, "precision": precision, "compiler": version,
           "input_shapes": {k: list(v) for k, v in sorted(input_shapes.items())}}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:32]


# ------------------------------------------------------------------------------ one point
@dataclass(frozen=True)
class PointTask:
    graph_ir: str  # path of the graph-level .mlir (weights beside it)
    config_text: str
    precision: str


def run_point(task: PointTask) -> dict[str, Any]:
    """Compile the graph IR for the point's config and simulate it timing-only. Never raises
    for a point the compiler refuses: status "failed" and the message."""
    import numpy as np

    from infer.target.energy import area_breakdown
    from infer.tools.driver import compile as compile_model

    with tempfile.TemporaryDirectory(prefix="infer-sweep-") as tmp:
        cfg_path = Path(tmp) / "point.toml"
        cfg_path.write_text(task.config_text)
        t0 = time.perf_counter()
        try:
            exe = compile_model(task.graph_ir, target=str(cfg_path), precision=task.precision)
        except Exception as e:  # the compiler's refusal of this config is a result
            msg = str(e).splitlines()[0] if str(e) else type(e).__name__
            return {"status": "failed", "reason": f"{type(e).__name__}: {msg}",
                    "compile_s": time.perf_counter() - t0}
    t1 = time.perf_counter()
    inputs = [np.zeros(s.shape, s.np_dtype) for s in exe.artifact.inputs]
    try:
        exe.run(inputs, mode="timing", trace=True)
    except Exception as e:  # e.g. a program whose loop counts are data: the point's result
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        return {"status": "failed", "reason": f"simulation: {type(e).__name__}: {msg}", "compile_s": t1 - t0}
    t2 = time.perf_counter()
    rep = exe.last_report
    row: dict[str, Any] = {"status": "ok", "reason": "", "cycles": rep.cycles, "latency_us": rep.seconds * 1e6,
                           "macs": rep.macs, "dram_bytes": rep.dram_bytes,
                           "matrix_utilization": rep.matrix_peak_fraction, "instructions": len(exe.program),
                           "compile_s": t1 - t0, "simulate_s": t2 - t1}
    area = area_breakdown(exe.config)
    row["area_mm2"] = area["total"]
    row.update({f"area_{c}_mm2": area[c] for c in AREA_COMPONENTS})
    en = rep.energy
    if en is not None:
        row["energy_uj"] = en.total_pj * 1e-6
        row["power_mw"] = en.average_power_w * 1e3
        row.update({f"energy_{c}_uj": en.by_component[c] * 1e-6 for c in COMPONENTS})
    return row


# ------------------------------------------------------------------------------ the sweep
@dataclass
class SweepResult:
    params: list[Param]
    rows: list[dict[str, Any]]  # one per grid point: the point's keys, then SWEEP_COLUMNS
    csv_path: Path
    computed: int = 0  # points simulated in this run (the others came from the cache or were invalid)
    plots: list[Path] = field(default_factory=list)
    wall_seconds: float = 0.0

    @property
    def keys(self) -> list[str]:
        return [k for p in self.params for k in p.keys]

    def table(self) -> str:
        keys = self.keys
        head = [*keys, "status", "cycles", "latency us", "energy uJ", "power mW", "area mm2", "pareto"]
        body = []
        for r in self.rows:
            ok = r["status"] == "ok"
            pareto = ("E" if r.get("pareto_energy") else "") + ("A" if r.get("pareto_area") else "")
            body.append([*(str(r[k]) for k in keys), r["status"] + (" (cached)" if r.get("cached") else ""),
                         str(r["cycles"]) if ok else "-", f"{r['latency_us']:.1f}" if ok else "-",
                         _num(r["energy_uj"]) if ok and r.get("energy_uj") != "" else "-",
                         _num(r["power_mw"]) if ok and r.get("power_mw") != "" else "-",
                         f"{r['area_mm2']:.3f}" if r.get("area_mm2") not in (None, "") else "-", pareto or "-"])
        widths = [max(len(h), *(len(b[i]) for b in body)) for i, h in enumerate(head)]
        lines = ["  ".join(h.rjust(w) for h, w in zip(head, widths, strict=True))]
        lines += ["  ".join(c.rjust(w) for c, w in zip(b, widths, strict=True)) for b in body]
        for r in self.rows:
            if r["status"] != "ok":
                lines.append(f"{point_label({k: r[k] for k in keys})}: {r['status']}: {r['reason']}")
        lines.append("pareto: E = on the latency-energy front, A = on the latency-area front")
        return "\n".join(lines)


def pareto_front(points: list[tuple[float, float]]) -> list[bool]:
    """For each (x, y): whether no other point is <= in both and < in one (minimising both)."""
    out = []
    for i, (x, y) in enumerate(points):
        dominated = any(x2 <= x and y2 <= y and (x2 < x or y2 < y)
                        for j, (x2, y2) in enumerate(points) if j != i)
        out.append(not dominated)
    return out


def _mark_pareto(rows: list[dict[str, Any]]) -> None:
    ok = [r for r in rows if r["status"] == "ok" and r.get("energy_uj") not in (None, "")]
    for col, metric in (("pareto_energy", "energy_uj"), ("pareto_area", "area_mm2")):
        front = pareto_front([(r["latency_us"], r[metric]) for r in ok])
        for r in rows:
            r[col] = 0
        for r, on in zip(ok, front, strict=True):
            r[col] = int(on)


def write_csv(rows: list[dict[str, Any]], keys: list[str], path: Path) -> Path:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["point", *keys, *SWEEP_COLUMNS], extrasaction="ignore")
        w.writeheader()
        for i, r in enumerate(rows):
            w.writerow({"point": i, **{c: r.get(c, "") for c in (*keys, *SWEEP_COLUMNS)}})
    return path


def run_sweep(model: str | Path, base: str = "edge", params: list[Param] | list[str] | None = None, *,
              precision: str = "fp32", out_dir: str | Path = "sweep", ray_address: str | None = None,
              input_shapes: dict[str, Any] | None = None, plots: bool = True,
              progress: Callable[[str], None] | None = None) -> SweepResult:
    """Run the grid; writes out_dir/sweep.csv (and PNG plots) and returns the rows."""
    from infer.target.hw import ConfigError, config_path, from_dict

    t_start = time.perf_counter()
    say = progress or (lambda msg: None)
    if precision not in PRECISIONS:
        raise SweepError(f"--precision {precision}: a sweep compiles {' or '.join(PRECISIONS)} "
                         "(int8 needs calibration data per point)")
    model_path = Path(model)
    if not model_path.exists():
        raise SweepError(f"{model}: no such file or directory")
    try:
        base_file = config_path(base)
    except ConfigError as e:
        raise SweepError(str(e)) from None
    base_text = base_file.read_text()
    try:
        base_cfg = from_dict(tomllib.loads(base_text), base_file.name)
    except (ConfigError, tomllib.TOMLDecodeError) as e:
        raise SweepError(f"base config: {e}") from None
    if base_cfg.energy is None or base_cfg.area is None:
        raise SweepError(f"{base_file.name}: a sweep needs the [energy] and [area] sections (see target/edge.toml)")
    if params is None or (params and isinstance(params[0], str)):
        params = parse_params(list(params or []), base_text, base_file.name)  # type: ignore[arg-type]
    params = list(params)  # type: ignore[arg-type]
    keys = [k for p in params for k in p.keys]
    out = Path(out_dir)
    cache = out / "cache"
    cache.mkdir(parents=True, exist_ok=True)
    version = compiler_version()
    mhash = model_hash(model_path)
    shapes = dict(input_shapes or {})

    rows: list[dict[str, Any]] = []
    todo: list[tuple[int, str, str]] = []  # (row index, cache key, config text)
    for point in grid(params):
        row: dict[str, Any] = dict(point)
        rows.append(row)
        name = f"{base_cfg.name}[{','.join(f'{k}={v}' for k, v in point.items())}]"
        text = derive_toml(base_text, point, name)
        try:
            cfg = from_dict(tomllib.loads(text), f"{base_file.name} with {point_label(point)}")
        except ConfigError as e:
            row.update(status="invalid", reason=str(e).split(": ", 1)[-1])
            say(f"skipped {point_label(point)}: invalid config: {row['reason']}")
            continue
        from infer.target.energy import area_breakdown

        area = area_breakdown(cfg)
        row.update({"area_mm2": area["total"], **{f"area_{c}_mm2": area[c] for c in AREA_COMPONENTS}})
        key = point_key(mhash, text, precision, version, shapes)
        hit = cache / f"{key}.json"
        if hit.is_file():
            row.update(json.loads(hit.read_text()), cached=1)
            say(f"cached {point_label(point)}: {_brief(row)}")
        else:
            todo.append((len(rows) - 1, key, text))
    if not any(r.get("status") != "invalid" for r in rows):
        raise SweepError("no valid point in the grid: " + "; ".join(
            f"{point_label({k: r[k] for k in keys})}: {r['reason']}" for r in rows))

    computed = 0
    if todo:
        graph_ir = _graph_ir(model_path, mhash, cache, shapes, say)
        tasks = [PointTask(str(graph_ir), text, precision) for _, _, text in todo]
        say(f"{len(todo)} point(s) to compile and simulate (timing only), {len(rows) - len(todo)} cached or invalid")

        def done(i: int, result: dict[str, Any]) -> None:
            idx, key, _ = todo[i]
            if not result.pop("transient", False):
                (cache / f"{key}.json").write_text(json.dumps(result))
            rows[idx].update(result, cached=0)
            say(f"done {point_label({k: rows[idx][k] for k in keys})}: {_brief(rows[idx])}")

        _run_tasks(tasks, ray_address, out, done)
        computed = len(todo)
    _mark_pareto(rows)
    result = SweepResult(params, rows, write_csv(rows, keys, out / "sweep.csv"), computed)
    if plots:
        from infer.tools.sweep_plots import write_sweep_plots

        result.plots = write_sweep_plots(rows, keys, out, title=f"{model_path.name} on {base_cfg.name}, {precision}")
    result.wall_seconds = time.perf_counter() - t_start
    return result


def _num(x: float) -> str:
    """4 significant digits without an exponent below 10^7."""
    return f"{x:.4g}" if abs(x) < 1e4 else f"{x:.0f}"


def _brief(row: dict[str, Any]) -> str:
    if row["status"] != "ok":
        return f"{row['status']}: {row['reason']}"
    return (f"{row['cycles']} cycles, {_num(row.get('energy_uj', 0))} uJ, {row['area_mm2']:.3f} mm^2 "
            f"(compile {row.get('compile_s', 0):.1f} s, simulate {row.get('simulate_s', 0):.1f} s)")


def _graph_ir(model: Path, mhash: str, cache: Path, shapes: dict[str, Any], say) -> Path:
    """The model's graph IR, imported once per model hash (weights beside it in the cache)."""
    if model.suffix == ".mlir":
        return model.resolve()
    shape_tag = hashlib.sha256(json.dumps({k: list(v) for k, v in sorted(shapes.items())}).encode()).hexdigest()[:8]
    folder = cache / f"graph-{mhash[:16]}-{shape_tag}"
    path = folder / "model.mlir"
    if not path.is_file():
        from infer.frontend import import_model

        say(f"importing {model} (once for every point)")
        options = {"input_shapes": shapes} if shapes else {}
        tmp = Path(tempfile.mkdtemp(prefix=folder.name + ".", dir=cache))
        import_model(str(model), **options).save(str(tmp / "model.mlir"))
        if folder.exists():
            shutil.rmtree(folder)
        tmp.rename(folder)
    return path.resolve()


def _run_tasks(tasks: list[PointTask], ray_address: str | None, out: Path,
               done: Callable[[int, dict[str, Any]], None]) -> None:
    """Run every task on Ray (a quiet local instance unless ray_address is given); call
    done(i, result) as each finishes."""
    import logging

    import ray

    started_here, temp = False, None
    # Ray logs a notice about its (default-on) token authentication at every start: not ours to show
    logging.getLogger("ray._private.authentication").setLevel(logging.ERROR)
    if not ray.is_initialized():
        if ray_address:
            ray.init(address=ray_address, log_to_driver=False, logging_level=logging.ERROR)
        else:
            # Ray's unix sockets need a short path: its session files go under /tmp, removed after
            temp = tempfile.mkdtemp(prefix="infer-ray-", dir="/tmp")
            ray.init(num_cpus=os.cpu_count() or 1, include_dashboard=False, log_to_driver=False,
                     configure_logging=False, logging_level=logging.ERROR, _temp_dir=temp)
        started_here = True
    try:
        task = ray.remote(num_cpus=1, max_retries=0)(run_point)
        refs = {task.remote(t): i for i, t in enumerate(tasks)}
        pending = list(refs)
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            for ref in ready:
                try:
                    result = ray.get(ref)
                except ray.exceptions.RayError as e:  # a worker died (e.g. out of memory): not cached
                    msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
                    result = {"status": "failed", "reason": f"Ray: {type(e).__name__}: {msg}", "transient": True}
                done(refs[ref], result)
    finally:
        if started_here:
            ray.shutdown()
            if temp:
                shutil.rmtree(temp, ignore_errors=True)


def default_progress() -> Callable[[str], None]:
    t0 = time.perf_counter()

    def say(msg: str) -> None:
        print(f"[{time.perf_counter() - t0:7.1f} s] {msg}", file=sys.stderr, flush=True)
    return say
