"""Strict-chain quotients run in one timer (`simulator.acceleration.chain_run`) against the same quotient run event
by event, and calibrated training steps on GPU nodes with chains against the same steps without and against the
full simulation of every chip.

Oracles: the event-by-event run of the same quotient on a twin system (every arrival logged with its instant, each
link's bytes, clock and latency wait after the run: equal, not close); a lone chain's time from the link figures by
hand (each cut-through transfer: both hop latencies plus bytes over the rate); and for whole steps the full
simulation (`simulate_step(fast=False)`). Interfering traffic is placed inside the chain's window (a message on one
of its links, the network's idleness asked, link efficiency changed): the chain must hand itself to the
event-by-event run and give its figures; without the guard the same cases come out different (so the guard is
what makes them right); at one of the chain's own instants it must ask for a rerun."""
from __future__ import annotations

import json
import math
from types import SimpleNamespace

import pytest
from same_results import assert_same

from simulator.acceleration import chain_run
from simulator.acceleration.chain_run import NO_CHAINS, ChainRunner, _Chain, attach, no_chains
from simulator.acceleration.quotient import execute_quotient, run_on_quotient
from simulator.acceleration.reruns import Attempt, run_with_reruns
from simulator.acceleration.step_symmetry import Rerun
from simulator.collectives import plan_collective
from simulator.engine.system import System
from simulator.hardware.specs import get_chip
from simulator.workloads.plans.layout import parse_plan_mesh
from simulator.workloads.plans.step import simulate_step
from simulator.workloads.plans.train import TrainOptions
from simulator.workloads.transformer import TransformerConfig

NBYTES = 64e6


def _setup(topology: str = "nodes:2:4", algorithm: str = "hierarchical", nbytes: float = NBYTES):
    system = System("h100", topology=topology, trace=False)
    plan = plan_collective("all_reduce", system, nbytes, algorithm=algorithm)
    q, _ = run_on_quotient(system.network, plan.schedule.transfers)
    return system, q


def _run(chained: bool, extra=(), idle_at=(), again_at=None, carried: float = 0.0):
    """The hierarchical AllReduce's quotient on nodes:2:4 from t=0 (and once more at ``again_at``), messages
    ``extra`` (at, src, dst, bytes) beside it, and at each instant of ``idle_at`` the network's idleness asked
    (and, where idle, every link set to half its rate, as a calibrated collective's start does). Returns the log
    of (what, instant), each link's state after the run, and the runner."""
    system, q = _setup()
    net, env = system.network, system.env
    runner = ChainRunner(net, {})
    net.eager_sink = runner if chained else None
    for link in q.links:  # (bytes already on the links: whole, or not)
        link.bytes_carried = carried
    log: list[tuple[str, float]] = []

    def collective(_e=None, name="all_reduce"):
        execute_quotient(net, q, name).callbacks.append(lambda e: log.append((name, env.now)))

    collective()
    if again_at is not None:
        env.timeout(again_at).callbacks.append(lambda e: collective(name="again"))
    for at, src, dst, nbytes in extra:
        def send(_e, src=src, dst=dst, nbytes=nbytes):
            net.message(src, dst, nbytes, "x").callbacks.append(lambda e: log.append((f"{src}->{dst}", env.now)))
        env.timeout(at).callbacks.append(send)
    for at in idle_at:
        def ask(_e, at=at):
            idle = net.idle()
            log.append((f"idle {idle}", env.now))
            if idle:
                net.set_link_efficiency(lambda kind: 0.5)
        env.timeout(at).callbacks.append(ask)
    system.run()
    state = {c.name: (c.bytes_carried, c._last_update, c._arrive_by, c._flows) for c in net.links.values()}
    return sorted(log), state, runner


def _lone_steps():
    system, q = _setup()
    return _Chain.of(q).timeline(0.0)


def test_the_hierarchical_all_reduce_quotient_is_a_chain_and_a_ring_of_pieces_is_not():
    _, q = _setup()
    chain = _Chain.of(q)
    assert chain is not None and len(chain.steps) == len(q.transfers) == 12  # 6 NVLink, 2 IB, 4 barriers
    assert {c.name for c in chain.links} == {"link 0->sw0", "link sw0->0", "link 0->ib0", "link ib0->0"}
    _, ring = _setup("nodes:1:8", "unidirectional")  # pieces pipelined round the ring: several in flight at once
    assert _Chain.of(ring) is None


