"""Issue 17's friction: calibrated roofline and model, buffers VMEM cannot hold, token counts, negative
quantities, empty chip names, topologies that are not the chip's own, misuse of the Python API, SPMD.

Oracles come from first principles and the committed calibration constants (the fitted data, read from
simulator/hardware/data/calibration.json, not from the code that applies them).
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from simulator import PodsimError, System, spmd, start_collective
from simulator.engine.environment import ApiMisuseError
from simulator.frontend.cli import main
from simulator.hardware.gpu_kernels import gpu_kernels
from simulator.hardware.specs import PRESETS
from simulator.units import parse_tokens
from simulator.workloads.pipeline import Operand, Step, effective_buffers

CALIBRATION = json.loads((Path(__file__).resolve().parents[1] / "simulator" / "hardware" / "data" /
                          "calibration.json").read_text())["chips"]


def run_json(capsys, *argv: str) -> dict:
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def fails(capsys, *argv: str) -> str:
    """The one-line error of a refused command (exit status 2)."""
    assert main(list(argv)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    return err


# --- roofline --calibrated ----------------------------------------------------------------------------------


def test_calibrated_roofline_of_a_skinny_h100_matmul(capsys):
    """64 x 4096 x 4096 on an H100 runs on the GPU kernel model: its chosen tile's output tiles fill a fraction of
    the 132 SMs in one wave, and its time is the kernel model's, launch included."""
    m, k, n = 64, 4096, 4096
    fit = CALIBRATION["h100"]
    kernels = gpu_kernels("h100")
    peak, bw = PRESETS["h100"].peak_bf16_flops_per_s, PRESETS["h100"].hbm_bandwidth_bytes_per_s
    flops, nbytes = 2 * m * k * n, 2 * (m * k + k * n + m * n)
    (tm, tn), split = kernels.best_tile(m, k, n)
    tiles = math.ceil(m / tm) * math.ceil(n / tn)
    t_compute = kernels.matmul_s(m, k, n)
    t_memory = nbytes / (bw * fit["hbm_fraction"])
    data = run_json(capsys, "roofline", "--chip", "h100", "--matmul", f"{m},{k},{n}", "--calibrated")
    assert data["t_compute_s"] == pytest.approx(flops / peak) and data["bound"] == "memory"  # ideal unchanged
    assert data["output_tiles"] == tiles < 132 and data["cores"] == 132 and data["tile"] == [tm, tn]
    assert data["split_k"] == split
    assert data["wave_fill"] == pytest.approx(tiles / 132)  # one part-full wave
    assert data["calibrated_t_compute_s"] == pytest.approx(t_compute, rel=1e-12)
    assert data["calibrated_t_memory_s"] == pytest.approx(t_memory, rel=1e-12)
    assert data["calibrated_lower_bound_s"] == pytest.approx(max(t_compute, t_memory))
    assert data["calibrated_upper_bound_s"] == pytest.approx(t_compute + t_memory)
    assert data["calibrated_bound"] == "compute"  # a part-full wave: the fitted kernel is the slower roof
    assert data["matmul_efficiency"] == pytest.approx(flops / (peak * t_compute))
    assert data["hbm_efficiency"] == fit["hbm_fraction"]


def test_calibrated_roofline_pads_the_matmul_to_the_kernels_tiles(capsys):
    """100^3 on an H100 runs in tiles of the kernel's choice, m and n padded to them, k to the bf16 k-tile (64)."""
    data = run_json(capsys, "roofline", "--chip", "h100", "--matmul", "100,100,100", "--calibrated")
    tm, tn = data["tile"]
    rows, cols = math.ceil(100 / tm), math.ceil(100 / tn)
    assert data["output_tiles"] == rows * cols and data["padded_flops"] == 2 * rows * tm * cols * tn * 128
    assert data["calibrated_t_compute_s"] == pytest.approx(gpu_kernels("h100").matmul_s(100, 100, 100), rel=1e-12)


def test_calibrated_roofline_of_a_flop_count_has_no_wave_or_launch(capsys):
    frac = CALIBRATION["tpu-v5e"]["matmul"]["peak_fraction"]
    data = run_json(capsys, "roofline", "--chip", "tpu-v5e", "--flops", "2e12", "--bytes", "1GB", "--calibrated")
    assert data["calibrated_t_compute_s"] == pytest.approx(2e12 / (197e12 * frac))
    assert data["calibrated_t_memory_s"] == pytest.approx(1e9 / (820e9 * CALIBRATION["tpu-v5e"]["hbm_fraction"]))
    assert data["matmul_launch_s"] == 0 and "output_tiles" not in data


