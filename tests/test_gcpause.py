"""`gc_paused`: the collector is off inside and as it was after; what was made inside goes to the oldest generation
unexamined, where a full pass still finds its garbage cycles; a process's own frozen objects stay frozen; after
`FULL_PASS_EVERY` moved objects the pause runs a full pass itself."""
from __future__ import annotations

import gc
import weakref

import pytest

from simulator.engine import gcpause
from simulator.engine.gcpause import MOVE_FROM, gc_paused


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


def _cycles(n: int) -> list[weakref.ref]:
    """``n`` garbage cycles of two objects each (unreachable at once); weak references to one of each pair."""
    refs = []
    for _ in range(n):
        a, b = _Node(), _Node()
        a.other, b.other = b, a
        refs.append(weakref.ref(a))
    return refs


def test_the_collector_is_restored_and_nested_pauses_act_as_one():
    assert gc.isenabled()
    with gc_paused():
        assert not gc.isenabled()
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the inner pause leaves it to the outer one
    assert gc.isenabled()
    with gc_paused(False):
        assert gc.isenabled()
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()  # off before: off after
    finally:
        gc.enable()


def test_objects_made_inside_go_to_the_oldest_generation_and_their_cycles_are_still_collected():
    gc.collect()
    with gc_paused():
        kept = [[i] for i in range(2 * MOVE_FROM)]  # alive after the pause
        refs = _cycles(MOVE_FROM)  # garbage cycles: only a pass of the collector frees them
    assert gc.get_count()[0] < MOVE_FROM  # the young generation was emptied, unexamined ...
    young = {id(o) for o in gc.get_objects(generation=0)} | {id(o) for o in gc.get_objects(generation=1)}
    assert not any(id(o) in young for o in kept[:: MOVE_FROM // 10])  # ... into the oldest one
    assert all(r() is not None for r in refs)  # no pass has run over them yet
    gc.collect()  # the interpreter's next full pass
    assert all(r() is None for r in refs)
    assert len(kept) == 2 * MOVE_FROM


def test_a_small_pause_leaves_its_objects_to_the_young_generation():
    gc.collect()
    with gc_paused():
        kept = [[i] for i in range(100)]
    assert id(kept[-1]) in {id(o) for o in gc.get_objects(generation=0)}


def test_frozen_objects_stay_frozen():
    gc.collect()
    gc.freeze()  # as a server does before forking
    try:
        frozen = gc.get_freeze_count()
        assert frozen > 0
        with gc_paused():
            refs = _cycles(MOVE_FROM)
        assert gc.get_freeze_count() == frozen
        gc.collect()
        assert all(r() is None for r in refs)  # (made after the freeze: the usual young generation)
    finally:
        gc.unfreeze()


def test_a_full_pass_after_enough_moved_objects(monkeypatch):
    monkeypatch.setattr(gcpause, "FULL_PASS_EVERY", 5 * MOVE_FROM)
    monkeypatch.setattr(gcpause, "_moved", [0])
    gc.collect()
    with gc_paused():
        first = _cycles(MOVE_FROM)  # 3 tracked objects a cycle (its weak reference too): 3 * MOVE_FROM made
    assert all(r() is not None for r in first)  # moved, not yet examined
    with gc_paused():
        second = _cycles(MOVE_FROM)  # 6 * MOVE_FROM moved in all: past FULL_PASS_EVERY
    assert all(r() is None for r in first + second)
    assert gcpause._moved[0] == 0


def test_an_error_inside_still_restores_the_collector():
    with pytest.raises(ValueError), gc_paused():
        _cycles(MOVE_FROM)
        raise ValueError
    assert gc.isenabled()
