"""Import benchmark: a ~100M-parameter Llama-style checkpoint (random, f32,
safetensors, written to a temporary folder) through the Hugging Face frontend.

Targets: import time < 5 s; peak memory of the import < 1.5x the weights' size.

Method
- Each import runs in a fresh child process (python -c), so nothing from
  writing the checkpoint is resident. The child imports infer first, records
  its resident set (VmRSS from /proc/self/status), runs `import_hf_folder`
  (prefill + decode functions, seq_len 128, max_len 256), then reads VmHWM
  (the peak resident set). Peak import memory = VmHWM - VmRSS before.
  Memory-mapped checkpoint pages that the import touched would be resident
  and so counted; pages never touched are not (they cost nothing).
- tracemalloc in the same child gives the peak of Python-heap allocations
  during the import (numpy buffers included), as a second opinion.
- Time is wall-clock of `import_hf_folder` alone (module verification included).
Both a single-file checkpoint and the same weights in 3 shards
(model.safetensors.index.json) are measured.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

CONFIG = dict(
    architectures=["LlamaForCausalLM"], model_type="llama", hidden_size=768, intermediate_size=2048,
    num_hidden_layers=12, num_attention_heads=12, num_key_value_heads=4, vocab_size=32000,
    max_position_embeddings=2048, rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=True,
    hidden_act="silu",
)
TIME_TARGET_S = 5.0
MEMORY_TARGET_RATIO = 1.5


def tensors(cfg: dict) -> dict[str, tuple[int, ...]]:
    h, i, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    d = h // cfg["num_attention_heads"]
    kv = cfg["num_key_value_heads"] * d
    shapes = {"model.embed_tokens.weight": (v, h), "model.norm.weight": (h,)}
    for n in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{n}"
        shapes.update({
            f"{p}.input_layernorm.weight": (h,), f"{p}.post_attention_layernorm.weight": (h,),
            f"{p}.self_attn.q_proj.weight": (h, h), f"{p}.self_attn.k_proj.weight": (kv, h),
            f"{p}.self_attn.v_proj.weight": (kv, h), f"{p}.self_attn.o_proj.weight": (h, h),
            f"{p}.mlp.gate_proj.weight": (i, h), f"{p}.mlp.up_proj.weight": (i, h),
            f"{p}.mlp.down_proj.weight": (h, i),
        })
    return shapes


def write_checkpoint(folder: Path, shards: int) -> tuple[int, int]:
    """Write random weights; returns (parameters, bytes)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(CONFIG))
    shapes = tensors(CONFIG)
    rng = np.random.default_rng(0)
    names = list(shapes)
    groups = [names[k::shards] for k in range(shards)]
    weight_map, total = {}, 0
    for k, group in enumerate(groups):
        file = "model.safetensors" if shards == 1 else f"model-{k + 1:05d}-of-{shards:05d}.safetensors"
        part = {n: (rng.standard_normal(shapes[n], dtype=np.float32) * 0.02) for n in group}
        total += sum(a.size for a in part.values())
        save_file(part, str(folder / file))
        weight_map.update({n: file for n in group})
        del part
    if shards > 1:
        (folder / "model.safetensors.index.json").write_text(
            json.dumps({"metadata": {"total_size": total * 4}, "weight_map": weight_map})
        )
    return total, total * 4


CHILD = r"""
import json, sys, time, tracemalloc
def status(key):
    for line in open('/proc/self/status'):
        if line.startswith(key + ':'):
            return int(line.split()[1]) * 1024
from infer.frontend.hf_import import import_hf_folder
from infer.dialects import graph_interpreter  # noqa: F401  (what a user session has loaded)
import_hf_folder(sys.argv[2], seq_len=4, max_len=8, phase='prefill')  # warm up lazy imports
rss0 = status('VmRSS')
tracemalloc.start()
t = time.perf_counter()
m = import_hf_folder(sys.argv[1], seq_len=128, batch=1, max_len=256)
dt = time.perf_counter() - t
_, heap = tracemalloc.get_traced_memory()
tracemalloc.stop()
ops = sum(1 for _ in m.walk())
print(json.dumps(dict(seconds=dt, rss_delta=status('VmHWM') - rss0, heap_peak=heap, ops=ops)))
"""


def measure(folder: Path, tiny: Path) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, str(folder), str(tiny)], capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"import failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        tiny_cfg = dict(CONFIG, hidden_size=64, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
                        num_key_value_heads=2, vocab_size=64)
        tiny = tmp / "tiny"
        tiny.mkdir()
        (tiny / "config.json").write_text(json.dumps(tiny_cfg))
        save_file({n: np.zeros(s, np.float32) for n, s in tensors(tiny_cfg).items()}, str(tiny / "model.safetensors"))
        print(f"bench_import: Llama-style checkpoint {CONFIG['num_hidden_layers']} layers, hidden {CONFIG['hidden_size']}, "
              f"GQA {CONFIG['num_attention_heads']}/{CONFIG['num_key_value_heads']}, vocab {CONFIG['vocab_size']} (f32, random)")
        for shards in (1, 3):
            folder = tmp / f"llama_{shards}"
            t = time.perf_counter()
            params, nbytes = write_checkpoint(folder, shards)
            wrote = time.perf_counter() - t
            r = measure(folder, tiny)
            mem = max(r["rss_delta"], r["heap_peak"])
            ratio = mem / nbytes
            print(f"\n[{'single file' if shards == 1 else f'{shards} shards'}] {params / 1e6:.1f}M parameters, "
                  f"{nbytes / 2**20:.0f} MiB of weights (written in {wrote:.1f} s)")
            print(f"  import time      {r['seconds']:.3f} s   target < {TIME_TARGET_S} s   "
                  f"({r['seconds'] / TIME_TARGET_S:.1%} of target) {'OK' if r['seconds'] < TIME_TARGET_S else 'OVER'}")
            print(f"  peak RSS delta   {r['rss_delta'] / 2**20:.1f} MiB   python heap peak (tracemalloc) {r['heap_peak'] / 2**20:.1f} MiB")
            print(f"  memory / weights {ratio:.4f}x   target < {MEMORY_TARGET_RATIO}x   "
                  f"({ratio / MEMORY_TARGET_RATIO:.2%} of target) {'OK' if ratio < MEMORY_TARGET_RATIO else 'OVER'}")
            print(f"  IR: {r['ops']} ops (@prefill + @decode); weights stay in the checkpoint file(s), none read at import")


if __name__ == "__main__":
    main()
