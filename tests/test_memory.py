"""MemoryPool: labelled allocations, FIFO back-pressure, live set and peak."""
import pytest
import simpy

from simulator.engine.memory import MemoryPool
from simulator.errors import CapacityError, PodsimError


def test_back_pressure_waits_for_space_first_come_first_served():
    env = simpy.Environment()
    pool = MemoryPool(env, "vmem", 100)
    log = []

    def holder(name, nbytes, at, hold):
        yield env.timeout(at)
        alloc = yield pool.allocate(nbytes, name)
        log.append((name, "got", env.now))
        yield env.timeout(hold)
        pool.free(alloc)

    env.process(holder("a", 60, 0, 5))
    env.process(holder("big", 70, 1, 1))   # must wait for a to free at t=5
    env.process(holder("small", 10, 2, 1))  # fits now, but FIFO keeps it behind "big"
    env.run()
    assert log == [("a", "got", 0), ("big", "got", 5), ("small", "got", 5)]
    assert pool.peak_bytes == 80 and pool.peak_time_s == 5
    assert pool.live_bytes == 0


def test_live_set_timeline_and_labels():
    env = simpy.Environment()
    pool = MemoryPool(env, "hbm", 1000)
    out = {}

    def proc():
        a = yield pool.allocate(300, "weights")
        b = yield pool.allocate(200, "kv")
        out["labels"] = pool.live_by_label()
        yield env.timeout(1)
        pool.free(a)
        yield env.timeout(1)
        pool.free(b)

    env.process(proc())
    env.run()
    assert out["labels"] == {"weights": 300, "kv": 200}
    assert pool.timeline == [(0, 0), (0, 300), (0, 500), (1, 200), (2, 0)]
    assert pool.peak_bytes == max(live for _, live in pool.timeline) == 500


def test_request_that_can_never_fit_fails_at_once_naming_label_and_capacity():
    pool = MemoryPool(simpy.Environment(), "vmem", 128)
    with pytest.raises(CapacityError, match=r"'block7'.*128"):
        pool.allocate(129, "block7")


def test_double_free_is_an_error():
    env = simpy.Environment()
    pool = MemoryPool(env, "vmem", 10)
    event = pool.allocate(5, "x")
    env.run()
    pool.free(event.value)
    with pytest.raises(PodsimError, match="freed twice"):
        pool.free(event.value)
