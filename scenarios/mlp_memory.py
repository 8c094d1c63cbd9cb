"""How much memory does a gated MLP need at its peak, and how much do in-place ops save?

Memory is a live set, not a sum (REFERENCE.md "Transformer accounting"). A gated MLP on ``tokens``
tokens reads a residual ``x [T, D]``, computes two branches ``gate = x W_gate`` and ``up = x W_up``
(``[T, F]`` each, on the MXU), multiplies ``act(gate) * up`` (VPU), projects down to ``out [T, D]``
(MXU) and adds the residual. Headline: a 64 MiB residual and two 192 MiB branches peak at 448 MiB;
writing the product in place into the gate buffer and freeing ``up`` leaves 256 MiB; the 64 MiB
output makes 320 MiB. Without the in-place write the product needs its own 192 MiB buffer and the
peak is 64 + 3 x 192 = 640 MiB.

Only activations are tracked, in the chip's HBM pool; the weights sit in HBM the whole time (a
constant offset) and are left out, as in the reference. Shapes follow from the byte sizes: ``D =
residual_bytes / (tokens x elem)``, ``F = branch_bytes / (tokens x elem)`` (defaults: D 4096, F 12288).
"""
from __future__ import annotations

from collections.abc import Generator
from typing import Any

import simpy

from simulator.engine.chip import Chip
from simulator.engine.memory import Allocation, MemoryPool
from simulator.engine.system import System
from simulator.errors import PodsimError
from simulator.hardware.specs import DTYPE_BYTES, ChipSpec, check_dtype
from simulator.report.result import Result
from simulator.units import positive, positive_int

MIB = 2**20
#: VPU FLOPs per element of ``act(gate) * up``: the activation counted as one op, the product as one.
GATE_FLOPS_PER_ELEMENT = 2


def analytic_peak_bytes(residual_bytes: float, branch_bytes: float, in_place: bool = True) -> float:
    """Closed-form peak of the live set (the output is the residual's size).

    The program points that can be the maximum are "both branches live" (residual + 2 branches, plus
    a third branch-sized product buffer when the product is not written in place) and "output
    allocated" (residual + the product's branch + output): ``r + max(2b (+ b), b + r)``.
    """
    both = 2 * branch_bytes + (0 if in_place else branch_bytes)
    return residual_bytes + max(both, branch_bytes + residual_bytes)


class _Recorder:
    """Allocate, free and mark in-place ops in one pool, logging ``(time, live bytes, event)`` after each."""

    def __init__(self, env: simpy.Environment, pool: MemoryPool) -> None:
        self.env, self.pool = env, pool
        self.timeline: list[dict[str, Any]] = []

    def log(self, event: str) -> None:
        self.timeline.append({"time_s": self.env.now, "live_bytes": self.pool.live_bytes, "event": event})

    def allocate(self, nbytes: float, label: str) -> Generator[simpy.Event, Any, Allocation]:
        alloc = yield self.pool.allocate(nbytes, label)
        self.log(f"allocate {label}")
        return alloc

    def free(self, alloc: Allocation) -> None:
        self.pool.free(alloc)
        self.log(f"free {alloc.label}")


def mlp_program(chip: Chip, rec: _Recorder, tokens: int, d: int, f: int, elem: int, dtype: str,
                in_place: bool) -> Generator[simpy.Event, Any, None]:
    """The gated MLP as one SimPy process: each buffer is allocated when the op that writes it starts."""
    residual = yield from rec.allocate(elem * tokens * d, "residual")
    gate = yield from rec.allocate(elem * tokens * f, "gate")
    yield chip.matmul(tokens, d, f, "gate = x @ W_gate", dtype)
    up = yield from rec.allocate(elem * tokens * f, "up")
    yield chip.matmul(tokens, d, f, "up = x @ W_up", dtype)
    if in_place:
        yield chip.vector(GATE_FLOPS_PER_ELEMENT * tokens * f, "act(gate) * up")
        rec.log("gate = act(gate) * up (in place)")
        rec.free(up)
        hidden = gate
    else:
        hidden = yield from rec.allocate(elem * tokens * f, "product")
        yield chip.vector(GATE_FLOPS_PER_ELEMENT * tokens * f, "act(gate) * up")
        rec.log("product = act(gate) * up")
        rec.free(gate)
        rec.free(up)
    out = yield from rec.allocate(elem * tokens * d, "output")
    yield chip.matmul(tokens, f, d, "output = hidden @ W_down", dtype)
    rec.free(hidden)
    yield chip.vector(tokens * d, "output += residual")
    rec.log("output += residual (in place)")
    rec.free(residual)
    del out  # the output stays live: it is the next layer's residual


