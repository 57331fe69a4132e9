"""`infer generate`: text generation with a language model, streamed as it is produced.

    infer generate MODEL --prompt TEXT [--max-new-tokens N] [--temperature T] [--top-k K]
                   [--top-p P] [--seed S] [--max-context N] [--prefill-length S] [--no-chat-template]
                   [-t edge|server|CONFIG.toml [--precision fp32|bf16] [--chunk C] [--block-size BS]
                    [--num-blocks NB]] [--cache-dir DIR]

MODEL is a GGUF file (llama.cpp: Llama family, F32/F16/BF16/Q8_0/Q4_0/Q4_1) or a Hugging Face
folder (Llama family, GPT-2). The prompt goes through the model's chat template when it has one.
The generated text streams to stdout; the notes on where it runs and the summary (prompt and
generated token counts, why it stopped, time to first token and time per output token, host
wall time) go to stderr, so stdout is the answer.

Where it runs:
- with `-t/--target` (or `--precision`): on the simulated NPU. The model is imported with a
  paged KV cache (@prefill_chunk: --chunk tokens per step, default 32; @decode; --block-size
  tokens per block, default 16; --num-blocks, default one full sequence of --max-context tokens,
  default 256, plus the padding blocks) and compiled into one artifact for the target at
  --precision (default fp32); the prefill and decode steps run on the instruction-set simulator
  with the KV pools resident in its DRAM. Time to first token and per output token are the
  simulated cycles at the config's clock; the host wall time is printed beside them.
- without: on the graph-level reference interpreter, on this host (no simulated time).
With `--cache-dir DIR` (or $INFER_CACHE_DIR) a GGUF model's tokenizer, built from its metadata
once, and the compiled artifact are kept in DIR for the next run (tools/compile_cache.py).
The Python equivalent is `infer.Generator` (with `executor=infer.DeviceExecutor(compiled)` for
the simulated NPU: see infer/generation/device_executor.py).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from infer.tools.compile_cache import CACHE_ENV, cached_tokenizer

REFERENCE_NOTE = ("runs on the reference interpreter (the graph-level golden model, on this host), so no "
                  "simulated cycles are reported (-t edge|server runs on the simulated NPU)")

_FINISH = {
    "eos": "end of sequence",
    "max_new_tokens": "--max-new-tokens reached",
    "context_full": "the context is full (--max-context)",
}


def _seconds(s: float | None) -> str:
    return "n/a" if s is None else f"{s:.3f} s"


def _ms(s: float | None) -> str:
    return "n/a" if s is None else f"{s * 1e3:.3f} ms"


def cmd_generate(args: argparse.Namespace) -> int:
    from infer.generation import GenerationError, Generator
    from infer.tools.cli import CLIError

    if args.target is not None or args.precision is not None:
        return _generate_on_device(args)
    paged = [o for o in ("chunk", "block_size", "num_blocks") if getattr(args, o) is not None]
    if paged:
        raise CLIError(f"--{paged[0].replace('_', '-')} applies to generation on the simulated NPU (-t/--target)")
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
        cache_dir = args.cache_dir or os.environ.get(CACHE_ENV) or None
        if cache_dir:
            cached_tokenizer(cache_dir, gen.model)
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


def _check_request(args: argparse.Namespace) -> None:
    from infer.tools.cli import CLIError

    if args.max_new_tokens < 1:
        raise CLIError(f"--max-new-tokens must be >= 1, got {args.max_new_tokens}")
    if not args.prompt:
        raise CLIError("--prompt is empty")


def _generate_on_device(args: argparse.Namespace) -> int:
    """The simulated NPU: paged import, one multi-entry artifact, DeviceExecutor."""
    from infer.frontend import import_model
    from infer.generation import GenerationError, Generator
    from infer.generation.device_executor import DeviceExecutor
    from infer.tools.cli import CLIError
    from infer.tools.compile_cmds import is_decoder_source
    from infer.tools.driver import compile as compile_model

    _check_request(args)
    from infer.generation.sampling import SamplingError, SamplingOptions

    try:  # the sampling options before the compile
        SamplingOptions(args.temperature, args.top_k, args.top_p, args.seed)
    except SamplingError as e:
        raise CLIError(str(e)) from None
    if args.prefill_length is not None:
        raise CLIError("--prefill-length is the reference interpreter's; on the simulated NPU use --chunk")
    if not is_decoder_source(args.model):
        raise CLIError(f"{args.model}: not a .gguf file or a Hugging Face decoder folder (Llama family, GPT-2)")
    target, precision = args.target or "edge", args.precision or "fp32"
    options = {"kv_cache": "paged", "chunk": args.chunk, "max_len": args.max_context, "block_size": args.block_size,
               "num_blocks": args.num_blocks}
    start = time.perf_counter()
    model = import_model(args.model, **{k: v for k, v in options.items() if v is not None})
    cache_dir = args.cache_dir or os.environ.get(CACHE_ENV) or None
    if cache_dir:
        cached_tokenizer(cache_dir, model)
    if model.tokenizer is None:
        raise CLIError(f"{args.model}: the model carries no tokenizer (GGUF tokenizer.ggml.* metadata or "
                       "a folder's tokenizer files), so the prompt cannot be encoded")
    from infer.dialects.npu_attrs import attr_to_json

    paged = attr_to_json(model.module.attributes["infer.paged_kv"])
    chat = not args.no_chat_template and model.chat_template is not None
    ids = model.apply_chat_template(args.prompt) if chat else [int(t) for t in model.tokenizer.encode(args.prompt)]
    # the executor's own checks, before the compile: a clear error, fast
    if len(ids) > paged["max_len"]:
        raise CLIError(f"the prompt is {len(ids)} tokens but the KV cache holds {paged['max_len']} per sequence "
                       "(raise --max-context up to the model's context length, or shorten the prompt)")
    bs = paged["block_size"]
    usable = paged["num_blocks"] - -(-max(paged["chunk"], paged["batch"]) // bs)
    if -(-len(ids) // bs) > usable:
        raise CLIError(f"the KV-cache pool is too small for this request: the prompt needs {-(-len(ids) // bs)} "
                       f"blocks of {bs} tokens, the pool has {usable} for sequences (raise --num-blocks)")
    from infer.tools.compile_cache import cache_file, load_cached, store

    kept = cache_file(cache_dir, args.model, target, precision, paged) if cache_dir else None
    art = load_cached(kept) if kept is not None else None
    if art is not None:
        print(f"note: the compiled artifact from the cache: {kept}", file=sys.stderr, flush=True)
    else:
        print(f"note: compiling {args.model} for the {target} NPU ({precision}; @prefill_chunk and @decode in one "
              "artifact)" + (f"; kept in {kept}" if kept is not None else ""), file=sys.stderr, flush=True)
        art = compile_model(model, target=target, precision=precision, progress=not args.quiet).artifact
        if kept is not None:
            try:
                store(art, kept)
            except OSError as e:  # the run goes on: only the next one compiles again
                print(f"note: the artifact was not kept in {cache_dir}: {e.strerror or e}", file=sys.stderr)
    compiled = time.perf_counter()
    try:
        ex = DeviceExecutor(art)
        gen = Generator(model, executor=ex)
        pieces = gen.generate(ids, max_new_tokens=args.max_new_tokens, temperature=args.temperature,
                              top_k=args.top_k, top_p=args.top_p, seed=args.seed)
        print(f"note: runs on the simulated {art.target_name} NPU ({precision}): chunk {ex.chunk} tokens, KV cache "
              f"{ex.num_blocks} blocks of {ex.block_size} tokens", file=sys.stderr, flush=True)
        gen_start = time.perf_counter()
        for piece in pieces:
            sys.stdout.write(piece.text or "")
            sys.stdout.flush()
    except GenerationError as e:
        raise CLIError(str(e)) from None
    sys.stdout.write("\n")
    sys.stdout.flush()
    end = time.perf_counter()
    stats = gen.last_stats
    assert stats is not None
    _print_counts(args, gen, stats)
    print(f"device time:      time to first token {_ms(stats.device_time_to_first_token_s)}, per output "
          f"token {_ms(stats.device_time_per_output_token_s)} (simulated {art.target_name} cycles at "
          f"{ex.session.config.clock_ghz:g} GHz)", file=sys.stderr)
    print(f"host wall time:   {end - start:.3f} s (import and compile {compiled - start:.3f} s, generation "
          f"{end - gen_start:.3f} s: time to first token {_seconds(stats.time_to_first_token_s)}, per decode "
          f"step {_seconds(stats.time_per_output_token_s)})", file=sys.stderr)
    return 0


def _print_counts(args: argparse.Namespace, gen, stats) -> None:
    template = "plain text" if args.no_chat_template or gen.model.chat_template is None else "chat template"
    print(f"prompt tokens:    {stats.prompt_tokens} ({template})", file=sys.stderr)
    print(f"generated tokens: {stats.generated_tokens} (stopped: {_FINISH.get(stats.finish_reason or '', '?')})",
          file=sys.stderr)


def register(subparsers: argparse._SubParsersAction) -> None:
    from infer.tools.compile_cmds import positive_int

    p = subparsers.add_parser(
        "generate", help="generate text with a language model (GGUF file or Hugging Face folder) on the "
                         "simulated NPU (-t) or the reference interpreter",
        description=__doc__.split("\n\n", 2)[2], formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("model", help="a .gguf file or a Hugging Face folder (Llama family, GPT-2)")
    p.add_argument("--prompt", required=True, help="the user's message (in the model's chat template when it has one)")
    p.add_argument("--max-new-tokens", type=int, default=128, metavar="N",
                   help="stop after N generated tokens (default 128); generation also stops at the end of "
                        "sequence and when the context is full")
    p.add_argument("--temperature", type=float, default=0.0, help="0 is greedy (default); > 0 samples")
    p.add_argument("--top-k", type=positive_int, metavar="K", help="sample among the K most likely tokens")
    p.add_argument("--top-p", type=float, metavar="P", help="sample among the most likely tokens whose "
                                                           "probabilities sum to >= P (0 < P <= 1)")
    p.add_argument("--seed", type=int, help="seed of the sampler (the same seed gives the same tokens)")
    p.add_argument("--max-context", type=positive_int, metavar="N",
                   help="KV-cache capacity in tokens, prompt included (default: prefill length + 128, at most "
                        "the model's context length)")
    p.add_argument("--prefill-length", type=positive_int, metavar="S",
                   help="tokens per prefill step (default: 128, at most the model's context length); a longer "
                        "prompt continues one token per decode step")
    p.add_argument("--no-chat-template", action="store_true", help="encode the prompt as plain text")
    p.add_argument("-t", "--target", help="run on the simulated NPU with this config: edge, server or a "
                                          "CONFIG.toml (default: the reference interpreter)")
    p.add_argument("--precision", choices=["fp32", "bf16"],
                   help="the NPU precision (default fp32; implies the simulated NPU, -t edge unless given)")
    p.add_argument("--chunk", type=positive_int, metavar="C",
                   help="NPU: tokens per prefill step (default 32); a longer prompt takes several chunks")
    p.add_argument("--block-size", type=positive_int, metavar="BS",
                   help="NPU: tokens per KV-cache block, a power of two (default 16)")
    p.add_argument("--num-blocks", type=positive_int, metavar="NB",
                   help="NPU: blocks in the KV-cache pool (default: one sequence of --max-context tokens plus "
                        "the padding blocks)")
    p.add_argument("--cache-dir", metavar="DIR",
                   help=f"keep a GGUF model's tokenizer in DIR (built from the metadata once) and, on the NPU, the "
                        f"compiled artifact, loaded on the next run with the same model, config, precision, cache "
                        f"options and compiler (default: ${CACHE_ENV}; unset: no cache)")
    p.add_argument("-q", "--quiet", action="store_true", help="NPU: no compile progress on stderr")
    p.set_defaults(func=cmd_generate)
