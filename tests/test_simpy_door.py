"""SimPy behind one door: `simulator.engine.simpy_door` is the only module that names SimPy's internals, and each
of its shortcuts does what plain SimPy does (the reference: SimPy's own public API, `Environment.step`,
`Event.succeed`, `Timeout`, run side by side in a second environment).

If SimPy changes an internal the door relies on, `check_internals` (run at import) or one of these tests fails.
"""
from __future__ import annotations

import ast
import itertools
from pathlib import Path

import pytest
import simpy
from simpy.events import NORMAL, URGENT

from simulator.engine import simpy_door
from simulator.engine.environment import Environment

ROOT = Path(__file__).resolve().parents[1]
DOOR = ROOT / "simulator" / "engine" / "simpy_door.py"
#: SimPy's private attributes (simpy/core.py, simpy/events.py, simpy/resources/*.py in 4.1)
PRIVATE = {"_now", "_queue", "_eid", "_active_proc", "_ok", "_value", "_defused", "_delay", "_generator", "_target",
           "_resume", "_desc", "_process", "_describe_frame", "_trigger_put", "_trigger_get", "_do_put", "_do_get",
           "_check_callbacks", "_build_value", "_remove_check_callbacks", "_populate_value", "_count", "_events",
           "_evaluate"}
#: names only the door imports from SimPy's modules
PRIVATE_NAMES = {"PENDING", "URGENT", "NORMAL", "BoundClass", "EmptySchedule", "StopSimulation", "Infinity"}


def sources() -> list[Path]:
    dirs = ["simulator", "topologies", "scenarios", "benchmarks", "scripts", "tests"]
    return sorted(p for d in dirs for p in (ROOT / d).rglob("*.py")
                  if p != DOOR and p.name != "test_simpy_door.py" and "data" not in p.relative_to(ROOT).parts)


