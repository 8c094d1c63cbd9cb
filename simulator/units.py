"""Parse human quantities (``34MB``, ``16GiB``, ``0.4ms``, ``45GB/s``, ``2.3e15``) into SI floats.

Conversion happens only here, at the edges; inside podsim everything is bytes, seconds, bytes/s and
FLOP/s. Decimal prefixes are powers of 1000 and binary prefixes (KiB, MiB, ...) powers of 1024.
Bits are not accepted: a ``b`` suffix is rejected rather than silently read as bytes.
"""
from __future__ import annotations

import math
import re

from simulator.errors import NonFiniteError, PodsimError, QuantityError

_DECIMAL = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18}
_BINARY = {"Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40, "Pi": 2.0**50}
_TIME = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9, "ps": 1e-12}
_NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
# ASCII only: int() and float() would read other scripts' digits ("٣"), and superscripts ("²") fail later.
_PATTERN = re.compile(rf"^\s*(?P<num>{_NUMBER}|nan|inf|-inf)\s*(?P<unit>[^\s\d.+-][^\s]*)?\s*$", re.I | re.A)

# Each kind maps a unit suffix (without prefix) to its multiplier on the prefixed number.
_SUFFIXES = {
    "bytes": ("B",),
    "bandwidth": ("B/s",),
    "flops": ("FLOP/s", "FLOPS", "flop/s", "flops"),
    "flops_count": ("FLOP", "FLOPs", "flop", "flops"),
}
KINDS = ("bytes", "time", "bandwidth", "flops", "flops_count", "number")


def _prefixed(unit: str, suffixes: tuple[str, ...]) -> float | None:
    for suffix in suffixes:
        if not unit.endswith(suffix):
            continue
        prefix = unit[: len(unit) - len(suffix)]
        if prefix in _DECIMAL:
            return _DECIMAL[prefix]
        if prefix in _BINARY:
            return _BINARY[prefix]
    return None


def _multiplier(unit: str, kind: str) -> float | None:
    if unit == "":
        return 1.0
    if kind == "time":
        return _TIME.get(unit)
    if kind == "number":
        return _DECIMAL.get(unit)
    return _prefixed(unit, _SUFFIXES[kind])


def parse_quantity(text: str | float | int, kind: str = "number", *, name: str = "value") -> float:
    """Parse ``text`` as a quantity of ``kind`` and return it in SI units (float).

    ``kind`` is one of ``bytes`` (B, kB, MB, GiB ...), ``time`` (s, ms, us, ns), ``bandwidth``
    (B/s with prefixes), ``flops`` (FLOP/s with prefixes), ``flops_count`` (FLOP) or ``number``
    (plain, with an optional k/M/G/T prefix). A bare number is always accepted as SI.
    NaN and infinities are returned as floats; range checks belong to the caller (`positive`).

    >>> parse_quantity("16GiB", "bytes")
    17179869184.0
    >>> parse_quantity("0.4ms", "time")
    0.0004
    """
    if kind not in KINDS:
        raise QuantityError(f"unknown quantity kind {kind!r}; valid kinds: {', '.join(KINDS)}")
    if isinstance(text, bool):
        raise QuantityError(f"{name}={text!r} is a boolean; expected a {kind} quantity")
    if isinstance(text, (int, float)):
        return float(text)
    match = _PATTERN.match(str(text))
    unit = (match.group("unit") or "") if match else None
    mult = _multiplier(unit, kind) if unit is not None else None
    if match is None or mult is None:
        raise QuantityError(f"{name}={text!r} is not a {kind} quantity; {_examples(kind)}")
    return float(match.group("num")) * mult


def _examples(kind: str) -> str:
    examples = {
        "bytes": "expected e.g. 34e6, 34MB, 16GiB",
        "time": "expected e.g. 4e-4, 0.4ms, 1us",
        "bandwidth": "expected e.g. 8.2e11, 819GB/s, 45GB/s",
        "flops": "expected e.g. 1.97e14, 197TFLOP/s",
        "flops_count": "expected e.g. 2e12, 2TFLOP",
        "number": "expected a number such as 8, 2.5 or 1e6",
    }
    return examples[kind]


def show(value: object, limit: int = 40) -> str:
    """``repr(value)``, shortened in the middle when longer than ``limit`` characters (a 600-digit number
    would otherwise fill the error line)."""
    text = repr(value)
    if len(text) <= limit:
        return text
    return f"{text[: limit // 2]}...{text[-8:]} ({len(text)} characters)"


def _number_text(value: float) -> str:
    """``65,536`` for integers, ``1e18`` for large powers of ten, ``%g`` for floats."""
    if isinstance(value, int) and (abs(value) < 10**9 or str(abs(value)).rstrip("0") != "1"):
        return f"{value:,}"
    return f"{value:.4g}".replace("e+0", "e").replace("e+", "e").replace("e-0", "e-")


