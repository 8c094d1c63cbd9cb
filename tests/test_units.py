"""simulator.units: parsing human quantities into SI floats, range checks, display formatting."""
from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from simulator.errors import PodsimError, QuantityError
from simulator.units import format_quantity, parse_positive, parse_quantity, positive, positive_int


@pytest.mark.parametrize(
    ("text", "kind", "expected"),
    [
        ("34e6", "bytes", 34 * 10**6),
        ("34MB", "bytes", 34 * 10**6),
        ("16GiB", "bytes", 16 * 1024**3),
        ("1.5 GB", "bytes", 1.5 * 10**9),
        ("1KiB", "bytes", 1024),
        ("1kB", "bytes", 1000),
        (" 8 B ", "bytes", 8),
        ("0.4ms", "time", 0.4 / 1000),
        ("1us", "time", 1 / 10**6),
        ("1µs", "time", 1 / 10**6),
        ("2ns", "time", 2 / 10**9),
        ("3s", "time", 3),
        ("4e-4", "time", 4 / 10**4),
        ("45GB/s", "bandwidth", 45 * 10**9),
        ("819GB/s", "bandwidth", 819 * 10**9),
        ("8.2e11", "bandwidth", 820 * 10**9),
        ("197TFLOP/s", "flops", 197 * 10**12),
        ("2.3e15", "flops", 2300 * 10**12),
        ("2TFLOP", "flops_count", 2 * 10**12),
        ("8", "number", 8),
        ("2.5", "number", 2.5),
        ("1e6", "number", 10**6),
        ("8k", "number", 8000),
        ("-3", "number", -3),
    ],
)
def test_parse_quantity_examples(text, kind, expected):
    value = parse_quantity(text, kind)
    assert isinstance(value, float)
    assert value == pytest.approx(expected, rel=1e-12)


def test_numbers_pass_through_as_si_floats():
    assert parse_quantity(34e6, "bytes") == 34_000_000.0
    assert parse_quantity(3, "time") == 3.0
    assert isinstance(parse_quantity(3, "time"), float)


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("34Mb", "bytes"),  # bits are rejected, not read as bytes
        ("abc", "bytes"),
        ("", "bytes"),
        ("MB", "bytes"),
        ("5MB", "time"),
        ("45GB", "bandwidth"),
        ("1s", "bytes"),
        ("12 parsecs", "number"),
        ("1KiB", "number"),
    ],
)
def test_parse_quantity_rejects_bad_text_and_names_it(text, kind):
    with pytest.raises(QuantityError) as info:
        parse_quantity(text, kind, name="size")
    message = str(info.value)
    assert repr(text) in message  # the offending text, quoted
    assert "size" in message
    assert kind in message


def test_parse_quantity_rejects_booleans():
    with pytest.raises(QuantityError, match="True"):
        parse_quantity(True, "bytes")


def test_parse_quantity_rejects_unknown_kind_and_lists_kinds():
    with pytest.raises(QuantityError) as info:
        parse_quantity("1", "furlongs")
    assert "furlongs" in str(info.value)
    assert "bytes" in str(info.value) and "time" in str(info.value)


def test_quantity_error_is_a_podsim_error():
    assert issubclass(QuantityError, PodsimError)


_MULTIPLIERS = {"k": 1000, "M": 1000**2, "G": 1000**3, "T": 1000**4, "Ki": 1024, "Mi": 1024**2, "Gi": 1024**3}


@given(x=st.floats(min_value=0, allow_nan=False, allow_infinity=False), prefix=st.sampled_from(list(_MULTIPLIERS)))
def test_parse_prefixed_bytes_property(x, prefix):
    got = parse_quantity(f"{x!r}{prefix}B", "bytes")
    want = x * _MULTIPLIERS[prefix]
    assert math.isclose(got, want, rel_tol=1e-12)


@pytest.mark.parametrize("value", [0, 0.0, -1, -1e-30, math.nan, math.inf, -math.inf])
def test_positive_rejects_non_positive_and_non_finite(value):
    with pytest.raises(QuantityError) as info:
        positive(value, name="bandwidth_bytes_per_s")
    assert "bandwidth_bytes_per_s" in str(info.value)
    assert repr(value) in str(info.value)


def test_positive_accepts_and_allow_zero():
    assert positive(3, name="x") == 3.0
    assert isinstance(positive(3, name="x"), float)
    assert positive(0, name="x", allow_zero=True) == 0.0
    assert positive(0.0, name="x", allow_zero=True) == 0.0
    for bad in (-1, math.nan, math.inf):
        with pytest.raises(QuantityError):
            positive(bad, name="x", allow_zero=True)


