"""How much of offloading activations to host memory over PCIe does compute hide?

Every chip runs ``layers`` layers forward, keeping each layer's ``activation_bytes`` only until its
offload to the host has landed, then the layers backward (twice the forward FLOPs each), reloading each
layer's activations one layer ahead (the reload of layer l - 1 overlaps the backward of layer l). HBM
then holds a layer or two of activations instead of all of them, at the price of the PCIe traffic. The
topology needs hosts (``+hosts:H``, `simulator.engine.host`); every chip of a host shares its DRAM.

Closed form (two-stage flow shops of identical jobs, `simulator.analytic.pipeline_time`-style): with c
the forward compute of a layer, 2c its backward and t the transfer of one layer's activations -- the
PCIe term ``latency + A / b_pcie`` or the host DRAM share ``A H / b_dram``, whichever is longer --
forward c + t + (L - 1) max(c, t), then backward t + 2c + (L - 1) max(t, 2c). Compute hides the PCIe
roof once c >= t: a layer needs at least ``A / b_pcie`` seconds of compute (``podsim roofline --memory
pcie`` gives the FLOPs per byte that takes).
"""
from __future__ import annotations

from typing import Any

from simulator.engine.host import DEFAULT_HOST_MEMORY_BANDWIDTH_BYTES_PER_S
from simulator.engine.system import System
from simulator.hardware.specs import ChipSpec
from simulator.report.result import Result
from simulator.units import check_bytes, format_quantity, positive, positive_int


def run(*, layers: int = 8, activation_bytes: float = 256e6, layer_flops: float = 4e12,
        topology: str = "ring:4+hosts:4", chip: str | ChipSpec = "tpu-v5e", trace: bool = True) -> Result:
    """Simulate one step of ``layers`` layers on every chip of ``topology`` with activations offloaded."""
    positive_int(layers, name="layers")
    check_bytes(activation_bytes, name="activation_bytes", allow_zero=False)
    positive(layer_flops, name="layer_flops")
    system = System(chip, topology=topology, trace=trace)
    hosts = system.host_memory  # a topology without hosts: one line saying how to add them
    for c in system.chips:
        system.process(_step(system, c, layers, float(activation_bytes), float(layer_flops)), f"chip {c.index}")
    system.run()
    metrics = system.metrics()
    chip0 = system.chips[0].index
    host = hosts.host(chip0)
    edge = system.graph.edges[chip0, host]
    per_host = len(system.graph.nodes[host]["chips"])
    dram = system.graph.nodes[host].get("memory_bandwidth_bytes_per_s", DEFAULT_HOST_MEMORY_BANDWIDTH_BYTES_PER_S)
    c = layer_flops / system.spec.peak_flops_per_s()
    t = max(edge["latency_s"] + activation_bytes / edge["bandwidth_bytes_per_s"], activation_bytes * per_host / dram)
    forward = c + t + (layers - 1) * max(c, t)
    backward = t + 2 * c + (layers - 1) * max(t, 2 * c)
    compute_only = 3 * layers * c
    peak = max(p.peak_bytes for p in (x.hbm for x in system.chips))
    step = metrics["end_to_end_s"]
    return Result(
        scenario="host_offload",
        params=dict(layers=layers, activation_bytes=float(activation_bytes), layer_flops=float(layer_flops),
                    topology=topology, chip=system.spec.name),
        metrics=metrics,
        extra={"analytic_s": forward + backward, "compute_only_s": compute_only, "transfer_s": t,
               "layer_compute_s": c, "pcie_bandwidth_bytes_per_s": edge["bandwidth_bytes_per_s"],
               "chips_per_host": per_host, "hbm_activation_peak_bytes": peak,
               "hbm_without_offload_bytes": layers * float(activation_bytes),
               "offload_overhead_s": step - compute_only},
        trace=system.trace,
        headline=(f"{layers} layers, {format_quantity(activation_bytes, 'B')} of activations each offloaded over "
                  f"PCIe: {step * 1e3:.4g} ms simulated, {(forward + backward) * 1e3:.4g} ms closed form, "
                  f"{compute_only * 1e3:.4g} ms of compute; HBM holds "
                  f"{format_quantity(peak, 'B')} of activations instead of "
                  f"{format_quantity(layers * activation_bytes, 'B')}"),
        details=[f"a layer's transfer {t * 1e3:.4g} ms against its forward compute {c * 1e3:.4g} ms: "
                 + ("compute hides the offloads" if c >= t else "the offloads are exposed (PCIe-bound)")],
    )


def _step(system: System, chip: Any, layers: int, nbytes: float, flops: float) -> Any:
    """One chip's step: forward with offloads behind it, backward with reloads one layer ahead."""
    env, i = system.env, chip.index
    offloads = []
    for layer in range(layers):
        yield chip.compute(flops, f"forward {layer}")
        held = yield chip.hbm.allocate(nbytes, f"activations {layer}")
        done = system.offload(i, nbytes, f"offload {layer}")
        done.callbacks.append(lambda _e, a=held: chip.hbm.free(a))  # HBM is free once the host has it
        offloads.append(done)
    yield env.all_of(offloads)
    ahead = _reload(system, chip, nbytes, layers - 1)
    for layer in reversed(range(layers)):
        held = yield ahead
        if layer:
            ahead = _reload(system, chip, nbytes, layer - 1)  # prefetch the next layer back
        yield chip.compute(2 * flops, f"backward {layer}")
        chip.hbm.free(held)


def _reload(system: System, chip: Any, nbytes: float, layer: int) -> Any:
    """HBM for the layer's activations, then the reload into it; the event's value is the allocation."""
    def go() -> Any:
        held = yield chip.hbm.allocate(nbytes, f"activations {layer}")
        yield system.reload(chip.index, nbytes, f"reload {layer}")
        return held

    return system.env.process(go())
