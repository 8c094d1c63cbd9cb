"""Stuck and runaway simulations end in specific errors, never in a hang or a partial result."""
import pytest

from scenarios import double_buffer
from simulator.collectives import Transfer, check_arrived, execute
from simulator.engine.system import System
from simulator.errors import DeadlockError, RunawayError
from simulator.workloads.pipeline import Operand, Step, run_steps


def test_collective_whose_peer_never_sends_is_a_deadlock():
    system = System(topology="ring:4")
    cyclic = [Transfer(0, 0, 1, ("a",), "copy", (1,), 10.0), Transfer(1, 1, 2, ("a",), "copy", (0,), 10.0),
              Transfer(2, 2, 3, ("b",), "copy", (), 10.0)]
    done = execute(system.network, cyclic, None, "my collective")
    system.run()
    with pytest.raises(DeadlockError, match=r"2 of 3 transfers of my collective .*transfer 0 \(0 -> 1\) waits for "
                                            r"transfers \[1\]"):
        check_arrived(done, system.env.now)


def test_a_process_waiting_on_a_stuck_collective_is_named():
    system = System(topology="ring:4")
    cyclic = [Transfer(0, 0, 1, ("a",), "copy", (1,), 10.0), Transfer(1, 1, 0, ("a",), "copy", (0,), 10.0)]

    def coordinator():
        yield execute(system.network, cyclic, None, "gradient AllReduce")

    system.process(coordinator(), "layer 3 coordinator")
    with pytest.raises(DeadlockError, match="layer 3 coordinator waits for 2 of 2 transfers of gradient AllReduce"):
        system.run()


def test_a_dependency_cycle_between_pipelines_is_a_deadlock():
    system = System(n_chips=2)
    never = system.env.event()
    steps = [Step("waits", (Operand("x", "x", 1e3),), flops=1e6, before=lambda: never)]
    run_steps(system, steps, chip=system.chips[0], name="chip 0")
    with pytest.raises(DeadlockError, match=r"t=.* s with 1 process\(es\) blocked: chip 0 compute \(chip 0\)"):
        system.run()


def test_vmem_too_small_for_the_working_set_waits_and_is_reported():
    system = System()
    vmem = system.chip.vmem
    env = system.env

    def hold_then_ask():
        first = yield vmem.allocate(0.75 * vmem.capacity_bytes, "prefetched block")
        second = yield vmem.allocate(0.5 * vmem.capacity_bytes, "next block")  # never fits while first is held
        vmem.free(first)
        vmem.free(second)

    system.process(hold_then_ask(), "loader")
    with pytest.raises(DeadlockError, match="loader waits for .* bytes of vmem on chip 0 for 'next block'"):
        system.run()
    assert env.now == 0


def test_event_count_guard_stops_a_runaway_run():
    system = System(max_events=50_000)
    run_steps(system, [Step(f"b{i}", (Operand(f"b{i}", "x", 1e3),), flops=1e3) for i in range(20_000)])
    with pytest.raises(RunawayError, match="max_events=50,000"):
        system.run()


def test_wall_clock_guard_stops_a_slow_run():
    system = System(wall_clock_limit_s=1e-6)
    run_steps(system, [Step(f"b{i}", (Operand(f"b{i}", "x", 1e3),), flops=1e3) for i in range(20_000)])
    with pytest.raises(RunawayError, match="wall_clock_limit_s=1e-06"):
        system.run()


def test_guards_do_not_change_results():
    assert double_buffer.run().metrics["end_to_end_s"] == pytest.approx(0.5e-3, rel=1e-12)


# -- user scenario files: run() must return a Result; the user's own exceptions keep their traceback -------


def _cli(argv, capsys):
    from simulator.frontend.cli import main

    status = main(argv)
    out, err = capsys.readouterr()
    return status, out, err


def test_a_user_scenario_returning_none_says_what_run_must_return(capsys):
    status, out, err = _cli(["run", "tests/data/scenario_returns_none.py"], capsys)
    assert status == 2 and out == ""
    assert err == ("podsim: error: scenario file 'scenario_returns_none.py': run() returned NoneType None; "
                   "run(**params) must return a simulator.Result, e.g. Result(scenario='mine', params=params, "
                   "metrics=system.metrics())\n")


def test_a_user_scenario_raising_shows_its_own_traceback_framed_by_one_line(capsys):
    status, out, err = _cli(["run", "tests/data/scenario_raises.py", "--set", "blocks=3"], capsys)
    lines = err.splitlines()
    assert status == 2 and out == ""
    assert lines[0] == "Traceback (most recent call last):"
    assert 'scenario_raises.py", line 6, in run' in err and "in _helper" in err  # the user's frames ...
    assert "simulator" not in err.replace("simulator.Result", "")  # ... and none of podsim's
    assert lines[-2] == "RuntimeError: my helper cannot handle 3 blocks"
    assert lines[-1] == ("podsim: error: scenario file 'scenario_raises.py' raised RuntimeError in run() "
                         "(its traceback is above)")


def test_a_built_in_scenario_bug_is_not_blamed_on_the_user(monkeypatch):
    from scenarios import double_buffer as module
    from simulator.frontend.scenario import run_scenario

    monkeypatch.setattr(module, "run", lambda **kw: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        run_scenario(module, {})


# -- degenerate but legal sizes: a size-1 axis is a trivial mesh that runs and communicates nothing -------


@pytest.mark.parametrize("kind", ["all_gather", "reduce_scatter", "all_reduce", "all_to_all", "broadcast"])
def test_a_one_chip_collective_on_real_data_leaves_the_row_as_it_was(kind):
    import numpy as np

    from simulator.collectives import run_collective

    row = np.arange(8.0)
    r = run_collective(kind, System(topology="ring:1"), data=row[None, :])
    assert r.time_s == 0 and r.max_link_bytes == 0
    np.testing.assert_array_equal(r.outputs[0], row)  # one chip: gathered, reduced or sent, it is its own row


@pytest.mark.parametrize("argv", [["run", "mlp_layers", "--set", "M=1"],
                                  ["run", "sharded_matmul", "--set", "mesh=X=1"],
                                  ["run", "sharded_matmul", "--mesh", "X=1,Y=1", "--topology", "torus:1x1",
                                   "--set", "cases=false"]])
def test_size_one_meshes_run_verify_and_report_no_communication(argv, capsys):
    import json

    status, out, err = _cli([*argv, "--json"], capsys)
    assert status == 0, err
    result = json.loads(out)
    assert result["verified"] is True
    assert all(s["communication_s"] == 0 for s in result["strategies"])
    assert "ici" not in result["bytes"]


def test_the_book_cases_that_need_a_missing_axis_are_skipped_and_named(capsys):
    status, out, _ = _cli(["run", "sharded_matmul", "--set", "mesh=X=1"], capsys)
    assert status == 0
    assert "skipped (they need mesh axes X and Y): no communication" in out


def test_a_matmul_that_never_turns_compute_bound_says_so(capsys):
    status, out, _ = _cli(["run", "matmul_roofline", "--set", "k=1", "--set", "n=256", "--set", "m_values=1,8"],
                          capsys)
    assert status == 0
    assert "compute-bound from m = none up to 8" in out and "never unpadded" in out
    assert "None" not in out and "inf" not in out
