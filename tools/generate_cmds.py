"""`infer generate`: text generation with a language model, streamed as it is produced.

    infer generate MODEL --prompt TEXT [--max-new-tokens N] [--temperature T] [--top-k K]
                   [--top-p P] [--seed S] [--max-context N] [--prefill-length S] [--no-chat-template]

MODEL is a GGUF file (llama.cpp: Llama family, F32/F16/BF16/Q8_0/Q4_0/Q4_1) or a Hugging Face
folder (Llama family, GPT-2). The prompt goes through the model's chat template when it has one.
The generated text streams to stdout; the note on where it runs and the summary (prompt and
generated token counts, why it stopped, host wall time) go to stderr, so stdout is the answer.

Where it runs: the graph-level reference interpreter, on this host. Decode on the simulated
NPU is not implemented yet (issue 11, items 2-4), so no simulated cycles, device time to first
token or device time per token are reported, and `-t/--target` and `--precision` (which select
the simulated NPU) are refused with exit status 1 until it is. The Python equivalent is
`infer.Generator`.
"""

from __future__ import annotations

import argparse
import sys
import time

REFERENCE_NOTE = ("runs on the reference interpreter (the graph-level golden model, on this host): "
                  "decode on the simulated NPU is not implemented yet, so no simulated cycles are reported")

_FINISH = {
    "eos": "end of sequence",
    "max_new_tokens": "--max-new-tokens reached",
    "context_full": "the context is full (--max-context)",
}


def _seconds(s: float | None) -> str:
    return "n/a" if s is None else f"{s:.3f} s"


def cmd_generate(args: argparse.Namespace) -> int:
    from infer.generation import GenerationError, Generator
    from infer.tools.cli import CLIError

    if args.target is not None or args.precision is not None:
        raise CLIError("-t/--target and --precision select the simulated NPU, but decode on the device is not "
                       "implemented yet; without them, generation runs on the reference interpreter")
    if args.max_new_tokens < 1:
        raise CLIError(f"--max-new-tokens must be >= 1, got {args.max_new_tokens}")
    if not args.prompt:
        raise CLIError("--prompt is empty")
    prefill_length = args.prefill_length
    if prefill_length is None and args.max_context is not None:
        prefill_length = min(128, args.max_context)  # the import's default, within the asked context
    start = time.perf_counter()
    try:
        gen = Generator(args.model, prefill_length=prefill_length, max_context=args.max_context)
        if gen.tokenizer is None:
            raise CLIError(f"{args.model}: the model carries no tokenizer (GGUF tokenizer.ggml.* metadata or "
                           "a folder's tokenizer files), so the prompt cannot be encoded")
        ids = gen.encode(args.prompt, chat=False if args.no_chat_template else None)
        if len(ids) > gen.executor.max_context:
            raise CLIError(
                f"the prompt is {len(ids)} tokens but the context holds {gen.executor.max_context} "
                "(raise --max-context up to the model's context length, or shorten the prompt)"
            )
        imported = time.perf_counter()
        pieces = gen.generate(ids, max_new_tokens=args.max_new_tokens, temperature=args.temperature,
                              top_k=args.top_k, top_p=args.top_p, seed=args.seed)  # checks the request
        print(f"note: {REFERENCE_NOTE}", file=sys.stderr, flush=True)
        for piece in pieces:
            sys.stdout.write(piece.text or "")
            sys.stdout.flush()
    except GenerationError as e:
        raise CLIError(str(e)) from None
    sys.stdout.write("\n")
    sys.stdout.flush()
    total = time.perf_counter() - start
    stats = gen.last_stats
    assert stats is not None
    template = "plain text" if args.no_chat_template or gen.model.chat_template is None else "chat template"
    print(f"prompt tokens:    {stats.prompt_tokens} ({template})", file=sys.stderr)
    print(f"generated tokens: {stats.generated_tokens} (stopped: {_FINISH.get(stats.finish_reason or '', '?')})",
          file=sys.stderr)
    print(f"host wall time:   {total:.3f} s (import and tokenizer {imported - start:.3f} s, "
          f"time to first token {_seconds(stats.time_to_first_token_s)}, "
          f"per output token {_seconds(stats.time_per_output_token_s)})", file=sys.stderr)
    print("device time:      not simulated (reference interpreter)", file=sys.stderr)
    return 0


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got '{text}'") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "generate", help="generate text with a language model (GGUF file or Hugging Face folder) on the "
                         "reference interpreter",
        description=__doc__.split("\n\n", 2)[2], formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("model", help="a .gguf file or a Hugging Face folder (Llama family, GPT-2)")
    p.add_argument("--prompt", required=True, help="the user's message (in the model's chat template when it has one)")
    p.add_argument("--max-new-tokens", type=int, default=128, metavar="N",
                   help="stop after N generated tokens (default 128); generation also stops at the end of "
                        "sequence and when the context is full")
    p.add_argument("--temperature", type=float, default=0.0, help="0 is greedy (default); > 0 samples")
    p.add_argument("--top-k", type=_positive_int, metavar="K", help="sample among the K most likely tokens")
    p.add_argument("--top-p", type=float, metavar="P", help="sample among the most likely tokens whose "
                                                           "probabilities sum to >= P (0 < P <= 1)")
    p.add_argument("--seed", type=int, help="seed of the sampler (the same seed gives the same tokens)")
    p.add_argument("--max-context", type=_positive_int, metavar="N",
                   help="KV-cache capacity in tokens, prompt included (default: prefill length + 128, at most "
                        "the model's context length)")
    p.add_argument("--prefill-length", type=_positive_int, metavar="S",
                   help="tokens per prefill step (default: 128, at most the model's context length); a longer "
                        "prompt continues one token per decode step")
    p.add_argument("--no-chat-template", action="store_true", help="encode the prompt as plain text")
    p.add_argument("-t", "--target", help="not available yet: the simulated NPU (decode on the device is not "
                                          "implemented; refused with exit status 1)")
    p.add_argument("--precision", help="not available yet: the NPU precision (refused with exit status 1)")
    p.set_defaults(func=cmd_generate)
