"""Inputs stay meaningful after what is computed from them (`simulator.units.check_derived`), and old import
paths keep working with a deprecation warning until their documented removal.

A fault fraction whose share of full speed underflows is refused; a price whose cost overflows is refused;
each through the CLI with one line on stderr and exit status 2, while sensible values give the hand-derived
number.
"""
import importlib
import json
import sys
from pathlib import Path

import pytest

import simulator
from simulator.errors import QuantityError
from simulator.frontend.cli import main
from simulator.hardware.specs import get_chip
from simulator.units import check_derived

V5E = get_chip("tpu-v5e")


def fails(capsys, *argv: str) -> str:
    """The one-line error of a refused command (exit status 2)."""
    assert main(list(argv)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    return err


def test_check_derived_refuses_non_finite_and_out_of_range_values():
    assert check_derived(2.5, what="the cost", given="--price 9", minimum=0.0) == 2.5
    for bad in (float("inf"), float("nan"), 0.0):
        with pytest.raises(QuantityError, match=r"--price 9 makes the cost .* must be a finite number"):
            check_derived(bad, what="the cost", given="--price 9", minimum=1e-300)


@pytest.mark.parametrize("fault", ["link:0,0->0,1=1e-300", "chip:0=slow:1e-300"])
def test_a_fault_fraction_that_underflows_is_refused(capsys, fault):
    err = fails(capsys, "collective", "all_reduce", "--chip", "tpu-v5e", "--topology", "torus:4x4", "--bytes", "1MB",
                "--fault", fault)
    assert "1e-300" in err and "1e-9" in err


def test_fault_fractions_whose_product_underflows_are_refused(capsys):
    err = fails(capsys, "collective", "all_reduce", "--chip", "tpu-v5e", "--topology", "torus:4x4", "--bytes", "1MB",
                "--fault", "link:0,0->0,1=1e-5", "--fault", "link:0,0->0,1=1e-5")
    assert "names cable 0<->1 again" in err  # one cable takes one fraction (h31tree), so no product to underflow
    err = fails(capsys, "run", "matmul_roofline", "--fault", "chip:0=slow:1e-5", "--fault", "chip:0=slow:1e-5")
    assert "multiplying the --fault slow factors of one chip" in err


def test_a_small_fault_fraction_still_runs_at_that_share_of_the_bandwidth(capsys):
    assert main(["collective", "all_reduce", "--chip", "tpu-v5e", "--topology", "torus:4x4", "--bytes", "1MB",
                 "--fault", "link:0,0->0,1=1e-5", "--json"]) == 0
    (record,) = json.loads(capsys.readouterr().out)["faults"]
    assert record["bandwidth_bytes_per_s"] == pytest.approx(V5E.ici_bandwidth_bytes_per_s * 1e-5)


TRAIN = ["model", "llama-3-8b", "--mode", "train", "--batch", "64", "--seq", "8192", "--mesh", "fsdp=64",
         "--chip", "tpu-v5p", "--no-simulate"]  # 39 GiB a chip: fits 95 GiB


@pytest.mark.parametrize("price", ["1e308", "1e300", "1e-320"])
def test_a_price_whose_cost_overflows_or_vanishes_is_refused(capsys, price):
    err = fails(capsys, *TRAIN, "--price-per-chip-hour", price)
    assert "--price-per-chip-hour" in err and "cost of a step" in err


def test_a_price_gives_the_cost_of_the_step(capsys):
    assert main([*TRAIN, "--price-per-chip-hour", "2.5", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    cost = 2.5 * 64 * out["step_time_s"] / 3600  # dollars per chip-hour x chip-hours
    assert out["cost_per_step_usd"] == pytest.approx(cost)
    assert out["cost_per_million_tokens_usd"] == pytest.approx(cost / (64 * 8192) * 1e6)


def test_a_scenarios_price_whose_cost_overflows_is_refused_and_a_sane_one_is_the_cost(capsys):
    assert "price_per_chip_hour 1e+308 makes the cost of a step (USD) inf" in fails(
        capsys, "run", "transformer_step", "--set", "price_per_chip_hour=1e308")
    assert main(["run", "transformer_step", "--set", "price_per_chip_hour=2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)  # llama-2-7b decode on model=4: 4 chips, batch 8, one new token
    assert out["cost_per_step_usd"] == pytest.approx(2 * 4 * out["step_time_s"] / 3600)
    assert out["cost_per_million_tokens_usd"] == pytest.approx(out["cost_per_step_usd"] / 8 * 1e6)


def test_a_cost_over_a_whole_run_that_overflows_is_refused(capsys):
    err = fails(capsys, *TRAIN, "--price-per-chip-hour", "1e9", "--tokens-total", "1e18")
    assert "cost of the run" in err


@pytest.mark.parametrize("old", sorted(simulator.MOVED))
def test_every_moved_module_imports_as_the_module_it_became_with_a_warning(old):
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=rf"{old} moved to {simulator.MOVED[old]}.*{simulator.MOVED_REMOVAL}"):
        module = importlib.import_module(old)
    assert module is importlib.import_module(simulator.MOVED[old])


def test_the_removal_date_is_in_the_readme():
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    assert simulator.MOVED_REMOVAL in readme and "simulator.MOVED" in readme


def test_a_user_scenario_on_the_old_import_path_runs(tmp_path, capsys):
    """Issue 34: a scenario importing ``simulator.result`` failed with ModuleNotFoundError."""
    path = tmp_path / "old_paths.py"
    path.write_text('''"""A scenario written before the layering."""
from simulator.result import Result
from simulator.system import System


def run(*, n: int = 1) -> Result:
    """One load of a kB."""
    system = System()
    system.chip.load(1e3 * n, "x")
    system.run()
    return Result("old_paths", {"n": n}, system.metrics(), trace=system.trace)
''', encoding="utf-8")
    for old in ("simulator.result", "simulator.system"):  # imported afresh, so the warning is given here
        sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning) as warned:
        assert main(["run", str(path), "--json"]) == 0
    assert {str(w.message).split(":")[0] for w in warned} == {"simulator.result moved to simulator.report.result",
                                                              "simulator.system moved to simulator.engine.system"}
    assert json.loads(capsys.readouterr().out)["end_to_end_s"] == pytest.approx(1e3 / V5E.hbm_bandwidth_bytes_per_s)
