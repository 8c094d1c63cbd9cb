"""How much does double buffering save when loading and computing q blocks?

Each of ``blocks`` blocks is loaded HBM -> VMEM, then computed on the MXU. With one buffer the chip
loads, computes, loads, computes; with two or more, the next block loads while this one computes.
Headline (REFERENCE.md): 0.4 ms of loading and 0.2 ms of compute for the whole task in 2 blocks takes
0.5 ms double-buffered and 0.6 ms with one buffer. Closed form: `simulator.analytic.pipeline_time`.

Sized blocks hold VMEM: when VMEM holds fewer blocks at once than there are buffers, the run goes with the
buffers VMEM holds -- the loader waits for space, not for a buffer -- ``buffers_effective``
(`simulator.workloads.pipeline.effective_buffers`) says how many, the closed form uses that count, and a warning
line gives the numbers and a block count that does fit (checked before it is named); ``clamp_buffers=False``
refuses such a run instead, with the same numbers. Unsized whole-task times (``load_s``) whose bytes exceed the
chip's HBM warn (`simulator.report.sanity`).
"""
from __future__ import annotations

from simulator import analytic
from simulator.engine.system import System
from simulator.errors import CapacityError
from simulator.hardware.specs import ChipSpec
from simulator.report.result import Result
from simulator.report.sanity import over_hbm
from simulator.units import format_quantity, positive, positive_int
from simulator.workloads.pipeline import effective_buffers, run_steps, uniform_steps


def run(*, blocks: int = 2, buffers: int = 2, load_s: float = 0.4e-3, compute_s: float = 0.2e-3,
        load_bytes: float | None = None, compute_flops: float | None = None,
        chip: str | ChipSpec = "tpu-v5e", clamp_buffers: bool = True, trace: bool = True) -> Result:
    """Simulate ``blocks`` load-then-compute blocks with ``buffers`` VMEM buffers.

    The task is given either as whole-task times (``load_s``, ``compute_s``: the blocks then have no
    size, so only the buffer count limits prefetch) or, on ``chip``, as ``load_bytes`` over HBM and
    ``compute_flops`` on the MXU (the blocks then hold VMEM: with fewer buffers than asked fitting, the run takes
    those and warns, or with ``clamp_buffers=False`` is refused).
    """
    positive_int(blocks, name="blocks")
    system = System(chip, trace=trace)
    spec = system.spec
    sized = load_bytes is not None
    total_bytes = positive(load_bytes if sized else load_s, name="load_bytes" if sized else "load_s",
                           allow_zero=True) * (1 if sized else spec.hbm_bandwidth_bytes_per_s)
    peak = spec.peak_flops_per_s()
    given_flops = compute_flops is not None
    total_flops = positive(compute_flops if given_flops else compute_s,
                           name="compute_flops" if given_flops else "compute_s", allow_zero=True) \
        * (1 if given_flops else peak)
    steps = uniform_steps(blocks, total_bytes / blocks, total_flops / blocks, label="block")
    effective = effective_buffers(steps, spec.vmem_capacity_bytes, buffers) if sized else buffers
    one_fits = total_bytes / blocks <= spec.vmem_capacity_bytes  # else `run_steps` refuses the block itself
    if one_fits and effective < min(buffers, blocks) and not clamp_buffers:
        raise CapacityError(_refusal(spec, blocks, buffers, effective, total_bytes, total_flops))
    run_steps(system, steps, buffers, reserve_vmem=sized)
    system.run()
    a, c = total_bytes / blocks / spec.hbm_bandwidth_bytes_per_s, total_flops / blocks / peak
    expected = analytic.pipeline_time(blocks, a, c, effective)
    metrics = system.metrics()
    serial = analytic.pipeline_time(blocks, a, c, 1)
    clamped = effective < min(buffers, blocks)
    warnings = [_short_note(spec, total_bytes / blocks, buffers, effective) + "; " +
                _fit_hint(spec, blocks, buffers, total_bytes, total_flops)] if clamped else []
    notes = [] if sized else ["note: blocks given as times (load_s) have no size, so they hold no VMEM and the trace "
                              "and Gantt show no VMEM live-bytes lane; give load_bytes and compute_flops to size them"]
    if not sized:
        warnings += over_hbm(f"load_s={a * blocks:.4g} s at {format_quantity(spec.hbm_bandwidth_bytes_per_s, 'B/s')} "
                             "reads a task that", total_bytes, spec, "the chip cannot hold it, so some of it is read "
                             "more than once (give load_bytes to size the blocks)")
    return Result(
        scenario="double_buffer",
        params=dict(blocks=blocks, buffers=buffers, load_s=a * blocks, compute_s=c * blocks,
                    load_bytes=total_bytes, compute_flops=total_flops, chip=spec.name),
        metrics=metrics,
        extra={"analytic_s": expected, "serial_s": serial, "block_load_s": a, "block_compute_s": c,
               "saving_vs_serial_s": serial - metrics["end_to_end_s"], "buffers_effective": effective,
               **({"warnings": warnings} if warnings else {})},
        trace=system.trace,
        headline=(f"{_buffers(buffers, effective)} over {blocks} blocks: {metrics['end_to_end_s'] * 1e3:.4g} ms "
                  f"simulated, {expected * 1e3:.4g} ms closed form, {serial * 1e3:.4g} ms serial"),
        details=warnings + notes,
    )


