"""vLLM 0.6's tensor-parallel worker sync (simulator.workloads.serving.host) against Vidur's barrier rows read
straight from the package CSV, its place in the replay (every step of a window), and the one replay set-up
(`vllm_replay`) both published-run callers use."""
from __future__ import annotations

import csv
from typing import Any

import numpy as np
import pytest

from simulator.frontend import validate_serving
from simulator.hardware.calibration import DATA
from simulator.hardware.specs import get_chip
from simulator.workloads.budget import Parallelism
from simulator.workloads.serving import host
from simulator.workloads.serving.arrivals import Arrival
from simulator.workloads.serving.costs import StepCosts
from simulator.workloads.serving.scheduler import SchedulerConfig
from simulator.workloads.serving.simulate import ServeSetup, host_parts, run_stream
from simulator.workloads.transformer import get_model

CSV = DATA / "calibration" / "vllm_host_overhead.csv"


def _raw_lines() -> dict[int, tuple[float, float]]:
    """Per degree, (intercept s, slope s per sequence) by least squares (numpy lstsq on [1, d]) on the Llama-2-7B
    barrier rows, read from the file with csv alone."""
    with CSV.open() as f:
        rows = [r for r in csv.DictReader(f) if r["component"] == "tp_barrier"]
    out = {}
    for tp in (1, 2, 4):
        mine = [r for r in rows if r["tp"] == str(tp) and r["model"] == "meta-llama/Llama-2-7b-hf"]
        d = np.array([float(r["batch"]) for r in mine])
        y = np.array([float(r["measured_ms"]) / 1e3 for r in mine])
        (a, b), *_ = np.linalg.lstsq(np.column_stack([np.ones_like(d), d]), y, rcond=None)
        out[tp] = (float(a), float(b))
    return out


def test_the_barrier_rows_are_vidurs_56_with_the_7b_rows_fit_and_the_rest_held_out():
    """Vidur's a100 cpu_overheads.csv at 0633efae has 56 (model, degree, batch) rows; every one is here once,
    fit exactly when the model is Llama-2-7B (8 batches at each of 1, 2 and 4 GPUs)."""
    with CSV.open() as f:
        rows = [r for r in csv.DictReader(f) if r["component"] == "tp_barrier"]
    assert len(rows) == 56 == len({(r["model"], r["tp"], r["batch"]) for r in rows})
    assert all((r["set"] == "fit") == (r["model"] == "meta-llama/Llama-2-7b-hf") for r in rows)
    assert sorted(int(r["tp"]) for r in rows if r["set"] == "fit") == [1] * 8 + [2] * 8 + [4] * 8
    assert all("0633efaee2826c47b16741e57df0476b58136714" in r["source"] for r in rows)
    assert all(0 < float(r["measured_ms"]) < 5 for r in rows)  # a barrier of milliseconds, not seconds


def test_each_degrees_line_and_the_sync_are_least_squares_on_the_raw_rows():
    """The fitted lines equal lstsq on the file's rows; the sync of t GPUs is the t line less the one-GPU line,
    zero for one GPU, and 8 GPUs take the 4-GPU line (no 8-GPU profile: a floor)."""
    raw = _raw_lines()
    fits = host.barrier_fits()
    assert sorted(fits) == [1, 2, 4]
    for tp, (a, b) in raw.items():
        assert fits[tp][0] == pytest.approx(a, rel=1e-9) and fits[tp][1] == pytest.approx(b, abs=1e-12)
    assert host.tp_sync(1) == (0.0, 0.0)
    for tp, base in ((2, 2), (3, 2), (4, 4), (8, 4), (16, 4)):
        s, s_seq = host.tp_sync(tp)
        assert s == pytest.approx(raw[base][0] - raw[1][0], rel=1e-9)
        assert s_seq == pytest.approx(raw[base][1] - raw[1][1], abs=1e-12)
    d = np.arange(1, 257)
    two, four = (np.polyval([host.tp_sync(t)[1], host.tp_sync(t)[0]], d) for t in (2, 4))
    assert (two > 0).all() and (four > two).all()  # more workers to wait for, never less
    with pytest.raises(ValueError, match="tensor-parallel degree"):
        host.profiled_degree(0)


def test_the_sync_family_compares_every_barrier_row_with_its_degrees_line():
    """One case per row of the file; the prediction is the raw line of the row's degree at its batch."""
    raw = _raw_lines()
    from simulator.frontend.validate import Case

    cases = [c for c in validate_serving.host_cases(Case) if c.family == validate_serving.SYNC_FAMILY]
    assert len(cases) == 56 and sum(not c.held_out for c in cases) == 24
    for c in cases:
        tp, batch = (int(p[2:] if p.startswith("tp") else p[1:]) for p in c.name.split("-")[-3:-1])
        a, b = raw[tp]
        assert c.predicted == pytest.approx(1e3 * (a + b * batch), rel=1e-9)


