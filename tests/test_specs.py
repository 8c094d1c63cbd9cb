"""simulator.hardware.specs: presets against REFERENCE.md, ChipSpec validation, user chips from TOML files."""
from __future__ import annotations

import dataclasses
import math

import pytest

from simulator.errors import PodsimError, SpecError
from simulator.hardware.specs import PRESETS, ChipSpec, get_chip, load_chip_file

GB = 1e9
GiB = 2**30

# Written by hand from the REFERENCE.md chip table (per chip, dense):
# name: (bf16 FLOP/s, int8 or fp8 OP/s, HBM "GB", HBM B/s, ICI one-way B/s per link or None, links or None,
#        NVLink egress one way or None, wraparound rule, torus dims)
REFERENCE_TABLE = {
    "tpu-v4": (2.75e14, 2.75e14, 32, 1.2e12, 4.5e10, 6, None, "multiple4", 3),
    "tpu-v5e": (1.97e14, 3.94e14, 16, 8.2e11, 4.5e10, 4, None, "length16", 2),
    "tpu-v5p": (4.59e14, 9.18e14, 96, 2.8e12, 9.0e10, 6, None, "multiple4", 3),
    "tpu-v6e": (9.2e14, 1.84e15, 32, 1.6e12, 9.0e10, 4, None, "length16", 2),
    "tpu7x": (2.3e15, 4.61e15, 192, 7.4e12, 9.0e10, 6, None, "multiple4", 3),
    # NVLink 4: 18 links x 25e9 each way = 4.5e11 egress
    "h100": (9.9e14, 2.0e15, 80, 3.35e12, 25e9, 18, 4.5e11, "switch", 0),
    "h200": (9.9e14, 2.0e15, 141, 4.8e12, 25e9, 18, 4.5e11, "switch", 0),
    # NVLink 5: 9.0e11 egress (REFERENCE gives no per-link figure)
    "b200": (2.3e15, 4.5e15, 192, 8.0e12, None, None, 9.0e11, "switch", 0),
}


def test_the_reference_presets_exist_plus_a100_for_the_calibration_data():
    assert set(PRESETS) == set(REFERENCE_TABLE) | {"a100"}
    for name in REFERENCE_TABLE:
        assert get_chip(name).name == name
    a100 = get_chip("a100")  # NVIDIA datasheet: 312 TFLOP/s bf16, 2.039 TB/s, NVLink 3 = 12 x 25 GB/s
    assert (a100.peak_bf16_flops_per_s, a100.hbm_bandwidth_bytes_per_s, a100.ici_egress_bytes_per_s) == \
        (3.12e14, 2.039e12, 3.0e11)


@pytest.mark.parametrize("name", sorted(REFERENCE_TABLE))
def test_preset_matches_reference_table(name):
    bf16, int8, hbm_gb, hbm_bw, ici, links, egress, rule, dims = REFERENCE_TABLE[name]
    spec = get_chip(name)
    assert isinstance(spec.source, str) and spec.source.strip()
    assert spec.peak_bf16_flops_per_s == pytest.approx(bf16, rel=1e-9)
    assert spec.peak_int8_flops_per_s == pytest.approx(int8, rel=1e-9)
    assert spec.peak_flops_per_s("bf16") == pytest.approx(bf16, rel=1e-9)
    assert spec.peak_flops_per_s("int8") == pytest.approx(int8, rel=1e-9)
    assert spec.peak_flops_per_s("fp8") == pytest.approx(int8, rel=1e-9)
    assert spec.hbm_bandwidth_bytes_per_s == pytest.approx(hbm_bw, rel=1e-9)
    # "GB" capacities may be read as decimal or binary; either way they lie between the two
    assert hbm_gb * GB * (1 - 1e-9) <= spec.hbm_capacity_bytes <= hbm_gb * GiB * (1 + 1e-9)
    if ici is not None:
        assert spec.ici_bandwidth_bytes_per_s == pytest.approx(ici, rel=1e-9)
    if links is not None:
        assert spec.ici_links == links
    if egress is not None:
        assert spec.ici_egress_bytes_per_s == pytest.approx(egress, rel=1e-9)
    assert spec.wraparound == rule
    assert spec.torus_dims == dims


def test_hbm_beats_ici_beats_pcie_beats_dcn_on_tpus():
    for name in ("tpu-v4", "tpu-v5e", "tpu-v5p", "tpu-v6e", "tpu7x"):
        s = get_chip(name)
        assert s.hbm_bandwidth_bytes_per_s > s.ici_bandwidth_bytes_per_s > s.pcie_bandwidth_bytes_per_s \
            > s.dcn_bandwidth_bytes_per_s, name


def test_tpu_v5e_peak_intensity_is_about_240():
    spec = get_chip("tpu-v5e")
    # 1.97e14 / 8.2e11 = 240.24...
    assert spec.peak_bf16_flops_per_s / spec.hbm_bandwidth_bytes_per_s == pytest.approx(240, rel=0.01)