def test_calibrated_roofline_on_an_a100_runs_its_kernel_model(capsys):
    data = run_json(capsys, "roofline", "--chip", "a100", "--matmul", "1024,1024,1024", "--calibrated")
    assert data["calibrated_t_compute_s"] == pytest.approx(gpu_kernels("a100").matmul_s(1024, 1024, 1024))
    assert data["calibrated_t_compute_s"] > 2 * 1024**3 / PRESETS["a100"].peak_bf16_flops_per_s


def test_calibrated_roofline_text_sets_ideal_beside_calibrated(capsys):
    assert main(["roofline", "--chip", "h100", "--matmul", "1024,1024,1024", "--calibrated"]) == 0
    out = capsys.readouterr().out
    assert "ideal" in out and "calibrated" in out and "output tiles of" in out and "on 132 cores" in out
    assert main(["roofline", "--chip", "h100", "--matmul", "1024,1024,1024"]) == 0
    assert "calibrated" not in capsys.readouterr().out


def test_calibrated_roofline_on_a_chip_file_without_a_fit_is_one_line(capsys, full_chip_file):
    err = fails(capsys, "roofline", "--chip-file", str(full_chip_file), "--matmul", "8,8,8", "--calibrated")
    assert "no calibrated model for chip 'my-chip'" in err


# --- model --list and --calibrated --------------------------------------------------------------------------


