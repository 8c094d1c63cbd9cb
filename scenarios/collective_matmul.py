"""How much does overlapping the AllGather with the matmul save (a collective matmul)?

``Y[B, F_X] = X[B_X, D] @ W[D, F_X]`` on a ring of n chips: X must be gathered before every chip can
multiply by its W columns. Unoverlapped: a bidirectional AllGather of X, then one big local matmul.
Overlapped (the book's collective matmul, bidirectional): a chip multiplies the X block in hand
while the blocks travel both ways round the ring, so sending and computing run at once. Closed
forms: AllGather + matmul against `overlapped_time` (per-block compute and send times). Both
timelines are simulated; the overlapped one's trace shows the MXU and the links busy together, and
the result is checked on real arrays against numpy (``verified``).
"""
from __future__ import annotations

from typing import Any

import numpy as np
import simpy

from simulator import analytic
from simulator.collectives import run_collective
from simulator.engine.system import System, resolve_chip
from simulator.engine.watch import expect_events
from simulator.errors import PodsimError
from simulator.hardware.specs import DTYPE_BYTES, ChipSpec, check_dtype
from simulator.report.result import Result
from simulator.units import positive_int


def _reach(n: int) -> dict[int, int]:
    """Steps each way round the ring: ceil((n-1)/2) clockwise (+1), floor((n-1)/2) anticlockwise."""
    return {1: n // 2, -1: (n - 1) // 2}


def overlapped(spec: ChipSpec, topology: str, n: int, b: int, d: int, f: int, dtype: str = "bf16",
               arrays: tuple[np.ndarray, np.ndarray] | None = None, trace: bool = True) -> tuple[System, Any]:
    """Simulate the bidirectional collective matmul; with ``arrays`` (X, W) return every chip's Y too.

    Each chip multiplies its own X block at once and sends it both ways round the ring; every block
    that arrives is forwarded on at once (if it has further to go) and queued on the MXU.
    """
    system = System(spec, topology=topology, trace=trace)
    net, env = system.network, system.env
    chips = net.chips
    if len(chips) != n:
        raise PodsimError(f"topology {topology!r} has {len(chips)} chips but n={n}; give a ring of n chips")
    rows, cols = b // n, f // n
    nbytes = DTYPE_BYTES[dtype] * rows * d
    reach = _reach(n)
    arrived = {(i, dr, s): env.event() for i in range(n) for dr in reach for s in range(1, reach[dr] + 1)}
    xs = dict(enumerate(np.split(arrays[0], n))) if arrays else {}
    ws = dict(enumerate(np.split(arrays[1], n, axis=1))) if arrays else {}
    y: dict[int, dict[int, np.ndarray]] = {i: {} for i in range(n)}

    def send(i: int, dr: int, s: int, block: int, x: Any) -> None:
        dst = (i + dr) % n
        event = net.message(chips[i], chips[dst], nbytes, f"X{block}")
        event.callbacks.append(lambda _e: arrived[(dst, dr, s)].succeed((block, x)))

    def compute(i: int, block: int, x: Any) -> Any:
        if arrays:
            y[i][block] = x @ ws[i]
        return system.chips[i].matmul(rows, d, cols, f"X{block} @ W{i}", dtype)

    def device(i: int) -> Any:
        work = [compute(i, i, xs.get(i))]
        for dr, hops in reach.items():
            if hops:
                send(i, dr, 1, i, xs.get(i))
        for s in range(1, max(reach.values()) + 1):
            for dr, hops in reach.items():
                if s <= hops:
                    block, x = yield arrived[(i, dr, s)]
                    if s < hops:
                        send(i, dr, s + 1, block, x)
                    work.append(compute(i, block, x))
        yield simpy.AllOf(env, work)

    for i in range(n):
        system.process(device(i), f"chip {chips[i]} collective matmul")
    system.run()
    return system, ({i: np.concatenate([y[i][k] for k in range(n)]) for i in range(n)} if arrays else None)


def overlapped_time(n: int, t_block: float, t_send: float) -> float:
    """Closed form of `overlapped`: the MXU is never idle once work arrives, so the end is the later
    of n blocks back to back and, for every step s, the arrival at s x t_send plus the blocks still
    to come from step s on (two per step, one at the last step when n is even)."""
    reach = _reach(n)
    later = [s * t_send + t_block * sum(1 for dr in reach for k in range(s, reach[dr] + 1) if k >= 1)
             for s in range(1, max(reach.values()) + 1)]
    return max([n * t_block, *later])


def unoverlapped(spec: ChipSpec, topology: str, n: int, b: int, d: int, f: int, dtype: str = "bf16",
                 arrays: tuple[np.ndarray, np.ndarray] | None = None, trace: bool = True) -> tuple[System, Any, Any]:
    """AllGather X over the ring, then the whole local matmul."""
    system = System(spec, topology=topology, trace=trace)
    data = np.stack([block.reshape(-1) for block in np.split(arrays[0], n)]) if arrays else None
    gathered = run_collective("all_gather", system, DTYPE_BYTES[dtype] * b * d, data=data)
    for c in system.chips:
        c.matmul(b, d, f // n, "X @ W", dtype)
    system.run()
    ys = None
    if arrays:
        ws = np.split(arrays[1], n, axis=1)
        ys = {i: gathered.outputs[c].reshape(b, d) @ ws[i] for i, c in enumerate(system.network.chips)}
    return system, gathered, ys


def run(*, n: int = 4, B: int = 4096, D: int = 8192, F: int = 16384, topology: str | None = None,  # noqa: N803
        dtype: str = "bf16", verify: bool = True, chip: str | ChipSpec = "tpu-v5e", trace: bool = True) -> Result:
    """Simulate both ways on ``n`` chips (default topology ``ring:n``) and compare."""
    spec = resolve_chip(chip)
    for name, value in (("n", n), ("B", B), ("D", D), ("F", F)):
        positive_int(value, name=name)
    if n < 2 or n > 1024:
        raise PodsimError(f"n={n} must be from 2 to 1024 chips (a collective matmul needs a ring)")
    for name, value in (("B", B), ("F", F)):
        if value % n:
            raise PodsimError(f"{name}={value} must be divisible by n={n}: each chip holds {name}/n of it")
    check_dtype(dtype)
    topology = topology or f"ring:{n}"
    # the overlapped run's n^2 block sends and matmuls (about 5 n^2 events); the gathered run's AllGather
    # announces its own 3 n^2 when it is scheduled
    expect_events(5 * n * n, "use fewer chips (n)")
    fast, _ = overlapped(spec, topology, n, B, D, F, dtype, trace=trace)
    slow, gathered, _ = unoverlapped(spec, topology, n, B, D, F, dtype, trace=trace)
    peak = spec.peak_flops_per_s(dtype)
    t_block = analytic.padded_matmul_flops(B // n, D, F // n, spec.mxu_dim, spec.sublanes) / peak
    t_send = spec.hop_latency_s + DTYPE_BYTES[dtype] * (B // n) * D / spec.ici_bandwidth_bytes_per_s
    closed_fast = overlapped_time(n, t_block, t_send)
    t_full = analytic.padded_matmul_flops(B, D, F // n, spec.mxu_dim, spec.sublanes) / peak
    m_fast, m_slow = fast.metrics(), slow.metrics()
    extra: dict[str, Any] = {
        "overlapped_s": fast.env.now, "unoverlapped_s": slow.env.now, "analytic_overlapped_s": closed_fast,
        "analytic_unoverlapped_s": gathered.analytic_s + t_full, "speedup": slow.env.now / fast.env.now,
        "unoverlapped_overlap_s": m_slow["overlap_s"],
        "verified": _verify(spec, topology, n, dtype) if verify else None,
    }
    return Result(
        scenario="collective_matmul",
        params=dict(n=n, B=B, D=D, F=F, topology=topology, dtype=dtype, chip=spec.name),
        metrics=m_fast, extra=extra, trace=fast.trace,
        headline=(f"overlapping saves {(1 - fast.env.now / slow.env.now) * 100:.0f}%: {fast.env.now * 1e6:.4g} us "
                  f"against {slow.env.now * 1e6:.4g} us" + ("" if m_fast["overlap_s"] is None else  # tracing off
                                                             f"; the MXU and links overlap for "
                                                             f"{m_fast['overlap_s'] * 1e6:.4g} us")),
    )


def _verify(spec: ChipSpec, topology: str, n: int, dtype: str) -> bool:
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((8 * n, 24)), rng.standard_normal((24, 4 * n))
    reference = np.split(x @ w, n, axis=1)
    _, fast = overlapped(spec, topology, n, 8 * n, 24, 4 * n, dtype, arrays=(x, w), trace=False)
    _, _, slow = unoverlapped(spec, topology, n, 8 * n, 24, 4 * n, dtype, arrays=(x, w), trace=False)
    return all(np.allclose(ys[i], reference[i], rtol=1e-12, atol=1e-12) for ys in (fast, slow) for i in range(n))