def test_chipspec_is_frozen():
    spec = get_chip("tpu-v5e")
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.hbm_bandwidth_bytes_per_s = 1.0  # type: ignore[misc]
    assert get_chip("tpu-v5e").hbm_bandwidth_bytes_per_s == pytest.approx(8.2e11)


def test_replace_returns_a_validated_copy():
    spec = get_chip("tpu-v5e")
    faster = spec.replace(hbm_bandwidth_bytes_per_s=1e12)
    assert faster.hbm_bandwidth_bytes_per_s == 1e12
    assert spec.hbm_bandwidth_bytes_per_s == pytest.approx(8.2e11)
    assert faster != spec
    assert spec.replace(hop_latency_s=0).hop_latency_s == 0  # latency may be zero


@pytest.mark.parametrize("field", ["hbm_bandwidth_bytes_per_s", "ici_bandwidth_bytes_per_s",
                                   "vmem_bandwidth_bytes_per_s", "peak_bf16_flops_per_s"])
@pytest.mark.parametrize("value", [0.0, -1.0, math.nan, math.inf])
def test_bad_rates_raise_spec_error_naming_the_field(field, value):
    with pytest.raises(SpecError) as info:
        get_chip("tpu-v5e").replace(**{field: value})
    assert field in str(info.value)
    assert repr(value) in str(info.value)


@pytest.mark.parametrize(("field", "value"), [("ici_links", 0), ("mxu_dim", -128), ("mxu_count", 2.5),
                                              ("tensor_cores", True)])
def test_bad_integer_fields_raise(field, value):
    with pytest.raises(SpecError, match=field):
        get_chip("tpu-v5e").replace(**{field: value})


# Absurd but finite values, written by hand: each is far outside anything built (the fuzzer found
# 1e300 FLOP/s and 1e-300 B/s printing as 1e300 or inf).
@pytest.mark.parametrize(("field", "value"), [
    ("peak_bf16_flops_per_s", 1e300), ("peak_int8_flops_per_s", 1e-3), ("vpu_flops_per_s", 1e30),
    ("hbm_capacity_bytes", 1e30), ("hbm_bandwidth_bytes_per_s", 1e-300), ("vmem_bandwidth_bytes_per_s", 1e40),
    ("ici_bandwidth_bytes_per_s", 1e-300), ("hop_latency_s", 3600.0), ("pcie_bandwidth_bytes_per_s", 1.0),
    ("dcn_bandwidth_bytes_per_s", 1e-300), ("mxu_dim", 10**9), ("ici_links", 10**6), ("torus_dims", 40),
])
def test_implausible_values_are_refused_with_the_range(field, value):
    with pytest.raises(SpecError) as info:
        get_chip("tpu-v5e").replace(**{field: value})
    message = str(info.value)
    assert field in message and " from " in message and " to " in message


def test_every_preset_lies_inside_the_plausible_ranges():
    from simulator.hardware.specs import PLAUSIBLE

    for spec in PRESETS.values():
        for field, (low, high, _) in PLAUSIBLE.items():
            assert low <= getattr(spec, field) <= high, (spec.name, field)


def test_chip_file_with_an_implausible_value_names_the_file(tmp_path):
    path = tmp_path / "fast.toml"
    path.write_text('base = "tpu-v5e"\npeak_bf16_flops_per_s = 1e300\n')
    with pytest.raises(SpecError, match=r"chip file fast.toml: .*peak_bf16_flops_per_s=1e\+300 must be a finite "
                                        r"number from 1e6 to 1e18 FLOP/s"):
        load_chip_file(path)


@pytest.mark.parametrize("text,match", [("chip = 5\n", "chip = 5 must be a \\[chip\\] table"),
                                        ("a = " + "[" * 40 + "]" * 40 + "\n", "levels deep"),
                                        ("a = " + "[" * 3000 + "]" * 3000 + "\n", "levels deep")])
def test_chip_files_that_are_not_a_table_of_fields(tmp_path, text, match):
    path = tmp_path / "chip.toml"
    path.write_text(text)
    with pytest.raises(SpecError, match=match):
        load_chip_file(path)


def test_bad_wraparound_names_the_valid_rules():
    with pytest.raises(SpecError) as info:
        get_chip("tpu-v5e").replace(wraparound="donut")
    message = str(info.value)
    assert "donut" in message
    for rule in ("length16", "multiple4", "switch"):
        assert rule in message


def test_unknown_dtype_names_the_valid_ones():
    with pytest.raises(SpecError, match="fp16.*bf16"):
        get_chip("tpu-v5e").peak_flops_per_s("fp16")


def test_get_chip_unknown_lists_valid_names():
    with pytest.raises(SpecError) as info:
        get_chip("nope")
    message = str(info.value)
    assert "nope" in message
    for name in REFERENCE_TABLE:
        assert name in message
    assert issubclass(SpecError, PodsimError)


def test_to_dict_round_trips():
    spec = get_chip("h100")
    assert ChipSpec(**spec.to_dict()) == spec


# --- chip files ---------------------------------------------------------------------------------------


