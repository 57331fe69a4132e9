"""`infer serve-sim`: the serving simulation on the command line.

    infer serve-sim MODEL [-t edge|server|CONFIG.toml[,...]] (--trace REQ.jsonl | --rate R[,R...] --num-requests N)
                    [--policy continuous|static[,...]] [--max-batch-size B] [--token-budget T] [--block-size S]
                    [--num-kv-blocks K] [--watermark W] [--seed N] [--json OUT.json] [--plot-dir DIR]
                    [--ray-address ADDR] [--no-ray] [--cost auto|device|analytic] [--precision fp32|bf16]
                    [--device-chunk C] [--device-batch B] [--device-max-len L]

MODEL is a Llama-family Hugging Face folder (or its config.json): the simulation needs its
sizes only, unless it has weights: then the step costs come from its own compiled
@prefill_chunk/@decode programs simulated once per bucket (a cached table; --cost device|analytic
forces one source), otherwise from the analytic roofline model; the output says which. One
target, policy and rate run here and print the report table; several (comma lists) make a
sweep whose points run in parallel on Ray (a local instance unless --ray-address names a
cluster) and print one row per point. Bad values (a malformed trace line, a request longer
than the context or the KV pool, a rate <= 0, an unknown policy) are one error line and exit
status 1; argparse's usage errors exit 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def _errors() -> tuple[type[Exception], ...]:
    from infer.serving.simulate import SimulationError
    from infer.serving.workload import TraceError, WorkloadError
    from infer.tools.cli import CLIError

    return (CLIError, SimulationError, TraceError, WorkloadError)


def _list(text: str, what: str, conv=str) -> list[Any]:
    from infer.tools.cli import CLIError

    items = [t.strip() for t in text.split(",")]
    if not all(items):
        raise CLIError(f"{what} '{text}': empty item in the comma list")
    try:
        return [conv(t) for t in items]
    except ValueError:
        raise CLIError(f"{what} '{text}': expected a number or a comma list of numbers") from None


def _options(args: argparse.Namespace):
    from infer.serving.simulate import ServeSimOptions

    return ServeSimOptions(model=args.model, policy="continuous", max_batch_size=args.max_batch_size,
                           token_budget=args.token_budget, block_size=args.block_size,
                           num_kv_blocks=args.num_kv_blocks, watermark=args.watermark, cache_dir=args.cache_dir,
                           cost=args.cost, precision=args.precision, device_chunk=args.device_chunk,
                           device_batch=args.device_batch, device_max_len=args.device_max_len)


def cmd_serve_sim(args: argparse.Namespace) -> int:
    from infer.serving.scheduler import POLICIES
    from infer.serving.simulate import resolve
    from infer.serving.sweep import WorkloadSpec, run_sweep, sweep_points
    from infer.serving.workload import LengthDist, read_trace
    from infer.tools.cli import CLIError

    policies = _list(args.policy, "--policy")
    for p in policies:
        if p not in POLICIES:
            raise CLIError(f"--policy: unknown policy '{p}' (supported: {', '.join(POLICIES)})")
    targets = _list(args.target, "-t/--target")
    base = _options(args)
    for t in targets:                       # bad models, configs and options fail here, before any run
        dims, _, _ = resolve(base.with_(target=t))
    if args.trace:
        trace = tuple(read_trace(args.trace))
        rates: list[float | None] = [None]
        workload = WorkloadSpec(trace=trace)
    else:
        rates = _list(args.rate, "--rate", float)
        for r in rates:
            if not r > 0 or r == float("inf"):
                raise CLIError(f"--rate must be > 0 requests per second, got {r:g}")
        if args.num_requests < 1:
            raise CLIError(f"--num-requests must be >= 1, got {args.num_requests}")
        workload = WorkloadSpec(args.num_requests, LengthDist(args.prompt_len_median, args.prompt_len_sigma),
                                LengthDist(args.output_len_median, args.output_len_sigma), args.seed)
    points = sweep_points(base, targets, policies, rates, workload)
    if len(points) == 1:
        return _single(args, points[0])
    summaries = run_sweep(points, args.ray_address, use_ray=not args.no_ray)
    _print_sweep(summaries)
    if args.json:
        Path(args.json).write_text(json.dumps({"sweep": summaries}, indent=1) + "\n")
        print(f"wrote {args.json}", file=sys.stderr)
    if args.plot_dir:
        from infer.serving.plots import plot_sweep

        out = Path(args.plot_dir)
        out.mkdir(parents=True, exist_ok=True)
        plot_sweep(summaries, out / "sweep.png", f"{summaries[0]['model']}: {summaries[0]['cost_source']}")
        print(f"wrote {out / 'sweep.png'}", file=sys.stderr)
    return 0


def _single(args: argparse.Namespace, point) -> int:
    from infer.serving.simulate import resolve, simulate
    from infer.serving.workload import poisson_workload

    w = point.workload
    if w.trace is not None:
        specs = list(w.trace)
    else:
        dims, _, _ = resolve(point.opts)
        specs = poisson_workload(point.rate, w.num_requests, w.prompt, w.output, dims.max_context, w.seed)
    report = simulate(point.opts, specs)
    print(report.table())
    if args.json:
        d = report.as_dict()
        d["rate"] = point.rate
        Path(args.json).write_text(json.dumps(d, indent=1) + "\n")
        print(f"wrote {args.json}", file=sys.stderr)
    if args.plot_dir:
        from infer.serving.plots import plot_latency_cdfs

        out = Path(args.plot_dir)
        out.mkdir(parents=True, exist_ok=True)
        plot_latency_cdfs({f"{report['target']} {report['policy']}": report}, out / "latency_cdf.png",
                          f"{report['model']}: {report['cost_source']}")
        print(f"wrote {out / 'latency_cdf.png'}", file=sys.stderr)
    return 0


def _print_sweep(summaries: list[dict[str, Any]]) -> None:
    print(f"step costs: {summaries[0]['cost_source'].split(' of ')[0]} (see cost_source per point)")
    head = (f"{'target':10}{'policy':12}{'rate':>8}{'done':>6}{'lost':>5}{'preempt':>8}{'tok/s':>11}"
            f"{'TTFT p99 ms':>13}{'TPOT p50 ms':>13}{'TPOT p99 ms':>13}{'batch':>7}{'KV waste':>9}")
    print(head)

    def ms(v):
        return f"{v * 1e3:13.3f}" if v is not None else f"{'-':>13}"

    for s in summaries:
        rate = "trace" if s["rate"] is None else f"{s['rate']:g}"
        print(f"{s['target']:10}{s['policy']:12}{rate:>8}{s['completed']:>6}{s['lost']:>5}{s['preemptions']:>8}"
              f"{s['throughput_tokens_per_s']:>11.1f}{ms(s['ttft_p99_s'])}{ms(s['tpot_p50_s'])}{ms(s['tpot_p99_s'])}"
              f"{s['batch_size_mean']:>7.1f}{s['kv_waste_mean'] * 100:>8.2f}%")


def _guarded(fn):
    def run(args: argparse.Namespace) -> int:
        try:
            return fn(args)
        except _errors() as e:
            msg = str(e).splitlines()[0] if str(e) else type(e).__name__
            print(f"infer serve-sim: error: {msg}", file=sys.stderr)
            return 1
    return run


def register(subparsers: argparse._SubParsersAction) -> None:
    from infer.tools.cli import writes

    p = subparsers.add_parser("serve-sim", help="simulate LLM serving (continuous or static batching) on a target",
                              description=__doc__.split("\n\n")[2], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", help="Llama-family Hugging Face folder or its config.json")
    p.add_argument("-t", "--target", default="edge", help="edge, server or CONFIG.toml; a comma list sweeps (default: edge)")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--trace", metavar="REQ.jsonl",
                     help='request trace, lines {"arrival_s": 0.0, "prompt_tokens": 120, "output_tokens": 40}')
    src.add_argument("--rate", metavar="R[,R...]", help="Poisson arrival rate(s) in requests/s (a list sweeps)")
    p.add_argument("--num-requests", type=int, default=200, help="generated requests (default 200)")
    p.add_argument("--prompt-len-median", type=float, default=256.0, help="log-normal prompt length median (256)")
    p.add_argument("--prompt-len-sigma", type=float, default=1.0, help="log-normal prompt length sigma (1.0; 0 = fixed)")
    p.add_argument("--output-len-median", type=float, default=128.0, help="log-normal output length median (128)")
    p.add_argument("--output-len-sigma", type=float, default=1.0, help="log-normal output length sigma (1.0)")
    p.add_argument("--seed", type=int, default=0, help="workload seed (default 0)")
    p.add_argument("--policy", default="continuous", help="continuous or static; a comma list sweeps (default continuous)")
    p.add_argument("--max-batch-size", type=int, default=64, help="requests in a batch (default 64)")
    p.add_argument("--token-budget", type=int, default=512, help="tokens per step, continuous batching (default 512)")
    p.add_argument("--block-size", type=int, default=16, help="tokens per KV block (default 16)")
    p.add_argument("--num-kv-blocks", type=int, help="KV pool size in blocks (default: the DRAM the weights leave)")
    p.add_argument("--watermark", type=float, default=0.01, help="fraction of KV blocks kept free at admission (0.01)")
    p.add_argument("--json", metavar="OUT.json", help="write the report (or the sweep's points) as JSON")
    p.add_argument("--plot-dir", metavar="DIR", help="write PNG plots here (latency CDFs; sweep: rate curves)")
    p.add_argument("--ray-address", help="Ray cluster for sweeps (default: a local Ray instance)")
    p.add_argument("--no-ray", action="store_true", help="run sweep points one after another in this process")
    p.add_argument("--cost", choices=("auto", "device", "analytic"), default="auto",
                   help="step costs: device = simulate the model's compiled programs (MODEL must have weights), "
                        "analytic = roofline model; auto = device when MODEL has weights (default)")
    p.add_argument("--precision", choices=("fp32", "bf16"), default="bf16",
                   help="precision of the programs the device cost table compiles (default bf16)")
    p.add_argument("--device-chunk", type=int, default=16, help="their prefill chunk in tokens (default 16)")
    p.add_argument("--device-batch", type=int, default=8, help="their decode batch (default 8, at most the max batch)")
    p.add_argument("--device-max-len", type=int, default=1024,
                   help="their context (default 1024; the table extrapolates beyond)")
    p.add_argument("--cache-dir", help="step-cost table cache (default $INFER_CACHE_DIR/serving or ~/.cache/infer/serving)")
    p.set_defaults(func=_guarded(cmd_serve_sim))
    writes(p, "json")
