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
    system = System(max_events=50_000)  # 40,000 blocks: about 120,000 events (3 a block), checked every TICK
    run_steps(system, [Step(f"b{i}", (Operand(f"b{i}", "x", 1e3),), flops=1e3) for i in range(40_000)])
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
    assert "skipped no communication: needs mesh axes X and Y" in out


def test_a_matmul_that_never_turns_compute_bound_says_so(capsys):
    status, out, _ = _cli(["run", "matmul_roofline", "--set", "k=1", "--set", "n=256", "--set", "m_values=1,8"],
                          capsys)
    assert status == 0
    assert "compute-bound from m = none up to 8" in out and "never unpadded" in out
    assert "None" not in out and "inf" not in out


# -- long runs: estimates before the run, a budget, progress while it runs, Ctrl-C says how far it got -----


def _steps(n):
    return [Step(f"b{i}", (Operand(f"b{i}", "x", 1e3),), flops=1e3) for i in range(n)]


def test_a_watch_counts_every_event_of_every_system_and_the_estimate_of_queued_work():
    from simulator.engine.watch import RunWatch, watching

    watch = RunWatch()
    with watching(watch):
        ends = []
        for n in (3, 5):
            system = System()
            run_steps(system, _steps(n))
            ends.append(system.run())
    assert watch.estimate == 7 * (3 + 5)  # seven events per pipeline step, announced before each run
    assert watch.events > 0 and watch.now_s == ends[-1]


def test_work_past_the_budget_is_refused_before_anything_runs():
    from simulator.engine.watch import RunWatch, watching

    system = System()
    with watching(RunWatch(max_events=1_000)), pytest.raises(RunawayError, match=r"would simulate about 1,400 "
                                                                                r"events, more than its budget of "
                                                                                r"1,000; use fewer, larger blocks"):
        run_steps(system, _steps(200))
    assert system.env.now == 0


def test_a_run_past_the_budget_stops_at_the_first_report():
    from simulator.engine.watch import TICK, RunWatch, watching

    system = System()

    def chatter():
        while True:
            yield system.env.timeout(1e-9)

    system.process(chatter(), "endless")
    with watching(RunWatch(max_events=TICK)), pytest.raises(RunawayError, match="passed its budget of 16,384"):
        system.run()


def test_the_long_run_warning_comes_once_with_the_estimate_and_the_hint(monkeypatch):
    from simulator.engine import watch as watch_module

    monkeypatch.setattr(watch_module, "LONG_RUN_EVENTS", 10)
    said = []
    watch = watch_module.RunWatch(on_long_run=lambda w, hint: said.append((w.estimate, hint)))
    with watch_module.watching(watch):
        for _ in range(3):
            run_steps(System(), _steps(2))
    assert said == [(14, "use fewer, larger blocks")]


def test_ctrl_c_inside_a_simulation_says_what_was_simulated():
    from simulator.engine.watch import RunWatch, watching
    from simulator.errors import SimulationInterrupted

    system = System()
    run_steps(system, _steps(4))

    def user_presses_ctrl_c():
        yield system.env.timeout(1.0)
        raise KeyboardInterrupt

    system.process(user_presses_ctrl_c(), "keyboard")
    with watching(RunWatch(estimate=1_000)), pytest.raises(SimulationInterrupted) as info:
        system.run()
    message = str(info.value)
    assert message.startswith("interrupted; simulated so far: ")
    assert "of about 1,000 estimated, 1 s of simulated time; moved 4 kB over hbm_read" in message


def test_the_cli_exits_130_on_ctrl_c_with_the_progress_so_far(capsys, monkeypatch):
    from simulator.engine import system as system_module

    def interrupted(self, watch):
        raise KeyboardInterrupt

    monkeypatch.setattr(system_module.System, "_run_loop", interrupted)
    status, out, err = _cli(["run", "double_buffer"], capsys)
    assert status == 130 and out == ""
    assert err == ("podsim: interrupted; simulated so far: 0 events of about 14 estimated, 0 s of simulated "
                   "time\n")


def test_the_cli_warns_before_a_long_run(capsys, monkeypatch):
    from simulator.engine import watch as watch_module

    monkeypatch.setattr(watch_module, "LONG_RUN_EVENTS", 20)
    status, out, err = _cli(["run", "double_buffer", "--set", "blocks=4"], capsys)
    assert status == 0 and out.startswith("double_buffer: ")
    assert err == "podsim: this run will simulate about 28 events (roughly 0 s); use fewer, larger blocks\n"


def test_progress_without_a_terminal_is_one_line_now_and_then():
    import io
    import time

    from simulator.engine.watch import RunWatch
    from simulator.frontend.progress import Progress

    stream = io.StringIO()
    progress = Progress(stream)
    watch = RunWatch(estimate=5_000_000)
    progress(watch)  # a run younger than DELAY_S shows nothing
    assert stream.getvalue() == ""
    watch.started, watch.events = time.monotonic() - 12.0, 1_234_567
    watch.clock(3.5e-3)
    progress(watch)
    progress(watch)  # the next line waits LINE_EVERY_S
    line = stream.getvalue()
    assert line.startswith("podsim: simulating: 1,234,567 of about 5,000,000 events, t=3.5 ms simulated, ")
    assert line.count("\n") == 1


def test_progress_on_a_terminal_is_a_bar_of_events_against_the_estimate():
    import io

    from simulator.engine.watch import RunWatch
    from simulator.frontend.progress import Progress

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    stream = Terminal()
    progress = Progress(stream)
    watch = RunWatch(estimate=2_000_000)
    watch.started -= 5.0
    watch.events = 1_000_000
    watch.clock(2e-3)
    progress(watch)
    progress.close()
    drawn = stream.getvalue()
    assert "simulating:  50%" in drawn and "1.00M/2.00M" in drawn and "t=2 ms simulated" in drawn


def test_a_command_still_preparing_says_so():
    import io

    from simulator.engine.watch import RunWatch
    from simulator.frontend.progress import Progress

    stream = io.StringIO()
    watch = RunWatch()
    watch.started -= 12.0
    Progress(stream)(watch)
    assert stream.getvalue().startswith("podsim: preparing the run: 12 s, nothing simulated yet")