@pytest.mark.parametrize("carried", [0.0, 0.375], ids=["whole", "fractional"])
def test_a_lone_chain_takes_its_closed_form_and_is_the_event_by_event_run(carried):
    """Each transfer alone, cut through two hops: latency of both plus its bytes over the (equal) rate of its
    links, from the link figures of nodes:2:4 (the real links, not the quotient's); 3 + 3 NVLink and 1 + 1 IB
    transfers in turn. A link's count of bytes, a whole number, takes its flows' whole bytes in one addition;
    one that is not (0.375 bytes on the links before the run) takes them one by one: the count is the
    event-by-event run's either way."""
    system, q = _setup()
    net = system.network
    hand = 0.0
    for t in q.transfers:  # (a barrier: no route, no time)
        if q.routes[t.id] is not None:
            links = [net.link(0, "sw0"), net.link("sw0", 1)] if t.dst == 1 else [net.link(0, "ib0"), net.link("ib0", 4)]
            assert links[0].bandwidth_bytes_per_s == links[1].bandwidth_bytes_per_s
            hand += links[0].latency_s + links[1].latency_s + t.nbytes / links[0].bandwidth_bytes_per_s
    log, state, runner = _run(True, carried=carried)
    assert runner.runs == 1 and runner.released == 0
    assert log[0][0] == "all_reduce" and math.isclose(log[0][1], hand, rel_tol=1e-12)
    plain_log, plain_state, _ = _run(False, carried=carried)
    assert log == plain_log and state == plain_state


FRACTIONS = (0.01, 0.1, 0.25, 0.4, 0.55, 0.7, 0.9, 0.99)


@pytest.mark.parametrize("fraction", FRACTIONS)
@pytest.mark.parametrize("dst", [2, 5], ids=["nvlink", "ib"])
def test_a_message_on_a_held_link_hands_the_chain_over_exactly(fraction, dst):
    """A 1 MB message from chip 0 (on 0->sw0 to chip 2, on 0->ib0 to chip 5) inside the chain's window: the same
    arrivals and link states as the event-by-event run."""
    end = _lone_steps()[-1].arrival
    extra = [(fraction * end, 0, dst, 1e6)]
    log, state, runner = _run(True, extra)
    assert runner.runs == 1 and runner.released == 1 and not runner.conflict
    plain_log, plain_state, _ = _run(False, extra)
    assert log == plain_log and state == plain_state


def test_without_the_guard_a_message_on_a_held_link_comes_out_wrong(monkeypatch):
    """The same messages with no guard on the held links: the chain never hears of them, and in most windows the
    arrivals differ from the event-by-event run -- the guard is what makes the cases above right."""
    end = _lone_steps()[-1].arrival
    monkeypatch.setattr(chain_run, "_HELD", ())
    wrong = 0
    for fraction in FRACTIONS:
        extra = [(fraction * end, 0, 2, 1e6)]
        if _run(True, extra)[0] != _run(False, extra)[0]:
            wrong += 1
    assert wrong >= len(FRACTIONS) // 2, wrong


def _gaps():
    """Instants inside the chain where its links carry nothing yet (half a latency into each routed transfer)."""
    return [step.start + 0.5 * step.hops[0][0].latency_s for step in _lone_steps() if step.hops]


def test_idleness_asked_and_efficiency_set_inside_the_window_are_the_event_by_event_runs():
    """In each transfer's first latency the network is idle (its flow is on its way): the chain says so, then the
    rate changes under it (a flow admitted ahead is put back and admitted at the new rate) -- as event by event;
    asked mid-flow, it is busy."""
    steps = _lone_steps()
    busy = [0.5 * (steps[0].hops[0][2] + steps[0].hops[0][3])]
    for at in [*_gaps(), *busy]:
        log, state, runner = _run(True, idle_at=[at])
        plain_log, plain_state, _ = _run(False, idle_at=[at])
        assert log == plain_log and state == plain_state, at
        assert runner.released == 1
    assert ("idle False", busy[0]) in _run(False, idle_at=busy)[0]  # (the oracle's answer mid-flow)
    assert any(("idle True", at) in _run(False, idle_at=[at])[0] for at in _gaps())


def test_without_the_idleness_hook_a_held_link_looks_idle_mid_flow(monkeypatch):
    """With `busy` and `settle` doing nothing, the chained run answers idle mid-flow (and changes the rates under
    its flows), where the event-by-event run is busy: the hook is what makes the case above right."""
    steps = _lone_steps()
    at = 0.5 * (steps[0].hops[0][2] + steps[0].hops[0][3])
    monkeypatch.setattr(ChainRunner, "busy", lambda self: False)
    monkeypatch.setattr(ChainRunner, "settle", lambda self: None)
    assert ("idle True", at) in _run(True, idle_at=[at])[0]
    assert ("idle False", at) in _run(False, idle_at=[at])[0]


