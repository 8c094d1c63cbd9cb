"""What each chip holds in HBM during a simulated training step: live bytes over time and the peak.

A ledger, not a pool: the step never waits for memory (a plan that does not fit is reported, not
stalled), so this records what a `MemoryPool` would hold -- the chip's weights, gradients and optimizer
state from the start; each layer's saved activations from its forward until its backward; FSDP's
gathered weights from the gather's start until the layer is done; a layer's unreduced gradients until
their ReduceScatter ends; one layer rebuilt while it is recomputed; the output layer's fp32 logits.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Any

MAX_POINTS = 200  #: timeline points reported per chip (evenly thinned)


class HbmLedger:
    """Live bytes per chip over simulated time."""

    def __init__(self, env: Any) -> None:
        self.env = env
        self.live: dict[Any, float] = defaultdict(float)
        self.peak: dict[Any, float] = defaultdict(float)
        self.timeline: dict[Any, list[tuple[float, float]]] = defaultdict(list)

    def add(self, chip: Any, nbytes: float, at: float | None = None) -> None:
        """``nbytes`` more (or fewer, when negative) on ``chip`` from now (or from ``at``, s: a lockstep lane's own
        instant, `simulator.workloads.plans.step.TrainStep`)."""
        if not nbytes:
            return
        self.live[chip] += nbytes
        self.peak[chip] = max(self.peak[chip], self.live[chip])
        self.timeline[chip].append((self.env.now if at is None else at, self.live[chip]))

    def release_when(self, chip: Any, nbytes: float, event: Any, at: float | None = None) -> None:
        """Hold ``nbytes`` on ``chip`` from now (or ``at``, s) until ``event`` fires."""
        self.add(chip, nbytes, at)
        event.callbacks.append(lambda _e: self.add(chip, -nbytes))

    def summary(self) -> dict[str, Any]:
        """The busiest chip's peak and its timeline ([time s, bytes], at most `MAX_POINTS`)."""
        if not self.peak:
            return {"simulated_memory_peak_bytes": 0.0, "memory_timeline": []}
        chip = max(self.peak, key=lambda c: self.peak[c])
        points = self.timeline[chip]
        step = max(1, len(points) // MAX_POINTS)
        thinned = points[::step] + ([points[-1]] if (len(points) - 1) % step else [])
        return {"simulated_memory_peak_bytes": self.peak[chip], "memory_timeline_chip": chip,
                "memory_timeline": [[t, b] for t, b in thinned]}