def _range_text(minimum: float, maximum: float | None, what: str, unit: str = "") -> str:
    unit = f" {unit}" if unit else ""
    if maximum is None:
        return f"{what} >= {_number_text(minimum)}{unit}"
    return f"{what} from {_number_text(minimum)} to {_number_text(maximum)}{unit}"


def positive(value: float, *, name: str, allow_zero: bool = False) -> float:
    """Return ``value`` if it is finite and > 0 (or >= 0 with ``allow_zero``), else raise.

    >>> positive(3.0, name="bandwidth_bytes_per_s")
    3.0
    """
    if value.__class__ is float and (value >= 0.0 if allow_zero else value > 0.0) and value < math.inf:
        return value  # the hot path (NaN fails the comparisons and takes the checks below)
    bound = ">= 0" if allow_zero else "> 0"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise QuantityError(f"{name}={show(value)} must be a finite number {bound}")
    bad = value < 0 if allow_zero else value <= 0
    if math.isnan(value) or math.isinf(value) or bad:
        raise QuantityError(f"{name}={show(value)} must be a finite number {bound}")
    return float(value)


def check_number(value: object, *, name: str, minimum: float, maximum: float, unit: str = "",
                 error: type[PodsimError] = QuantityError, where: str = "") -> float:
    """Return ``value`` as a float if it is a finite number in [``minimum``, ``maximum``] (``unit`` is
    named in the message), else raise ``error`` whose message starts with ``where``.

    >>> check_number(8.2e11, name="hbm_bandwidth_bytes_per_s", minimum=1e6, maximum=1e15, unit="B/s")
    820000000000.0
    """
    if isinstance(value, (int, float)) and not isinstance(value, bool) and minimum <= value <= maximum:
        return float(value)  # NaN fails the comparisons
    raise error(f"{where}{name}={show(value)} must be {_range_text(minimum, maximum, 'a finite number', unit)}")


def check_derived(value: float, *, what: str, given: str, minimum: float = -math.inf, maximum: float = math.inf,
                  error: type[PodsimError] = QuantityError, hint: str = "") -> float:
    """The one check that an input stays meaningful after what is computed from it: ``value`` (``what``,
    derived from the input ``given`` as the user wrote it) must be a finite number in [``minimum``,
    ``maximum``], else ``error`` refuses the input by name -- a fraction whose product underflows, a price whose
    cost overflows. ``hint`` (what would be valid) ends the message.

    >>> check_derived(2.5, what="cost per step", given="--price-per-chip-hour 9", minimum=0.0)
    2.5
    """
    if minimum <= value <= maximum and math.isfinite(value):  # NaN fails the comparisons
        return float(value)
    hint = f"; {hint}" if hint else ""
    wanted = _range_text(minimum, None if maximum == math.inf else maximum, "a finite number") \
        if minimum > -math.inf else "a finite number" + (f" <= {_number_text(maximum)}" if maximum < math.inf else "")
    raise error(f"{given} makes {what} {_number_text(float(value))}, which must be {wanted}{hint}")


def check_int(value: object, *, name: str, minimum: int = 1, maximum: int | None = None,
              error: type[PodsimError] = QuantityError, where: str = "", hint: str = "") -> int:
    """Return ``value`` if it is an integer in [``minimum``, ``maximum``] (booleans are not integers
    here), else raise ``error`` whose message starts with ``where``, states the range and ends with
    ``hint`` in parentheses.

    >>> check_int(4, name="blocks")
    4
    """
    if value.__class__ is int and value >= minimum and (maximum is None or value <= maximum):
        return value
    if isinstance(value, int) and not isinstance(value, bool) and value >= minimum and \
            (maximum is None or value <= maximum):
        return int(value)
    hint = f" ({hint})" if hint else ""
    raise error(f"{where}{name}={show(value)} must be {_range_text(minimum, maximum, 'an integer')}{hint}")


def positive_int(value: object, *, name: str, minimum: int = 1) -> int:
    """Return ``value`` if it is an integer >= ``minimum`` (booleans are not integers here), else raise.

    >>> positive_int(4, name="blocks")
    4
    """
    return check_int(value, name=name, minimum=minimum)


#: Largest count a person types in podsim (10**18): more is a typo, and exact integers past it stop
#: being exact floats, so closed forms would overflow or round.
MAX_COUNT = 10**18


