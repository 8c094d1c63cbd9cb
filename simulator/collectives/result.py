"""What a collective run returns: `CollectiveResult`, its times beside the closed form, the book's estimate and the
topology's lower bound, its bytes and bandwidths (`simulator.collectives.api` fills it)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

ONE_CHIP_NOTE = "one chip per group: the collective takes no time and moves no bytes, so it has no bandwidth"


@dataclass
class CollectiveResult:
    """Simulated and closed-form figures of one collective (seconds, bytes, bytes/s).

    ``algbw_bytes_per_s`` and ``busbw_bytes_per_s`` are None for one-chip groups (``note`` says why).
    """

    kind: str
    time_s: float
    analytic_s: float
    book_s: float | None
    topology_bound_s: float
    algorithm: str
    nbytes: float
    padded_bytes: float
    group_size: int
    groups: int
    algbw_bytes_per_s: float | None
    busbw_bytes_per_s: float | None
    max_link_bytes: float
    total_link_bytes: float
    mode: str
    n_transfers: int
    link_bytes: dict[str, float] = field(default_factory=dict)
    outputs: dict[Any, np.ndarray] | None = None
    note: str | None = None
    alternatives: list[dict[str, Any]] = field(default_factory=list)  #: every applicable algorithm's closed form
    protocol: str | None = None  #: NCCL protocol (calibrated GPU systems; `simulator.collectives.protocol`)
    #: calibrated GPU systems: NCCL's own choice and why (`simulator.collectives.tuner.nccl_select`)
    nccl: dict[str, Any] | None = None
    quotient_order: int | None = None  #: mode "quotient": transfers (and links) each simulated one stands for
    #: grids: the bound for algorithms whose hops all join two members of one group (`bounds.own_links_bound`)
    own_links_bound_s: float | None = None

    def to_json(self) -> dict[str, Any]:
        """The figures as a flat dict (without the numeric outputs; ``note`` and ``quotient_order`` only when
        there is one)."""
        return {k: v for k, v in self.__dict__.items()
                if k != "outputs" and not (k in ("note", "quotient_order", "nccl", "own_links_bound_s") and v is None)}


def no_op(kind: str, nbytes: float, n_groups: int) -> CollectiveResult:
    return CollectiveResult(kind=kind, time_s=0.0, analytic_s=0.0, book_s=0.0, topology_bound_s=0.0,
                            algorithm="none", nbytes=nbytes, padded_bytes=0.0, group_size=1, groups=n_groups,
                            algbw_bytes_per_s=None, busbw_bytes_per_s=None, max_link_bytes=0.0,
                            total_link_bytes=0.0, mode="full", n_transfers=0, note=ONE_CHIP_NOTE)
