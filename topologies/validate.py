"""Checks shared by every generator: counts, shapes, the size limit, link numbers and kinds.

Each check returns the cleaned value or raises `TopologyError` naming the bad value and the valid range.
"""

from __future__ import annotations

import math
import numbers
import operator
from collections.abc import Sequence
from typing import Any

from topologies.errors import TopologyError

MAX_CHIPS = 65_536
"""Largest system any generator builds (chips; a 256x256 torus builds in about a second, the largest
TPU pod has 8,960 chips); larger requests are refused before anything is built."""

LINK_KINDS = ("ici", "nvlink", "pcie", "dcn", "ib")
"""The link technologies an edge's ``kind`` attribute may name."""


def format_shape(shape: Sequence[object]) -> str:
    """Render a shape the way specs write it: ``(4, 4, 8)`` -> ``'4x4x8'``."""
    return "x".join(str(n) for n in shape)


def as_int(value: object, what: str) -> int:
    """Return ``value`` as an int, refusing bools, floats and other non-integers."""
    if isinstance(value, bool):
        raise TopologyError(f"{what} {value!r} is not an integer; it must be an integer >= 1")
    try:
        return operator.index(value)  # type: ignore[arg-type]  # anything: a TypeError is the answer
    except TypeError:
        raise TopologyError(f"{what} {value!r} is not an integer; it must be an integer >= 1") from None


def check_count(value: object, what: str, minimum: int = 1) -> int:
    """Return ``value`` as an int >= ``minimum`` (a ring size, a number of nodes, ...)."""
    count = as_int(value, what)
    if count < minimum:
        raise TopologyError(f"{what} {count} is too small; it must be an integer >= {minimum}")
    return count


def check_shape(shape: object, what: str) -> tuple[int, ...]:
    """Return ``shape`` as a non-empty tuple of ints >= 1 (one per axis)."""
    if isinstance(shape, (str, bytes)) or not isinstance(shape, Sequence):
        raise TopologyError(f"{what} {shape!r} is not a sequence of axis lengths; pass e.g. (4, 4)")
    if len(shape) == 0:
        raise TopologyError(f"{what} () has no axes; give at least one axis length, e.g. (8,)")
    axes = tuple(as_int(n, f"{what} {format_shape(shape)!r} axis") for n in shape)
    for n in axes:
        if n < 1:
            raise TopologyError(
                f"{what} {format_shape(axes)!r} has an axis of length {n}; each axis must be an integer >= 1"
            )
    return axes


def check_size(n_chips: int, what: str) -> int:
    """Refuse systems above `MAX_CHIPS` chips before any node is built."""
    if n_chips > MAX_CHIPS:
        raise TopologyError(f"{what} has {n_chips} chips; at most {MAX_CHIPS} chips are supported")
    return n_chips


def check_bandwidth(value: object, what: str = "bandwidth_bytes_per_s") -> float:
    """Return a finite bandwidth > 0 in bytes/s as a float."""
    number = _as_float(value, what, "a finite number > 0 (bytes/s)")
    if not math.isfinite(number) or number <= 0:
        raise TopologyError(f"{what}={value!r} is invalid; it must be a finite number > 0 (bytes/s)")
    return number


def check_latency(value: object, what: str = "latency_s") -> float:
    """Return a finite latency >= 0 in seconds as a float."""
    number = _as_float(value, what, "a finite number >= 0 (seconds)")
    if not math.isfinite(number) or number < 0:
        raise TopologyError(f"{what}={value!r} is invalid; it must be a finite number >= 0 (seconds)")
    return number


def check_kind(kind: object) -> str:
    """Return ``kind`` if it is one of `LINK_KINDS`."""
    if kind not in LINK_KINDS:
        raise TopologyError(f"link kind {kind!r} is unknown; valid kinds are {', '.join(LINK_KINDS)}")
    return str(kind)


def _as_float(value: object, what: str, valid: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TopologyError(f"{what}={value!r} is invalid; it must be {valid}")
    return float(value)


def chip_attr(chip: object, attr: str) -> Any:
    """Return ``chip.<attr>``, or raise naming the chip and the missing attribute."""
    try:
        return getattr(chip, attr)
    except AttributeError:
        name = getattr(chip, "name", repr(chip))
        raise TopologyError(f"chip {name} has no attribute {attr!r}, which this topology needs") from None
