"""The ``--fault``, ``--jitter``, ``--samples`` and ``--seed`` flags: registered on a command, parsed into
`simulator.engine.faults` objects.

Fault specs (coordinates in the topology's own notation, as ``--src`` takes them: ``0,0`` or a chip index;
a switch by name)::

    link:SRC->DST=down          the cable is dead (both directions)
    link:SRC->DST=0.5           the cable runs at a fraction of its bandwidth (also 50%)
    link:SRC->DST=latency:2us   every hop over it takes 2 us longer
    chip:ID=slow:0.8[:UNITS]    the chip runs its MXU, VPU and HBM (or UNITS, e.g. mxu+hbm) at 0.8 of full speed
    chip:ID=pause:AT:FOR        the chip and its links stop at AT for FOR (e.g. pause:1ms:200us)
    chip:ID=fail[:AT]           the chip fails (at t = 0, or at AT)

Jitter: ``--jitter [DIST:]CV[:UNITS]`` -- ``5%``, ``gamma:0.05``, ``lognormal:5%:mxu+link``.
"""
from __future__ import annotations

import argparse
import re
from dataclasses import dataclass
from typing import Any

from simulator.engine.faults import (
    CHIP_UNITS,
    DISTRIBUTIONS,
    JITTER_UNITS,
    ChipFail,
    ChipPause,
    ChipSlow,
    Fault,
    Jitter,
    LinkDegraded,
    LinkDown,
    LinkLatency,
)
from simulator.errors import FaultError, PodsimError
from simulator.units import parse_int, parse_quantity, show

MAX_SAMPLES = 100_000  #: Monte Carlo draws one command runs; more is a typo (and hours)
FORMS = ("link:SRC->DST=down|FRACTION|latency:TIME, or chip:ID=slow:FACTOR[:UNITS]|pause:AT:FOR|fail[:AT] "
         "(e.g. link:0,0->1,0=down, chip:5=slow:0.8)")
_LINK = re.compile(r"^link:(?P<src>[^=>-]+)->(?P<dst>[^=]+)=(?P<what>.+)$", re.ASCII)
_CHIP = re.compile(r"^chip:(?P<chip>[^=]+)=(?P<what>.+)$", re.ASCII)


def add_fault_args(p: argparse.ArgumentParser) -> None:
    """Register the fault, jitter and Monte Carlo flags on a subcommand."""
    p.add_argument("--fault", action="append", default=[], metavar="SPEC",
                   help="a fault (repeatable): link:SRC->DST=down|FRACTION|latency:TIME, "
                        "chip:ID=slow:FACTOR[:UNITS]|pause:AT:FOR|fail[:AT]")
    p.add_argument("--jitter", metavar="[DIST:]CV", help=f"per-operation time noise, e.g. 5%% or gamma:0.05 "
                   f"({', '.join(DISTRIBUTIONS)}; optional :UNITS of {'+'.join(JITTER_UNITS)})")
    p.add_argument("--samples", help="Monte Carlo draws: report mean, p50, p90, p99, max and the critical elements")
    p.add_argument("--seed", help="seed of the draws (default 0; same seed, same trace)")


@dataclass(frozen=True)
class FaultOptions:
    """The parsed flags: faults, jitter (None: none), draws (None: one run) and seed."""

    faults: tuple[Fault, ...]
    jitter: Jitter | None
    samples: int | None
    seed: int
    specs: tuple[str, ...]

    @property
    def any(self) -> bool:
        return bool(self.faults) or self.jitter is not None or self.samples is not None


def fault_options(args: argparse.Namespace) -> FaultOptions | None:
    """The fault flags of ``args`` (None when the command has none or none were given)."""
    if not hasattr(args, "fault"):
        return None
    specs = tuple(args.fault)
    samples = None if args.samples is None else parse_int(args.samples, name="--samples", maximum=MAX_SAMPLES)
    seed = 0 if args.seed is None else parse_int(args.seed, name="--seed", minimum=0, maximum=2**63 - 1)
    opts = FaultOptions(tuple(parse_fault(s) for s in specs), parse_jitter(args.jitter) if args.jitter else None,
                        samples, seed, specs)
    return opts if opts.any or args.seed is not None else None


