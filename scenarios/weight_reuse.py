"""Which loop order reads less from HBM when the weights do not fit in VMEM at once?

``X[batch, d_in] @ W[d_in, d_out]`` with W in ``weight_blocks`` column blocks and X in ``input_groups``
row groups; VMEM holds one weight block, one input group and one output tile. Headline (REFERENCE.md):
8 MB of weights in two 4 MB blocks and four input groups -- ``input_major`` re-reads the weights for
every group (32 MB), ``weight_major`` reads them once (8 MB) but reads the inputs twice. The result
counts the whole traffic per tensor so the trade-off is visible, and simulates both orders. Since VMEM
holds one step's working set, more than one buffer cannot overlap anything: ``buffers_effective`` is 1
and the text summary says so when more were asked.
"""
from __future__ import annotations

from typing import Any

from simulator import analytic
from simulator.engine.system import System, resolve_chip
from simulator.errors import PodsimError
from simulator.hardware.specs import ChipSpec, check_dtype
from simulator.report.result import Result
from simulator.workloads.pipeline import LOOP_ORDERS, effective_buffers, run_steps, weight_input_steps


def expected_bytes(order: str, batch: int, d_in: int, d_out: int, weight_blocks: int,
                   input_groups: int, elem_bytes: int) -> dict[str, dict[str, float]]:
    """Closed-form HBM traffic per tensor: the stationary operand is read once, the other per pass."""
    w, x, y = elem_bytes * d_in * d_out, elem_bytes * batch * d_in, elem_bytes * batch * d_out
    weights = w if order == "weight_major" else w * input_groups
    inputs = x * weight_blocks if order == "weight_major" else x
    return {"weights": {"read": weights, "written": 0.0}, "inputs": {"read": inputs, "written": 0.0},
            "outputs": {"read": 0.0, "written": y}}


def _simulate(order: str, spec: ChipSpec, dims: dict[str, int], buffers: int, trace: bool, dtype: str) -> System:
    steps = weight_input_steps(order, **dims, dtype=dtype)
    tile = max(sum(o.nbytes for o in s.operands + s.outputs) for s in steps)
    system = System(spec.replace(vmem_capacity_bytes=tile), trace=trace)
    run_steps(system, steps, buffers)
    system.run()
    return system


def run(*, order: str = "weight_major", batch: int = 1000, d_in: int = 2000, d_out: int = 2000,
        weight_blocks: int = 2, input_groups: int = 4, buffers: int = 1, dtype: str = "bf16",
        chip: str | ChipSpec = "tpu-v5e", trace: bool = True) -> Result:
    """Simulate the product in loop ``order``; VMEM is set to exactly one step's working set."""
    spec = resolve_chip(chip)
    dims = dict(batch=batch, d_in=d_in, d_out=d_out, weight_blocks=weight_blocks,
                input_groups=input_groups, elem_bytes=check_dtype(dtype))
    if order not in LOOP_ORDERS:
        raise PodsimError(f"order={order!r}; valid orders: {', '.join(LOOP_ORDERS)}")
    systems = {o: _simulate(o, spec, dims, buffers, trace and o == order, dtype) for o in LOOP_ORDERS}
    system = systems[order]
    metrics = system.metrics()
    steps = weight_input_steps(order, **dims, dtype=dtype)
    effective = effective_buffers(steps, system.spec.vmem_capacity_bytes, buffers)
    hbm = {o: s.trace.bytes_by_interface["hbm_read"] + s.trace.bytes_by_interface["hbm_write"]
           for o, s in systems.items()}
    flops = analytic.padded_matmul_flops(batch // input_groups, d_in, d_out // weight_blocks, spec.mxu_dim,
                                         spec.sublanes) * weight_blocks * input_groups
    bounds = analytic.roofline(flops, hbm[order], spec.peak_flops_per_s(dtype), spec.hbm_bandwidth_bytes_per_s)
    other = LOOP_ORDERS[1 - LOOP_ORDERS.index(order)]
    return Result(
        scenario="weight_reuse",
        params=dict(order=order, buffers=buffers, chip=spec.name, dtype=dtype, **dims),
        metrics=metrics,
        extra={**_extra(order, systems, hbm, bounds, dims), "buffers_effective": effective},
        trace=system.trace,
        headline=(f"{order} moves {hbm[order] / 1e6:.4g} MB over HBM in {metrics['end_to_end_s'] * 1e6:.4g} us; "
                  f"{other} moves {hbm[other] / 1e6:.4g} MB in "
                  f"{systems[other].env.now * 1e6:.4g} us"),
        details=[] if effective == buffers else
        [f"note: VMEM holds one step's working set, so the {buffers} buffers asked run as {effective} "
         "(buffers_effective): each load waits for the step before it to free VMEM"],
    )


def _extra(order: str, systems: dict[str, System], hbm: dict[str, float], bounds: dict[str, Any],
           dims: dict[str, int]) -> dict[str, Any]:
    return {
        "bytes_by_tensor": {k: dict(v) for k, v in systems[order].trace.bytes_by_tensor.items()},
        "analytic_bytes_by_tensor": expected_bytes(order, **dims),
        "hbm_bytes": hbm[order],
        "analytic_lower_bound_s": bounds["lower_bound_s"],
        "analytic_upper_bound_s": bounds["upper_bound_s"],
        "by_order": {o: {"hbm_bytes": hbm[o], "time_s": s.env.now} for o, s in systems.items()},
        "vmem_capacity_bytes": systems[order].spec.vmem_capacity_bytes,
    }

