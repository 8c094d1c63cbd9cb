"""Multi-axis plans: which parts of an AllGather's array cross which axes in which stage, and how big each is.

A part gathers over every axis of the group once, one axis per stage, in its own order; stages are
separated by barriers (a ReduceScatter runs the plan backwards). Crossing axis a it moves what it holds
then -- one piece of every shard position it has gathered -- over a ring of n_a, which keeps the busiest
link of that ring busy ``beta_a`` seconds per byte moved (the ring's per-link load over its bandwidth).
So a part of weight w (its fraction of the array) gathered in order o costs, at its step j,

    w x prod(n_b for b in o[:j]) x beta_{o_j}      (in units of V / n bytes)

A stage lasts as long as its busiest axis, and every chip must receive what it lacks through its links,
so a plan reaches the per-chip ingress bound exactly when in every stage every axis is equally busy.

`balanced` fills stages from the last one back. The last stage holds every part's largest step: parts
ending on each axis, in inverse proportion to what that step costs, so every axis ends together. Each
earlier stage holds the parts' earlier steps, which load the axes unequally; smaller parts ending in
that stage fill every axis up to the busiest. The first ``k - 1`` stages cannot be filled (a part needs
k stages), but what is left there shrinks about n-fold with each stage added in front: with four extra
stages every wrapped torus up to 3-D (sides 2-16) is within 1% of the bound in bandwidth. Each stage
also costs its hops' latency, so the algorithm picks the number of stages by its closed form.
`sequential` is one part taking the axes one after another; `rotated` the book's plan, equal parts, part
p taking the axes p, p+1, ... in ``k`` stages (at the bound where all axes are alike).
"""
from __future__ import annotations

import itertools
import math
from collections import defaultdict
from collections.abc import Sequence

StagePlan = list[tuple[tuple[int, ...], int, float]]  #: (axis order, first stage, weight) of each part
EXTRA_STAGES = 4  #: stages `balanced` may add in front of the k a part needs
_SLICES = 16  #: pieces a filler is cut into, each given to the order whose previous step is least busy


def sequential(n_axes: int) -> tuple[StagePlan, int]:
    """One part over every axis in turn: ``k`` stages."""
    return [(tuple(range(n_axes)), 0, 1.0)], n_axes


def stage_counts(n_axes: int) -> list[int]:
    """The stage counts `balanced` is tried with."""
    return [1] if n_axes <= 1 else list(range(n_axes, n_axes + EXTRA_STAGES + 1))


def balanced(sizes: Sequence[int], beta: Sequence[float], stages: int) -> StagePlan:
    """Parts whose steps keep every axis equally busy in every stage but the first ``k - 1`` (see the module).

    ``sizes``: the group's axis lengths; ``beta``: seconds per byte of each axis's phase (> 0);
    ``stages``: at least ``k``. Weights sum to 1.
    """
    k, n = len(sizes), math.prod(sizes)
    loads = [[0.0] * k for _ in range(stages)]
    weights: dict[tuple[tuple[int, ...], int], float] = defaultdict(float)

    def cost(order: tuple[int, ...], j: int) -> float:
        return math.prod(sizes[b] for b in order[:j]) * beta[order[j]]

    def fill(axis: int, end: int, load: float) -> None:
        """Parts ending on ``axis`` at stage ``end`` that add ``load`` there."""
        orders = [o for o in itertools.permutations(range(k)) if o[-1] == axis]
        weight = load / (n / sizes[axis] * beta[axis]) / _SLICES
        for _ in range(_SLICES):
            order = min(orders, key=lambda o: loads[end - 1][o[-2]]) if k > 1 else orders[0]
            weights[(order, end - k + 1)] += weight
            for j, a in enumerate(order):
                loads[end - k + 1 + j][a] += weight * cost(order, j)

    for axis in range(k):
        fill(axis, stages - 1, 1.0)
    for t in range(stages - 2, k - 2, -1):
        top = max(loads[t])
        for axis in range(k):
            if top - loads[t][axis] > 1e-12 * top:
                fill(axis, t, top - loads[t][axis])
    total = sum(weights.values())
    return [(order, start, w / total) for (order, start), w in sorted(weights.items(), key=lambda kv: (kv[0][1],
                                                                                                       kv[0][0]))]



def rotated(n_axes: int) -> tuple[StagePlan, int]:
    """Equal parts, part p taking the axes p, p+1, ...: ``k`` stages."""
    axes = tuple(range(n_axes))
    return [(axes[p:] + axes[:p], 0, 1.0 / n_axes) for p in range(n_axes)], n_axes
