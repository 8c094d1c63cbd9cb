"""The public entry points: `plan_collective` (validate and build), `run_collective`, `start_collective`.

Every `CollectiveResult` carries the simulated time beside the algorithm's closed form (``analytic_s``),
the book's estimate where it has one (``book_s``) and the topology's lower bound (``topology_bound_s``,
`simulator.collectives.bounds`).
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from simulator import analytic
from simulator.collectives import fault_routes, layout, payload
from simulator.collectives import protocol as protocols
from simulator.collectives.algorithm import AUTO, KINDS, Algorithm, Job, get_algorithm
from simulator.collectives.book import book_estimate
from simulator.collectives.bounds import own_links_bound, topology_bound
from simulator.collectives.fast_path import fast_path
from simulator.collectives.fault_routes import AS_FAULTED
from simulator.collectives.groups import Group, collective_groups, nic_rings, root_position
from simulator.collectives.result import CollectiveResult, no_op
from simulator.collectives.ring import RingAlgorithm
from simulator.collectives.schedule import Completion, Schedule, check_arrived, gc_paused
from simulator.collectives.schedule import execute as execute_all
from simulator.collectives.tuner import Choice, nccl_select, tune
from simulator.engine.network import Network
from simulator.errors import PodsimError
from simulator.units import check_bytes, positive_int

if TYPE_CHECKING:  # annotations only: no import at run time (and no cycle)
    from simulator.engine.system import System

MULTI_AXIS = ("parallel", "sequential")
MODES = ("auto", "full", "reduced")
MAX_CHUNKS = 10_000  #: pieces per message; more is a units mistake and would take minutes


@dataclass
class CollectivePlan:
    """A validated, compiled collective, ready to execute."""

    kind: str
    algorithm: Algorithm | None  #: None for a one-device group
    job: Job
    nbytes: float
    n_keys: int
    reduced: bool
    schedule: Schedule | None  #: None for a one-device group (a no-op)
    alternatives: list[dict[str, Any]] = field(default_factory=list)  #: ``{"algorithm", "time_s"}``, fastest first
    protocol: str | None = None  #: the NCCL protocol it runs with (None: ideal links, or none applies)
    nccl: dict[str, Any] | None = None  #: NCCL's choice and why (calibrated GPU systems)
    quotient: Any = None  #: (quotient, group) built in place of the schedule (then empty): `run_collective` only
    route: str = ""  #: how it goes round link faults (`simulator.collectives.fault_routes`; "": as faulted)

    @property
    def groups(self) -> list[Group]:
        """The groups the collective runs in."""
        return self.job.groups


def plan_collective(kind: str, system: System, nbytes: float | None = None, *, axes: Sequence[Any] | None = None,
                    algorithm: str = "auto", multi_axis: str = "parallel", chunks: int | None = None, root: Any = None,
                    data: np.ndarray | None = None, mode: str = "auto", mesh: Any = None,
                    rings: int | None = None, groups: Sequence[Group] | None = None,
                    protocol: str = "auto") -> CollectivePlan:
    """Validate the arguments of `run_collective` and compile its schedule.

    ``groups`` names the groups explicitly (`Group` objects of chips, all of one shape) in place of ``axes``
    and ``mesh``: for groups that follow no axis, such as a compiled program's replica groups. The plan holds
    every transfer; `run_collective` plans through `_plan`, which may build a quotient in their place.
    """
    plan = _plan(kind, system, nbytes, axes=axes, algorithm=algorithm, multi_axis=multi_axis, chunks=chunks,
                 root=root, data=data, mode=mode, mesh=mesh, rings=rings, groups=groups, protocol=protocol)
    assert plan is not None, "a plan of every group (None only for `plan_one_group`)"
    return plan


def plan_one_group(kind: str, system: System, nbytes: float, group: Group, every: Sequence[Group] | None = None,
                   tuned: CollectivePlan | None = None, **kwargs: Any) -> CollectivePlan | None:
    """`plan_collective` (keywords as there) with the schedule of ``group``, one of its groups, alone: the algorithm
    and its job chosen over every group, then built for ``group`` as `plan_collective` builds each group; None
    where that job would not be the same (chunks, keys, layout), the plan runs in reduced mode, over several NIC
    rings or round faults (build every group then); an NCCL protocol (calibrated GPUs) is chosen, and its pieces
    cut, over every group. For a caller that runs the whole
    collective on a quotient whose representatives lie in ``group`` (`simulator.acceleration.node_quotients`).
    ``every``: the collective's groups where the caller has them already (exactly `collective_groups` of its
    ``axes`` and ``mesh``: not computed again; ignored with explicit ``groups``). ``tuned``: the plan of a
    collective whose groups an automorphism of the fabric maps onto these, group by group and position by position
    (the caller checks it: another pipeline stage's, `simulator.acceleration.step_symmetry`): its choice -- the
    algorithm, protocol, NCCL's pick and the alternatives' prices, which such a map leaves as they are -- is taken
    instead of tuning again; the job and its pieces are made for these groups."""
    return _plan(kind, system, nbytes, **kwargs, only=group, every=every, tuned=tuned)


def _plan(kind: str, system: System, nbytes: float | None = None, *, axes: Sequence[Any] | None = None,
          algorithm: str = "auto", multi_axis: str = "parallel", chunks: int | None = None, root: Any = None,
          data: np.ndarray | None = None, mode: str = "auto", mesh: Any = None, rings: int | None = None,
          groups: Sequence[Group] | None = None, protocol: str = "auto", direct_quotient: bool = False,
          only: Group | None = None, every: Sequence[Group] | None = None,
          tuned: CollectivePlan | None = None) -> CollectivePlan | None:
    """`plan_collective`; ``direct_quotient`` (`run_collective`'s aggregated runs, mode ``auto``) lets an
    algorithm that declares `Capabilities.direct_quotient` build its quotient in place of the schedule; ``only``:
    `plan_one_group` (None where it does not apply), ``every`` its groups where the caller has them, ``tuned`` its
    choice taken from a plan of automorphic groups."""
    net = system.network
    if net is None:
        raise PodsimError("this system has no topology; build it with System(chip, topology='torus:4x4')")
    if kind not in KINDS:
        raise PodsimError(f"unknown collective {kind!r}; valid kinds: {', '.join(KINDS)}")
    for name, value, valid in (("multi_axis", multi_axis, MULTI_AXIS), ("mode", mode, MODES)):
        if value not in valid:
            raise PodsimError(f"{name}={value!r}; valid: {', '.join(valid)}")
    if chunks is not None:  # None: each algorithm's own count (`Algorithm.default_chunks`)
        positive_int(chunks, name="chunks")
        if chunks > MAX_CHUNKS:
            raise PodsimError(f"chunks={chunks} is more than the {MAX_CHUNKS:,} pieces podsim simulates per message")
    if algorithm != AUTO:
        get_algorithm(algorithm)  # a bad name is an error even where nothing would run
    price = _protocol_price(system, protocols.check(protocol))
    if only is not None and data is not None:  # `plan_one_group` does not apply: say so now
        return None
    explicit = groups is not None
    groups = _explicit_groups(net, groups, axes, mesh, rings) if groups is not None else \
        list(every) if every is not None else collective_groups(net, axes, mesh)
    rings = 1 if explicit else rings  # explicit groups are the rings themselves
    group = groups[0]
    root_pos = root_position(groups, root)

    def make_job(chosen: Algorithm | None, pieces: int | None = chunks) -> Job:
        return _job(chosen, kind, net, groups, nbytes, data, multi_axis, pieces, root_pos, rings, axes, mesh)

    if group.n <= 1:
        job = make_job(None)
        return CollectivePlan(kind, None, job, job.nbytes, _n_keys(job), False, None)
    eligible = fast_path().reduced_eligible(mode, kind, data, group, net, not explicit)
    if tuned is not None and only is not None and tuned.algorithm is not None:  # (`plan_one_group`'s ``tuned``)
        choice = Choice(tuned.algorithm, make_job(tuned.algorithm), [dict(a) for a in tuned.alternatives],
                        tuned.protocol, tuned.nccl)
    else:
        nccl = None if price is None else nccl_select(kind, net, groups, _nbytes(nbytes, data), protocol)
        choice = tune(algorithm, kind, net, groups, make_job, price, nccl, _forecast(system, price))
    route = AS_FAULTED
    tried_schedules: dict[tuple[str, str], Schedule] = {}  #: `_round_faults`' trials' schedules, to run again
    if algorithm == AUTO and price is None and not explicit and mesh is None:
        choice, route = _round_faults(system, choice, kind, axes, root, algorithm, nbytes, data, multi_axis,
                                      chunks, rings, tried_schedules)
    job = choice.job
    job_chunks = chunks  #: the pieces ``job`` was made with (None: the algorithm's own)
    if price is not None and choice.protocol is not None:  # pieces as the chosen protocol's links pipeline them
        pieces = protocols.protocol_chunks(system.calibration, choice.algorithm, job, choice.protocol)
        if pieces is not None and pieces != job.chunks:
            job, job_chunks = make_job(choice.algorithm, pieces), pieces
        job.net_step_bytes = protocols.network_step_bytes(job, choice.protocol)  # network hops move whole steps
    job.reduced = fast_path().use_reduced(mode, eligible, choice.algorithm, algorithm == AUTO)
    if only is not None:  # (an NCCL protocol's choice and pieces are the whole collective's, made above)
        if job.reduced or route != AS_FAULTED or data is not None or len(job.rings) != 1 or only not in groups:
            return None
        mine = _job(choice.algorithm, kind, net, [only], nbytes, None, multi_axis, job_chunks, root_pos, 1, None,
                    None)
        if (mine.parts, mine.chunks, mine.key_bytes, mine.nbytes, mine.layout, len(mine.rings)) != \
                (job.parts, job.chunks, job.key_bytes, job.nbytes, job.layout, 1):
            return None
        mine.net_step_bytes = job.net_step_bytes
        job = mine
    schedule = Schedule(job.key_bytes)
    direct = direct_quotient and mode == "auto" and data is None and choice.algorithm.capabilities.direct_quotient
    built = fast_path().direct_quotient(system, choice.algorithm, job) if direct else None
    trial = tried_schedules.get((route, choice.algorithm.name))
    if built is None and trial is not None and job is choice.job and not job.reduced and only is None:
        schedule = trial  # the trial's own schedule: the same job on the same way (transfers are immutable)
    elif built is None:
        choice.algorithm.build(job, schedule)
    return CollectivePlan(kind, choice.algorithm, job, job.nbytes, _n_keys(job), job.reduced, schedule,
                          choice.alternatives, choice.protocol, choice.nccl, built, route)


def _round_faults(system: System, choice: Any, kind: str, axes: Any, root: Any, algorithm: str, nbytes: float | None,
                  data: Any, multi_axis: str, chunks: int | None, rings: int | None,
                  schedules: dict[tuple[str, str], Schedule] | None = None, trials: bool = True) -> tuple[Any, str]:
    """``auto`` under link faults: the choice on the network as faulted, or on a way round the faults
    (`simulator.collectives.fault_routes`). Closed forms over unlike links are not exact, so where
    `fault_routes.trials_apply`, the `fault_routes.TRIALS` candidates ranked first (each way's best two by closed
    form, a way over unlike links weighed by `fault_routes.INEXACT_MARGIN`) are simulated on a copy of the network
    and the fastest run is chosen (``simulated_s`` in their alternatives); elsewhere the best score wins. Every
    way's alternatives are listed, each labelled with its ``route`` (absent: as faulted). ``schedules`` (where
    given) receives each trial's schedule by (route label, algorithm name), so the run of the one chosen need not
    build it again (torus:8x8 ``--axes 1`` AllReduce round a dead cable: ``multi_detour``'s 1.4 M transfers).
    ``trials`` False: closed forms only, never a trial (`ideal_closed_form`, which simulates nothing)."""
    ways = fault_routes.alternatives(system)
    forecast = _forecast(system, None)  # calibrated TPU links: every way's alternatives forecast, ranked by ideal

    def make_job_on(net: Network, groups: list[Group], root_pos: tuple[int, ...]) -> Any:
        def make_job(chosen: Algorithm | None) -> Job:
            return _job(chosen, kind, net, groups, nbytes, data, multi_axis, chunks, root_pos, rings, axes, None)
        return make_job

    tuned = [(ways[0], choice, choice.job.groups, make_job_on(_network(system), choice.job.groups,
                                                              choice.job.root_pos))]
    for way in ways[1:]:
        way_net = _way_net(way)
        groups = collective_groups(way_net, axes, None)
        make_job = make_job_on(way_net, groups, root_position(groups, root))
        try:
            tuned.append((way, tune(algorithm, kind, way_net, groups, make_job, forecast=forecast), groups,
                          make_job))
        except PodsimError:
            continue
    listed = [(way.score(alt.get("ideal_time_s", alt["time_s"])), i, rank,
               {**alt, "route": way.label} if way.label else dict(alt))
              for i, (way, other, _, _) in enumerate(tuned) for rank, alt in enumerate(other.alternatives)]
    per_way = 2 if len(tuned) > 1 else fault_routes.TRIALS  # each way's best two; one way alone: its first TRIALS
    candidates = sorted((c for c in listed if c[2] < per_way), key=lambda c: (c[0], c[1]))
    best = _settle(candidates, tuned)
    tried = _worth_trying(candidates, tuned) \
        if trials and (len(tuned) > 1 or not ways[0].exact) and fault_routes.trials_apply(system, data) else []
    if tried:
        tried = _with_avoiding_trials(tried, candidates, tuned)
    for _, i, _, alt in tried:
        alt["simulated_s"], schedule = _trial(system, kind, tuned[i][0].label, alt["algorithm"], axes, root,
                                              nbytes, multi_axis, chunks, rings)
        if schedules is not None:
            schedules[(tuned[i][0].label, alt["algorithm"])] = schedule
    if tried:  # the fastest run; runs within TRIAL_TIE of it are a tie, settled by score
        quickest = min(c[3]["simulated_s"] for c in tried)
        best = _settle([c for c in tried if c[3]["simulated_s"] <= quickest * (1 + fault_routes.TRIAL_TIE)], tuned)
    way, other, groups, make_job = tuned[best[1]]
    if best[3]["algorithm"] != other.algorithm.name:
        other = tune(best[3]["algorithm"], kind, _way_net(way), groups, make_job, forecast=forecast)
    if len(tuned) > 1 or tried:
        other.alternatives = [c[3] for c in sorted(tried, key=lambda c: c[3]["simulated_s"])] + \
            sorted((c[3] for c in listed if "simulated_s" not in c[3]), key=lambda alt: alt["time_s"])
    return other, way.label


def _settle(candidates: list[Any], tuned: list[Any]) -> Any:
    """The candidate (score, way, rank, alternative) ``auto`` runs: the least score, scores within a relative 1e-9
    of it a tie (as `algorithm.fastest` ties closed forms), settled by the way (as faulted first), then by that
    way's own choice (`tune`'s tie rule: a ring that uses the wraparound before one that does not), then by rank.
    Before, ties went to the first alternative by rank, which lists ties by name: on an ideal H100 switch:8 64 MB
    Broadcast, ``line`` (1.5706e-4 s, the same closed form as ``unidirectional``) replaced the tuner's choice
    ``unidirectional`` and the alternatives shrank to ``line`` alone (a second `tune` by name)."""
    least = min(c[0] for c in candidates)
    tied = [c for c in candidates if c[0] <= least * (1 + 1e-9)]
    return min(tied, key=lambda c: (c[1], c[3]["algorithm"] != tuned[c[1]][1].algorithm.name, c[2]))


def _worth_trying(candidates: list[Any], tuned: list[Any]) -> list[Any]:
    """The first `fault_routes.TRIALS` candidates whose closed form is within `fault_routes.TRIAL_SPAN` of the best
    one's, or that are the best of a way over like links (exactly priced); none where that leaves one. (One
    algorithm with one closed form on two ways is not one plan: ``dimension_order`` AllToAll on torus:8 with chip 3
    at slow:0.5 takes 8.728 ms as faulted and 5.560 ms on the way round the chip, so both are tried.) With one way
    alone, or on a switched fabric (its ways: as faulted, and avoiding a degraded link), the first
    `fault_routes.TRIALS` whatever their closed forms: on ideal H100 nodes:4:8
    with chip 0's NIC at half speed, 1 GB AllGather, ``hierarchical_pipelined`` is priced 2.31 ms and takes 5.00 ms,
    ``line`` 4.01 and 3.90 ms."""
    fastest = min(c[3]["time_s"] for c in candidates)
    net = tuned[0][0].net
    span = math.inf if len(tuned) == 1 or (net is not None and not net.grid) else fault_routes.TRIAL_SPAN
    near = [c for c in candidates if c[3]["time_s"] <= fastest * span][:fault_routes.TRIALS]
    tried = [c for c in candidates if c in near or (tuned[c[1]][0].exact and c[2] == 0)]
    return tried if len(tried) > 1 else []


def _with_avoiding_trials(tried: list[Any], candidates: list[Any], tuned: list[Any]) -> list[Any]:
    """``tried`` and, after them, what ``auto`` would try with the degraded cables removed: the candidates of the
    ways that avoid them (``fault_routes.AVOIDS`` and its detour) are the removed cables' system's own, on the same
    networks, so trying what that system would try (its trials, or its one choice where it tries none) makes a
    degraded cable never slower than a dead one by construction (issue 31's invariant). Without it, `auto`'s
    trials could all go elsewhere: on tpu-v5e ring:5 with cable 4-0 at 0.241, a 1 MB AllReduce spent three of its
    four on ``line`` on three ways that run it alike, and took 40.23 us where the dead cable's detoured ring took
    39.56 us; on torus:4x4 ``--axes 0`` with cable 1,0-0,0 at 0.509, 37.42 against 36.06 us, that ring fifth by
    closed form (tests/test_fault_invariant_small.py)."""
    avoiding = [c for c in candidates if tuned[c[1]][0].label.startswith(fault_routes.AVOIDS)]
    if not avoiding:
        return tried
    own = _worth_trying(avoiding, tuned) or [_settle(avoiding, tuned)]
    return tried + [c for c in own if all(c is not t for t in tried)]


def _trial(system: System, kind: str, label: str, name: str, axes: Any, root: Any, nbytes: float | None,
           multi_axis: str, chunks: int | None, rings: int | None) -> tuple[float, Schedule]:
    """Seconds ``name`` takes on the way labelled ``label`` round ``system``'s faults, simulated on a fresh copy of
    its network (`fault_routes.trial_system`; flow-level aggregation, the path `run_collective` takes there), and
    the schedule it ran (its transfers name chips, not the copy's channels)."""
    scratch = fault_routes.trial_system(system)
    assert system.faults is not None, "trials run only under faults (`fault_routes.trials_apply`)"
    way = next(w for w in fault_routes.ways(_network(scratch), system.faults.faults) if w.label == label)
    way_net = _way_net(way)
    groups = collective_groups(way_net, axes, None)
    chosen = get_algorithm(name)
    job = _job(chosen, kind, way_net, groups, nbytes, None, multi_axis, chunks, root_position(groups, root), rings,
               axes, None)
    schedule = Schedule(job.key_bytes)
    chosen.build(job, schedule)
    with gc_paused(True):
        done = execute_all(way_net, schedule.transfers, None, kind, True)
        scratch.run()
    check_arrived(done, scratch.env.now)
    return scratch.env.now, schedule


def _nbytes(nbytes: float | None, data: np.ndarray | None) -> float:
    """V for NCCL's tuner: ``nbytes``, or the bytes of one chip's row of ``data``."""
    if nbytes is not None or data is None:
        return float(nbytes or 0.0)
    return float(data[0].nbytes) if getattr(data, "ndim", 1) > 1 else float(data.nbytes)


def _protocol_price(system: System, protocol: str) -> Any:
    """The tuner's pricing on a calibrated GPU system (every NCCL protocol, or the one asked); None elsewhere."""
    calibration = getattr(system, "calibration", None)
    if protocols.applies(calibration):
        return protocols.calibrated_price(calibration, protocol)
    if protocol != protocols.AUTO:
        raise PodsimError(f"protocol={protocol!r} needs a calibrated GPU system (System(chip, calibrated=True) on "
                          f"a GPU chip): ideal links and TPU links have no NCCL protocol; leave protocol='auto'")
    return None


def _forecast(system: System, price: Any) -> Any:
    """The calibrated seconds of an (algorithm, job) on a calibrated system without NCCL protocols (TPU links):
    the launch latency plus the closed form on links at their calibrated rates, as `_execute_calibrated` runs
    them; None on ideal systems and where ``price`` (the NCCL protocols) already prices calibrated."""
    calibration = getattr(system, "calibration", None)
    if calibration is None or price is not None:
        return None

    def forecast(algorithm: Algorithm, job: Job) -> float:
        return protocols.calibrated_closed_form(calibration, algorithm, job)

    return forecast


def _job(chosen: Algorithm | None, kind: str, net: Network, groups: list[Group], nbytes: float | None,
         data: np.ndarray | None, multi_axis: str, chunks: int | None, root_pos: tuple[int, ...], rings: int | None,
         axes: Any, mesh: Any) -> Job:
    """A job for ``chosen`` (None: one device per group): V from ``data`` or ``nbytes``, keys, NIC rings, and
    what `Algorithm.prepare` settles. Ring algorithms cut AllGather, ReduceScatter and AllReduce arrays by
    `simulator.collectives.layout`; other algorithms and kinds by `simulator.collectives.payload`."""
    group = groups[0]
    if data is not None and chosen is not None and not chosen.capabilities.numeric:
        raise PodsimError(f"algorithm {chosen.name!r} moves timing and bytes only (capabilities.numeric=False); "
                          f"give nbytes instead of data, or another algorithm")
    by_layout = isinstance(chosen, RingAlgorithm) and kind in layout.RING_KINDS
    parts = 1 if chosen is None or by_layout else chosen.parts(kind, group, multi_axis)
    shard_units, unit_bytes = None, 1.0
    if chunks is None and data is not None:
        chunks = _numeric_chunks(chosen, kind, net, groups, data)
    if data is not None and by_layout:
        nbytes, shard_units = layout.check_data(kind, data, len(net.chips), group.n)
        unit_bytes = float(data.itemsize)
    elif data is not None:
        assert chunks is not None, "set above where data is given (`_numeric_chunks`)"
        nbytes = payload.check_data(kind, data, len(net.chips), group.n, parts, chunks)
    if nbytes is None:
        raise PodsimError("give nbytes (the collective's array size in bytes) or data")
    check_bytes(nbytes, name="nbytes", allow_zero=False)
    auto_chunks = chunks is None and data is None
    if chunks is None:
        chunks = chosen.default_chunks(kind, net, groups, nbytes) if chosen is not None else 1
    n_keys = payload.n_keys(kind, group.n, parts, chunks)
    key_bytes = math.ceil(nbytes / n_keys) if data is None else nbytes / n_keys  # whole bytes per key
    job = Job(kind, net, groups, [groups], parts, chunks, root_pos, key_bytes, numeric=data is not None,
              nbytes=nbytes, multi_axis=multi_axis, shard_units=shard_units, unit_bytes=unit_bytes,
              auto_chunks=auto_chunks)
    if chosen is None:
        return job
    job.rings = nic_rings(net, groups, rings, data, axes, mesh) if chosen.nic_rings else [groups]
    if len(job.rings) > 1:
        job.key_bytes = math.ceil(nbytes / len(job.rings) / n_keys)
    chosen.prepare(job)
    return job


def _numeric_chunks(chosen: Algorithm | None, kind: str, net: Network, groups: list[Group], data: Any) -> int:
    """Numeric mode without ``chunks``: the algorithm's own count, or the largest below it that splits a row."""
    count = chosen.default_chunks(kind, net, groups, None) if chosen is not None else 1
    row = data.shape[1] if isinstance(data, np.ndarray) and data.ndim == 2 else 1
    return max(c for c in range(1, count + 1) if row % c == 0)


def _n_keys(job: Job) -> int:
    """Keys the array of one group (and NIC ring) is cut into."""
    if job.layout is not None:
        return job.group.n * len(job.layout.parts) * 2
    return payload.n_keys(job.kind, job.group.n, job.parts, job.chunks)


def _padded_bytes(plan: CollectivePlan) -> float:
    """Bytes the keys hold beyond V, over every NIC ring (whole bytes per key, even halves)."""
    job = plan.job
    if job.layout is not None:
        stored = job.group.n * job.layout.shard_units * job.layout.unit_bytes
    else:
        stored = job.key_bytes * plan.n_keys
    return stored * len(job.rings) - plan.nbytes


def start_collective(kind: str, system: System, nbytes: float, **kwargs: Any) -> Completion:
    """Start a timing-only collective now, inside a running simulation; returns its completion event.

    Takes the keyword arguments of `run_collective` (except ``data``). On a calibrated system it pays
    the launch latency, and sets the links' calibrated efficiency when no other transfer is in flight
    (collectives that overlap keep the rate the first one set).
    """
    aggregate = _aggregate(kwargs)
    with gc_paused(aggregate):
        return _start(kind, system, nbytes, aggregate, kwargs)


def _start(kind: str, system: System, nbytes: float, aggregate: bool, kwargs: dict[str, Any]) -> Completion:
    plan = plan_collective(kind, system, nbytes, **kwargs)
    if plan.schedule is None:
        done = Completion(system.env)
        done.algorithm = "none"
        done.succeed(system.env.now)
        return done
    return start_planned(system, plan, aggregate=aggregate)


def start_planned(system: System, plan: CollectivePlan, quotient: Any = None,
                  aggregate: bool = True) -> Completion:
    """`start_collective` of a timing-only ``plan``, on ``quotient`` of its schedule where given: a calibration
    (per link kind and size, set where the network is idle) keeps the quotient exact."""
    done = _execute_calibrated(system, plan, None, _network(system).idle(), aggregate, quotient)
    done.algorithm, done.protocol = _algorithm(plan).name, plan.protocol
    return done


def run_collective(kind: str, system: System, nbytes: float | None = None, **kwargs: Any) -> CollectiveResult:
    """Run one collective on ``system`` (a `System` with a topology) and return its figures.

    ``nbytes`` is V: the full gathered array (AllGather), the unreduced array on each device
    (ReduceScatter, AllReduce), the whole array spread over the group (AllToAll), or the root's array
    (Broadcast). Keywords: ``axes`` (default all), ``algorithm`` (``auto`` or a name from
    `simulator.collectives.algorithms`: bidirectional, unidirectional, line, ...), ``multi_axis``
    (parallel, sequential), ``chunks`` (pieces a broadcast's array is cut into; None, the default, lets
    the algorithm choose: one for rings, a pipelining count for spanning trees), ``root``, ``mode`` (auto,
    full, reduced), ``mesh``, ``rings``
    (GPU nodes: how many NIC rings share the array; default one per GPU of a node), ``protocol`` (``auto`` or
    an NCCL protocol, LL, LL128 or Simple: calibrated GPU systems only, `simulator.collectives.protocol`) and
    ``data``. With
    ``data`` (one row per chip) the arrays move for real and ``outputs`` holds each chip's result; V then
    comes from the data. With a `simulator.workloads.mesh.Mesh`, ``axes`` are logical axis names and the
    groups follow its placement. ``aggregate`` (default True; in every mode, ``full`` included) runs the
    transfers with flow-level aggregation (`simulator.collectives.schedule.execute`), with Python's cyclic
    garbage collector paused while it plans and runs (`gc_paused`); False: the plain path.
    """
    aggregate = _aggregate(kwargs)
    with gc_paused(aggregate):
        return _run(kind, system, nbytes, aggregate, kwargs)


def _run(kind: str, system: System, nbytes: float | None, aggregate: bool, kwargs: dict[str, Any]) -> CollectiveResult:
    plan = _plan(kind, system, nbytes, **kwargs, direct_quotient=aggregate)
    assert plan is not None, "a plan of every group (None only for `plan_one_group`)"
    data = kwargs.get("data")
    job, net = plan.job, _network(system)  # `_plan` refused a system without one
    if plan.schedule is None:
        result = no_op(kind, plan.nbytes, len(plan.groups))
        if data is not None:  # one chip per group: every collective leaves each chip's row as it was
            result.outputs = {dev: data[dev].copy() for g in plan.groups for dev in g.members.values()}
        return result
    buffers = None if data is None else layout.initial_buffers(kind, plan.groups, data, job.layout) \
        if job.layout is not None else payload.initial_buffers(kind, plan.groups, data, job.parts, job.chunks,
                                                               job.root_pos)
    start, before = system.env.now, net.link_bytes()
    on_quotient = fast_path().quotient_run(system, plan, kwargs.get("mode", "auto"), data is None and aggregate)
    if on_quotient is not None:
        channels = {c: c.bytes_carried for c in net.links.values()}
    done = _execute_calibrated(system, plan, buffers, aggregate=aggregate,
                               quotient=None if on_quotient is None else on_quotient[0])
    system.run()
    net.set_link_efficiency(None)
    check_arrived(done, system.env.now)
    if on_quotient is not None:  # every link of a representative's orbit carried what it carried, spans too
        fast_path().unfold(net, on_quotient[1], on_quotient[0], channels)
    time_s = system.env.now - start
    algbw, busbw = analytic.bus_bandwidth(kind, plan.nbytes, time_s, job.group.n)
    link_bytes = {k: v - before.get(k, 0.0) for k, v in net.link_bytes().items() if v > before.get(k, 0.0)}
    total = sum(link_bytes.values())
    if plan.reduced:  # the trace saw one ring per axis; count the bytes of all the others too
        total = fast_path().total_link_bytes(net, plan.groups, job.group, link_bytes)
        system.trace.count(next(iter(net.links.values())).kind, total - sum(link_bytes.values()))
        link_bytes = fast_path().every_link_bytes(net, plan.groups, link_bytes)  # metrics never see representatives
    return CollectiveResult(
        kind=kind, time_s=time_s, analytic_s=_analytic_s(plan),
        book_s=None if net.faulted else book_estimate(kind, job.group, net, job.parts, plan.nbytes, job.root_pos),
        topology_bound_s=topology_bound(kind, net, plan.groups, plan.nbytes, job.root_pos),
        own_links_bound_s=own_links_bound(kind, net, plan.groups, plan.nbytes, job.root_pos),
        algorithm=_algorithm(plan).name, nbytes=plan.nbytes, padded_bytes=_padded_bytes(plan),
        group_size=job.group.n, groups=len(plan.groups), algbw_bytes_per_s=algbw, busbw_bytes_per_s=busbw,
        max_link_bytes=max(link_bytes.values(), default=0.0), total_link_bytes=total,
        mode="reduced" if plan.reduced else "quotient" if on_quotient else "full",
        n_transfers=on_quotient[0].represented if on_quotient else len(plan.schedule.transfers),
        link_bytes=link_bytes, outputs=_outputs(plan, buffers),
        alternatives=plan.alternatives, protocol=plan.protocol, nccl=plan.nccl,
        quotient_order=None if on_quotient is None else on_quotient[0].order,
        note=fault_routes.fault_note(system, plan, link_bytes))


def ideal_closed_form(kind: str, system: Any, nbytes: float, *, axes: Sequence[Any] | None = None,
                      algorithm: str = "auto", multi_axis: str = "parallel", chunks: int | None = None,
                      root: Any = None, mesh: Any = None, rings: int | None = None) -> dict[str, Any]:
    """The ideal figures of a collective without simulating it: on ``system`` (ideal links) the algorithm the
    tuner picks by closed form, that closed form (``time_s``, seconds) and the topology's lower bound
    (``topology_bound_s``), with the group's size and count. Under link faults ``auto`` weighs every way round
    them by closed form as `run_collective` does, without its trial runs (``route``: the way's label, "" as
    faulted); before, only the network as faulted was priced, so on tpu-v5e torus:4x4 ``--axes 1`` round a dead
    cable the ideal line said 16.67 ms (``line``) beside an 11.52 ms calibrated forecast (``multi_detour``).
    Bounds, not forecasts: ``podsim collective --calibrated`` prints them beside its one (calibrated) simulation.
    Arguments as `run_collective`."""
    net = system.network
    if net is None:
        raise PodsimError("this system has no topology; build it with System(chip, topology='torus:4x4')")
    if kind not in KINDS:
        raise PodsimError(f"unknown collective {kind!r}; valid kinds: {', '.join(KINDS)}")
    if algorithm != AUTO:
        get_algorithm(algorithm)
    groups = collective_groups(net, axes, mesh)
    root_pos = root_position(groups, root)
    group = groups[0]

    def make_job(chosen: Algorithm | None) -> Job:
        return _job(chosen, kind, net, groups, nbytes, None, multi_axis, chunks, root_pos, rings, axes, mesh)

    if group.n <= 1:
        return {"time_s": 0.0, "algorithm": None, "topology_bound_s": 0.0, "group_size": group.n,
                "groups": len(groups), "algbw_bytes_per_s": 0.0, "busbw_bytes_per_s": 0.0}
    choice = tune(algorithm, kind, net, groups, make_job, None, None)
    route = AS_FAULTED
    if algorithm == AUTO and mesh is None:  # under link faults, every way round them, as `run_collective` weighs
        choice, route = _round_faults(system, choice, kind, axes, root, algorithm, nbytes, None, multi_axis,
                                      chunks, rings, trials=False)
    time_s = choice.algorithm.closed_form(choice.job)
    algbw, busbw = analytic.bus_bandwidth(kind, choice.job.nbytes, time_s, group.n) if time_s > 0 else (0.0, 0.0)
    return {"time_s": time_s, "algorithm": choice.algorithm.name, "route": route,
            "topology_bound_s": topology_bound(kind, net, groups, choice.job.nbytes, root_pos),
            "group_size": group.n, "groups": len(groups), "algbw_bytes_per_s": algbw, "busbw_bytes_per_s": busbw}


def _network(system: System) -> Network:
    """The network of a system a collective runs on (`_plan` refuses a system without one)."""
    net = system.network
    assert net is not None, "a collective runs on a system with a topology (`_plan` checks)"
    return net


def _way_net(way: fault_routes.Route) -> Network:
    """The network of a way round link faults (`fault_routes.alternatives` has one for every way of a
    network's faults; None only for a system without links, where no collective runs)."""
    assert way.net is not None, f"the way {way.label!r} round the faults has a network"
    return way.net


def _algorithm(plan: CollectivePlan) -> Algorithm:
    """The algorithm of a plan that runs (None only for a one-device group's no-op, which never runs)."""
    assert plan.algorithm is not None, "a plan that runs has an algorithm"
    return plan.algorithm


def _analytic_s(plan: CollectivePlan) -> float:
    """The closed form of the algorithm run: with a protocol, as the tuner priced it (calibrated links)."""
    algorithm = _algorithm(plan)
    if plan.protocol is None:
        return algorithm.closed_form(plan.job)
    mine = next(a for a in plan.alternatives if a["algorithm"] == algorithm.name)
    return mine.get("protocols", {}).get(plan.protocol, mine["time_s"])


def _outputs(plan: CollectivePlan, buffers: dict[Any, dict[Any, np.ndarray]] | None) -> dict[Any, np.ndarray] | None:
    """Each device's result in numeric mode (None when timing only)."""
    job = plan.job
    if buffers is None:
        return None
    if job.layout is not None:
        return layout.outputs(plan.kind, plan.groups, buffers, job.layout)
    return payload.outputs(plan.kind, plan.groups, buffers, job.parts, job.chunks, job.root_pos)


def _aggregate(kwargs: dict[str, Any]) -> bool:
    """Take ``aggregate`` out of a collective's keywords (True or False; default True)."""
    aggregate = kwargs.pop("aggregate", True)
    if not isinstance(aggregate, bool):
        raise PodsimError(f"aggregate={aggregate!r}; valid: True (flow-level aggregation) or False (plain path)")
    return aggregate


def _execute_calibrated(system: System, plan: CollectivePlan, buffers: Any, set_links: bool = True,
                        aggregate: bool = True, quotient: Any = None) -> Completion:
    """`execute` (`execute_quotient` of ``quotient`` where given), after the calibrated launch latency and
    (with ``set_links``) with links at their calibrated efficiency for an array of this size (and the hop
    latency of the plan's protocol, if any); plain `execute` on an ideal system."""
    net, cal = plan.job.net, system.calibration  # the plan's network: the system's, or a way round its faults
    schedule, algorithm = plan.schedule, _algorithm(plan)
    assert schedule is not None, "a plan that runs has a schedule (None: a one-device no-op)"

    def execute(*args: Any) -> Completion:
        return execute_all(*args) if quotient is None else fast_path().execute_quotient(net, quotient, plan.kind)

    if cal is None:
        return execute(net, schedule.transfers, buffers, plan.kind, aggregate)
    fraction, latency, launch_s = protocols.link_settings(cal, plan.nbytes, algorithm.name, plan.protocol)
    if set_links:
        net.set_link_efficiency(fraction, latency)
    done = Completion(system.env)

    def launch(_e: Any) -> None:
        finished = execute(net, schedule.transfers, buffers, plan.kind, aggregate)
        done.pending = finished.pending

        def finish(ev: Any) -> None:
            done.succeed(ev.value)
        finished.callbacks.append(finish)

    system.env.timeout(launch_s).callbacks.append(launch)
    return done


def _explicit_groups(net: Network, groups: Sequence[Group], axes: Any, mesh: Any, rings: int | None) -> list[Group]:
    """``groups`` checked: not beside axes, mesh or rings; one shape; chips of ``net``, each in one group."""
    groups = list(groups)
    if axes is not None or mesh is not None or rings not in (None, 1):
        raise PodsimError("give explicit groups, or axes / mesh / rings, not both")
    if not groups or any(g.sizes != groups[0].sizes for g in groups):
        raise PodsimError(f"explicit groups must be one or more groups of one shape, got "
                          f"{[g.sizes for g in groups]}")
    members = [c for g in groups for c in g.members.values()]
    known = set(net.chips)
    bad = [c for c in members if c not in known]
    if bad or len(set(members)) != len(members):
        raise PodsimError(f"explicit groups must name chips of the topology, each once; bad or repeated: "
                          f"{bad or sorted({c for c in members if members.count(c) > 1})}")
    return groups
