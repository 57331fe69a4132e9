"""Step costs: how long one engine step takes, from per-entry program costs.

A step is run as program calls, the way the device executor will run the compiled
prefill/decode programs: one batched *decode* call for all the step's decode items, and
one *prefill-chunk* call per prefill chunk. So a step's cycles are

    decode(batch = number of decode rows, context = mean KV length they attend to)
  + sum over chunks of prefill(chunk = tokens in the chunk, start = tokens already cached)

(`compose_step_cycles`). The per-entry costs come from a *profiler*: a callable
`profiler(entry, a, b) -> cycles` with entry "decode" (a = batch, b = context) or
"prefill" (a = chunk tokens, b = start position). The device executor will provide one
that simulates the compiled programs; `infer.serving.cost_table.StepCostTable` profiles
it once on a grid of buckets, caches the table on disk and interpolates.

`AnalyticRooflineProfiler` is the profiler available until then: an *analytic roofline
model*, not a measurement. For a Llama-family config (hidden size, layers, heads, FFN
size, vocabulary) and a hardware config it charges each program call

    cycles = max(MACs / (rows * cols),  DRAM bytes / dram.bytes_per_cycle)

with MACs = tokens x (every linear layer incl. the LM head) + attention (q.k and p.v over
the cached context, per layer and query head), and DRAM bytes = every weight once per
call + the KV cache read (context) and written (new tokens), all at `weight_bytes` /
`kv_bytes` per element (bf16: 2). Everything else (vector work, latency, DMA set-up,
imperfect overlap) is left out: it is a lower bound on what a compiled program can do,
and every report that uses it says "analytic roofline".
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

ENTRIES = ("decode", "prefill")


class Profiler(Protocol):
    source: str

    def __call__(self, entry: str, a: int, b: int) -> float: ...


class ModelConfigError(ValueError):
    pass


@dataclass(frozen=True)
class LlamaDims:
    """The sizes of a Llama-family decoder that its costs depend on."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    max_context: int
    name: str = "model"

    @classmethod
    def from_hf_config(cls, cfg: dict[str, Any], name: str = "model") -> LlamaDims:
        model_type = str(cfg.get("model_type", "")).lower()
        if model_type not in ("llama", "mistral", "qwen2"):
            raise ModelConfigError(f"{name}: model_type {model_type!r} is not a Llama-family decoder "
                                   "(supported: llama, mistral, qwen2)")
        try:
            hidden = int(cfg["hidden_size"])
            heads = int(cfg["num_attention_heads"])
            return cls(hidden=hidden, layers=int(cfg["num_hidden_layers"]), heads=heads,
                       kv_heads=int(cfg.get("num_key_value_heads") or heads),
                       head_dim=int(cfg.get("head_dim") or hidden // heads),
                       intermediate=int(cfg["intermediate_size"]), vocab=int(cfg["vocab_size"]),
                       max_context=int(cfg.get("max_position_embeddings") or 2048), name=name)
        except KeyError as e:
            raise ModelConfigError(f"{name}: config.json lacks {e}") from None
        except (TypeError, ValueError) as e:
            raise ModelConfigError(f"{name}: config.json has a bad value: {e}") from None

    @classmethod
    def from_path(cls, path: str | Path) -> LlamaDims:
        """A Hugging Face folder (its config.json) or a config.json file."""
        p = Path(path)
        cfg_path = p / "config.json" if p.is_dir() else p
        if not cfg_path.is_file():
            raise ModelConfigError(f"{path}: not a Hugging Face model folder or config.json (no {cfg_path.name})")
        try:
            cfg = json.loads(cfg_path.read_text())
        except (OSError, UnicodeDecodeError, ValueError) as e:
            raise ModelConfigError(f"{cfg_path}: not a Hugging Face model folder or config.json "
                                   f"(cannot read it as JSON: {e})") from None
        if not isinstance(cfg, dict):
            raise ModelConfigError(f"{cfg_path}: expected a JSON object")
        return cls.from_hf_config(cfg, name=p.name if p.is_dir() else p.parent.name)

    @property
    def linear_macs_per_token(self) -> int:
        h, d = self.hidden, self.head_dim
        attn = h * (self.heads * d) * 2 + h * (self.kv_heads * d) * 2        # q, o; k, v
        mlp = 3 * h * self.intermediate
        return self.layers * (attn + mlp) + h * self.vocab                  # + LM head

    @property
    def weight_elements(self) -> int:
        """Weights read per call: every linear layer, the LM head, the norms (not the embedding gather)."""
        return self.linear_macs_per_token + (2 * self.layers + 1) * self.hidden

    @property
    def kv_elements_per_token(self) -> int:
        return 2 * self.layers * self.kv_heads * self.head_dim

    def attention_macs(self, keys_total: int) -> int:
        """q.k and p.v over `keys_total` (query, key) pairs, every layer and query head."""
        return 2 * self.layers * self.heads * self.head_dim * keys_total

    def digest(self) -> str:
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:16]


