"""Request streams: arrival times and prompt / output lengths, drawn from distributions or read from a trace.

Arrivals are Poisson (exponential gaps, coefficient of variation 1) or bursty (gamma gaps with shape
``1 / cv**2``: the same mean rate, burstier for cv > 1 -- what ``vllm bench serve --burstiness`` draws with
burstiness = 1 / cv**2). Lengths come from a `LengthDist`: ``fixed:N`` (or a bare ``N``), ``uniform:A:B``
(whole numbers A..B inclusive), ``lognormal:MEDIAN:SIGMA`` (natural-log sigma, rounded, at least 1) or
``empirical:F.csv`` (lengths drawn with replacement from a column of a trace). Everything is drawn from
one ``numpy.random.Generator`` seeded by ``seed``: the same seed, the same stream.

Trace CSV (``--trace F.csv``): one request a row, a header naming the columns. Accepted names (case
ignored), first match wins:

- arrival time, seconds from the start: ``arrival_s``, ``arrival_time``, ``timestamp``, ``time``,
  ``TIMESTAMP`` (Azure LLM inference trace: an ISO date-time, taken relative to the first row), or
  milliseconds in ``timestamp_ms`` (Mooncake's ``timestamp`` is milliseconds too: give it as timestamp_ms);
- prompt tokens: ``prompt_tokens``, ``input_tokens``, ``input_length``, ``ContextTokens`` (Azure),
  ``input_len``, ``prompt_len``, ``Request tokens`` (BurstGPT, whose ``Timestamp`` is seconds);
- output tokens: ``output_tokens``, ``output_length``, ``GeneratedTokens`` (Azure), ``output_len``,
  ``completion_tokens``, ``Response tokens`` (BurstGPT).
"""
from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import numpy as np

from simulator.errors import PodsimError
from simulator.units import show

MAX_REQUESTS = 10_000_000  #: requests in one stream (an hour at 2,700 req/s); more is a units mistake
TIME_COLUMNS = ("arrival_s", "arrival_time", "timestamp", "time")
MS_COLUMNS = ("timestamp_ms",)
PROMPT_COLUMNS = ("prompt_tokens", "input_tokens", "input_length", "contexttokens", "input_len", "prompt_len",
                  "request tokens")
OUTPUT_COLUMNS = ("output_tokens", "output_length", "generatedtokens", "output_len", "completion_tokens",
                  "response tokens")


@dataclass(frozen=True)
class Arrival:
    """One request as it reaches the server: when (s), its prompt tokens and the tokens it will generate."""

    time_s: float
    prompt_tokens: int
    output_tokens: int


