"""Choosing an algorithm: every applicable one priced by its own closed form, the fastest run (as NCCL's tuner).

For ``auto``, `tune` prepares a job for each algorithm that can run the collective (`Algorithm.unfit` is
None and its job can be made, e.g. numeric data splits into its pieces), prices it with
`Algorithm.closed_form` and returns the job of the fastest (ties: `algorithm.fastest`) beside every
alternative's predicted time. An algorithm asked for by name is the only one prepared and priced (its
alternatives then list it alone): on a thousand GPUs pricing every other algorithm costs seconds that
a forced choice does not need (``auto`` shows them all). On a calibrated GPU system ``price`` prices each algorithm
with every NCCL protocol it can use instead (`simulator.collectives.protocol.calibrated_price`): the
choice then names a protocol, and each alternative lists its fastest protocol and every protocol's time.

On a calibrated GPU system ``auto`` is what stock NCCL would run (``nccl``: `nccl_select`): NCCL's own tuning
model (`simulator.collectives.nccl_tuner`) ranks its algorithms and protocols, and the first whose podsim plug-in
applies here is run with that protocol; the simulation and the calibrated closed form then price it. Custom kernels
that stock NCCL lacks (one-shot, two-shot, recursive doubling, ...) stay in the alternatives, labelled
``"nccl": false, "source": "custom kernel"``, and run only when asked for by name. Ideal runs keep the fastest
closed form (the bound).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from simulator.collectives import nccl_tuner
from simulator.collectives.algorithm import AUTO, Algorithm, Job, applicable, choose, fastest, get_algorithm
from simulator.collectives.groups import Group
from simulator.engine.network import Network
from simulator.errors import PodsimError


@dataclass
class Choice:
    """The algorithm to run, its prepared job, and every applicable algorithm's closed form."""

    algorithm: Algorithm
    job: Job
    alternatives: list[dict[str, Any]]  #: ``{"algorithm": name, "time_s": closed form}``, fastest first (auto)
    protocol: str | None = None  #: the NCCL protocol priced fastest (None: ideal links, or no protocols here)
    nccl: dict[str, Any] | None = None  #: NCCL's own choice and why (calibrated GPU systems; `nccl_select`)


def tune(name: str, kind: str, net: Network, groups: list[Group], make_job: Callable[[Algorithm], Job],
         price: Callable[[Algorithm, Job], tuple[float, str, dict[str, float]]] | None = None,
         nccl: Callable[[str, dict[str, dict[str, Any]]], dict[str, Any] | None] | None = None,
         forecast: Callable[[Algorithm, Job], float] | None = None) -> Choice:
    """The job of algorithm ``name`` (``auto``: the fastest by closed form) and the alternatives priced
    (``auto``: every applicable algorithm; a name: that one).

    ``make_job`` builds and prepares a job for an algorithm, raising `PodsimError` where it cannot
    (that algorithm is then no alternative; asked for by name, its error is raised). ``price`` (None: the
    algorithm's ideal closed form) gives (seconds, protocol, seconds per protocol) for a job. ``nccl`` (with
    ``price``) maps (name, the priced alternatives by name) to NCCL's choice (`nccl_select`), which then decides.
    ``forecast`` (without ``price``: a calibrated system with no NCCL protocols, e.g. TPU links) gives an
    alternative's calibrated seconds; the choice stays the fastest closed form, and each alternative's ``time_s`` is
    then its forecast, ``ideal_time_s`` its ideal closed form (a bound).

    Every alternative of a calibrated run (``price`` or ``forecast``) says ``"time_is": "forecast"``: with ``nccl``,
    its ``time_s`` and ``protocol`` are those of the protocol NCCL's tuner would run for it asked for by name (what
    ``algorithm=name`` then simulates), ``fastest_protocol`` the one priced fastest. Ideal runs' alternatives are
    bounds (ideal peak links) and carry no ``time_is``.
    """
    if name != AUTO:
        choose(name, kind, net, groups)  # an algorithm that does not apply: say which ones do
    jobs: dict[str, Job] = {}
    errors: dict[str, PodsimError] = {}
    for fit in applicable(kind, net, groups) if name == AUTO else [name]:
        try:
            jobs[fit] = make_job(get_algorithm(fit))
        except PodsimError as err:
            errors[fit] = err
    if name in errors or not jobs:
        raise errors.get(name) or next(iter(errors.values()), None) or PodsimError(f"no algorithm can run {kind} here")
    if price is None:
        times = {fit: get_algorithm(fit).closed_form(job) for fit, job in jobs.items()}
        extra: dict[str, dict[str, Any]] = {fit: {} for fit in jobs}
    else:
        priced = {}
        for fit, job in list(jobs.items()):
            try:
                priced[fit] = price(get_algorithm(fit), job)
            except PodsimError as err:  # e.g. a protocol asked for that this algorithm cannot use
                errors[fit] = err
                del jobs[fit]
        if name in errors or not jobs:
            raise errors.get(name) or next(iter(errors.values()))
        times = {fit: t for fit, (t, _, _) in priced.items()}
        extra = {fit: {"protocol": p, "protocols": each} for fit, (_, p, each) in priced.items()}
    chosen = name if name != AUTO else fastest(times)
    protocol, picked = extra[chosen].get("protocol"), None
    if nccl is not None and price is not None:
        picked = nccl(name, extra)
        if picked is not None and picked.get("plugin") in jobs:
            chosen, protocol = picked["plugin"], picked["protocol"]
        for fit in extra:
            extra[fit].update(nccl_tuner.label(fit))
        for fit in list(times):  # each alternative as it would run asked for by name: NCCL's protocol for it
            if fit == chosen:
                runs = protocol  # the one this run simulates
            else:
                own = nccl(fit, {fit: extra[fit]})
                runs = own.get("protocol") if own is not None and own.get("plugin") == fit else None
            if runs is not None and runs in extra[fit]["protocols"] and runs != extra[fit]["protocol"]:
                extra[fit]["fastest_protocol"] = extra[fit]["protocol"]
                extra[fit]["protocol"] = runs
                times[fit] = extra[fit]["protocols"][runs]
    if picked is not None and name == AUTO and picked.get("plugin") == chosen:
        _name_faster_algorithm(picked, chosen, times, extra)
    if price is not None:
        for fit in extra:
            extra[fit]["time_is"] = "forecast"
    elif forecast is not None:
        ideal = dict(times)
        times = {fit: forecast(get_algorithm(fit), job) for fit, job in jobs.items()}
        extra = {fit: {"ideal_time_s": ideal[fit], "time_is": "forecast"} for fit in jobs}
    alternatives = [{"algorithm": fit, "time_s": t, **extra[fit]}
                    for fit, t in sorted(times.items(), key=lambda kv: (kv[1], kv[0]))]
    return Choice(get_algorithm(chosen), jobs[chosen], alternatives, protocol, picked)