class AnalyticRooflineProfiler:
    """Analytic roofline cycles of the decode and prefill-chunk calls (a model, not a measurement)."""

    def __init__(self, dims: LlamaDims, hw, weight_bytes: float = 2.0, kv_bytes: float = 2.0):
        self.dims, self.hw = dims, hw
        self.weight_bytes, self.kv_bytes = weight_bytes, kv_bytes
        self.source = (f"analytic roofline of {dims.name} on {hw.name} (max(MACs/peak, DRAM bytes/bandwidth); "
                       "not measured)")

    def __call__(self, entry: str, a: int, b: int) -> float:
        d, hw = self.dims, self.hw
        kv_tok = d.kv_elements_per_token * self.kv_bytes
        if entry == "decode":
            batch, context = a, b
            macs = batch * d.linear_macs_per_token + d.attention_macs(batch * context)
            moved = d.weight_elements * self.weight_bytes + batch * context * kv_tok
        elif entry == "prefill":
            chunk, start = a, b
            keys = chunk * start + chunk * (chunk + 1) // 2               # causal: query j sees start + j + 1 keys
            macs = chunk * d.linear_macs_per_token + d.attention_macs(keys)
            moved = d.weight_elements * self.weight_bytes + (start + chunk) * kv_tok
        else:
            raise ValueError(f"unknown entry {entry!r} (supported: {', '.join(ENTRIES)})")
        return max(macs / hw.peak_macs_per_cycle, moved / hw.dram.bytes_per_cycle)

    def step_cycles(self, step) -> float:
        return compose_step_cycles(step, self)


def compose_step_cycles(step, entry_cycles, chunk: int | None = None, batch: int | None = None) -> float:
    """A step's cycles: one batched decode call plus one call per prefill chunk (see the module doc).

    With `chunk` and `batch` (the compiled programs' chunk C and decode batch B, as the device
    executor runs them): a prefill item of n tokens from start s is ceil(n / C) calls
    prefill(C, s + k C), and the decode items are calls of at most B rows in item order, each
    costed as the mean over its rows of decode(rows, that row's context): a call's fixed work is
    the same for every row count's profile, and its attention is per row, each over its own
    KV blocks (the mean context of the rows would smooth the block steps away: the tiny Llama's
    random steps were off by up to 4.9 %, 0.9 % now with `block_axis`); idle rows are part of
    every decode call already."""
    if chunk is None:
        batch_rows = step.idle_rows
        context = step.idle_context
        total = 0.0
        for item in step.items:
            if item.is_prefill:
                total += entry_cycles("prefill", item.num_tokens, item.start)
            else:
                batch_rows += 1
                context += item.start + 1
        if batch_rows:
            total += entry_cycles("decode", batch_rows, context / batch_rows)
        return total
    total = 0.0
    decodes = []
    for item in step.items:
        if item.is_prefill:
            for at in range(item.start, item.start + item.num_tokens, chunk):
                total += entry_cycles("prefill", chunk, at)
        else:
            decodes.append(item.start + 1)
    for at in range(0, len(decodes), batch or len(decodes)):
        group = decodes[at:at + (batch or len(decodes))]
        total += sum(entry_cycles("decode", len(group), c) for c in group) / len(group)
    return total