def _width(nbytes: float, name: str, tokens: int, elem: int) -> int:
    per_row = tokens * elem
    if nbytes % per_row:
        raise PodsimError(f"{name}={nbytes!r} must be a multiple of tokens x element bytes "
                          f"({tokens} x {elem} = {per_row}) so that it is a [tokens, width] tensor")
    return int(nbytes // per_row)


def simulate(spec: str | ChipSpec, residual_bytes: float, branch_bytes: float, in_place: bool, tokens: int,
             dtype: str) -> tuple[System, list[dict[str, Any]]]:
    """Run the program once; returns the finished System and the named live-set timeline."""
    elem = DTYPE_BYTES[dtype]
    d, f = _width(residual_bytes, "residual_bytes", tokens, elem), _width(branch_bytes, "branch_bytes", tokens, elem)
    system = System(spec)
    rec = _Recorder(system.env, system.chip.hbm)
    for nbytes, label in ((residual_bytes, "residual_bytes"), (branch_bytes, "branch_bytes")):
        system.chip.hbm.check_fits(nbytes, label)
    system.process(mlp_program(system.chip, rec, tokens, d, f, elem, dtype, in_place), "gated MLP")
    system.run()
    return system, rec.timeline


def _after(timeline: list[dict[str, Any]], event: str) -> float:
    return next(p["live_bytes"] for p in timeline if p["event"] == event)


def _validate(residual_bytes: float, branch_bytes: float, in_place: bool, tokens: int, dtype: str) -> None:
    positive(residual_bytes, name="residual_bytes")
    positive(branch_bytes, name="branch_bytes")
    positive_int(tokens, name="tokens")
    if not isinstance(in_place, bool):
        raise PodsimError(f"in_place={in_place!r} must be true or false")
    check_dtype(dtype)


def run(*, residual_bytes: float = 64 * MIB, branch_bytes: float = 192 * MIB, in_place: bool = True,
        tokens: int = 8192, dtype: str = "bf16", chip: str | ChipSpec = "tpu-v5e") -> Result:
    """Simulate the gated MLP's live set in HBM, with and without the in-place gate product."""
    _validate(residual_bytes, branch_bytes, in_place, tokens, dtype)
    system, timeline = simulate(chip, residual_bytes, branch_bytes, in_place, tokens, dtype)
    pool = system.chip.hbm
    try:  # the other mode is for comparison; it may not fit where the asked-for one does
        other_peak = simulate(chip, residual_bytes, branch_bytes, not in_place, tokens, dtype)[0].chip.hbm.peak_bytes
        other_fits = True
    except PodsimError:
        other_peak, other_fits = float(analytic_peak_bytes(residual_bytes, branch_bytes, not in_place)), False
    peaks = {"in_place": pool.peak_bytes if in_place else other_peak,
             "separate_product": other_peak if in_place else pool.peak_bytes}
    saving = peaks["separate_product"] - peaks["in_place"]
    return Result(
        scenario="mlp_memory",
        params=dict(residual_bytes=residual_bytes, branch_bytes=branch_bytes, in_place=in_place, tokens=tokens,
                    dtype=dtype, chip=system.spec.name),
        metrics=system.metrics(),
        extra={"peak_bytes": pool.peak_bytes, "peak_time_s": pool.peak_time_s, "timeline": timeline,
               "analytic_peak_bytes": float(analytic_peak_bytes(residual_bytes, branch_bytes, in_place)),
               "after_free_up_bytes": _after(timeline, "free up"),
               "after_output_bytes": _after(timeline, "allocate output"),
               "final_live_bytes": pool.live_bytes,
               "other_mode_peak_bytes": other_peak, "other_mode_fits": other_fits,
               "peak_by_mode": peaks, "in_place_saving_bytes": saving},
        trace=system.trace,
        headline=(f"writing act(gate)*up in place peaks at {peaks['in_place'] / MIB:.4g} MiB vs "
                  f"{peaks['separate_product'] / MIB:.4g} MiB with a separate product buffer "
                  f"({saving / MIB:.4g} MiB, {100 * saving / peaks['separate_product']:.3g}% less): the product "
                  f"reuses the gate buffer and up is freed before the output is allocated"),
    )
