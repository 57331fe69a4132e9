"""tools/opt_numerics.compare, the numeric check of `infer-opt --verify-each-numerically` and
of the differential fuzzer: bf16 lowerings are compared by cosine over the whole output."""

from __future__ import annotations

import numpy as np

from infer.tools.opt_numerics import NumericOptions, compare


def one_hot_rows(hot: list[int], tail: float) -> np.ndarray:
    """Softmax-like rows of 128: 1.0 at `hot`, `tail` (a denormal) elsewhere."""
    x = np.full((len(hot), 128), tail, np.float32)
    x[np.arange(len(hot)), hot] = 1.0
    return x


def test_bf16_outputs_equal_where_they_matter_pass():
    """One-hot rows equal at their 1.0s and apart only in their ~1e-41 tails: the cosine over
    the whole output is 1 (the equal elements were left out of it, and it came out 0: fuzz seed
    278 reported a saturated softmax as a mismatch)."""
    reference = one_hot_rows([67, 39, 38], 8.8e-42)
    simulated = one_hot_rows([67, 39, 38], 4.5e-41)
    assert compare(reference, simulated, "lowering", "bf16", NumericOptions()) is None


def test_bf16_outputs_that_disagree_are_a_mismatch():
    reference = one_hot_rows([67, 39, 38], 0.0)
    simulated = one_hot_rows([66, 39, 38], 0.0)
    mismatch = compare(reference, simulated, "lowering", "bf16", NumericOptions())
    assert mismatch is not None and "cosine 0.66" in str(mismatch.__dict__), mismatch


def test_common_infinities_are_left_out_of_the_cosine():
    reference = np.array([np.inf, 1.0, 2.0, -np.inf], np.float32)
    simulated = np.array([np.inf, 1.001, 2.0, -np.inf], np.float32)
    assert compare(reference, simulated, "lowering", "bf16", NumericOptions()) is None
    assert compare(reference, np.array([np.inf, 1.0, 2.0, 3.0], np.float32), "lowering", "bf16",
                   NumericOptions()) is not None
