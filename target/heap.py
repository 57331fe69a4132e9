"""glibc's malloc tuned for a process that allocates and frees big numpy buffers over and over.

By default glibc serves an allocation above its mmap threshold (128 KiB, raised up to 32 MiB
to the largest mapped block freed so far) from a fresh mapping, unmapped again when freed, and
returns free memory at the top of its heap to the system once more than twice that threshold
is free. A buffer of that size allocated and freed in a loop then faults every page in each
time (the kernel maps and zeroes it). Both the compiler (weights imported, packed, split,
serialised: hundreds of MB) and the simulator's batched operations (stacked products, private
copies and version arrays of local memory: up to tens of MB per operation, every run) do that.

`keep_buffers_in_heap(mmap_threshold, trim_threshold, top_pad)` makes buffers up to
`mmap_threshold` bytes come from the heap and keeps up to `trim_threshold` bytes of free heap
instead of returning it (the heap grows by at least `top_pad` at a time). Settings only ever
grow within a process (the largest asked for wins, so a compile's tuning survives a simulator
run in the same process). Process-wide and one-way: glibc's dynamic threshold is off from
then on. A no-op where the C library has no mallopt (not glibc).
"""

from __future__ import annotations

import ctypes
from typing import Any

_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD = -1, -2, -3  # malloc.h

#: the simulator's setting (`Simulator.run`): measured on the fp32 e2e programs (runs after the
#: first, one process, 2-core VM): page faults per run ResNet-50 edge 136 K -> 35 (system time
#: 0.37 -> 0.002 s), Llama prefill edge 71 K -> 9 (0.40 -> 0.003 s), server 27.6 K -> 1 (0.07
#: -> 0 s); a 32 MiB threshold left the Llama prefill edge at 65 K, trimming alone (glibc's
#: dynamic threshold then off) made it 505 K. Since reductions compute their products per
#: iteration (sim_lockstep._iteration) more, smaller buffers come and go: keeping 128 MiB of
#: free heap left the Llama prefill edge at 116 K faults per run, 256 MiB at 544, 512 MiB at
#: 523 (ResNet-50 edge 1.1 K, the Llama prefill server 186 -> 0). Peak memory is unchanged
#: (423 MB for the Llama prefill edge); freed memory up to that much stays with the process.
SIMULATOR = (64 << 20, 512 << 20, 16 << 20)
#: a compile (`infer compile`, a process that ends when it is done): everything up to 1 GiB
#: from the heap, never trimmed, grown 256 MiB at a time (ResNet-50: ~40 % fewer page faults,
#: ~0.5 s less system time, the same peak memory)
COMPILE = (1 << 30, (1 << 31) - 1, 256 << 20)

_applied = [0, 0, 0]  # what this module set: mmap threshold, trim threshold, top pad


def _mallopt() -> Any:
    """The C library's mallopt, or None (not glibc)."""
    try:
        return ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return None


def keep_buffers_in_heap(setting: tuple[int, int, int]) -> None:
    """Raise glibc's (mmap threshold, trim threshold, top pad) to at least `setting` (bytes);
    values this process already raised higher stay."""
    if all(a >= s for a, s in zip(_applied, setting, strict=True)):
        return
    mallopt = _mallopt()
    for i, parameter in enumerate((_M_MMAP_THRESHOLD, _M_TRIM_THRESHOLD, _M_TOP_PAD)):
        if setting[i] > _applied[i]:
            if mallopt is not None:
                mallopt(ctypes.c_int(parameter), ctypes.c_int(setting[i]))
            _applied[i] = setting[i]
