"""Spying on the tiling choices a lowering offers autotuning (passes/tiling_tuning.pick_index)."""

from __future__ import annotations


def offered_choices(monkeypatch, module) -> list[list]:
    """Record the ranked candidates of every `pick_index` call `module` makes (each a list of
    keys, best first); the picks are unchanged."""
    offered: list[list] = []
    pick = module.pick_index

    def spy(ranked):
        offered.append(list(ranked))
        return pick(ranked)

    monkeypatch.setattr(module, "pick_index", spy)
    return offered
