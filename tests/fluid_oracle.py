"""An independent fluid model of chains of hops on fair-shared ports, for the NIC-ring closed forms' tests
(tests/test_nic_ring_closed_form.py, tests/test_flow_closed_forms.py)."""
from __future__ import annotations

import math


def brute_fluid(hops: list[tuple[float, float]], ports: list[int], s: float, chains: list[list[int]] | None = None,
                sizes: list[list[float]] | None = None) -> float:
    """An independent fluid run: every flow's bytes left updated at every event (no virtual clock, no heap), a
    port's flows each at its rate over their number; a chain's next hop joins its port the hop's latency after
    the previous hop's bytes have left theirs. By default a ring phase: chain o crosses hops o, o + 1, ..., n - 1
    of them, each carrying ``s`` (sizes 1)."""
    n = len(hops)
    if chains is None:
        chains = [[(o + k) % n for k in range(n - 1)] for o in range(n)]
    if sizes is None:
        sizes = [[1.0] * len(c) for c in chains]
    now, last = 0.0, 0.0
    waiting = [(hops[c[0]][0], o, 0) for o, c in enumerate(chains)]  # (join time, chain, hop within the chain)
    flows: dict[tuple[int, int], float] = {}  # (chain, hop within it) -> bytes left
    while waiting or flows:
        count = {p: sum(1 for o, h in flows if ports[chains[o][h]] == p) for p in set(ports)}
        rate = {f: hops[chains[f[0]][f[1]]][1] / count[ports[chains[f[0]][f[1]]]] for f in flows}
        end = min(((left / rate[f], f) for f, left in flows.items()), default=(math.inf, None))
        join = min(waiting, default=(math.inf, 0, 0))
        dt = min(end[0], join[0] - now)
        for f in flows:
            flows[f] -= dt * rate[f]
        now += dt
        if end[1] is not None and end[0] <= join[0] - (now - dt):
            o, h = end[1]
            del flows[end[1]]
            if h + 1 < len(chains[o]):
                waiting.append((now + hops[chains[o][h + 1]][0], o, h + 1))
            last = max(last, now)
        else:
            waiting.remove(join)
            flows[(join[1], join[2])] = s * sizes[join[1]][join[2]]
    return last
