"""vLLM 0.6's host time in `podsim serve` (simulator.workloads.serving.host): each mechanism against a hand-timed
schedule, the fits against their closed forms, and the bound and the V1 engine left alone."""
from __future__ import annotations

import numpy as np
import pytest

from simulator.hardware.specs import get_chip
from simulator.workloads.budget import Parallelism
from simulator.workloads.serving import host
from simulator.workloads.serving.arrivals import Arrival
from simulator.workloads.serving.costs import StepCosts
from simulator.workloads.serving.metrics import latencies
from simulator.workloads.serving.scheduler import SchedulerConfig
from simulator.workloads.serving.simulate import ServeSetup, host_parts, run_stream
from simulator.workloads.transformer import get_model

LLAMA = get_model("llama-3-8b")
H100 = get_chip("h100")


def _setup(steps: int = 10, engine: str | None = "vllm") -> ServeSetup:
    sched = SchedulerConfig(chunk_tokens=0, whole_budget_tokens=2048, num_steps=steps)
    return ServeSetup(LLAMA, H100, Parallelism(1, 1), sched=sched, max_model_len=4096, engine=engine)


def test_one_request_at_zero_load_waits_the_front_end_then_one_prefill_step_and_one_call():
    """TTFT = front-end + the prefill step's price + the host time of one call of one sequence, exactly; the
    bound's TTFT is the bound's prefill step alone."""
    setup = _setup()
    fe, cost = host_parts(setup)
    assert fe > 0 and not cost.zero
    costs = StepCosts(LLAMA, H100, 1, engine="vllm", eager_prefill=True)  # V0: the prefill runs eagerly
    prefill = costs.forecast_s(0, 0, [(100, 0)])
    req = run_stream(setup, [Arrival(0.0, 100, 1)], "forecast").done[0]
    assert req.first_token_s == pytest.approx(fe + prefill + cost.seconds(1, 1), rel=1e-12)
    bound = run_stream(setup, [Arrival(0.0, 100, 1)], "bound").done[0]
    assert bound.first_token_s == pytest.approx(costs.bound_s(0, 0, [(100, 0)]), rel=1e-12)


def test_a_window_pays_its_steps_and_one_call_of_k_steps():
    """One request of 11 tokens: after its first token, one window of 10 decode steps over 100..109 cached
    positions, plus the host time of one call of one sequence for 10 steps: call + 10 x (step + per sequence)."""
    setup = _setup()
    _, cost = host_parts(setup)
    costs = StepCosts(LLAMA, H100, 1, engine="vllm")
    req = run_stream(setup, [Arrival(0.0, 100, 11)], "forecast").done[0]
    steps = sum(costs.forecast_s(1, 100 + i, []) for i in range(10))
    by_hand = cost.call_s + cost.call_seq_s + 10 * (cost.step_s + cost.step_seq_s)
    assert cost.seconds(1, 10) == pytest.approx(by_hand, rel=1e-12)
    assert req.finish_s - req.first_token_s == pytest.approx(steps + by_hand, rel=1e-12)


def test_a_front_end_delay_shifts_every_first_token_by_itself():
    """The closed-form fit rests on this: a constant delay of every arrival changes no schedule, so every TTFT
    moves by the delay and every TPOT stays (a busy stream, windows and queueing included)."""
    arrivals = host.sharegpt_stream(8.0, 200, seed=3)
    a = run_stream(_setup(), arrivals, "forecast", frontend_s=0.0).done
    b = run_stream(_setup(), arrivals, "forecast", frontend_s=0.04).done
    la, lb = latencies(a), latencies(b)
    np.testing.assert_allclose(lb["ttft_s"] - la["ttft_s"], 0.04, rtol=0, atol=1e-9)
    np.testing.assert_allclose(lb["tpot_s"], la["tpot_s"], rtol=1e-9)


def test_vllm_v1_and_other_engines_get_no_host_time():
    """One step per call is vLLM V1 (its fitted steps hold its host time); other engines likewise."""
    for setup in (_setup(steps=1), _setup(engine="tensorrt-llm")):
        fe, cost = host_parts(setup)
        assert fe == 0 and cost.zero
    arrivals = [Arrival(0.0, 100, 20), Arrival(0.01, 50, 5)]
    plain = run_stream(_setup(steps=1), arrivals, "forecast").done
    costs = StepCosts(LLAMA, H100, 1, engine="vllm")
    assert plain[0].first_token_s == pytest.approx(costs.forecast_s(0, 0, [(100, 0)]), rel=1e-12)