@dataclass(frozen=True)
class LengthDist:
    """A distribution of token counts: ``kind`` fixed / uniform / lognormal / empirical and its parameters."""

    kind: str
    a: float = 0.0
    b: float = 0.0
    values: tuple[int, ...] = ()

    def draw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` whole token counts >= 1."""
        if self.kind == "fixed":
            return np.full(n, int(self.a), dtype=np.int64)
        if self.kind == "uniform":
            return rng.integers(int(self.a), int(self.b) + 1, size=n)
        if self.kind == "lognormal":
            return np.maximum(1, np.rint(self.a * np.exp(self.b * rng.standard_normal(n)))).astype(np.int64)
        return rng.choice(np.asarray(self.values, dtype=np.int64), size=n)

    @property
    def most(self) -> int | None:
        """The largest count it can draw (None for lognormal: unbounded)."""
        return {"fixed": int(self.a), "uniform": int(self.b)}.get(self.kind, max(self.values) if self.values else None)


def _whole(text: str, flag: str, spec: str) -> int:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 1 or value != int(value):
        raise PodsimError(f"{flag} {show(spec)}: {show(text)} must be a whole number of tokens >= 1")
    return int(value)


def parse_length(spec: str, flag: str = "--prompt-len") -> LengthDist:
    """``N``, ``fixed:N``, ``uniform:A:B``, ``lognormal:MEDIAN:SIGMA`` or ``empirical:F.csv`` -> `LengthDist`;
    `PodsimError` naming the valid forms otherwise."""
    kind, _, rest = str(spec).strip().partition(":")
    parts = rest.split(":") if rest else []
    if not rest and kind:
        kind, parts = "fixed", [kind]
    forms = "N, fixed:N, uniform:A:B, lognormal:MEDIAN:SIGMA or empirical:F.csv"
    if kind == "fixed" and len(parts) == 1:
        return LengthDist("fixed", _whole(parts[0], flag, spec))
    if kind == "uniform" and len(parts) == 2:
        lo, hi = (_whole(p, flag, spec) for p in parts)
        if hi < lo:
            raise PodsimError(f"{flag} {show(spec)}: uniform:A:B needs A <= B")
        return LengthDist("uniform", lo, hi)
    if kind == "lognormal" and len(parts) == 2:
        sigma = float(parts[1]) if _is_float(parts[1]) else -1.0
        if not 0 <= sigma <= 5:
            raise PodsimError(f"{flag} {show(spec)}: lognormal sigma {show(parts[1])} must be a number in [0, 5]")
        return LengthDist("lognormal", _whole(parts[0], flag, spec), sigma)
    if kind == "empirical" and rest:
        column = OUTPUT_COLUMNS if "output" in flag else PROMPT_COLUMNS
        return LengthDist("empirical", values=tuple(_column(rest, column, flag)))
    raise PodsimError(f"{flag} {show(spec)}: expected {forms}")


def _is_float(text: str) -> bool:
    try:
        return math.isfinite(float(text))
    except ValueError:
        return False


def poisson_arrivals(rate_per_s: float, duration_s: float, prompt: LengthDist, output: LengthDist, seed: int,
                     cv: float = 1.0) -> list[Arrival]:
    """Requests arriving over ``duration_s`` at ``rate_per_s`` on average: exponential gaps (``cv`` = 1) or gamma
    gaps of shape 1 / cv**2 (bursty for cv > 1), lengths from ``prompt`` and ``output``; seeded by ``seed``."""
    if not (math.isfinite(rate_per_s) and rate_per_s > 0):
        raise PodsimError(f"--rate {show(rate_per_s)} must be a finite number of requests per second > 0")
    if not (math.isfinite(duration_s) and duration_s > 0):
        raise PodsimError(f"--duration {show(duration_s)} must be a finite time > 0")
    if not (math.isfinite(cv) and 0 < cv <= 10):
        raise PodsimError(f"--burstiness cv {show(cv)} must be in (0, 10] (1: Poisson)")
    expected = rate_per_s * duration_s
    if expected > MAX_REQUESTS:
        raise PodsimError(f"--rate {rate_per_s:g} x --duration {duration_s:g} s = {expected:,.0f} requests; "
                          f"podsim simulates at most {MAX_REQUESTS:,} in one run")
    rng = np.random.default_rng(seed)
    n = int(expected + 10 * math.sqrt(expected) + 10)
    shape = 1.0 / cv**2
    gaps = rng.gamma(shape, 1.0 / (rate_per_s * shape), size=n)
    times = np.cumsum(gaps)
    times = times[times < duration_s]
    k = len(times)
    p, o = prompt.draw(rng, k), output.draw(rng, k)
    return [Arrival(float(t), int(a), int(b)) for t, a, b in zip(times, p, o, strict=True)]


def _header(path: Path, flag: str) -> tuple[list[str], list[list[str]]]:
    if not path.is_file():
        raise PodsimError(f"{flag} {show(str(path))}: no such file")
    with path.open(newline="") as f:
        rows = [r for r in csv.reader(f) if r and any(c.strip() for c in r)]
    if len(rows) < 2:
        raise PodsimError(f"{flag} {show(str(path))}: empty trace (a header and at least one request row needed)")
    return [h.strip().lower() for h in rows[0]], rows[1:]


def _find(header: list[str], names: tuple[str, ...]) -> int | None:
    return next((header.index(n) for n in names if n in header), None)


def _column(path_text: str, names: tuple[str, ...], flag: str) -> list[int]:
    header, rows = _header(Path(path_text), flag)
    k = _find(header, names)
    if k is None:
        raise PodsimError(f"{flag} empirical:{path_text}: no column named one of {', '.join(names)}")
    return [_whole(r[k], flag, path_text) for r in rows]


def _seconds(text: str, ms: bool) -> float:
    try:
        value = float(text)
        return value / 1e3 if ms else value
    except ValueError:
        return datetime.fromisoformat(text.strip().replace("Z", "+00:00")[:26]).timestamp()


def read_trace(path_text: str, flag: str = "--trace") -> list[Arrival]:
    """The requests of a trace CSV (module docstring: the columns), sorted by arrival, times relative to the
    first; `PodsimError` for a missing file, an empty trace, a missing column or a bad value (naming the row)."""
    header, rows = _header(Path(path_text), flag)
    t_col, ms = _find(header, TIME_COLUMNS), False
    if t_col is None:
        t_col, ms = _find(header, MS_COLUMNS), True
    p_col, o_col = _find(header, PROMPT_COLUMNS), _find(header, OUTPUT_COLUMNS)
    for col, names in ((t_col, TIME_COLUMNS + MS_COLUMNS), (p_col, PROMPT_COLUMNS), (o_col, OUTPUT_COLUMNS)):
        if col is None:
            raise PodsimError(f"{flag} {show(path_text)}: no column named one of {', '.join(names)} "
                              f"(header: {', '.join(header)})")
    assert t_col is not None and p_col is not None and o_col is not None  # each checked just above
    if len(rows) > MAX_REQUESTS:
        raise PodsimError(f"{flag} {show(path_text)}: {len(rows):,} requests; at most {MAX_REQUESTS:,}")
    out = []
    for i, r in enumerate(rows, start=2):
        try:
            t = _seconds(r[t_col], ms)
            out.append(Arrival(t, _whole(r[p_col], flag, path_text), _whole(r[o_col], flag, path_text)))
        except (ValueError, IndexError) as e:
            raise PodsimError(f"{flag} {show(path_text)} line {i}: {show(','.join(r))} is not a request row "
                              f"({e})".replace("\n", " ")) from None
        if not math.isfinite(t):
            raise PodsimError(f"{flag} {show(path_text)} line {i}: arrival time {show(r[t_col])} is not finite")
    start = min(a.time_s for a in out)
    return sorted((Arrival(a.time_s - start, a.prompt_tokens, a.output_tokens) for a in out),
                  key=lambda a: a.time_s)
