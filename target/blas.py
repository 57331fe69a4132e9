"""One BLAS thread for every matrix product that must be reproducible bit for bit.

The simulator's `mx.matmul` and the interpreters' products are numpy matmuls (BLAS sgemm /
dgemm). Their bits depend on the number of BLAS threads: with OpenBLAS 0.3.31 (numpy 2.4's
wheels) on a 2-core AMD EPYC (AVX2), a (128, 128) x (128, 128) fp32 product of bf16 values
differs in 1,768 of its 16,384 elements between one thread and two (the threaded path blocks
the dot products differently); (1, 128) x (128, 128) and (16, 16) x (16, 16) do not. So the
simulator and the tile interpreter, which must agree bit for bit, both run their products on
one thread (`one_blas_thread`), whatever the machine's cores. It also keeps the simulator fast
on a loaded machine: its BLAS calls are small, and a multithreaded BLAS on busy cores spins
(a 784x128x128 fp32 product measured 1.2 ms on one thread and 27 ms on two with two other
jobs running; a 128x128x128 one 0.5 ms against 24 ms at load 3).

Setting the limit costs a few hundred microseconds, so it is taken once per run: nested
entries (a function calling another, a simulator run inside an interpreter's) are free. The
controller lists the BLAS libraries loaded when it is made (1.3 ms); it is made again when
Python modules were imported since (one may have loaded another BLAS: scipy.linalg's OpenBLAS,
beside numpy's, was left at its threads).
"""

from __future__ import annotations

import sys
from typing import Any

_controller: Any = None
_modules_seen = 0  # len(sys.modules) when the controller was made
_depth = 0
_limit: Any = None


class one_blas_thread:
    """Context manager: BLAS on one thread inside (reentrant; the outermost entry sets and
    restores the limit)."""

    def __enter__(self) -> None:
        global _controller, _depth, _limit, _modules_seen
        _depth += 1
        if _depth > 1:
            return
        try:
            if _controller is None or len(sys.modules) != _modules_seen:
                from threadpoolctl import ThreadpoolController

                _controller = ThreadpoolController()
                _modules_seen = len(sys.modules)
            _limit = _controller.limit(limits=1, user_api="blas")
        except ImportError:  # pragma: no cover - threadpoolctl is a dependency
            _limit = None

    def __exit__(self, *exc: object) -> None:
        global _depth, _limit
        _depth -= 1
        if _depth == 0 and _limit is not None:
            _limit.restore_original_limits()
            _limit = None
