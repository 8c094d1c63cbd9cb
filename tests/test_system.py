"""System: runs to completion, and a stuck run raises a DeadlockError instead of a partial result."""
import pytest

from simulator.engine.system import System
from simulator.errors import DeadlockError, PodsimError


def test_waiting_forever_is_reported_with_name_time_and_target():
    system = System("tpu-v5e")
    env, vmem = system.env, system.chip.vmem

    def hog():
        yield vmem.allocate(vmem.capacity_bytes, "hog")  # never freed
        yield env.timeout(1e-3)

    def starved():
        yield env.timeout(2e-3)
        yield vmem.allocate(1, "late block")

    system.process(hog(), "hog")
    system.process(starved(), "starved loader")
    with pytest.raises(DeadlockError, match=r"t=0\.002 s.*starved loader waits for 1 bytes of vmem.*'late block'"):
        system.run()


def test_finished_run_returns_its_end_time():
    system = System("tpu-v5e")

    def sleeper():
        yield system.env.timeout(3.0)

    system.process(sleeper(), "sleeper")
    assert system.run() == 3.0


@pytest.mark.parametrize("n", [0, -2, 1.5])
def test_bad_chip_count(n):
    with pytest.raises(PodsimError, match="n_chips"):
        System("tpu-v5e", n_chips=n)