def _buffers(asked: int, effective: int) -> str:
    return f"{asked} buffer(s)" if effective >= asked else f"{asked} buffer(s) asked, {effective} in VMEM,"


def _refusal(spec: ChipSpec, blocks: int, buffers: int, effective: int, total_bytes: float,
             total_flops: float) -> str:
    """Why ``buffers`` buffers of these blocks do not fit VMEM, with the numbers, and a block count that does
    (`_blocks_that_fit`; checked, not guessed)."""
    block = total_bytes / blocks
    hint = _fit_hint(spec, blocks, buffers, total_bytes, total_flops)
    return (f"{buffers} buffers of {format_quantity(block, 'B')} blocks need {format_quantity(buffers * block, 'B')} "
            f"of VMEM but {spec.name} holds {format_quantity(spec.vmem_capacity_bytes, 'B')}: {effective} fit at once "
            f"(buffers_effective={effective}); {hint}, or drop clamp_buffers=false to run {effective} buffer(s)")


def _fit_hint(spec: ChipSpec, blocks: int, buffers: int, total_bytes: float, total_flops: float) -> str:
    """The fewest blocks whose buffers fit VMEM (checked), as a hint."""
    fit = _blocks_that_fit(spec, blocks, buffers, total_bytes, total_flops)
    return f"blocks={fit} ({format_quantity(total_bytes / fit, 'B')} each) fits {buffers}" if fit else \
        "no block count up to 64x as many fits them"


def _blocks_that_fit(spec: ChipSpec, blocks: int, buffers: int, total_bytes: float, total_flops: float) -> int | None:
    """The fewest blocks (from ``blocks`` + 1 up to 64 x ``blocks``) whose ``buffers`` buffers fit VMEM."""
    for n in range(blocks + 1, 64 * blocks + 1):
        steps = uniform_steps(n, total_bytes / n, total_flops / n, label="block")
        if effective_buffers(steps, spec.vmem_capacity_bytes, buffers) >= min(buffers, n):
            return n
    return None


def _short_note(spec: ChipSpec, block_bytes: float, asked: int, effective: int) -> str:
    """Why the run overlaps less than ``asked`` buffers: VMEM holds only ``effective`` blocks at once."""
    how = "serially: load, compute, load, compute" if effective == 1 else f"as {effective} buffers"
    return (f"warning (clamp_buffers, the default): VMEM ({format_quantity(spec.vmem_capacity_bytes, 'B')}) holds "
            f"{effective} block(s) of {format_quantity(block_bytes, 'B')} at once, not the {asked} buffers asked: "
            f"the run goes {how}, and the closed form counts {effective} (buffers_effective)")