def test_each_component_line_is_the_least_squares_line_of_its_fit_rows():
    """slope = cov(d, y) / var(d), intercept = mean(y) - slope mean(d), in seconds, from the CSV rows."""
    for comp in host.COMPONENTS:
        rows = [r for r in host.host_rows() if r["component"] == comp and r["set"] == "fit"]
        d = [float(r["batch"]) for r in rows]
        y = [float(r["measured_ms"]) / 1e3 for r in rows]
        md, my = sum(d) / len(d), sum(y) / len(y)
        slope = sum((a - md) * (b - my) for a, b in zip(d, y, strict=True)) / sum((a - md) ** 2 for a in d)
        a, b = host.component_fits()[comp]
        assert b == pytest.approx(slope, rel=1e-9) and a == pytest.approx(my - slope * md, rel=1e-9)
        assert b > 0  # host time grows with the batch


def test_the_fitted_front_end_zeroes_the_mean_ttft_error_of_its_fit_rows():
    """Replayed with the fitted front-end time (a real simulation, not the shift added afterwards), the fit rows'
    median TTFT errors average to zero; the held-out rows are not what it was fitted on."""
    fe = host.vllm_v0_frontend_s()
    fit = [r for r in host.run_rows() if r["set"] == "fit"]
    assert fit and all(r["metric"] == "median_ttft" and r["gpus"] == "1" for r in fit)
    gaps = [host.simulate_run(r["run"], fe)[r["metric"]] - float(r["measured"]) for r in fit]
    assert sum(gaps) / len(gaps) == pytest.approx(0.0, abs=1e-6)
    assert 0.0 < fe < 0.1  # tens of milliseconds, not a step model's error of seconds


def test_the_bound_of_a_stream_is_untouched_by_the_host_time():
    """The bound is an ideal: a vLLM multi-step setup (host parts apply) and the same setup on an engine without
    them time every request alike, to the last bit."""
    arrivals = host.sharegpt_stream(4.0, 60, seed=5)
    with_host = run_stream(_setup(steps=10), arrivals, "bound").done
    without = run_stream(_setup(steps=10, engine="tensorrt-llm"), arrivals, "bound").done
    assert not host_parts(_setup(steps=10))[1].zero and host_parts(_setup(steps=10, engine="tensorrt-llm"))[1].zero
    assert [(r.first_token_s, r.finish_s) for r in with_host] == [(r.first_token_s, r.finish_s) for r in without]


def test_the_cli_names_the_host_time_under_calibrated_parts_only_where_it_applies(capsys):
    """`podsim serve --json`: vLLM with 10-step windows lists both mechanisms (and the host CPU under
    uncalibrated); one step per call lists none; the forecast's first token comes at least the front-end time
    after the bound's."""
    import json

    from simulator.frontend.cli import main

    base = ["serve", "llama-3-8b", "--chip", "h100", "--rate", "4", "--duration", "20s", "--prompt-len", "200",
            "--output-len", "50", "--chunked-prefill", "0", "--calibrated", "--json"]
    outs = {}
    for steps in ("1", "10"):
        assert main([*base, "--scheduler-steps", steps]) == 0
        outs[steps] = json.loads(capsys.readouterr().out)
    parts = outs["10"]["calibrated_parts"]
    assert len(parts) == 3 and "front-end" in parts[0] and "host time per scheduler call" in parts[1]
    assert "prefill steps run eagerly" in parts[2]
    assert any("host" in u for u in outs["10"]["uncalibrated"])
    assert outs["1"]["calibrated_parts"] == [] and not any("vLLM 0.6" in u for u in outs["1"]["uncalibrated"])
    fe = host.vllm_v0_frontend_s()
    assert f"{1e3 * fe:.1f} ms" in parts[0]
    assert outs["10"]["forecast"]["ttft_s"]["p50"] > outs["10"]["bound"]["ttft_s"]["p50"] + fe