def test_a_tensor_parallel_window_pays_the_sync_on_every_step():
    """One request of 11 tokens on 4 x H100: after its first token one window of 10 decode steps, which costs its
    10 priced steps + one call's host time + 10 x (output processing + sync of 4 GPUs at one sequence), the
    sync taken from the raw rows; on one GPU the same window has no sync."""
    llama, h100 = get_model("llama-3-8b"), get_chip("h100")
    raw = _raw_lines()
    sched = SchedulerConfig(chunk_tokens=0, whole_budget_tokens=2048, num_steps=10)
    for tp in (1, 4):
        setup = ServeSetup(llama, h100, Parallelism(1, tp), sched=sched, max_model_len=4096, engine="vllm")
        _, cost = host_parts(setup)
        costs = StepCosts(llama, h100, tp, engine="vllm")
        req = run_stream(setup, [Arrival(0.0, 100, 11)], "forecast").done[0]
        steps = sum(costs.forecast_s(1, 100 + i, []) for i in range(10))
        sync = (raw[tp][0] - raw[1][0]) + (raw[tp][1] - raw[1][1])
        by_hand = cost.call_s + cost.call_seq_s + 10 * (cost.step_s + cost.step_seq_s + sync)
        assert req.finish_s - req.first_token_s == pytest.approx(steps + by_hand, rel=1e-9)
    assert sync > 1e-4  # 4 GPUs: tenths of a millisecond a step


def test_vllm_replay_is_the_set_up_of_both_published_run_callers(monkeypatch):
    """SGLang's runs (host.simulate_run) and LambdaLabs' (validate_serving.predict_run) both build their replay
    with vllm_replay, at their memory fractions (0.9, 0.95); the set-up is vLLM 0.6's: 256 sequences, no chunked
    prefill, a budget of max(max_model_len, 2048) tokens, 10-step windows, tensor parallel over the run's GPUs."""
    seen = []
    real = host.vllm_replay

    def spy(model: Any, chip: str, gpus: int, max_model_len: int, memory_fraction: float) -> Any:
        setup = real(model, chip, gpus, max_model_len, memory_fraction)
        seen.append(setup)
        return setup

    monkeypatch.setattr(host, "vllm_replay", spy)
    monkeypatch.setattr(validate_serving, "vllm_replay", spy)
    sg = next(r for r in host.run_rows() if r["gpus"] == "1")
    lam = next(r for r in validate_serving.serving_rows() if r["gpus"] == "2")
    args = (lam["run"], lam["chip"], lam["model"], 2, int(lam["max_model_len"]))
    a = host.simulate_run.__wrapped__(sg["run"], 0.0)
    b = validate_serving.predict_run.__wrapped__(*args)
    assert [s.memory_fraction for s in seen] == [0.9, 0.95]
    assert a == host.simulate_run(sg["run"], 0.0) and b == validate_serving.predict_run(*args)  # the spy changes none
    seen = seen[:2]
    for s, r in zip(seen, (sg, lam), strict=True):
        assert s.mesh == Parallelism(1, int(r["gpus"])) and s.chip.name == get_chip(r["chip"]).name
        assert s.engine == "vllm" and s.max_model_len == int(r["max_model_len"])
        assert (s.sched.max_batch, s.sched.chunk_tokens, s.sched.num_steps) == (256, 0, 10)
        assert s.sched.whole_budget_tokens == max(int(r["max_model_len"]), 2048)


def test_the_calibrated_parts_name_the_sync_only_on_more_than_one_gpu():
    """`podsim serve`'s calibrated_parts: a line for the worker sync on 4 GPUs (its per-step and per-sequence
    milliseconds, from the raw rows), none on one GPU."""
    llama = get_model("llama-3-8b")
    raw = _raw_lines()
    sched = SchedulerConfig(chunk_tokens=0, whole_budget_tokens=2048, num_steps=10)
    lines = {tp: host.describe(*host_parts(ServeSetup(llama, get_chip("h100"), Parallelism(1, tp), sched=sched,
                                                      max_model_len=4096, engine="vllm"))) for tp in (1, 4)}
    assert not any("worker sync" in line for line in lines[1]) and len(lines[4]) == len(lines[1]) + 1
    assert f"{1e3 * (raw[4][0] - raw[1][0]):.3f} + {1e3 * (raw[4][1] - raw[1][1]):.4f} ms" in lines[4][-1]
