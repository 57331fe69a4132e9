"""target/heap.py: glibc's malloc keeps the simulator's big temporaries in its heap instead of
mapping (and faulting in) fresh pages for each, and settings only ever grow."""

from __future__ import annotations

import resource
import sys

import numpy as np
import pytest

from infer.target import heap


class _Spy:
    def __init__(self):
        self.calls: list[tuple[int, int]] = []

    def mallopt(self, parameter, value):
        self.calls.append((parameter.value, value.value))
        return 1


def test_settings_only_grow(monkeypatch):
    spy = _Spy()
    monkeypatch.setattr(heap, "_mallopt", lambda: spy.mallopt)
    monkeypatch.setattr(heap, "_applied", [0, 0, 0])
    heap.keep_buffers_in_heap((64, 128, 16))
    assert spy.calls == [(heap._M_MMAP_THRESHOLD, 64), (heap._M_TRIM_THRESHOLD, 128),
                         (heap._M_TOP_PAD, 16)]
    spy.calls.clear()
    heap.keep_buffers_in_heap((32, 128, 8))  # nothing above what is set: no call
    assert spy.calls == []
    heap.keep_buffers_in_heap((32, 256, 8))  # only the value asked higher changes
    assert spy.calls == [(heap._M_TRIM_THRESHOLD, 256)]
    assert heap._applied == [64, 256, 16]


def test_simulator_run_applies_its_setting(monkeypatch):
    from infer.target.asm import assemble
    from infer.target.sim import Simulator

    spy = _Spy()
    monkeypatch.setattr(heap, "_mallopt", lambda: spy.mallopt)
    monkeypatch.setattr(heap, "_applied", [0, 0, 0])
    Simulator("edge").run(assemble("halt"), np.zeros(64, np.uint8), mode="functional")
    assert heap._applied == list(heap.SIMULATOR)
    assert {p for p, _ in spy.calls} == {heap._M_MMAP_THRESHOLD, heap._M_TRIM_THRESHOLD,
                                         heap._M_TOP_PAD}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc and ru_minflt")
def test_big_buffers_reused_without_page_faults():
    """A 40 MB buffer allocated, written and freed ten times faults its pages in once, not ten
    times (by default glibc maps each such buffer afresh: measured 5,321 faults for the ten,
    transparent huge pages taking some; 0 with the setting)."""
    if heap._mallopt() is None:
        pytest.skip("not glibc")
    heap.keep_buffers_in_heap(heap.SIMULATOR)
    size = 40 << 20
    np.ones(size, np.uint8)  # the heap grows once
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(10):
        np.ones(size, np.uint8)
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    assert faults < 100
