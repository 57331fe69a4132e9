"""The Gauss error function in float64, shared by the reference interpreter (graph `erf` and
exact `gelu`) and the vector unit's `erf` / `gelu_erf` instructions, which round it to fp32
(docs/isa.md): one definition, so the golden model and the hardware model cannot drift.

The float64 values are `scipy.special.erf`'s (Cephes' rational approximations, max abs error
~1e-16 against `math.erf`). Until the thirty-fifth session this module evaluated W. J. Cody's
rational approximations in numpy; on 1 M random and all-MiniLM-L6-v2's captured GELU inputs the
two give the same fp32 roundings, and scipy's compiled loop is 3x faster (docs/tool-speed.md).
"""

from __future__ import annotations

import functools
import math

import numpy as np

#: elements per block of gelu_erf: its float64 temporaries (the scaled operand, erf, the sum and
#: the products) stay in the L1/L2 caches; each element's value is the same whatever the blocks
#: (every step is elementwise)
_ERF_CHUNK = 1 << 13

_INV_SQRT2 = 1.0 / math.sqrt(2.0)


@functools.cache
def _scipy_erf():
    """scipy.special.erf, imported at its first use: importing scipy.special takes ~0.3 s,
    which every `infer` command and simulator start would pay for two vector ops."""
    from scipy.special import erf as scipy_erf

    return scipy_erf


def erf(x: np.ndarray) -> np.ndarray:
    """Vectorized Gauss error function in float64 (max abs error ~1e-16)."""
    return _scipy_erf()(np.asarray(x, dtype=np.float64))


def gelu_erf(a: np.ndarray) -> np.ndarray:
    """0.5 a (1 + erf(a / sqrt 2)) of float a, computed in float64 and rounded once to fp32 (the
    vector unit's `gelu_erf`, docs/isa.md): the same operations on each element as on the whole
    array, block by block, so the float64 temporaries of the scale, the sum and the products
    stay in cache with erf's."""
    a = np.asarray(a)
    scipy_erf = _scipy_erf()
    flat = a.reshape(-1)
    out = np.empty(flat.shape, np.float32)
    for i in range(0, flat.size, _ERF_CHUNK):
        out[i : i + _ERF_CHUNK] = _gelu_erf_block(flat[i : i + _ERF_CHUNK].astype(np.float64), scipy_erf)
    return out.reshape(a.shape)


def _gelu_erf_block(x: np.ndarray, scipy_erf) -> np.ndarray:
    """gelu_erf of a float64 block, in place: (0.5 x) (1 + erf(x / sqrt 2))."""
    e = scipy_erf(x * _INV_SQRT2)
    e += 1.0
    x *= 0.5
    x *= e
    return x
