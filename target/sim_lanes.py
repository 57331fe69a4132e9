"""Lane-parallel execution of one batched operation on several threads.

The functional engine runs a hardware loop whose iterations are independent as one numpy
operation per instruction over all iterations ("lanes", `sim_lockstep`). Those operations are
independent per lane by construction: the dependence analysis accepted the loop only because no
lane touches bytes another lane writes. So the lanes of one operation can be split into chunks
along the first lane dimension and the chunks computed on different threads, with the same bits:
a stacked matmul is one BLAS call per (m, k) x (k, n) slice whatever the chunking, elementwise
ops and conversions are per element, and row reductions are over the last axis, inside a lane.
numpy releases the GIL inside BLAS calls and ufunc loops, so chunks run in parallel.

Threads only pay off for big operations (a hand-off costs tens of microseconds), so operations
below a work threshold run on the caller's thread. The caller computes chunks too and takes
whatever chunk no helper thread has started, so on a machine whose other cores are busy the
run degrades to the serial one instead of waiting for a helper to be scheduled. BLAS itself
runs on one thread (`blas.one_blas_thread`): its threads spin and wait on a loaded machine.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

#: operations with less work than this run serially (a hand-off to a helper thread costs tens
#: of microseconds): multiply-adds of a matmul, elements of a vector operation. Measured on
#: 2 cores: splitting matmuls from 2 M multiply-adds and vector ops from 32 K elements made
#: ResNet-50 server slower (0.60 -> 0.79 s); from 8 M multiply-adds, and vector ops (memory
#: bound) only from 1 M elements, the Llama prefill server gains (0.46 -> 0.39 s)
MIN_PARALLEL_MACS = 1 << 23
MIN_PARALLEL_ELEMENTS = 1 << 20
#: chunks per thread: more than one, so a thread that got its core late takes fewer
CHUNKS_PER_THREAD = 2


#: environment variable: the simulator's threads when a Simulator is not given any
THREADS_ENV = "INFER_SIM_THREADS"


def default_threads() -> int:
    """INFER_SIM_THREADS when set (a positive integer), else 1. Threads are opt-in: measured on
    an idle 2-core machine they speed up models of big stacked matmuls (the Llama prefill on
    server, 0.46 -> 0.39 s) and slow down the others (ResNet-50 server 0.60 -> 0.63 s, edge
    programs 5-20 %: their operations are small), see docs/simulator.md."""
    text = os.environ.get(THREADS_ENV, "").strip()
    if not text:
        return 1
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"{THREADS_ENV}={text!r}: expected a positive integer (threads of "
                         "the simulator's functional engine; 1 runs it serially)")
    return value


def machine_threads() -> int:
    """The cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


class _Job:
    __slots__ = ("fn", "chunks", "next", "lock", "left", "done", "results", "error")

    def __init__(self, fn: Callable[[slice], Any], chunks: list[slice]):
        self.fn, self.chunks = fn, chunks
        self.next = 0
        self.lock = threading.Lock()
        self.left = len(chunks)
        self.done = threading.Event()
        self.results: list[Any] = [None] * len(chunks)
        self.error: BaseException | None = None

    def work(self) -> None:
        """Compute chunks until none is left to start."""
        while True:
            with self.lock:
                i = self.next
                if i >= len(self.chunks):
                    return
                self.next = i + 1
            try:
                r = self.fn(self.chunks[i])
            except BaseException as e:  # re-raised on the caller's thread
                r = None
                self.error = self.error or e
            with self.lock:
                self.results[i] = r
                self.left -= 1
                if self.left == 0:
                    self.done.set()


class LanePool:
    """`pool.map(n, fn)`: fn(slice) over chunks of range(n) on `threads` threads (the caller's
    included); returns the chunks' results in order. Helper threads are started when first
    needed and are daemons waiting on a queue (no spinning)."""

    def __init__(self, threads: int):
        self.threads = max(1, int(threads))
        self._queue: queue.SimpleQueue[_Job] | None = None

    def _start(self) -> queue.SimpleQueue[_Job]:
        q: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        for k in range(self.threads - 1):
            threading.Thread(target=_helper, args=(q,), name=f"sim-lanes-{k}", daemon=True).start()
        self._queue = q
        return q

    def map(self, n: int, fn: Callable[[slice], Any]) -> list[Any]:
        parts = min(n, self.threads * CHUNKS_PER_THREAD)
        bounds = [n * i // parts for i in range(parts + 1)]
        chunks = [slice(bounds[i], bounds[i + 1]) for i in range(parts)]
        job = _Job(fn, chunks)
        q = self._queue or self._start()
        for _ in range(min(self.threads - 1, parts - 1)):
            q.put(job)
        job.work()
        job.done.wait()
        if job.error is not None:
            raise job.error
        return job.results


def _helper(q: queue.SimpleQueue[_Job]) -> None:
    while True:
        q.get().work()


_POOLS: dict[int, LanePool] = {}


def pool(threads: int) -> LanePool | None:
    """The shared pool of `threads` threads (None for one thread: run serially)."""
    if threads <= 1:
        return None
    p = _POOLS.get(threads)
    if p is None:
        p = _POOLS[threads] = LanePool(threads)
    return p


def cut(a: np.ndarray, s: slice, out: np.ndarray) -> np.ndarray:
    """Operand `a` of a batched operation writing `out`, for the lanes s of out's first
    dimension: sliced when it has out's rank and first dimension, else whole (it broadcasts
    along that dimension, the same for every lane)."""
    return a[s] if a.ndim == out.ndim and a.shape[0] == out.shape[0] else a


def splittable(out: np.ndarray, min_rank: int = 3) -> bool:
    """Whether `out` has a first lane dimension to split: rank >= min_rank (lanes, rows, cols),
    at least two lanes, each its own bytes."""
    return out.ndim >= min_rank and out.shape[0] >= 2 and out.strides[0] != 0
