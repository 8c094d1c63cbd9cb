"""Warnings for runs that are legal but cannot be what the user meant: more bytes than the chip's HBM holds.

A simulation prices the time of moving bytes; it does not refuse an array the chip cannot hold when the
question is only how long the movement takes. These lines say so beside the answer (text and JSON
``warnings``), with the numbers.
"""
from __future__ import annotations

from simulator.hardware.specs import ChipSpec
from simulator.units import format_quantity


def over_hbm(what: str, nbytes: float, chip: ChipSpec, consequence: str) -> list[str]:
    """One warning line when ``nbytes`` (what one chip holds or reads, described by ``what``) exceeds the chip's
    HBM capacity, else none."""
    cap = chip.hbm_capacity_bytes
    if nbytes <= cap:
        return []
    return [f"warning: {what} is {format_quantity(nbytes, 'B')}, {nbytes / cap:.3g} x the "
            f"{cap / 2**30:.4g} GiB of HBM one {chip.name} holds; {consequence}"]


def collective_per_chip_bytes(kind: str, nbytes: float, group_size: int) -> float:
    """Bytes of the array one chip holds in a collective of V = ``nbytes`` (the gathered / unreduced array of one
    group): all of V in AllGather (after), ReduceScatter and AllReduce (before), Broadcast and Reduce; V / n in
    AllToAll, Gather and Scatter (every chip but the root)."""
    if kind in ("all_to_all", "gather", "scatter"):
        return nbytes / max(1, group_size)
    return nbytes
