"""The slice shapes real TPU systems offer, for placing a logical mesh on hardware that exists.

Cloud TPU sells slices in fixed shapes (REFERENCE.md, "Wraparound"; Cloud TPU's v4, v5e, v5p and v6e
system-architecture pages list them):

- ``"length16"`` (tpu-v5e, tpu-v6e): 2-D slices 1x1, 2x2, 2x4, 4x4, 4x8, 8x8, 8x16 and 16x16 (a pod);
  larger systems are several pods joined by the data-centre network.
- ``"multiple4"`` (tpu-v4, tpu-v5p, tpu7x): 3-D slices 1x1x1, 2x2x1, 2x2x2, 2x2x4 and 2x4x4 below a cube,
  then any shape whose sides are multiples of 4 (built from 4x4x4 cubes), up to the pod.

A shape may be laid in any axis order (a 2x4 slice is also a 4x2 slice): the links do not care which
axis is called 0.
"""

from __future__ import annotations

import itertools
import math

from topologies.errors import TopologyError

LENGTH16_SHAPES = ((1, 1), (2, 2), (2, 4), (4, 4), (4, 8), (8, 8), (8, 16), (16, 16))
"""Every slice of a tpu-v5e / tpu-v6e pod, smallest first."""

SMALL_MULTIPLE4_SHAPES = ((1, 1, 1), (2, 2, 1), (2, 2, 2), (2, 2, 4), (2, 4, 4))
"""The tpu-v4 / tpu-v5p / tpu7x slices smaller than a full 4x4x4 cube."""

MAX_MULTIPLE4_CHIPS = 65_536  #: beyond any pod; bounds the search


def slice_shapes(n_chips: int, rule: str) -> list[tuple[int, ...]]:
    """Every real slice shape of ``n_chips`` chips under wraparound ``rule``, most cube-like first.

    Each shape is listed once, sides in ascending order; lay it in any axis order.

    Examples
    --------
    >>> slice_shapes(8, "length16")
    [(2, 4)]
    >>> slice_shapes(256, "multiple4")
    [(4, 8, 8), (4, 4, 16)]
    >>> slice_shapes(6, "length16")
    []
    """
    if isinstance(n_chips, bool) or not isinstance(n_chips, int) or n_chips < 1:
        raise TopologyError(f"n_chips={n_chips!r} must be a whole number >= 1")
    if rule == "length16":
        return [s for s in LENGTH16_SHAPES if math.prod(s) == n_chips]
    if rule != "multiple4":
        raise TopologyError(f"wraparound rule {rule!r} has no slice shapes; valid rules are length16, multiple4")
    small = [tuple(sorted(s)) for s in SMALL_MULTIPLE4_SHAPES if math.prod(s) == n_chips]
    if small or n_chips % 64 or n_chips > MAX_MULTIPLE4_CHIPS:
        return small
    cubes = n_chips // 64
    shapes = [(4 * a, 4 * b, 4 * (cubes // (a * b))) for a in range(1, cubes + 1) for b in range(a, cubes + 1)
              if cubes % (a * b) == 0 and a * b * b <= cubes and b <= cubes // (a * b)]
    return sorted(shapes, key=lambda s: (max(s) / min(s), s))


def orientations(shape: tuple[int, ...]) -> list[tuple[int, ...]]:
    """The distinct axis orders of ``shape``, in a stable order.

    Examples
    --------
    >>> orientations((2, 4))
    [(2, 4), (4, 2)]
    """
    return sorted(set(itertools.permutations(shape)))
