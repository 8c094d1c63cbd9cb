"""Every built-in scenario runs with its defaults on every chip preset (issue 17).

Defaults that depend on the chip -- matmul_roofline's k (A must fit VMEM beside two B and C blocks),
collective_sweep's topology (a v5e pod, a v5p cube or an NVLink node), the slices meshes land on --
must give a run on each preset, not a capacity or topology error. The default-suite walk shortens the
slow scenarios' sweeps and models (`QUICK`: nothing that the chip-dependent defaults are chosen from);
the benchmark walk (``pytest -m benchmark``) runs every default exactly as it is.
"""
from __future__ import annotations

from typing import Any

import pytest

from simulator.frontend.scenario import list_scenarios, load_scenario, run_scenario, scenario_params
from simulator.hardware.specs import PRESETS

SCENARIOS = sorted(list_scenarios())

#: Per scenario, shorter sweeps or a smaller model for the default suite; none of these is an input the
#: chip-dependent defaults are chosen from (matmul_roofline's k depends on m, block_n and VMEM, not n).
QUICK: dict[str, dict[str, Any]] = {
    "collective_sweep": {"sizes": (1, 4**16)},  # the two ends of the default sweep (1 B and 4 GiB)
    "decode_batch_sweep": {"batches": (1,)},  # one point: no bisection for the crossover
    "fsdp_vs_tp": {"meshes": ("fsdp=4,model=4",)},
    "long_context_decode": {"simulate": False},  # 16 chips of llama-3-70b at 8Ki context: a benchmark
    "matmul_roofline": {"n": 1024},  # four column blocks of the default width instead of 64
    "pipeline_bubble": {"microbatches": (16,), "schedules": ("interleaved",)},
    "straggler_tail": {"samples": 2},
    "transformer_step": {"model": "gpt2", "context": 1000},  # gpt2's positions end at 1,024
}


def _kwargs(name: str, chip: str, quick: bool) -> dict[str, Any]:
    params = scenario_params(load_scenario(name))
    assert "chip" in params, f"scenario {name} takes no chip: it cannot run on every preset"
    kwargs: dict[str, Any] = {"chip": chip, **(QUICK.get(name, {}) if quick else {})}
    if quick and "trace" in params:
        kwargs["trace"] = False
    return kwargs


@pytest.mark.parametrize("chip", list(PRESETS))
@pytest.mark.parametrize("name", SCENARIOS)
def test_scenario_runs_on_every_preset(name, chip):
    result = run_scenario(load_scenario(name), _kwargs(name, chip, quick=True))
    assert result.params.get("chip") in (chip, None)  # the preset was used (echoed where the scenario echoes it)
    assert result.dumps() and result.summary()  # printable as JSON (no inf, no NaN) and as text


@pytest.mark.benchmark
@pytest.mark.parametrize("chip", list(PRESETS))
@pytest.mark.parametrize("name", SCENARIOS)
def test_scenario_runs_with_all_its_defaults_on_every_preset(name, chip):
    result = run_scenario(load_scenario(name), _kwargs(name, chip, quick=False))
    assert result.metrics["end_to_end_s"] > 0


def test_quick_overrides_name_real_parameters():
    for name, overrides in QUICK.items():
        if name in SCENARIOS:
            assert set(overrides) <= set(scenario_params(load_scenario(name))), name


@pytest.mark.parametrize("chip", ["tpu-v4", "h100", "a100"])
def test_matmul_roofline_default_k_keeps_two_buffers_in_vmem(chip):
    """The original failure: k = 16384 put 42 MB of blocks in a GPU's 33 MB. The chosen k is the largest
    power of two <= 16384 whose A (m = 1024 rows, bf16) plus two B and two C blocks (256 columns) fit."""
    from scenarios import matmul_roofline

    vmem = PRESETS[chip].vmem_capacity_bytes
    m, block_n = 1024, 256

    def need(k: int) -> int:
        return 2 * (m * k + 2 * (k * block_n + m * block_n))

    expected = max(k for k in (2**i for i in range(7, 15)) if need(k) <= vmem)
    r = matmul_roofline.run(chip=chip, n=1024, m_values=(1024,))
    assert r.params["k"] == expected < 16384
    assert r.extra["buffers_effective"] == 2


@pytest.mark.parametrize("chip,topology", [("tpu-v5e", "slice:16x16"), ("tpu-v6e", "slice:16x16"),
                                           ("tpu-v4", "slice:4x4x4"), ("tpu7x", "slice:4x4x4"),
                                           ("h100", "switch:8"), ("a100", "switch:8")])
def test_collective_sweep_defaults_to_the_chips_own_topology(chip, topology):
    from scenarios import collective_sweep

    r = collective_sweep.run(chip=chip, sizes=(1, 4**16), trace=False)
    assert r.params["topology"] == topology
    assert "notes" not in r.metrics  # the chip's own topology: nothing to warn about
    assert r.extra["crossover_bytes"] > 0