def test_model_list_names_every_preset_with_its_parameters(capsys):
    from simulator.workloads.transformer import PRESETS as MODELS

    assert main(["model", "--list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == list(MODELS)
    assert "6.74B params" in lines[list(MODELS).index("llama-2-7b")]  # the published 6.74 billion


def test_model_calibrated_sits_beside_the_ideal_decode_step(capsys):
    """A memory-bound decode step (gpt2, batch 1) streams its weights; calibrated HBM runs at the fitted
    fraction, so the calibrated step is the ideal one over that fraction (to within the tiny compute)."""
    ideal = run_json(capsys, "model", "gpt2", "--chip", "h100")
    both = run_json(capsys, "model", "gpt2", "--chip", "h100", "--calibrated")
    # one simulation (the calibrated one): the ideal figure beside it is the closed-form bound of the same ops,
    # at most the ideal simulation and, for a weight-streaming step, within its tiny store of it
    assert both["ideal_from"] == "closed form" and ideal["ideal_from"] == "simulation"
    assert both["step_time_s"] <= ideal["step_time_s"] * (1 + 1e-9)
    assert both["step_time_s"] == pytest.approx(ideal["step_time_s"], rel=0.01)
    assert both["calibrated_step_time_s"] == pytest.approx(ideal["step_time_s"] / CALIBRATION["h100"]["hbm_fraction"],
                                                           rel=0.01)
    assert both["calibrated_tokens_per_s"] == pytest.approx(1 / both["calibrated_step_time_s"])
    assert main(["model", "gpt2", "--chip", "h100", "--calibrated"]) == 0
    assert "(calibrated " in capsys.readouterr().out


def test_model_calibrated_training_step(capsys):
    both = run_json(capsys, "model", "gpt2", "--mode", "train", "--chip", "h100", "--mesh", "data=2", "--batch", "2",
                    "--seq", "256", "--calibrated")
    assert both["calibrated_step_time_s"] > both["step_time_s"]
    assert both["calibrated_mfu"] == pytest.approx(both["mfu"] * both["step_time_s"] / both["calibrated_step_time_s"])


def test_model_calibrated_needs_the_simulation(capsys):
    assert "drop --no-simulate" in fails(capsys, "model", "gpt2", "--calibrated", "--no-simulate")


# --- buffers VMEM cannot hold -------------------------------------------------------------------------------


def _blocks(*sizes: float) -> list[Step]:
    return [Step(f"s{i}", (Operand(f"x{i}", "x", b),)) for i, b in enumerate(sizes)]


def test_effective_buffers_counts_how_many_blocks_fit_at_once():
    assert effective_buffers(_blocks(40, 40, 40, 40), 100, 4) == 2  # 80 fits, 120 does not
    assert effective_buffers(_blocks(40, 40, 40, 40), 200, 4) == 4
    assert effective_buffers(_blocks(40, 40), 100, 8) == 8  # every block fits at once: nothing limits
    assert effective_buffers(_blocks(60, 60, 60), 100, 2) == 1
    assert effective_buffers(_blocks(10, 90, 10, 10), 99, 3) == 1  # the 90 leaves room for nothing
    assert effective_buffers(_blocks(10, 90, 10, 10), 100, 3) == 2  # 10 + 90 fits exactly


def test_effective_buffers_counts_a_carried_operand_once():
    w = Operand("w", "weights", 60)
    steps = [Step(f"s{i}", (w, Operand(f"x{i}", "inputs", 10))) for i in range(4)]  # w stays resident
    assert effective_buffers(steps, 85, 3) == 2  # w + x0 + x1 = 80; a third input makes 90
    assert effective_buffers(steps, 95, 3) == 3


def test_double_buffer_that_vmem_cannot_hold_is_refused_with_the_numbers_and_a_count_that_fits(capsys):
    """Issue 30: 400 MiB in 4 blocks of 100 MiB, 2 buffers, 128 MiB of VMEM: refused (it ran silently serial),
    naming the 200 MiB the buffers need, the 128 MiB there is, and the fewest blocks that do fit -- 7 blocks of
    57.1 MiB, 114 MiB for two (6 would need 133 MiB), which the suggestion's own run confirms."""
    args = ["run", "double_buffer", "--set", "load_bytes=400MiB", "--set", "compute_flops=100e9", "--set", "blocks=4",
            "--set", "clamp_buffers=false"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "2 buffers of 104.9 MB blocks need 209.7 MB of VMEM but tpu-v5e holds 134.2 MB" in err
    assert "blocks=7 " in err and "clamp_buffers=false" in err
    data = run_json(capsys, *args[:-3], "blocks=7")
    assert data["buffers_effective"] == 2


def test_double_buffer_that_vmem_cannot_hold_runs_serially_when_asked_and_warns(capsys):
    """400 MiB in 4 blocks of 100 MiB with 128 MiB of VMEM, clamp_buffers asked: one block at a time, 4 (a + c)."""
    a = 100 * 2**20 / PRESETS["tpu-v5e"].hbm_bandwidth_bytes_per_s
    c = 25e9 / PRESETS["tpu-v5e"].peak_bf16_flops_per_s
    args = ["run", "double_buffer", "--set", "load_bytes=400MiB", "--set", "compute_flops=100e9", "--set", "blocks=4",
            "--set", "clamp_buffers=true"]
    data = run_json(capsys, *args)
    assert data["buffers_effective"] == 1 and data["params"]["buffers"] == 2
    assert data["end_to_end_s"] == pytest.approx(4 * (a + c), rel=1e-9)
    assert data["analytic_s"] == pytest.approx(4 * (a + c), rel=1e-9)
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "warning (clamp_buffers, the default): VMEM" in text and "buffers_effective" in text
    assert "not the 2 buffers asked" in text and "blocks=7 " in text  # the block count that fits, checked
    assert main(args[:-2]) == 0  # the default runs it the same way (the public contract's buffers_effective)


def test_double_buffer_gets_the_buffers_vmem_holds(capsys):
    """8 blocks of 50 MiB, 4 buffers asked: VMEM holds 2, so it is a double buffer: a + 7 max(a, c) + c."""
    a = 50 * 2**20 / PRESETS["tpu-v5e"].hbm_bandwidth_bytes_per_s
    c = 100e9 / 8 / PRESETS["tpu-v5e"].peak_bf16_flops_per_s
    data = run_json(capsys, "run", "double_buffer", "--set", "load_bytes=400MiB", "--set", "compute_flops=100e9",
                    "--set", "blocks=8", "--set", "buffers=4", "--set", "clamp_buffers=true")
    assert data["buffers_effective"] == 2
    assert data["end_to_end_s"] == pytest.approx(a + 7 * max(a, c) + c, rel=1e-9)


def test_double_buffer_that_fits_reports_the_buffers_asked(capsys):
    data = run_json(capsys, "run", "double_buffer", "--set", "buffers=3", "--set", "blocks=4")
    assert data["buffers_effective"] == 3
    assert main(["run", "double_buffer"]) == 0
    text = capsys.readouterr().out
    assert "warning" not in text and "buffers asked" not in text


def test_weight_reuse_says_its_vmem_holds_one_step(capsys):
    data = run_json(capsys, "run", "weight_reuse", "--set", "buffers=2")
    assert data["buffers_effective"] == 1
    assert main(["run", "weight_reuse", "--set", "buffers=2"]) == 0
    assert "run as 1 (buffers_effective)" in capsys.readouterr().out


def test_matmul_roofline_with_a_k_too_large_for_two_buffers_says_so():
    """k = 12000 on an H100: A (1024 x 12000 bf16, 24.6 MB) leaves room for one 6.6 MB B/C pair, not two."""
    from scenarios import matmul_roofline

    r = matmul_roofline.run(chip="h100", k=12000, n=1024, m_values=(1024,))
    assert r.extra["buffers_effective"] == 1
    assert any("buffers_effective" in line for line in r.details)


# --- inputs accepted silently or unclearly -------------------------------------------------------------------


@pytest.mark.parametrize("argv", [
    ["run", "double_buffer", "--chip", ""],
    ["roofline", "--chip", "", "--matmul", "8,8,8"],
    ["collective", "all_gather", "--chip", "", "--topology", "ring:4", "--bytes", "1MB"],
    ["send", "--chip", "", "--topology", "ring:4", "--src", "0", "--dst", "1", "--bytes", "1MB"],
    ["model", "gpt2", "--chip", ""],
])
def test_an_empty_chip_name_is_an_unknown_chip(capsys, argv):
    assert "unknown chip ''; valid chips: tpu-v4" in fails(capsys, *argv)


@pytest.mark.parametrize("argv", [
    ["model", "gpt2", "--mesh", "model=2,model=4"],
    ["run", "sharded_matmul", "--mesh", "X=2,X=4"],
    ["run", "transformer_step", "--set", "mesh=model=2,model=4"],
])
def test_a_repeated_mesh_axis_is_refused(capsys, argv):
    assert "twice" in fails(capsys, *argv)


def test_token_counts_take_binary_prefixes_and_refuse_the_ambiguous_k(capsys):
    assert parse_tokens("8Ki", name="--context") == 8192
    assert parse_tokens("0.5Ki", name="--context") == 512
    assert parse_tokens("8192", name="--context") == 8192
    assert parse_tokens("1e3", name="--context") == 1000
    with pytest.raises(PodsimError, match=r"ambiguous for a token count: write 8000 or 8Ki \(= 8192\)"):
        parse_tokens("8k", name="--context")
    data = run_json(capsys, "model", "llama-3-8b", "--context", "8Ki", "--no-simulate")
    assert data["context"] == 8192
    assert "write 8000 or 8Ki (= 8192)" in fails(capsys, "model", "gpt2", "--context", "8k")
    assert "write 2000 or 2Ki (= 2048)" in fails(capsys, "model", "gpt2", "--mode", "prefill", "--seq", "2k")
    assert "write 8000 or 8Ki" in fails(capsys, "run", "transformer_step", "--set", "context=8k")


@pytest.mark.parametrize("argv", [
    ["collective", "all_gather", "--topology", "ring:4", "--bytes", "-5MB"],
    ["roofline", "--chip", "tpu-v5e", "--flops", "1e12", "--bytes", "-5MB"],
    ["send", "--topology", "ring:4", "--src", "0", "--dst", "1", "--bytes", "-5MB"],
])
def test_a_negative_quantity_reaches_the_quantity_check(capsys, argv):
    err = fails(capsys, *argv)
    # the value as typed, not as converted (-5000000.0)
    assert "--bytes='-5MB'" in err and "must be a finite number" in err and "expected one argument" not in err


@pytest.mark.parametrize("chip,topology,words", [
    ("h100", "torus:4x4", "GPUs connect through NVLink switches"),
    ("b200", "ring:8", "GPUs connect through NVLink switches"),
    ("tpu-v5e", "switch:8", "link to their torus neighbours over ICI, not through a switch"),
    ("tpu-v5e", "torus:4x4x4", "slices are 2-D tori"),
    ("tpu-v5e", "slice:3x8", "no real tpu-v5e slice is 3x8 (no real slice has 24 chips)"),
    ("tpu-v5e", "slice:2x8", "no real tpu-v5e slice is 2x8 (real 16-chip slices: 4x4)"),
    ("tpu-v5p", "slice:4x4x6", "no real tpu-v5p slice is 4x4x6"),
])
def test_a_topology_that_is_not_the_chips_own_is_simulated_and_named(capsys, chip, topology, words):
    data = run_json(capsys, "collective", "all_gather", "--chip", chip, "--topology", topology, "--bytes", "1MB")
    assert data["time_s"] > 0 and any(words in note for note in data["notes"])
    assert main(["collective", "all_gather", "--chip", chip, "--topology", topology, "--bytes", "1MB"]) == 0
    assert "note: " in capsys.readouterr().out


@pytest.mark.parametrize("chip,topology", [("h100", "switch:8"), ("h100", "nodes:2:8"), ("tpu-v5e", "slice:16x16"),
                                           ("tpu-v5e", "slice:2x4"), ("tpu-v5p", "slice:4x4x8"), ("tpu-v5e", "ring:8"),
                                           ("tpu-v5e", "multislice:2:16x16")])
def test_the_chips_own_topology_has_no_note(chip, topology):
    assert System(chip, topology=topology, trace=False).notes == []


def test_a_mesh_on_a_slice_no_chip_has_says_so(capsys):
    """data=3 x model=4 on v5e lays a 3x4 slice; Cloud TPU sells no 12-chip v5e slice."""
    data = run_json(capsys, "model", "gpt2", "--mesh", "data=3,model=4", "--batch", "3", "--no-simulate")
    assert any("3x4" in note and "no real slice has 12 chips" in note for note in data["notes"])
    r = run_json(capsys, "run", "transformer_step", "--set", "model=gpt2", "--set", "mesh=data=3,model=4",
                 "--set", "batch=6", "--set", "context=1000")
    assert any("no real tpu-v5e slice" in note for note in r["notes"])
    assert "notes" not in run_json(capsys, "model", "gpt2", "--mesh", "data=2,model=4", "--batch", "2", "--no-simulate")


# --- the Python API -----------------------------------------------------------------------------------------


def test_a_chip_event_given_to_env_process_is_a_podsim_error():
    system = System("tpu-v5e")
    with pytest.raises(ApiMisuseError, match=r"given a Timeout event.*yield chip.matmul"):
        system.env.process(system.chip.matmul(128, 128, 128))
    with pytest.raises(PodsimError, match="generator function work itself; call it"):
        def work(chip):
            yield chip.matmul(8, 8, 8)
        system.process(work, "work")


def test_a_process_that_yields_a_non_event_is_a_podsim_error(tmp_path):
    system = System("tpu-v5e")

    def forgot_to_call(chip):
        yield chip.matmul  # the method, not its event

    system.process(forgot_to_call(system.chip), "forgot")
    with pytest.raises(ApiMisuseError, match="which is not an event.*call it and yield the event"):
        system.run()


def test_spmd_starts_every_chip_and_waits_for_the_slowest():
    """Chip i runs i + 1 matmuls of 1024^3: the group is done when chip 3 is, after 4 of them."""
    system = System("tpu-v5e", topology="ring:4")
    one = 2 * 1024**3 / 197e12
    log = []

    def program(chip):
        for _ in range(chip.index + 1):
            yield chip.matmul(1024, 1024, 1024)
        log.append((chip.index, round(system.env.now / one, 9)))

    def main_process():
        yield spmd(system, program)
        log.append(("all", round(system.env.now / one, 9)))

    system.process(main_process(), "main")
    system.run()
    assert log == [(0, 1), (1, 2), (2, 3), (3, 4), ("all", 4)]


def test_spmd_on_a_group_then_a_collective():
    system = System("tpu-v5e", topology="ring:4")

    def program(chip):
        yield chip.matmul(1024, 1024, 1024)

    def step():
        yield spmd(system, program, chips=[1, 2])
        yield start_collective("all_gather", system, 4e6)

    system.process(step(), "step")
    end = system.run()
    assert {s.chip for s in system.trace.spans if s.unit == "mxu"} == {1, 2}
    assert end > 2 * 1024**3 / 197e12
    with pytest.raises(ApiMisuseError, match="no chip 9"):
        spmd(system, program, chips=[9])
    with pytest.raises(ApiMisuseError, match="not a generator"):
        spmd(System("tpu-v5e"), lambda chip: None)