def test_positive_rejects_booleans():
    with pytest.raises(QuantityError):
        positive(True, name="flag")


def test_positive_rejects_non_numbers_with_quantity_error():
    with pytest.raises(QuantityError, match="abc"):
        positive("abc", name="x")


@pytest.mark.parametrize("value", [0, -3, 2.5, True, "4", None])
def test_positive_int_rejects(value):
    with pytest.raises(QuantityError) as info:
        positive_int(value, name="blocks")
    assert "blocks" in str(info.value)
    assert repr(value) in str(info.value)


def test_positive_int_accepts_and_minimum():
    assert positive_int(4, name="blocks") == 4
    assert positive_int(0, name="n", minimum=0) == 0
    with pytest.raises(QuantityError, match=">= 2"):
        positive_int(1, name="n", minimum=2)


def test_parse_positive_combines_parse_and_range_check():
    assert parse_positive("0.4ms", "time", name="load_s") == pytest.approx(4e-4, rel=1e-12)
    with pytest.raises(QuantityError, match="load_s"):
        parse_positive("-1ms", "time", name="load_s")
    with pytest.raises(QuantityError, match="load_s"):
        parse_positive("nan", "time", name="load_s")


@pytest.mark.parametrize(
    ("value", "unit", "expected"),
    [
        (8.2e11, "B/s", "820 GB/s"),
        (16 * 1024**3, "B", "17.18 GB"),  # 17179869184 B, 4 significant digits
        (1.97e14, "FLOP/s", "197 TFLOP/s"),
        (5, "B", "5 B"),
        (1500, "B", "1.5 kB"),
        (4e-4, "s", "400 us"),
        (1.5, "s", "1.5 s"),
        (2.5e-9, "s", "2.5 ns"),
        (1e-6, "s", "1 us"),
        (2e-12, "s", "2e-12 s"),
    ],
)
def test_format_quantity_examples(value, unit, expected):
    assert format_quantity(value, unit) == expected


# -- the one validation layer: check_int, check_number, parse_int --------------------------------------


@pytest.mark.parametrize("value", [0, 101, 2.0, True, "5", None, 10**600])
def test_check_int_states_the_range(value):
    from simulator.units import check_int

    with pytest.raises(QuantityError, match=r"^n=.* must be an integer from 1 to 100$"):
        check_int(value, name="n", maximum=100)


def test_check_int_error_class_prefix_and_hint():
    from simulator.errors import SpecError
    from simulator.units import check_int

    assert check_int(7, name="n") == 7
    with pytest.raises(SpecError, match=r"^chip 'x': buffers=0 must be an integer >= 1 \(1 = serial\)$"):
        check_int(0, name="buffers", error=SpecError, where="chip 'x': ", hint="1 = serial")


@pytest.mark.parametrize("value", [0.5, 1e19, math.nan, math.inf, -math.inf, True, "1e9"])
def test_check_number_refuses_outside_the_closed_range(value):
    from simulator.units import check_number

    with pytest.raises(QuantityError, match=r"must be a finite number from 1 to 1e18 B/s$"):
        check_number(value, name="bw", minimum=1, maximum=1e18, unit="B/s")


@pytest.mark.parametrize("text,value", [("8", 8), (" 12 ", 12), ("1e3", 1000), ("4k", 4000), ("+3", 3), (5, 5)])
def test_parse_int_accepts_whole_numbers(text, value):
    from simulator.units import parse_int

    assert parse_int(text, name="n") == value


@pytest.mark.parametrize("text", ["²", "٣", "1_000", "2.5", "abc", "", "0", "-1", "1e30", "9" * 600, "9" * 5000,
                                  True, None, "inf", "nan"])
def test_parse_int_refuses_everything_else_in_one_line(text):
    from simulator.units import parse_int, show

    with pytest.raises(QuantityError) as info:
        parse_int(text, name="--batch")
    message = str(info.value)
    assert message.startswith(f"--batch={show(text)} must be a whole number") and len(message) < 200


def test_unicode_digits_are_not_quantities():
    for text in ("٣", "²", "１２"):  # Arabic-Indic three, superscript two, full-width twelve
        with pytest.raises(QuantityError):
            parse_quantity(text, "number")


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan])
def test_format_quantity_never_prints_a_non_finite_number(value):
    from simulator.errors import NonFiniteError

    with pytest.raises(NonFiniteError):
        format_quantity(value, "s")
