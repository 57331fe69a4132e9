"""The Gauss error function in float64, shared by the reference interpreter (graph `erf` and
exact `gelu`) and the vector unit's `erf` / `gelu_erf` instructions, which round it to fp32
(docs/isa.md): one definition, so the golden model and the hardware model cannot drift.

W. J. Cody, "Rational Chebyshev approximations for the error function", Math. Comp. 1969;
coefficients as in his CALERF routine. Max abs error ~1e-16.
"""

from __future__ import annotations

import math

import numpy as np

_ERF_A = (3.16112374387056560e00, 1.13864154151050156e02, 3.77485237685302021e02,
          3.20937758913846947e03, 1.85777706184603153e-1)
_ERF_B = (2.36012909523441209e01, 2.44024637934444173e02, 1.28261652607737228e03,
          2.84423683343917062e03)
_ERF_C = (5.64188496988670089e-1, 8.88314979438837594e00, 6.61191906371416295e01,
          2.98635138197400131e02, 8.81952221241769090e02, 1.71204761263407058e03,
          2.05107837782607147e03, 1.23033935479799725e03, 2.15311535474403846e-8)
_ERF_D = (1.57449261107098347e01, 1.17693950891312499e02, 5.37181101862009858e02,
          1.62138957456669019e03, 3.29079923573345963e03, 4.36261909014324716e03,
          3.43936767414372164e03, 1.23033935480374942e03)
_ERF_P = (3.05326634961232344e-1, 3.60344899949804439e-1, 1.25781726111229246e-1,
          1.60837851487422766e-2, 6.58749161529837803e-4, 1.63153871373020978e-2)
_ERF_Q = (2.56852019228982242e00, 1.87295284992346725e00, 5.27905102951428412e-1,
          6.05183413124413191e-2, 2.33520497626869185e-3)
_SQRPI = 5.6418958354775628695e-1  # 1 / sqrt(pi)


#: elements per block: its ~40 float64 passes (masks, Horner steps, exp) stay in the L1/L2
#: caches. GELU of 32 x 1536 normal values (all-MiniLM-L6-v2's FFN at sequence 32): 6.6-6.9 ms
#: in blocks of 32 K elements, 3.5-4.8 ms in blocks of 8 K (best of 3 x 40 calls, 2-core
#: machine); each element's value is the same whatever the blocks (every step is elementwise)
_ERF_CHUNK = 1 << 13

_INV_SQRT2 = 1.0 / math.sqrt(2.0)


def erf(x: np.ndarray) -> np.ndarray:
    """Vectorized Gauss error function in float64 (max abs error ~1e-16)."""
    x = np.asarray(x)
    if x.size <= _ERF_CHUNK:
        return _erf_block(x.astype(np.float64))
    return _by_blocks(x, _erf_block, np.float64)


def gelu_erf(a: np.ndarray) -> np.ndarray:
    """0.5 a (1 + erf(a / sqrt 2)) of float a, computed in float64 and rounded once to fp32 (the
    vector unit's `gelu_erf`, docs/isa.md): the same operations on each element as on the whole
    array, block by block, so the float64 temporaries of the scale, the sum and the products
    stay in cache with erf's."""
    return _by_blocks(np.asarray(a), _gelu_erf_block, np.float32)


def _gelu_erf_block(x: np.ndarray) -> np.ndarray:
    """gelu_erf of a float64 block, in place: (0.5 x) (1 + erf(x / sqrt 2))."""
    e = _erf_block(x * _INV_SQRT2)
    e += 1.0
    x *= 0.5
    x *= e
    return x


def _by_blocks(a: np.ndarray, block_fn, dtype) -> np.ndarray:
    """block_fn over a's elements in float64 blocks of _ERF_CHUNK, the results in `dtype`."""
    flat = a.reshape(-1)
    out = np.empty(flat.shape, dtype)
    for i in range(0, flat.size, _ERF_CHUNK):
        out[i : i + _ERF_CHUNK] = block_fn(flat[i : i + _ERF_CHUNK].astype(np.float64))
    return out.reshape(a.shape)


#: exp(-vs * vs) for every vs = k / 16 that _exp_split meets (k = trunc(16 v), v <= 27): the
#: same np.exp of the same products, computed once instead of per element
_SPLIT_VS = np.arange(27 * 16 + 1) / 16.0
_EXP_SPLIT = np.exp(-_SPLIT_VS * _SPLIT_VS)


def _exp_split(v: np.ndarray) -> np.ndarray:
    """exp(-v*v) computed in two factors for accuracy: exp(-vs*vs) * exp(-delta) with vs = v
    truncated to a multiple of 1/16 and delta = (v - vs)(v + vs). vs takes at most 433 values
    (0 <= v <= 27), so its factor comes from a table of the same np.exp results."""
    k = v * 16.0
    np.trunc(k, out=k)
    vs = k / 16.0
    delta = v - vs
    delta *= v + vs
    np.negative(delta, out=delta)
    np.exp(delta, out=delta)
    delta *= _EXP_SPLIT[k.astype(np.intp)]  # IEEE products commute: exp(-vs*vs) * exp(-delta)
    return delta


def _erf_block(x: np.ndarray) -> np.ndarray:
    """Cody's three rational approximations on |x| <= 0.5, 0.5 < |x| <= 4 and |x| > 4. The
    Horner steps of the first two update their arrays in place (the same operations in the
    same order as `num = (num + c) * z`). Each range's elements are gathered and scattered by
    their flat indices: a boolean mask gathers 8 K elements in ~24 us and scatters them in
    ~28 us, `np.flatnonzero` and `take` in ~10 us, an index assignment in ~11 us."""
    with np.errstate(all="ignore"):
        y = np.abs(x).reshape(-1)
        out = np.full(y.shape, np.nan)  # NaN falls through every range

        small = np.flatnonzero(y <= 0.5)
        ys = y.take(small)
        z = ys * ys
        num = _ERF_A[4] * z
        den = z + _ERF_B[0]
        den *= z
        for i in range(3):
            num += _ERF_A[i]
            num *= z
            if i:
                den += _ERF_B[i]
                den *= z
        num += _ERF_A[3]
        num *= ys
        den += _ERF_B[3]
        num /= den
        out[small] = num  # ys * (num + A3) / (den + B3)

        mid = np.flatnonzero((y > 0.5) & (y <= 4.0))
        ym = y.take(mid)
        num = _ERF_C[8] * ym
        den = ym + _ERF_D[0]
        den *= ym
        for i in range(7):
            num += _ERF_C[i]
            num *= ym
            if i:
                den += _ERF_D[i]
                den *= ym
        num += _ERF_C[7]
        den += _ERF_D[7]
        num /= den
        num *= _exp_split(ym)
        np.subtract(1.0, num, out=num)
        out[mid] = num  # 1 - erfc: (num + C7) / (den + D7) * exp(-ym * ym)

        big = np.flatnonzero(y > 4.0)
        if big.size:  # rare in activations: its dozen small operations cost ~20 us unused
            yb = y.take(big)
            z = 1.0 / (yb * yb)
            num = _ERF_P[5] * z
            den = z
            for i in range(4):
                num = (num + _ERF_P[i]) * z
                den = (den + _ERF_Q[i]) * z
            r = z * (num + _ERF_P[4]) / (den + _ERF_Q[4])
            r = (_SQRPI - r) / yb
            erfc_big = np.where(yb < 27.0, r * _exp_split(np.minimum(yb, 27.0)), 0.0)
            out[big] = 1.0 - erfc_big
        return np.copysign(out.reshape(np.shape(x)), x)
