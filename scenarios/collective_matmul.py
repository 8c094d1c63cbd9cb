"""How much does overlapping the AllGather with the matmul save (a collective matmul)?

``Y[B, F_X] = X[B_X, D] @ W[D, F_X]`` on a ring of n chips: X must be gathered before every chip can
multiply by its W columns. Unoverlapped: AllGather X, then one big local matmul. Overlapped (the
book's collective matmul): at each of n steps a chip multiplies the X block in hand while passing it
to its neighbour, so sending and computing run at once; the last block is only computed. Closed
forms: AllGather + matmul against (n - 1) * max(t_compute, t_send) + t_compute per block. Both
timelines are simulated; the overlapped one's trace shows the MXU and the links busy together, and
the result is checked on real arrays against numpy (``verified``).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from simulator import analytic
from simulator.collectives import run_collective
from simulator.result import Result
from simulator.specs import DTYPE_BYTES, ChipSpec
from simulator.system import System, resolve_chip
from simulator.units import positive_int


def overlapped(spec: ChipSpec, topology: str, n: int, b: int, d: int, f: int, dtype: str = "bf16",
               arrays: tuple[np.ndarray, np.ndarray] | None = None, trace: bool = True) -> tuple[System, Any]:
    """Simulate the collective matmul; with ``arrays`` (X, W) return every chip's Y block too."""
    system = System(spec, topology=topology, trace=trace)
    net, env = system.network, system.env
    chips = net.chips
    rows, cols = b // n, f // n
    nbytes = DTYPE_BYTES[dtype] * rows * d
    arrived = {(i, s): env.event() for i in range(n) for s in range(n - 1)}
    xs = {i: np.split(arrays[0], n)[i] for i in range(n)} if arrays else {}
    ws = {i: np.split(arrays[1], n, axis=1)[i] for i in range(n)} if arrays else {}
    y = {i: {} for i in range(n)}

    def device(i: int) -> Any:
        block, held = i, xs.get(i)
        for s in range(n):
            compute = system.chips[i].matmul(rows, d, cols, f"X{block} @ W{i}", dtype)
            if s < n - 1:
                message = net.message(chips[i], chips[(i + 1) % n], nbytes, f"X{block}")
                message.callbacks.append(lambda _e, dst=(i + 1) % n, s=s, x=held: arrived[(dst, s)].succeed(x))
            yield compute
            if arrays:
                y[i][block] = held @ ws[i]
            if s < n - 1:
                held = yield arrived[(i, s)]
                block = (block - 1) % n

    for i in range(n):
        system.process(device(i), f"chip {chips[i]} collective matmul")
    system.run()
    return system, ({i: np.concatenate([y[i][k] for k in range(n)]) for i in range(n)} if arrays else None)


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
    topology = topology or f"ring:{n}"
    fast, _ = overlapped(spec, topology, n, B, D, F, dtype, trace=trace)
    slow, gathered, _ = unoverlapped(spec, topology, n, B, D, F, dtype, trace=trace)
    peak = spec.peak_flops_per_s(dtype)
    t_block = analytic.padded_matmul_flops(B // n, D, F // n, spec.mxu_dim, spec.sublanes) / peak
    t_send = spec.hop_latency_s + DTYPE_BYTES[dtype] * (B // n) * D / spec.ici_bandwidth_bytes_per_s
    closed_fast = (n - 1) * max(t_block, t_send) + t_block
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
                  f"against {slow.env.now * 1e6:.4g} us; the MXU and links overlap for "
                  f"{m_fast['overlap_s'] * 1e6:.4g} us"),
    )


def _verify(spec: ChipSpec, topology: str, n: int, dtype: str) -> bool:
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((8 * n, 24)), rng.standard_normal((24, 4 * n))
    reference = np.split(x @ w, n, axis=1)
    _, fast = overlapped(spec, topology, n, 8 * n, 24, 4 * n, dtype, arrays=(x, w), trace=False)
    _, _, slow = unoverlapped(spec, topology, n, 8 * n, 24, 4 * n, dtype, arrays=(x, w), trace=False)
    return all(np.allclose(ys[i], reference[i], rtol=1e-12, atol=1e-12) for ys in (fast, slow) for i in range(n))
