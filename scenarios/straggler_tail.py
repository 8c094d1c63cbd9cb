"""How does the p99 of a training step grow with the number of chips when each chip jitters by x%?

A synchronous data-parallel step on n chips: every chip runs its forward and backward pass as one MXU op
of ``step_flops`` (``compute_s`` at peak), all wait for the slowest, then the gradients (``grad_bytes``)
are AllReduced over the chips' torus. Each chip's compute time is multiplied by its own lognormal draw of
mean 1 and coefficient of variation ``cv`` (links do not jitter); the step is simulated ``samples`` times
per chip count, each draw seeded apart (`simulator.engine.faults`).

Closed form: the compute phase ends with the slowest of n independent draws, so its quantile q is
``C exp(mu + s z)`` with ``s**2 = ln(1 + cv**2)``, ``mu = -s**2 / 2`` and ``z`` the normal quantile of
``q**(1/n)`` (P(max <= t) = F(t)**n); the AllReduce adds its own closed form. With cv = 5% the compute
phase's p99 is 12% over nominal on one chip (z = 2.33) and 20% on 64 (z = 3.60), and its median climbs
from -0.1% to +12%: more chips, more stragglers -- and only one has to be slow. Results compare each count
with its own nominal step (the AllReduce differs from torus to torus).
"""
from __future__ import annotations

import math
from statistics import NormalDist
from typing import Any

import numpy as np
import simpy

from simulator.collectives import execute, plan_collective
from simulator.engine.faults import Jitter, current_plan
from simulator.engine.system import System, resolve_chip
from simulator.errors import PodsimError
from simulator.hardware.specs import ChipSpec
from simulator.report.result import Result
from simulator.report.tails import critical_element, tail_stats
from simulator.units import check_number, positive, positive_int

MAX_CHIPS = 1024  #: the largest chip count swept (a 32x32 torus)


def torus_for(n: int) -> str | None:
    """A near-square torus of ``n`` chips (``torus:4x8`` for 32; None for one chip)."""
    if n == 1:
        return None
    a = 2 ** (int(math.log2(n)) // 2) if n & (n - 1) == 0 else 1
    return f"torus:{a}x{n // a}" if a > 1 else f"torus:{n}"


def closed_quantile(q: float, n: int, cv: float, compute_s: float) -> float:
    """Seconds by which the slowest of ``n`` lognormal compute times (mean ``compute_s``, CV ``cv``) has
    finished with probability ``q``."""
    if cv == 0:
        return compute_s
    s = math.sqrt(math.log1p(cv * cv))
    return compute_s * math.exp(-s * s / 2 + s * NormalDist().inv_cdf(q ** (1 / n)))


def _step(spec: ChipSpec, topology: str | None, transfers: list[Any], flops: float, jitter: Jitter,
          seed: np.random.SeedSequence, trace: bool) -> System:
    plan = current_plan()  # faults given on the command line (--fault) apply to every draw
    system = System(spec, topology=topology, faults=plan.faults if plan else (), jitter=jitter, seed=seed,
                    trace=trace)
    done = [chip.compute(flops, label="forward+backward") for chip in system.chips]

    def step() -> Any:
        yield simpy.AllOf(system.env, done)
        if transfers:
            yield execute(system.network, transfers, None, "all_reduce")

    system.process(step(), "data-parallel step")
    system.run()
    return system


def _chip_count(n: int) -> int:
    positive_int(n, name="chips")
    if n > MAX_CHIPS or (n & (n - 1)):
        raise PodsimError(f"chips={n}: give powers of two from 1 to {MAX_CHIPS} (each runs on a near-square torus)")
    return n


def run(*, chips: tuple = (1, 4, 16, 64), cv: float = 0.05, samples: int = 100, seed: int = 0,
        compute_s: float = 10e-3, grad_bytes: float = 100e6, chip: str | ChipSpec = "tpu-v5e",
        trace: bool = True) -> Result:
    """Monte Carlo of the step at each chip count; the worst draw of the largest count is the trace."""
    spec = resolve_chip(chip)
    counts = sorted({_chip_count(n) for n in chips})
    check_number(cv, name="cv", minimum=0.0, maximum=1.0)
    samples = positive_int(samples, name="samples")
    flops = positive(compute_s, name="compute_s") * spec.peak_flops_per_s()
    jitter = Jitter("lognormal", cv, ("mxu",))
    points, worst = [], None
    for n in counts:
        topology = torus_for(n)
        plan = plan_collective("all_reduce", System(spec, topology=topology, trace=False), grad_bytes) \
            if topology else None
        transfers = plan.schedule.transfers if plan is not None and plan.schedule is not None else []
        sync_s = plan.algorithm.closed_form(plan.job) if transfers else 0.0
        seeds = [np.random.SeedSequence(seed, spawn_key=(n, i)) for i in range(samples)]
        times = [_step(spec, topology, transfers, flops, jitter, s, False).env.now for s in seeds]
        stats = tail_stats(times)
        points.append({"chips": n, "topology": topology or "1 chip", **stats, "sync_s": sync_s,
                       "closed_p50_s": closed_quantile(0.5, n, cv, compute_s) + sync_s,
                       "closed_p99_s": closed_quantile(0.99, n, cv, compute_s) + sync_s,
                       "nominal_s": compute_s + sync_s})
        worst = (topology, transfers, seeds[int(np.argmax(times))])
    system = _step(spec, worst[0], worst[1], flops, jitter, worst[2], trace)
    first, last = points[0], points[-1]
    for p in points:  # the step over its nominal time, and the compute phase (the slowest chip) over its own
        p.update(p50_over_nominal=p["p50_s"] / p["nominal_s"] - 1, p99_over_nominal=p["p99_s"] / p["nominal_s"] - 1,
                 closed_p99_over_nominal=p["closed_p99_s"] / p["nominal_s"] - 1,
                 **{f"{k}compute_{q}_over_nominal": (p[f"{k}{q}_s"] - p["sync_s"]) / compute_s - 1
                    for k in ("", "closed_") for q in ("p50", "p99")})
    return Result(
        scenario="straggler_tail",
        params=dict(chips=tuple(counts), cv=cv, samples=samples, seed=seed, compute_s=compute_s,
                    grad_bytes=grad_bytes, chip=spec.name),
        metrics=system.metrics(),
        extra={"points": points, "straggler": critical_element(system.trace) if trace else None,
               "analytic_s": last["closed_p99_s"], "p99_over_nominal": last["p99_over_nominal"]},
        trace=system.trace,
        headline=(f"each chip's compute jitters by {cv:.0%}: the p99 step is {first['p99_over_nominal']:+.1%} over "
                  f"nominal on {first['chips']} chip(s), {last['p99_over_nominal']:+.1%} on {last['chips']} (closed "
                  f"form {last['closed_p99_over_nominal']:+.1%}); the trace is the worst of {samples} draws"),
        details=["chips  nominal step    p50 over    p99 over   closed-form p99 over"] + [
            f"{p['chips']:>5}  {p['nominal_s'] * 1e3:9.4f} ms  {p['p50_over_nominal']:+9.2%}  "
            f"{p['p99_over_nominal']:+9.2%}  {p['closed_p99_over_nominal']:+9.2%}" for p in points],
    )