def _name_faster_algorithm(picked: dict[str, Any], chosen: str, times: dict[str, float],
                           extra: dict[str, dict[str, Any]]) -> None:
    """Add ``forecast_faster_algorithm`` (``algorithm``, ``protocol``, ``time_s``, ``picked_time_s``, ``source``) and
    a clause of its ``reason`` to NCCL's choice ``picked`` where an alternative's calibrated closed form (a
    **forecast**, seconds, under the protocol it would run with asked for by name) is more than
    `nccl_tuner.FORECAST_MARGIN` below that of NCCL's pick ``chosen``. NCCL's pick still runs (issue 27: ``auto`` is
    what stock NCCL runs); this says what ``--algorithm`` would gain, as `nccl_tuner.decide` does for a protocol.
    On H100 nodes:4:8 at 1 GB NCCL's model puts NVLSTree ahead of Ring, where podsim's forecasts (each equal to its
    simulation) put Ring 13% ahead."""
    best = min(times, key=lambda fit: (times[fit], fit))
    if best == chosen or times[best] >= (1 - nccl_tuner.FORECAST_MARGIN) * times[chosen]:
        return
    source = nccl_tuner.label(best)["source"]
    picked["forecast_faster_algorithm"] = {"algorithm": best, "protocol": extra[best].get("protocol"),
                                           "time_s": times[best], "picked_time_s": times[chosen], "source": source}
    picked["reason"] = (f"{picked.get('reason', '')}; podsim forecasts {best} ({source}) faster here "
                        f"({times[best] * 1e6:.1f} us against {chosen}'s {times[chosen] * 1e6:.1f} us, calibrated "
                        f"closed form; --algorithm {best} runs it)")


def nccl_select(kind: str, net: Network, groups: list[Group], nbytes: float, asked: str = "auto") -> Callable[
        [str, dict[str, dict[str, Any]]], dict[str, Any] | None]:
    """The ``nccl`` of `tune` for ``kind`` of ``nbytes`` on ``groups``: NCCL's model choice as a dict -- ``algorithm``
    and ``protocol`` (NCCL's names), ``plugin`` (podsim's algorithm run), ``model_time_s``, ``reason``, ``table``
    (every enabled pair by NCCL's model, fastest first), ``disabled`` (NCCL algorithms off, and why); None where
    NCCL's tuner knows nothing of the chip."""
    comm = nccl_tuner.comm_for(net, list(groups[0].members.values()))

    def select(name: str, priced: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
        if comm is None:
            return None
        return nccl_tuner.decide(comm, kind, nbytes, asked, name, priced)

    return select