def parse_fault(text: str) -> Fault:
    """One ``--fault`` spec as a fault object; `FaultError` naming the spec and the valid forms."""
    try:
        return _parse(text.strip())
    except PodsimError as err:
        raise FaultError(f"--fault {show(text, 60)}: {err}") from None


def _parse(text: str) -> Fault:
    link, chip = _LINK.match(text), _CHIP.match(text)
    if link:
        src, dst, what = node(link["src"]), node(link["dst"]), link["what"].strip()
        if what == "down":
            return LinkDown(src, dst)
        if what.startswith("latency:"):
            return LinkLatency(src, dst, _time(what[len("latency:"):], "latency"))
        return LinkDegraded(src, dst, _fraction(what, "link fraction"))
    if chip:
        who, what = node(chip["chip"]), chip["what"].strip().split(":")
        if what[0] == "slow" and len(what) in (2, 3):
            units = tuple(what[2].split("+")) if len(what) == 3 else CHIP_UNITS
            return ChipSlow(who, _fraction(what[1], "chip slow factor"), units)
        if what[0] == "pause" and len(what) == 3:
            return ChipPause(who, _time(what[1], "pause start"), _time(what[2], "pause duration"))
        if what[0] == "fail" and len(what) <= 2:
            return ChipFail(who, _time(what[1], "fail time") if len(what) == 2 else 0.0)
    raise FaultError(f"must look like {FORMS}")


def node(text: str) -> Any:
    """A chip or switch named on the command line: ``5`` (index), ``0,1`` (coordinate) or ``sw0`` (name)."""
    text = text.strip()
    parts = [p.strip() for p in text.split(",")]
    if all(p.isascii() and p.isdigit() and len(p) <= 7 for p in parts):
        return int(parts[0]) if len(parts) == 1 else tuple(int(p) for p in parts)
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", text, re.ASCII):
        return text
    raise FaultError(f"{show(text)} is not a chip: give an index (5), a coordinate (0,1) or a switch's name")


def _fraction(text: str, name: str) -> float:
    text = text.strip()
    value = parse_quantity(text[:-1], "number", name=name) / 100 if text.endswith("%") else \
        parse_quantity(text, "number", name=name)
    if not 0 < value <= 1:  # NaN fails too
        raise FaultError(f"{name} {show(text)} must be a fraction in (0, 1] (e.g. 0.5 or 50%): the share of "
                         "full speed left")
    return value


def _time(text: str, name: str) -> float:
    value = parse_quantity(text.strip().lstrip("+"), "time", name=name)
    if not 0 <= value <= 1e6:
        raise FaultError(f"{name} {show(text)} must be a time from 0 to 1e6 s (e.g. 2us or 1ms)")
    return value


def parse_jitter(text: str) -> Jitter:
    """``--jitter [DIST:]CV[:UNITS]`` as a `Jitter` (CV as ``5%`` or ``0.05``)."""
    parts = [p.strip() for p in text.split(":")]
    try:
        dist = parts.pop(0) if parts and parts[0] and not (parts[0][0].isdigit() or parts[0][0] == ".") else \
            "lognormal"
        if not parts or len(parts) > 2:
            raise FaultError(f"must look like [DIST:]CV[:UNITS], e.g. 5% or gamma:0.05 ({', '.join(DISTRIBUTIONS)})")
        cv_text = parts[0]
        cv = parse_quantity(cv_text[:-1], "number", name="cv") / 100 if cv_text.endswith("%") else \
            parse_quantity(cv_text, "number", name="cv")
        units = tuple(parts[1].split("+")) if len(parts) == 2 else JITTER_UNITS
        return Jitter(dist, cv, units)
    except PodsimError as err:
        raise FaultError(f"--jitter {show(text, 60)}: {err}") from None