def reach_ins(tree: ast.AST) -> list[str]:
    """Every place ``tree`` names a SimPy internal: a private attribute, an import of a private name or of
    ``simpy.core``, an attribute ``simpy.core``."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in PRIVATE:
            found.append(f"line {node.lineno}: .{node.attr}")
        elif isinstance(node, ast.Attribute) and node.attr == "core" and isinstance(node.value, ast.Name) \
                and node.value.id == "simpy":
            found.append(f"line {node.lineno}: simpy.core")
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("simpy"):
            names = [a.name for a in node.names if a.name in PRIVATE_NAMES or node.module == "simpy.core"]
            found += [f"line {node.lineno}: from {node.module} import {n}" for n in names]
        elif isinstance(node, ast.Import):
            found += [f"line {node.lineno}: import {a.name}" for a in node.names if a.name == "simpy.core"]
    return found


def test_the_checker_finds_what_it_looks_for():
    code = ("from simpy.events import URGENT\nimport simpy.core\nx = env._now + env._queue[0][0]\n"
            "e._ok, e._value = True, 1\nsimpy.core.EmptySchedule\nfrom simpy import Event\nenv.now\n")
    assert sorted(f.split(": ")[1] for f in reach_ins(ast.parse(code))) == \
        sorted(["from simpy.events import URGENT", "import simpy.core", "._now", "._queue", "._ok", "._value",
                "simpy.core"])


def test_no_module_but_the_door_names_a_simpy_internal():
    bad = {str(p.relative_to(ROOT)): found for p in sources() if (found := reach_ins(ast.parse(p.read_text())))}
    assert bad == {}, "use simulator.engine.simpy_door instead"


def test_the_door_names_them_and_marks_each_use():
    text = DOOR.read_text()
    assert reach_ins(ast.parse(text))  # it is where they are
    lines = text.splitlines()
    # every line that touches an internal (outside check_internals, which probes them) says `internal:` on it or
    # on a line of the same statement group just above
    body = text[:text.index("def check_internals")]
    tree = ast.parse(body)
    unmarked = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr in PRIVATE
                and not any("internal:" in lines[i] for i in range(max(0, n.lineno - 3), n.lineno))]
    assert unmarked == []


def test_simpy_is_the_tested_version():
    version = tuple(int(p) for p in simpy.__version__.split(".")[:2])
    assert simpy_door.TESTED[0] <= version < simpy_door.TESTED[1], \
        f"SimPy {simpy.__version__} is untested: run this file, then update simpy_door.TESTED and the pin"
    pin = [line for line in (ROOT / "pyproject.toml").read_text().splitlines() if '"simpy' in line]
    assert pin and simpy_door.TESTED_TEXT in pin[0]


def test_check_internals_raises_when_an_internal_is_gone(monkeypatch):
    simpy_door.check_internals()  # the installed SimPy has them
    real = simpy.Environment.__init__

    def without_eid(self, initial_time=0):
        real(self, initial_time)
        del self._eid  # a SimPy without the queue's id counter

    monkeypatch.setattr(simpy.Environment, "__init__", without_eid)
    with pytest.raises(simpy_door.SimPyChanged, match=r"Environment\._eid.*simpy>=4\.1,<4\.2"):
        simpy_door.check_internals()


def test_check_internals_warns_outside_the_tested_range(monkeypatch):
    monkeypatch.setattr(simpy, "__version__", "4.2.0")
    with pytest.warns(RuntimeWarning, match="outside the tested range"):
        simpy_door.check_internals()


# ---- behaviour: each shortcut against plain SimPy -------------------------------------------------------------

def _order(schedule, *, use_door: bool) -> list[tuple[float, str]]:
    """Run ``schedule(env, log, use_door)`` and return the (time, label) log in processing order."""
    env = simpy.Environment()
    log: list[tuple[float, str]] = []
    schedule(env, log, use_door)
    env.run()
    return log


def _note(env, log, label):
    return lambda _e: log.append((env.now, label))


def test_clock_is_now():
    env = simpy.Environment(2.5)
    assert simpy_door.clock(env) == 2.5
    env.run(until=7.25)
    assert simpy_door.clock(env) == env.now == 7.25


def test_timeout_is_simpys_timeout():
    def schedule(env, log, use_door):
        for i, d in enumerate([3.0, 1.0, 1.0, 0.0, 2.5, 1.0]):
            t = simpy_door.timeout(env, d) if use_door else simpy.Timeout(env, d)
            assert isinstance(t, simpy.Timeout) and t.triggered and t.value is None and not t.processed
            t.callbacks.append(_note(env, log, f"t{i}"))
    assert _order(schedule, use_door=True) == _order(schedule, use_door=False) == \
        [(0.0, "t3"), (1.0, "t1"), (1.0, "t2"), (1.0, "t5"), (2.5, "t4"), (3.0, "t0")]
    with pytest.raises(ValueError, match="Negative delay"):
        simpy_door.timeout(simpy.Environment(), -1.0)


def test_timer_at_is_a_timeout_due_at_that_time():
    def schedule(env, log, use_door):
        def later():
            yield env.timeout(0.1)
            for i, at in enumerate([0.7, 0.3, 0.7]):
                if use_door:
                    simpy_door.timer_at(env, at, _note(env, log, f"a{i}"))
                else:
                    env.timeout(at - env.now).callbacks.append(_note(env, log, f"a{i}"))
            env.timeout(0.2).callbacks.append(_note(env, log, "plain"))
        env.process(later())
    door, plain = _order(schedule, use_door=True), _order(schedule, use_door=False)
    assert 0.1 + 0.2 > 0.3  # the plain timeout falls due just after a1 (0.30000000000000004)
    assert [lbl for _, lbl in door] == [lbl for _, lbl in plain] == ["a1", "plain", "a0", "a2"]
    assert [t for t, lbl in door if lbl != "plain"] == [0.3, 0.7, 0.7]  # exactly ``at``, not now + (at - now)


def test_succeed_urgent_queues_before_this_instants_normal_events():
    # SimPy's own URGENT events (a process's Initialize) pop before NORMAL ones (timeouts, event.succeed) of
    # the same time, whatever the order they were queued in; the door's succeed_urgent is one of them.
    def schedule(env, log, use_door):
        def at_one():
            yield env.timeout(1.0)
            env.timeout(0.0).callbacks.append(_note(env, log, "normal timeout"))
            ev = env.event()
            ev.callbacks.append(_note(env, log, "urgent"))
            if use_door:
                simpy_door.succeed_urgent(ev, "v")
            else:
                ev._ok, ev._value = True, "v"  # SimPy has no public call for this: what Event.succeed sets,
                env.schedule(ev, URGENT)  # queued as Environment.schedule does at priority URGENT
            ev.callbacks.append(lambda e: log.append((env.now, f"value {e.value}")))
        env.process(at_one())
    door = _order(schedule, use_door=True)
    assert door == _order(schedule, use_door=False)
    assert door == [(1.0, "urgent"), (1.0, "value v"), (1.0, "normal timeout")]


@pytest.mark.parametrize("queued", [(), ("normal",), ("urgent",), ("later",), ("normal", "later"),
                                    ("urgent", "normal"), ("later urgent",)])
def test_pops_next_says_whether_an_urgent_event_triggered_now_pops_first(queued):
    # the oracle is SimPy's own loop: trigger one more URGENT event now and step once; did that pop it?
    env = simpy.Environment(2.0)
    for what in queued:
        if what == "normal":
            env.event().succeed()  # NORMAL, now
        elif what == "later":
            env.timeout(1.0)
        else:  # queued at URGENT (now, or a second later), as Environment.schedule queues a process's Initialize
            ev = env.event()
            ev._ok, ev._value = True, None  # what Event.succeed sets
            env.schedule(ev, URGENT, delay=0.0 if what == "urgent" else 1.0)
    said = simpy_door.pops_next(env)
    mine = env.event()
    simpy_door.succeed_urgent(mine)
    env.step()
    assert said == mine.processed
    assert said == ("urgent" not in queued)


def test_init_pending_makes_an_untriggered_event():
    class Mine(simpy.Event):
        def __init__(self, env):
            simpy_door.init_pending(self, env)

    env = simpy.Environment()
    mine, plain = Mine(env), simpy.Event(env)
    for ev in (mine, plain):
        assert (ev.triggered, ev.processed, ev.callbacks, ev.env) == (False, False, [], env)
        with pytest.raises(AttributeError):
            ev.value  # noqa: B018 -- untriggered: no value yet
    mine.succeed(4)
    env.run()
    assert mine.processed and mine.value == 4


def test_fire_now_processes_the_event_as_the_loop_would():
    env = simpy.Environment()
    seen = []
    ev = env.event()
    ev.callbacks += [lambda e: seen.append(("a", e.value)), lambda e: seen.append(("b", e.ok))]
    simpy_door.fire_now(ev, 9)
    assert seen == [("a", 9), ("b", True)] and ev.processed and ev.triggered and ev.value == 9
    ref = env.event()
    ref.callbacks += [lambda e: seen.append(("a", e.value))]
    ref.succeed(9)
    env.step()  # SimPy processing it: the same state after
    assert (ref.processed, ref.triggered, ref.callbacks) == (ev.processed, ev.triggered, ev.callbacks) == \
        (True, True, None)


def test_queued_lists_every_queued_event_with_its_time():
    env = simpy.Environment()
    a, b = env.timeout(2.0), env.timeout(0.5)
    c = env.event().succeed()
    assert sorted(simpy_door.queued(env), key=lambda te: te[0]) == [(0.0, c), (0.5, b), (2.0, a)]
    env.run()
    assert list(simpy_door.queued(env)) == []


def _workload(env, log):
    """Processes, timeouts, AllOf, a shared Resource, a failure handled in a process, an event that fails
    defused: what the engine's events are made of."""
    res = simpy.Resource(env, capacity=1)

    def user(i, d):
        with res.request() as req:
            yield req
            log.append((env.now, f"got {i}"))
            yield env.timeout(d)
        log.append((env.now, f"done {i}"))

    def failing():
        yield env.timeout(0.25)
        raise KeyError("handled")

    def watcher():
        p = env.process(failing())
        try:
            yield p
        except KeyError:
            log.append((env.now, "caught"))
        done = yield env.all_of([env.timeout(0.5), env.timeout(1.5, value="x")])
        log.append((env.now, f"all {sorted(str(v) for v in done.values())}"))
        bad = env.event()
        bad.fail(RuntimeError("defused"))
        bad.defused = True

    for i, d in enumerate([1.0, 0.5, 0.0, 2.0]):
        env.process(user(i, d))
    env.process(watcher())