def test_full_chip_file_parses_unit_strings_to_si(full_chip_file):
    spec = load_chip_file(full_chip_file)
    assert spec.name == "my-chip"
    assert spec.peak_bf16_flops_per_s == pytest.approx(197 * 10**12, rel=1e-12)
    assert spec.peak_int8_flops_per_s == pytest.approx(394 * 10**12, rel=1e-12)
    assert spec.vpu_flops_per_s == pytest.approx(6.5 * 10**12, rel=1e-12)
    assert spec.hbm_capacity_bytes == 16 * 1024**3
    assert spec.hbm_bandwidth_bytes_per_s == pytest.approx(819 * 10**9, rel=1e-12)
    assert spec.vmem_capacity_bytes == 128 * 1024**2
    assert spec.vmem_bandwidth_bytes_per_s == pytest.approx(18 * 10**12, rel=1e-12)
    assert spec.ici_bandwidth_bytes_per_s == pytest.approx(45 * 10**9, rel=1e-12)
    assert spec.hop_latency_s == pytest.approx(1e-6, rel=1e-12)
    assert spec.pcie_bandwidth_bytes_per_s == pytest.approx(16 * 10**9, rel=1e-12)
    assert spec.dcn_bandwidth_bytes_per_s == 3.125e9
    assert (spec.mxu_dim, spec.mxu_count, spec.tensor_cores, spec.ici_links) == (128, 4, 1, 4)
    assert (spec.wraparound, spec.torus_dims) == ("length16", 2)
    assert "my_chip.toml" in spec.source


def test_chip_table_form_equals_top_level_form(full_chip_file, tmp_path):
    table = tmp_path / "table.toml"
    table.write_text("[chip]\n" + full_chip_file.read_text())
    assert load_chip_file(table) == load_chip_file(full_chip_file)


def test_base_preset_with_one_override(tmp_path):
    path = tmp_path / "fast_v5e.toml"
    path.write_text('base = "tpu-v5e"\nhbm_bandwidth_bytes_per_s = "1TB/s"\n')
    spec = load_chip_file(path)
    assert spec.hbm_bandwidth_bytes_per_s == pytest.approx(1e12, rel=1e-12)
    assert spec.peak_bf16_flops_per_s == pytest.approx(1.97e14)
    assert spec == get_chip("tpu-v5e").replace(hbm_bandwidth_bytes_per_s=1e12)
    assert "tpu-v5e" in spec.source


def test_base_must_be_a_known_preset(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('base = "tpu-v9"\n')
    with pytest.raises(SpecError, match="tpu-v9"):
        load_chip_file(path)


def test_base_that_is_not_a_string_raises_spec_error(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('base = ["tpu-v5e"]\n')
    with pytest.raises(SpecError):
        load_chip_file(path)


def test_missing_fields_are_named(tmp_path):
    path = tmp_path / "partial.toml"
    path.write_text('name = "half"\npeak_bf16_flops_per_s = "100TFLOP/s"\n')
    with pytest.raises(SpecError) as info:
        load_chip_file(path)
    message = str(info.value)
    for field in ("hbm_bandwidth_bytes_per_s", "ici_links", "wraparound"):
        assert field in message
    assert "peak_bf16_flops_per_s" not in message  # given, so not reported missing


@pytest.mark.parametrize(
    ("line", "fragment"),
    [
        ('mxu_count = "four"', "mxu_count"),
        ("ici_links = 4.5", "ici_links"),
        ('hbm_bandwidth_bytes_per_s = "fast"', "fast"),
        ('hbm_bandwidth_bytes_per_s = "819Gb/s"', "819Gb/s"),
        ('hop_latency_s = "1GB"', "hop_latency_s"),
        ("name = 5", "name"),
        ("hbm_bandwidth_bytes_per_s = 0", "hbm_bandwidth_bytes_per_s"),
    ],
)
def test_mistyped_fields_raise_spec_error(tmp_path, line, fragment):
    path = tmp_path / "typo.toml"
    path.write_text(f'base = "tpu-v5e"\n{line}\n')
    with pytest.raises(SpecError) as info:
        load_chip_file(path)
    assert fragment in str(info.value)


def test_unknown_field_lists_valid_fields(tmp_path):
    path = tmp_path / "extra.toml"
    path.write_text('base = "tpu-v5e"\nturbo_mode = true\n')
    with pytest.raises(SpecError) as info:
        load_chip_file(path)
    message = str(info.value)
    assert "turbo_mode" in message
    for field in ("hbm_bandwidth_bytes_per_s", "peak_bf16_flops_per_s", "wraparound"):
        assert field in message


def test_invalid_toml(tmp_path):
    path = tmp_path / "broken.toml"
    path.write_text("name = \n[[[")
    with pytest.raises(SpecError) as info:
        load_chip_file(path)
    assert "broken.toml" in str(info.value)
    assert "TOML" in str(info.value)


def test_missing_file(tmp_path):
    path = tmp_path / "nowhere.toml"
    with pytest.raises(SpecError) as info:
        load_chip_file(path)
    assert "nowhere.toml" in str(info.value)