def test_a_second_start_on_held_links_hands_the_first_over():
    """The same AllReduce again 30 us in, on the same links: the first is handed over, the second runs event by
    event, sharing them, as without chains."""
    log, state, runner = _run(True, again_at=30e-6)
    plain_log, plain_state, _ = _run(False, again_at=30e-6)
    assert log == plain_log and state == plain_state
    assert runner.released == 1 and runner.runs == 1


def test_traffic_at_one_of_the_chains_own_instants_asks_for_a_rerun():
    """A message at the instant the first transfer arrives (and the next is sent): whether it came first is a
    matter of event order, which the chain cannot promise -- a conflict, chains off for the reruns."""
    at = _lone_steps()[0].arrival
    system, q = _setup()
    net, env = system.network, system.env
    shared: dict = {}
    runner = net.eager_sink = ChainRunner(net, shared)
    execute_quotient(net, q, "all_reduce")
    env.timeout(at).callbacks.append(lambda e: net.message(0, 2, 1e6, "x"))
    with pytest.raises(Rerun, match="not alone"):
        system.run()
    assert runner.conflict and shared[NO_CHAINS]


def test_attach_is_off_with_tracing_under_no_chains_or_after_a_conflict():
    traced = System("h100", topology="nodes:2:4", trace=True).network
    assert attach(traced, {}) is None and traced.eager_sink is None
    net = System("h100", topology="nodes:2:4", trace=False).network
    with no_chains():
        assert attach(net, {}) is None
    assert attach(net, {NO_CHAINS: True}) is None
    assert isinstance(attach(net, {}), ChainRunner) and isinstance(net.eager_sink, ChainRunner)


def test_a_chain_conflict_reruns_the_same_attempt_without_chains():
    """Scripted runs: the first stops with its chains in conflict; the same attempt reruns, under `no_chains`."""
    tried = []

    class Run:
        def __init__(self, attempt):
            self.attempt, self.chained = attempt, chain_run._ON.get()
            self.sym = SimpleNamespace(active=True, mixed=False, broken=False, node_next=None,
                                       replays=SimpleNamespace(conflict=False, disturbed=frozenset()),
                                       chains=SimpleNamespace(conflict=self.chained))

        def run(self):
            tried.append((self.attempt, self.chained))
            if self.chained:
                raise Rerun()
            return "figures"

    outcome = run_with_reruns(Run, Attempt())
    assert tried == [(Attempt(), True), (Attempt(), False)]
    assert outcome.reasons == ["chained"] and outcome.figures == "figures" and chain_run._ON.get()


# -- whole calibrated steps ----------------------------------------------------------------------------------------
CFG = TransformerConfig(name="small", d_model=512, d_ff=2048, n_layers=8, n_heads=8, n_kv_heads=4, vocab_size=8192)
STEPS = [  # chip, mesh, topology, schedule
    ("h100", "data=2,pipeline=2,model=4", "nodes:4:4", "1f1b"),
    ("h100", "data=2,pipeline=4,model=4", "nodes:8:4", "interleaved"),
    ("h100", "data=4,pipeline=2,model=2", "nodes:8:2", "1f1b"),
    ("a100", "data=3,pipeline=2,model=4", "nodes:6:4", "gpipe"),
]


def _step(chip, mesh, topology, schedule, fast=True):
    opts = TrainOptions(schedule=schedule, microbatches=4, **({"virtual_stages": 2} if schedule == "interleaved"
                                                               else {}))
    return simulate_step(CFG, get_chip(chip), parse_plan_mesh(mesh), opts, 48, 128, topology, trace=False,
                         calibrated=True, fast=fast)


@pytest.mark.parametrize("case", STEPS, ids=[f"{c[1]}-{c[2]}-{c[3]}" for c in STEPS])
def test_a_calibrated_step_with_chains_is_the_step_without_and_the_full_simulation(case):
    chained, figures = _step(*case)
    with no_chains():
        plain, plain_figures = _step(*case)
    runner = chained.sym.chains
    assert runner is not None and runner.runs > 0 and plain.sym.chains is None
    assert chained.reruns == plain.reruns == []
    assert json.dumps(figures, sort_keys=True, default=repr) == json.dumps(plain_figures, sort_keys=True,
                                                                           default=repr)  # bit for bit
    assert chained.system.network.link_bytes() == plain.system.network.link_bytes()
    _, full = _step(*case, fast=False)
    assert_same(full, figures)


def test_a_step_hands_chains_over_where_its_pipeline_sends_meet_them():
    """On nodes:4:4 with 1F1B the activations cross the IB links the data-parallel AllReduce's chain holds."""
    chained, _ = _step(*STEPS[0])
    assert chained.sym.chains.released > 0
