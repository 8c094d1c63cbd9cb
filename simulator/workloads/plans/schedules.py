"""Pipeline-parallel schedules: the order in which each stage runs its forward and backward passes.

A task is ``(pass, microbatch, chunk)``: pass ``"F"`` or ``"B"``, microbatch 0..M-1, and the layer chunk
the device runs (always 0 unless interleaved; with v virtual stages device r holds chunks r, r + p,
..., so chunk c of device r is virtual stage c * p + r).

- GPipe: every forward, then every backward. Each stage holds all M microbatches' activations.
- Without a pipeline (p = 1) 1F1B is gradient accumulation: each microbatch's forward, then its backward, so
  one microbatch's activations are held at a time (as `memory.in_flight_layers` counts them).
- 1F1B (PipeDream-flush): p - r - 1 warm-up forwards, then one forward and one backward in turn, then
  the remaining backwards; at most p microbatches in flight. Same bubble as GPipe.
- Interleaved 1F1B (Megatron-LM): v chunks per device, microbatches in groups of p per chunk; warm-up
  2 (p - r - 1) + (v - 1) p forwards. Needs M to be a multiple of p.

The bubble (idle share of the pipelined part) is (p - 1) / (M + p - 1) for GPipe and 1F1B and
(p - 1) / (v M + p - 1) interleaved (Narayanan et al. 2021, with uniform stages).
"""
from __future__ import annotations

Task = tuple[str, int, int]


def bubble_fraction(schedule: str, p: int, m: int, v: int = 1) -> float:
    """Idle share of the pipelined part of a step with p stages and m microbatches (uniform stages)."""
    if p <= 1:
        return 0.0
    ways = v if schedule == "interleaved" else 1
    return (p - 1) / (ways * m + p - 1)


def tasks(schedule: str, p: int, rank: int, m: int, v: int = 1) -> list[Task]:
    """The ordered tasks of device ``rank`` of ``p``."""
    if schedule == "gpipe":
        return [("F", i, 0) for i in range(m)] + [("B", i, 0) for i in range(m)]
    if schedule == "1f1b" or v == 1:
        return _one_f_one_b([("F", i, 0) for i in range(m)], [("B", i, 0) for i in range(m)], min(p - rank - 1, m))
    forward = [("F", *_interleaved(k, p, v, m, backward=False)) for k in range(m * v)]
    backward = [("B", *_interleaved(k, p, v, m, backward=True)) for k in range(m * v)]
    warmup = min(m * v, 2 * (p - rank - 1) + (v - 1) * p)
    return _one_f_one_b(forward, backward, warmup)


def _interleaved(k: int, p: int, v: int, m: int, backward: bool) -> tuple[int, int]:
    """(microbatch, chunk) of the k-th forward (or backward) of a device in Megatron's interleaved order."""
    group, within = divmod(k, p * v)
    chunk = within // p
    return group * p + within % p, (v - 1 - chunk) if backward else chunk


def _one_f_one_b(forward: list[Task], backward: list[Task], warmup: int) -> list[Task]:
    out = forward[:warmup]
    f, b = warmup, 0
    while f < len(forward):
        out += [forward[f], backward[b]]
        f, b = f + 1, b + 1
    return out + backward[b:]


def virtual_stage(p: int, rank: int, chunk: int) -> int:
    """Position of device ``rank``'s chunk in the whole pipeline (0 = first layers)."""
    return chunk * p + rank


def stage_layers(n_layers: int, p: int, v: int, stage: int) -> range:
    """Layers of virtual stage ``stage`` of p x v."""
    per = n_layers // (p * v)
    return range(stage * per, (stage + 1) * per)
