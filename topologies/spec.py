"""Topology spec strings, as typed on the command line, turned into graphs.

Grammar (whitespace around the whole spec is ignored; the kind is case-insensitive)::

    ring:N   line:N   torus:AxBxC   mesh:AxB   slice:AxB   switch:N   multislice:K:AxB   nodes:K:G
    fattree:K:G   superpod:N   multipod:P:K:AxB

``torus`` wraps every axis, ``mesh`` none, ``slice`` follows the chip's wraparound rule. ``slice`` and
``multislice`` need a chip; with a chip, every spec takes its link numbers from it (see `parse_spec`).
``fattree:K:G`` is K nodes of G GPUs under a rail-optimised leaf/spine fabric (32 nodes per unit), and
``superpod:N`` N DGX scalable units of 32 x 8 GPUs (``superpod:4`` = 1,024 GPUs; `topologies.fattree`);
``multipod:P:K:AxB`` P pods of K slices each, a slower core between pods (`topologies.multilevel.multipod`).
Any form takes ``+hosts:H``: a host CPU per H chips, each chip on its own PCIe link to it
(``torus:4x4+hosts:4``; `topologies.hosts.with_hosts`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import networkx as nx

from topologies.errors import TopologyError
from topologies.fattree import fattree, superpod
from topologies.hosts import with_hosts
from topologies.multilevel import multipod, multislice, nodes
from topologies.slices import tpu_slice
from topologies.switch import switch
from topologies.torus import line, mesh, ring, torus
from topologies.validate import MAX_CHIPS, chip_attr

VALID_FORMS = (
    "ring:N",
    "line:N",
    "torus:AxBxC",
    "mesh:AxB",
    "slice:AxB (needs a chip)",
    "switch:N",
    "multislice:K:AxB (needs a chip)",
    "nodes:K:G",
    "fattree:K:G",
    "superpod:N",
    "multipod:P:K:AxB (needs a chip)",
    "any of these +hosts:H (a host per H chips, over PCIe)",
)
"""Every form `parse_spec` accepts (N, K, G and the axis lengths A, B, C are integers >= 1)."""

_INTEGER = re.compile(r"[0-9]{1,18}")


def parse_spec(spec: str, chip: object = None) -> nx.DiGraph:
    """Build the topology a spec string names.

    Parameters
    ----------
    spec : str
        One of `VALID_FORMS`, e.g. ``"torus:4x4x4"`` or ``"multislice:2:16x16"``.
    chip : object, optional
        A chip (duck-typed, see `tpu_slice`) or wraparound rule string. With a chip object:
        ring/line/torus/mesh/slice links use ``ici_bandwidth_bytes_per_s`` (one-way, bytes/s) and
        ``hop_latency_s`` (s); ``switch`` and the NVLink level of ``nodes`` use the chip's egress
        ``ici_bandwidth_bytes_per_s * ici_links`` (kind ``"nvlink"``); ``multislice`` uses
        ``dcn_bandwidth_bytes_per_s``. Without one, each generator's defaults apply.

    Returns
    -------
    networkx.DiGraph
        The graph, with ``graph["spec"]`` set to ``spec``.

    Examples
    --------
    >>> G = parse_spec("torus:4x4x4")
    >>> G.graph["kind"], G.graph["shape"], G.graph["spec"]
    ('torus', (4, 4, 4), 'torus:4x4x4')
    >>> parse_spec("slice:8x16", chip="length16").graph["wrap"]
    (False, True)
    """
    if isinstance(spec, str) and "+" in spec:
        return _with_hosts(spec, chip)
    kind, fields = _split(spec)
    form = _FORMS[kind]
    values = _parse_fields(spec, kind, fields, form.fields)
    if form.needs_chip and chip is None:
        raise TopologyError(
            f"topology spec {spec!r} needs a chip: its wraparound rule decides which axes wrap; "
            "pass a chip (e.g. --chip tpu-v5e) or use torus:/mesh: to choose wraparound yourself"
        )
    try:
        G = form.build(*values, chip)
    except TopologyError as err:
        raise TopologyError(f"topology spec {spec!r}: {err}") from None
    G.graph["spec"] = spec
    return G


def _with_hosts(spec: str, chip: object) -> nx.DiGraph:
    """``BASE+hosts:H``: the base topology with a host per H chips, each chip on its own PCIe link (the
    chip's ``pcie_bandwidth_bytes_per_s`` where a chip is given; `topologies.hosts.with_hosts`)."""
    base, _, suffix = spec.partition("+")
    name, _, count = suffix.strip().partition(":")
    if name.strip().lower() != "hosts" or not count:
        raise TopologyError(f"topology spec {spec!r}: after '+' only 'hosts:H' (H chips per host) is valid, "
                            f"e.g. 'torus:4x4+hosts:4'")
    per_host = _count(spec, count.strip())
    G = parse_spec(base, chip)
    pcie = {} if chip is None or isinstance(chip, str) else \
        {"pcie_bandwidth_bytes_per_s": chip_attr(chip, "pcie_bandwidth_bytes_per_s")}
    try:
        H = with_hosts(G, per_host, **pcie)
    except TopologyError as err:
        raise TopologyError(f"topology spec {spec!r}: {err}") from None
    H.graph["spec"] = spec
    return H


def _split(spec: object) -> tuple[str, list[str]]:
    if not isinstance(spec, str):
        raise TopologyError(f"topology spec {spec!r} is not a string; valid forms are {_forms()}")
    if not spec.strip():
        raise TopologyError(f"topology spec {spec!r} is empty; valid forms are {_forms()}")
    kind, *fields = spec.strip().split(":")
    if kind.lower() not in _FORMS:
        raise TopologyError(f"topology spec {spec!r} has unknown kind {kind!r}; valid forms are {_forms()}")
    return kind.lower(), fields


def _forms() -> str:
    return ", ".join(VALID_FORMS)


def _malformed(spec: str, why: str) -> TopologyError:
    return TopologyError(f"topology spec {spec!r} is malformed: {why}; valid forms are {_forms()}")


def _parse_fields(spec: str, kind: str, fields: list[str], wanted: tuple[str, ...]) -> list[object]:
    if len(fields) != len(wanted):
        raise _malformed(spec, f"{kind} takes {len(wanted)} field(s) after the kind, got {len(fields)}")
    return [_count(spec, f) if w == "count" else _shape(spec, f) for f, w in zip(fields, wanted, strict=True)]


def _count(spec: str, text: str) -> int:
    _check_not_huge(spec, text)
    if not _INTEGER.fullmatch(text) or int(text) < 1:
        raise _malformed(spec, f"{text!r} is not an integer >= 1")
    return int(text)


def _check_not_huge(spec: str, text: str) -> None:
    if len(text) > 18 and text.isascii() and text.isdigit():
        raise TopologyError(
            f"topology spec {spec!r}: {text} is far too large; at most {MAX_CHIPS} chips are supported"
        )


def _shape(spec: str, text: str) -> tuple[int, ...]:
    parts = text.split("x")
    for part in parts:
        _check_not_huge(spec, part)
    if not all(_INTEGER.fullmatch(p) for p in parts):
        raise _malformed(spec, f"shape {text!r} is not axis lengths joined by 'x', such as 4x4x4")
    return tuple(int(p) for p in parts)


def _ici(chip: object) -> dict[str, Any]:
    if chip is None or isinstance(chip, str):
        return {}
    return {
        "bandwidth_bytes_per_s": chip_attr(chip, "ici_bandwidth_bytes_per_s"),
        "latency_s": chip_attr(chip, "hop_latency_s"),
    }


def _egress(chip: object) -> float:
    """Per-chip egress each way (bytes/s): per-link one-way bandwidth times the number of links."""
    return float(chip_attr(chip, "ici_bandwidth_bytes_per_s") * chip_attr(chip, "ici_links"))


def _switch_link(chip: object) -> dict[str, Any]:
    if chip is None or isinstance(chip, str):
        return {}
    return {"bandwidth_bytes_per_s": _egress(chip), "latency_s": chip_attr(chip, "hop_latency_s")}


def _nvlink(chip: object) -> dict[str, Any]:
    if chip is None or isinstance(chip, str):
        return {}
    out = {
        "nvlink_bandwidth_bytes_per_s": _egress(chip),
        "nvlink_latency_s": chip_attr(chip, "hop_latency_s"),
    }
    ib = getattr(chip, "dcn_bandwidth_bytes_per_s", None)  # a GPU's network NIC (InfiniBand), one way
    if ib is not None:
        out["ib_bandwidth_bytes_per_s"] = ib
    return out


@dataclass(frozen=True)
class _Form:
    """One spec kind: the fields after the kind ("count" or "shape") and how to build from them."""

    fields: tuple[str, ...]
    build: Callable[..., nx.DiGraph]  # build(*parsed_fields, chip)
    needs_chip: bool = False


_FORMS: dict[str, _Form] = {
    "ring": _Form(("count",), lambda n, c: ring(n, **_ici(c))),
    "line": _Form(("count",), lambda n, c: line(n, **_ici(c))),
    "torus": _Form(("shape",), lambda shape, c: torus(shape, True, **_ici(c))),
    "mesh": _Form(("shape",), lambda shape, c: mesh(shape, **_ici(c))),
    "slice": _Form(("shape",), lambda shape, c: tpu_slice(shape, c), needs_chip=True),
    "switch": _Form(("count",), lambda n, c: switch(n, **_switch_link(c))),
    "multislice": _Form(("count", "shape"), lambda k, shape, c: multislice(k, shape, c), needs_chip=True),
    "nodes": _Form(("count", "count"), lambda k, g, c: nodes(k, g, **_nvlink(c))),
    "fattree": _Form(("count", "count"), lambda k, g, c: fattree(k, g, **_nvlink(c))),
    "superpod": _Form(("count",), lambda n, c: superpod(n, **_nvlink(c))),
    "multipod": _Form(("count", "count", "shape"), lambda p, k, shape, c: multipod(p, k, shape, c), needs_chip=True),
}