def test_run_until_empty_equals_simpys_run():
    ticks_door: list[float] = []
    env = simpy.Environment()
    log_door: list[tuple[float, str]] = []
    _workload(env, log_door)
    left = simpy_door.run_until_empty(env, 4, lambda: ticks_door.append(env.now), lambda n: None)
    ref = simpy.Environment()
    log_ref: list[tuple[float, str]] = []
    _workload(ref, log_ref)
    steps = 0
    while True:
        try:
            ref.step()
        except simpy_door.EmptySchedule:
            break
        steps += 1
    assert log_door == log_ref and env.now == ref.now
    assert len(ticks_door) * 4 + left == steps and 0 <= left < 4  # every event counted once


def test_run_until_empty_raises_an_unhandled_failure_like_simpy():
    def build(env):
        def broken():
            yield env.timeout(1.0)
            raise ValueError("boom")
        env.process(broken())

    ref = simpy.Environment()
    build(ref)
    with pytest.raises(ValueError, match="boom") as plain:
        ref.run()
    env = simpy.Environment()
    build(env)
    with pytest.raises(ValueError, match="boom") as door:
        simpy_door.run_until_empty(env, 8, lambda: None, lambda n: None)
    assert type(door.value.__cause__) is type(plain.value.__cause__) is ValueError and env.now == ref.now == 1.0


def test_run_until_empty_calls_an_overridden_step():
    calls = itertools.count()

    class Counting(simpy.Environment):
        def step(self):
            next(calls)
            return super().step()

    env = Counting()
    log: list[tuple[float, str]] = []
    _workload(env, log)
    left = simpy_door.run_until_empty(env, 2, lambda: None, lambda n: None)
    ref = simpy.Environment()
    log_ref: list[tuple[float, str]] = []
    _workload(ref, log_ref)
    ref.run()
    assert log == log_ref and next(calls) > 0 and left in (0, 1)


def test_run_until_empty_reports_the_events_before_an_interrupt():
    env = simpy.Environment()
    for t in range(1, 6):
        env.timeout(float(t))

    def ctrl_c(_event):
        raise KeyboardInterrupt

    env.timeout(6.0).callbacks.append(ctrl_c)
    told: list[object] = []
    with pytest.raises(KeyboardInterrupt):
        simpy_door.run_until_empty(env, 4, lambda: told.append("tick"), told.append)
    # five events processed (a tick after the fourth), the sixth interrupted in its callback
    assert told == ["tick", 1] and env.now == 6.0


def test_bind_event_classes_binds_simpys_event_factories():
    env = Environment()
    assert "timeout" in vars(env) and "event" in vars(env) and "process" not in vars(env)
    assert type(env.timeout(1.0)) is simpy.Timeout and NORMAL > URGENT
