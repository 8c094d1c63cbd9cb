"""TPU slices: a torus whose wraparound follows the chip generation's rule (REFERENCE.md, "Wraparound").

Rules, named by the chip's ``wraparound`` attribute:

- ``"length16"`` (tpu-v5e, tpu-v6e): 2-D, a pod is at most 16x16; an axis wraps only when its length is
  16 (8x16 wraps axis 1; 4x4 wraps nothing).
- ``"multiple4"`` (tpu-v4, tpu-v5p, tpu7x): 3-D, slices are built from 4x4x4 cubes; an axis wraps when
  its length is a multiple of 4. Slices smaller than a full cube (any axis shorter than 4, or fewer than
  3 axes, e.g. 2x2x1, 2x2x2, 2x2x4) have no wraparound at all: 2x2x4 wraps nothing, 4x4x8 wraps all.
- ``"switch"`` (GPUs): no torus; ask for ``switch:N`` instead.

The ``chip`` argument is duck-typed: any object with ``name``, ``wraparound``, ``torus_dims``,
``ici_bandwidth_bytes_per_s`` and ``hop_latency_s``, or a bare rule string (then the default link
numbers apply). The builder is `tpu_slice` (the topology spec's word is ``slice``, as in ``slice:8x16``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import networkx as nx

from topologies.errors import TopologyError
from topologies.links import Link
from topologies.torus import (
    DEFAULT_ICI_BANDWIDTH_BYTES_PER_S,
    DEFAULT_ICI_LATENCY_S,
    add_grid,
    effective_wrap,
)
from topologies.validate import check_shape, check_size, chip_attr, format_shape

WRAPAROUND_RULES = {"length16": 2, "multiple4": 3}
"""Torus rules and the number of torus axes each implies."""


def tpu_slice(
    shape: Sequence[int],
    chip: object,
    *,
    bandwidth_bytes_per_s: float = DEFAULT_ICI_BANDWIDTH_BYTES_PER_S,
    latency_s: float = DEFAULT_ICI_LATENCY_S,
    kind: str = "ici",
) -> nx.DiGraph:
    """Build a TPU slice with the wraparound its chip generation provides.

    Parameters
    ----------
    shape : sequence of int
        Axis lengths, at most ``chip.torus_dims`` of them.
    chip : object or str
        A chip (see the module docstring) or a rule string ``"length16"`` / ``"multiple4"``. A chip's own
        ``ici_bandwidth_bytes_per_s`` (one-way per link, bytes/s) and ``hop_latency_s`` (s) replace the
        keyword defaults.
    bandwidth_bytes_per_s, latency_s, kind
        Link parameters used when ``chip`` is a rule string.

    Returns
    -------
    networkx.DiGraph
        A torus (``graph["kind"] == "torus"``) with ``graph["slice_rule"]`` and ``graph["chip"]`` set.

    Examples
    --------
    >>> tpu_slice((8, 16), "length16").graph["wrap"]
    (False, True)
    >>> tpu_slice((2, 2, 4), "multiple4").graph["wrap"]
    (False, False, False)
    """
    plan = plan_slice(shape, chip, bandwidth_bytes_per_s=bandwidth_bytes_per_s, latency_s=latency_s, kind=kind)
    check_size(math.prod(plan.shape), f"slice shape {format_shape(plan.shape)!r}")
    G = nx.DiGraph(kind="torus", shape=plan.shape, wrap=plan.wrap, slice_rule=plan.rule, chip=plan.chip_name)
    add_grid(G, plan.shape, plan.wrap, plan.link)
    return G


@dataclass(frozen=True)
class SlicePlan:
    """A validated slice request: its shape, effective wraparound, link and the rule that decided it."""

    shape: tuple[int, ...]
    wrap: tuple[bool, ...]
    link: Link
    rule: str
    chip_name: str


def plan_slice(
    shape: Sequence[int], chip: object, *, bandwidth_bytes_per_s: float, latency_s: float, kind: str
) -> SlicePlan:
    """Validate a slice request against its chip and return what to build (nothing is built).

    Examples
    --------
    >>> plan_slice((8, 16), "length16", bandwidth_bytes_per_s=9e10, latency_s=1e-6, kind="ici").wrap
    (False, True)
    """
    axes = check_shape(shape, "slice shape")
    rule, dims, name = chip_rule(chip, math.prod(axes))
    _check_dims(axes, rule, dims, name)
    if not isinstance(chip, str):
        bandwidth_bytes_per_s = chip_attr(chip, "ici_bandwidth_bytes_per_s")
        latency_s = chip_attr(chip, "hop_latency_s")
    link = Link(bandwidth_bytes_per_s=bandwidth_bytes_per_s, latency_s=latency_s, kind=kind)
    return SlicePlan(axes, effective_wrap(axes, slice_wrap(axes, rule)), link, rule, name)


def slice_wrap(shape: tuple[int, ...], rule: str) -> tuple[bool, ...]:
    """Wraparound requested per axis by ``rule`` (before the size-2 rule of `torus` applies).

    Examples
    --------
    >>> slice_wrap((4, 4, 8), "multiple4"), slice_wrap((16, 8), "length16")
    ((True, True, True), (True, False))
    """
    if rule == "length16":
        return tuple(n == 16 for n in shape)
    full_cube = len(shape) == 3 and min(shape) >= 4
    return tuple(full_cube and n % 4 == 0 for n in shape)


def chip_rule(chip: object, n_chips: int = 8) -> tuple[str, int, str]:
    """Return ``(rule, torus_dims, name)`` for a chip object or a bare rule string.

    ``n_chips`` only sizes the ``switch:N`` suggestion made to a GPU chip.
    """
    if isinstance(chip, str):
        _check_rule(chip, repr(chip), n_chips)
        return chip, WRAPAROUND_RULES[chip], chip
    name = str(getattr(chip, "name", chip))
    rule = getattr(chip, "wraparound", None)
    _check_rule(rule, name, n_chips)
    assert isinstance(rule, str)  # `_check_rule` refuses anything else
    return rule, getattr(chip, "torus_dims", None) or WRAPAROUND_RULES[rule], name


def _check_rule(rule: object, name: str, n_chips: int) -> None:
    if rule == "switch":
        raise TopologyError(
            f"chip {name} has no torus (wraparound rule 'switch'); use a switch topology such as "
            f"'switch:{n_chips}' instead of a slice"
        )
    if rule not in WRAPAROUND_RULES:
        raise TopologyError(
            f"wraparound rule {rule!r} of chip {name} is unknown; valid rules are "
            f"{', '.join(WRAPAROUND_RULES)} (or 'switch' for GPUs)"
        )


def _check_dims(shape: tuple[int, ...], rule: str, dims: int, name: str) -> None:
    if len(shape) > dims:
        raise TopologyError(
            f"slice shape {format_shape(shape)!r} has {len(shape)} axes but chip {name} has a "
            f"{dims}-D torus; give at most {dims} axes"
        )
    if rule == "length16" and max(shape) > 16:
        raise TopologyError(
            f"slice shape {format_shape(shape)!r} has an axis longer than 16 but chip {name} pods are at "
            "most 16x16; each axis must be between 1 and 16"
        )