def parse_int(text: str | int, *, name: str, minimum: int = 1, maximum: int = MAX_COUNT,
              error: type[PodsimError] = QuantityError, where: str = "") -> int:
    """A whole number typed by a person (``8``, ``1e3``, ``4k``; ASCII digits only) in
    [``minimum``, ``maximum``]; ``error`` naming the range otherwise.

    >>> parse_int("1e3", name="--batch")
    1000
    """
    if isinstance(text, int) and not isinstance(text, bool):
        return check_int(text, name=name, minimum=minimum, maximum=maximum, error=error, where=where)
    value: int | None = None
    if isinstance(text, str):
        plain = text.strip()
        if plain.lstrip("+-").isdigit() and plain.isascii():
            value = int(plain) if len(plain) <= 40 else None  # longer is beyond any maximum
        else:
            try:
                number = parse_quantity(plain, "number", name=name)
            except QuantityError:
                number = math.nan
            value = int(number) if math.isfinite(number) and number == int(number) else None
    if value is None or not minimum <= value <= maximum:
        shown = None if maximum == MAX_COUNT and (value is None or value < minimum) else maximum
        raise error(f"{where}{name}={show(text)} must be {_range_text(minimum, shown, 'a whole number')} "
                    "(e.g. 8 or 1e3)")
    return value


_TOKEN_BINARY = re.compile(r"^\s*(?P<num>\d+(?:\.\d+)?)\s*(?P<prefix>Ki|Mi|Gi)\s*$", re.A)
_TOKEN_DECIMAL = re.compile(r"^\s*(?P<num>\d+(?:\.\d+)?)\s*(?P<prefix>[kKMG])\s*$", re.A)


def parse_tokens(text: str | int, *, name: str, minimum: int = 1, maximum: int = MAX_COUNT) -> int:
    """A token count (context, sequence length): ``8192``, ``1e3`` or ``8Ki`` (= 8192, binary prefixes).

    ``8k`` is refused: people mean 8000 and 8192 by it about equally often, so the message offers both.

    >>> parse_tokens("8Ki", name="--context")
    8192
    """
    if isinstance(text, str) and (found := _TOKEN_BINARY.match(text)):
        value = float(found.group("num")) * _BINARY[found.group("prefix")]
        if value == int(value):
            return parse_int(int(value), name=name, minimum=minimum, maximum=maximum)
    if isinstance(text, str) and (found := _TOKEN_DECIMAL.match(text)):
        num, prefix = found.group("num"), found.group("prefix")
        decimal, binary = float(num) * _DECIMAL[prefix], float(num) * _BINARY[prefix.upper() + "i"]
        raise QuantityError(f"{name}={text!r} is ambiguous for a token count: write {decimal:.0f} or "
                            f"{num}{prefix.upper()}i (= {binary:.0f})")
    return parse_int(text, name=name, minimum=minimum, maximum=maximum)


#: Larger sizes describe no machine (an exabyte); refusing them fails fast instead of simulating nonsense.
MAX_BYTES = 2.0**60


def check_bytes(value: float, *, name: str, allow_zero: bool = True) -> float:
    """`positive` for a size in bytes, also refusing more than `MAX_BYTES` (2**60, about 1.15e18)."""
    positive(value, name=name, allow_zero=allow_zero)
    if value > MAX_BYTES:
        raise QuantityError(f"{name}={value:.4g} bytes is more than any machine holds; at most 2**60 "
                            f"({MAX_BYTES:.3g}) bytes are accepted")
    return float(value)


def parse_positive(text: str | float | int, kind: str, *, name: str, allow_zero: bool = False) -> float:
    """`parse_quantity` followed by `positive` (and `check_bytes` for sizes): the usual path for
    sizes, times and rates."""
    parsed = parse_quantity(text, kind, name=name)
    try:
        value = positive(parsed, name=name, allow_zero=allow_zero)
    except QuantityError:
        if not isinstance(text, str):
            raise
        bound = ">= 0" if allow_zero else "> 0"  # name the value as typed (-5MB), not as converted (-5000000.0)
        raise QuantityError(f"{name}={show(text.strip())} must be a finite number {bound}") from None
    return check_bytes(value, name=name, allow_zero=allow_zero) if kind == "bytes" else value


def format_quantity(value: float, unit: str) -> str:
    """Format ``value`` (SI) with a decimal prefix for display: ``format_quantity(8.2e11, 'B/s')``.

    inf and NaN raise `NonFiniteError`: no command prints them (a value with no finite answer is worded).
    """
    if not math.isfinite(value):
        raise NonFiniteError(f"a quantity in {unit} about to be printed is {value!r}")
    if unit == "s":
        for scale, suffix in ((1.0, "s"), (1e-3, "ms"), (1e-6, "us"), (1e-9, "ns")):
            if abs(value) >= scale:
                return f"{value / scale:.4g} {suffix}"
        return f"{value:.4g} s"
    for scale, prefix in ((1e18, "E"), (1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.4g} {prefix}{unit}"
    return f"{value:.4g} {unit}"
