"""Serving request streams (issue 33): arrivals against their distributions, the scheduler against hand-timed
schedules, step costs against the closed-form budget and the served model, the fast decode segments
against plain iterations, KV pressure, disaggregation against the simulated send, find-rate's bracket."""
from __future__ import annotations

import math
import random

import numpy as np
import pytest

from simulator.errors import PodsimError
from simulator.hardware.specs import get_chip
from simulator.workloads.budget import Parallelism, decode_budget
from simulator.workloads.served import served_step
from simulator.workloads.serving.arrivals import Arrival, parse_length, poisson_arrivals, read_trace
from simulator.workloads.serving.costs import GRID, StepCosts, graph_batch, kv_capacity_tokens
from simulator.workloads.serving.findrate import find_rate
from simulator.workloads.serving.kvcache import BlockPool, blocks_for
from simulator.workloads.serving.metrics import distribution, summarize
from simulator.workloads.serving.scheduler import Replica, Request, SchedulerConfig
from simulator.workloads.serving.simulate import ServeSetup, check_stream, kv_transfer_line, run_stream
from simulator.workloads.transformer import get_model

LLAMA = get_model("llama-3-8b")
H100 = get_chip("h100")


def _const(step_s: float = 1.0):
    return lambda n_decode, ctx, chunks: step_s


def _serve(requests, price=None, **sched) -> list[Request]:
    rep = Replica(price or _const(), BlockPool(sched.pop("blocks", 10_000)), SchedulerConfig(**sched))
    return rep.run(requests)


# -- arrivals --------------------------------------------------------------------------------------------
def test_poisson_count_and_gaps_match_the_rate():
    a = poisson_arrivals(20.0, 500.0, parse_length("100"), parse_length("10"), seed=1)
    n = len(a)
    assert abs(n - 10_000) < 5 * math.sqrt(10_000)  # Poisson count: mean 10,000, sd 100
    gaps = np.diff([x.time_s for x in a])
    assert np.std(gaps) / np.mean(gaps) == pytest.approx(1.0, abs=0.05)  # exponential: cv 1


def test_gamma_gaps_have_the_asked_cv_and_the_same_rate():
    a = poisson_arrivals(20.0, 500.0, parse_length("100"), parse_length("10"), seed=2, cv=3.0)
    gaps = np.diff([x.time_s for x in a])
    assert np.std(gaps) / np.mean(gaps) == pytest.approx(3.0, rel=0.1)
    assert np.mean(gaps) == pytest.approx(1 / 20.0, rel=0.1)


def test_same_seed_same_stream_other_seed_other_stream():
    dist = parse_length("lognormal:500:0.8")
    one, two = (poisson_arrivals(5.0, 60.0, dist, dist, seed=7) for _ in range(2))
    assert one == two
    assert one != poisson_arrivals(5.0, 60.0, dist, dist, seed=8)


def test_length_distributions():
    rng = np.random.default_rng(0)
    assert set(parse_length("fixed:64").draw(rng, 50)) == {64}
    u = parse_length("uniform:10:20").draw(rng, 5000)
    assert u.min() == 10 and u.max() == 20
    ln = parse_length("lognormal:300:0.5").draw(rng, 20_000)
    assert np.median(ln) == pytest.approx(300, rel=0.03)  # the median of a lognormal is exp(mu)
    assert parse_length("uniform:10:20").most == 20


@pytest.mark.parametrize("spec", ["0", "-5", "uniform:9:3", "lognormal:100", "zipf:3", "1.5", "lognormal:100:x"])
def test_bad_length_is_one_clear_error(spec):
    with pytest.raises(PodsimError, match="--prompt-len"):
        parse_length(spec)


def test_trace_reads_common_column_names(tmp_path):
    azure = tmp_path / "azure.csv"
    azure.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n"
                     "2023-11-16 18:15:50.9951690,396,109\n")
    a = read_trace(str(azure))
    assert [(x.prompt_tokens, x.output_tokens) for x in a] == [(374, 44), (396, 109)]
    assert a[1].time_s - a[0].time_s == pytest.approx(4.314579, abs=1e-5)
    ms = tmp_path / "mooncake.csv"
    ms.write_text("timestamp_ms,input_length,output_length\n3000,10,2\n1000,20,3\n")
    assert read_trace(str(ms)) == [Arrival(0.0, 20, 3), Arrival(2.0, 10, 2)]
    burst = tmp_path / "burstgpt.csv"  # BurstGPT's header; its Timestamp is seconds
    burst.write_text("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                     "45,ChatGPT,1087,14,1101,Conversation log\n5,GPT-4,472,18,490,API log\n")
    assert read_trace(str(burst)) == [Arrival(0.0, 472, 18), Arrival(40.0, 1087, 14)]


def test_empty_or_broken_trace_is_refused(tmp_path):
    empty = tmp_path / "e.csv"
    empty.write_text("arrival_s,prompt_tokens,output_tokens\n")
    with pytest.raises(PodsimError, match="empty trace"):
        read_trace(str(empty))
    bad = tmp_path / "b.csv"
    bad.write_text("when,prompt_tokens,output_tokens\n0,1,1\n")
    with pytest.raises(PodsimError, match="no column named"):
        read_trace(str(bad))
    with pytest.raises(PodsimError, match="no such file"):
        read_trace(str(tmp_path / "none.csv"))


@pytest.mark.parametrize("rate", [0.0, -1.0, math.inf, math.nan])
def test_bad_rate_is_refused(rate):
    with pytest.raises(PodsimError, match="--rate"):
        poisson_arrivals(rate, 10.0, parse_length("1"), parse_length("1"), seed=0)


# -- the scheduler against hand-timed schedules -----------------------------------------------------------
def test_one_request_takes_prefill_then_output_minus_one_decode_steps():
    done = _serve([Request(0, 0.0, 100, 5)])
    r = done[0]
    assert (r.first_token_s, r.finish_s) == (1.0, 5.0)  # step 1: prefill -> token 1; steps 2-5: tokens 2-5


def test_chunked_prefill_splits_the_prompt_by_the_budget():
    r = _serve([Request(0, 0.0, 1000, 3)], chunk_tokens=256)[0]
    assert r.first_token_s == math.ceil(1000 / 256)  # 4 chunks, the last one yields the first token
    assert r.finish_s == math.ceil(1000 / 256) + 2


def test_static_batch_all_prefill_together_then_decode_together():
    done = _serve([Request(i, 0.0, 50, 10) for i in range(8)], chunk_tokens=8192)
    assert {r.first_token_s for r in done} == {1.0}
    assert {r.finish_s for r in done} == {10.0}


def test_max_batch_queues_the_rest_fcfs():
    done = sorted(_serve([Request(i, 0.0, 10, 4) for i in range(4)], max_batch=2), key=lambda r: r.rid)
    # requests 0, 1 run steps 1-4; 2, 3 are admitted at step 5 and finish at step 8
    assert [r.finish_s for r in done] == [4.0, 4.0, 8.0, 8.0]
    assert [r.first_token_s for r in done] == [1.0, 1.0, 5.0, 5.0]


def test_prefill_first_without_chunking_pauses_decodes():
    # request 0 decodes from t=1; request 1 arrives at 2.5: its prefill takes the step at t=3 alone
    done = sorted(_serve([Request(0, 0.0, 10, 6), Request(1, 2.5, 10, 2)], chunk_tokens=0), key=lambda r: r.rid)
    assert done[1].first_token_s == 4.0
    assert done[0].finish_s == 7.0  # 6 tokens over 7 steps: one step lent to the other prefill


def test_multi_step_windows_deliver_tokens_at_the_window_end():
    # vLLM 0.6 --num-scheduler-steps 10: prefill is one step, then decode runs in windows of 10 steps; a
    # request's tokens reach the client when its window ends (LambdaLabs' ITLs come 10 tokens apart)
    done = sorted(_serve([Request(0, 0.0, 100, 25), Request(1, 0.0, 100, 4)], chunk_tokens=0, num_steps=10),
                  key=lambda r: r.rid)
    assert [r.first_token_s for r in done] == [1.0, 1.0]
    # request 1 needs 3 more tokens but keeps its slot to the end of the first window (steps 2-11)
    assert done[1].finish_s == 11.0
    # request 0 needs 24 more: windows end at 11, 21, 31
    assert done[0].finish_s == 1.0 + 10 * math.ceil(24 / 10)


def test_arrivals_wait_for_the_multi_step_window():
    # request 1 arrives at t=1.5, inside request 0's first window (t=1..11): its prefill runs at t=11
    done = sorted(_serve([Request(0, 0.0, 10, 30), Request(1, 1.5, 10, 2)], chunk_tokens=0, num_steps=10),
                  key=lambda r: r.rid)
    assert done[1].first_token_s == 12.0
    one = sorted(_serve([Request(0, 0.0, 10, 30), Request(1, 1.5, 10, 2)], chunk_tokens=0), key=lambda r: r.rid)
    assert one[1].first_token_s == 3.0  # one step per schedule: admitted at the next step


def test_multi_step_windows_price_the_window_batch_at_growing_context():
    seen = []

    def price(n_decode, ctx, chunks):
        seen.append((n_decode, ctx, len(chunks)))
        return 1.0

    _serve([Request(0, 0.0, 10, 4), Request(1, 0.0, 20, 4)], price=price, chunk_tokens=0, num_steps=10)
    # one prefill of both prompts, then one window of 10 steps of both (the finished ones keep their slots):
    # cached positions 10 + 20 (the prompts; each step adds the token it decodes), growing by 2 a step
    assert seen[0] == (0, 0, 2)
    assert seen[1:] == [(2, 30 + 2 * i, 0) for i in range(10)]


def test_arrival_after_idle_starts_at_its_time():
    r = _serve([Request(0, 10.0, 5, 2)])[0]
    assert (r.first_token_s, r.finish_s) == (11.0, 12.0)


def test_recompute_preemption_finishes_everything_and_never_overfills():
    # 4 requests of 64 + 40 tokens need 7 blocks each at the end; the pool has 20
    reqs = [Request(i, 0.0, 64, 40) for i in range(4)]
    rep = Replica(_const(), BlockPool(20), SchedulerConfig())
    done = rep.run(reqs)
    assert len(done) == 4 and all(r.generated == 40 for r in done)
    assert rep.preemptions > 0
    assert max(rep.timeline.kv) <= 1.0


@pytest.mark.parametrize("steps", [1, 10])
def test_prefill_first_with_no_room_for_a_prefill_runs_the_decodes(steps):
    # chunking off, 6 requests of 64 + 40 tokens, a 20-block pool: the waiting prompts cannot be admitted while
    # the running ones hold the blocks, so the running ones decode (this once spun at zero-time iterations)
    rep = Replica(_const(), BlockPool(20), SchedulerConfig(chunk_tokens=0, num_steps=steps))
    done = rep.run([Request(i, 0.0, 64, 40) for i in range(6)])
    assert len(done) == 6 and all(r.generated == 40 for r in done)
    # max_batch full with a prompt waiting: the two running requests decode, steps 2-4 (or one 10-step window)
    full = sorted(_serve([Request(i, 0.0, 10, 4) for i in range(3)], max_batch=2, chunk_tokens=0, num_steps=steps),
                  key=lambda r: r.rid)
    assert [r.finish_s for r in full[:2]] == [4.0 if steps == 1 else 11.0] * 2
    assert full[2].first_token_s == full[0].finish_s + 1.0


@pytest.mark.parametrize("preempt", ["recompute", "swap"])
def test_preemption_under_multi_step_windows_finishes_everything(preempt):
    # the windows' lookahead slots run the same 20-block pool out; every request still ends, whole
    reqs = [Request(i, 0.0, 64, 40) for i in range(4)]
    rep = Replica(_const(), BlockPool(20), SchedulerConfig(num_steps=10, chunk_tokens=0, preempt=preempt))
    done = rep.run(reqs)
    assert len(done) == 4 and all(r.generated == 40 for r in done)
    assert rep.preemptions > 0 and rep.pool.free == 20
    assert max(rep.timeline.kv) <= 1.0


def test_swap_preemption_pays_the_host_link():
    kv_per_token = 131072.0  # bytes per position
    reqs = [Request(i, 0.0, 64, 40) for i in range(4)]
    rep = Replica(_const(0.0), BlockPool(20), SchedulerConfig(preempt="swap", kv_bytes_per_token=kv_per_token,
                                                               host_bytes_per_s=1e9))
    done = rep.run(reqs)
    assert len(done) == 4 and rep.preemptions > 0
    # steps cost nothing: the clock is swap time alone, whole blocks out and back in over 1 GB/s
    per_block = 16 * kv_per_token / 1e9
    assert rep.now / per_block == pytest.approx(round(rep.now / per_block), abs=1e-6)
    assert rep.now > 0


def test_segments_match_plain_iterations_exactly():
    costs = StepCosts(LLAMA, H100, 1, calibrated=True)
    arrivals = poisson_arrivals(8.0, 30.0, parse_length("lognormal:300:0.7"), parse_length("uniform:20:200"), seed=3)
    fast = Replica(costs.forecast_s, BlockPool(50_000), SchedulerConfig(chunk_tokens=512))
    slow = Replica(costs.forecast_s, BlockPool(50_000), SchedulerConfig(chunk_tokens=512))
    slow._segment_steps = lambda next_arrival: 0  # every iteration on its own
    def reqs():
        return [Request(i, a.time_s, a.prompt_tokens, a.output_tokens) for i, a in enumerate(arrivals)]
    one = {r.rid: (r.first_token_s, r.finish_s) for r in fast.run(reqs())}
    two = {r.rid: (r.first_token_s, r.finish_s) for r in slow.run(reqs())}
    assert one.keys() == two.keys()
    for k in one:
        assert one[k] == pytest.approx(two[k], rel=1e-12)
    assert fast.iterations == slow.iterations


# -- step costs --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("batch,context", [(1, 0), (8, 1000), (64, 4000)])
def test_decode_bound_is_the_closed_form_budget(batch, context):
    costs = StepCosts(LLAMA, H100, 1, calibrated=False)
    budget = decode_budget(LLAMA, H100, batch, context, Parallelism())
    assert costs.bound_s(batch, batch * context, []) == pytest.approx(budget["lower_bound_s"], rel=1e-9)


def test_prefill_bound_is_the_closed_form_budget():
    costs = StepCosts(LLAMA, H100, 1, calibrated=False)
    budget = decode_budget(LLAMA, H100, 1, 300, Parallelism(), new_tokens=700)
    assert costs.bound_s(0, 0, [(700, 300)]) == pytest.approx(budget["lower_bound_s"], rel=1e-9)


def test_forecast_decode_is_the_served_step_on_the_grid():
    costs = StepCosts(LLAMA, H100, 1, calibrated=True)
    for batch, ctx in ((1, 0), (16, GRID[80]), (96, GRID[90])):  # CUDA-graph sizes: no padding
        assert costs.forecast_s(batch, batch * ctx, []) == pytest.approx(
            served_step(LLAMA, H100, batch, ctx, 1, simulate=False)["step_time_s"], rel=1e-12)


def test_vllm_decode_batches_run_in_the_next_captured_cuda_graph():
    captured = [1, 2, 4] + [8 * i for i in range(1, 33)]  # vLLM model_runner.py _BATCH_SIZES_TO_CAPTURE
    assert [graph_batch(n) for n in range(1, 257)] == [min(b for b in captured if b >= n) for n in range(1, 257)]
    assert graph_batch(300) == 300  # past the largest graph: eager, unpadded
    vllm, trt = StepCosts(LLAMA, H100, 1, engine="vllm"), StepCosts(LLAMA, H100, 1, engine="tensorrt-llm")
    ctx = 100 * 512
    # ten sequences run as sixteen rows over the same cached positions; TensorRT-LLM (no graphs) runs ten
    assert vllm.forecast_s(10, ctx, []) == pytest.approx(vllm._decode_at(16, ctx / 16), rel=1e-12)
    assert vllm.forecast_s(10, ctx, []) > vllm._decode_at(10, ctx / 10)
    assert trt.forecast_s(10, ctx, []) == pytest.approx(trt._decode_at(10, ctx / 10), rel=1e-12)


def test_forecast_is_never_below_the_bound():
    costs = StepCosts(LLAMA, H100, 2, calibrated=True)
    rng = random.Random(0)
    for _ in range(200):
        d = rng.randint(0, 64)
        chunks = [(rng.randint(1, 2048), rng.randint(0, 3000)) for _ in range(rng.randint(0 if d else 1, 4))]
        ctx = sum(rng.randint(0, 4000) for _ in range(d))
        assert costs.forecast_s(d, ctx, chunks) >= costs.bound_s(d, ctx, chunks)


def test_tpu_forecast_is_the_ideal_step_named_uncalibrated():
    v5p = get_chip("tpu-v5p")
    costs = StepCosts(LLAMA, v5p, 4, calibrated=True)
    assert costs.uncalibrated and "tpu-v5p" in costs.uncalibrated[0]
    assert costs.forecast_s(8, 8000, []) >= costs.bound_s(8, 8000, [])


def test_kv_capacity_by_hand():
    per_position = 2 * 32 * 8 * 128 * 2  # K and V, 32 layers, 8 KV heads of 128, bf16
    free = 0.9 * H100.hbm_capacity_bytes - LLAMA.params() * 2
    assert kv_capacity_tokens(LLAMA, H100, 1) == math.floor(free / per_position)
    assert blocks_for(17) == 2 and blocks_for(16) == 1


# -- metrics, whole runs -----------------------------------------------------------------------------------
def test_distribution_is_numpys():
    v = np.random.default_rng(0).exponential(size=1001)
    d = distribution(v)
    assert d["p50"] == np.percentile(v, 50) and d["p99"] == np.percentile(v, 99) and d["max"] == v.max()


def test_summary_of_a_hand_schedule():
    done = _serve([Request(i, 0.0, 10, 4) for i in range(4)], max_batch=2)
    s = summarize(done, slo_ttft_s=2.0)
    assert s["ttft_s"]["max"] == 5.0 and s["tpot_s"]["p50"] == 1.0
    assert s["output_tokens_per_s"] == pytest.approx(16 / 8.0)
    assert s["slo_attainment"] == 0.5 and s["goodput_requests_per_s"] == pytest.approx(2 / 8.0)


def test_kv_that_cannot_hold_one_request_and_prompt_past_context_are_refused():
    big = ServeSetup(get_model("llama-3-70b"), H100)
    with pytest.raises(PodsimError, match="cannot hold one request"):
        check_stream(big, [Arrival(0.0, 100, 10)])
    small = ServeSetup(LLAMA, H100, max_model_len=1000)
    with pytest.raises(PodsimError, match="longer than the context"):
        check_stream(small, [Arrival(0.0, 990, 20)])
    with pytest.raises(PodsimError, match="empty"):
        check_stream(small, [])
    gpt2 = ServeSetup(get_model("gpt2"), H100)  # 1,024 learned positions
    check_stream(gpt2, [Arrival(0.0, 1000, 24)])
    with pytest.raises(PodsimError, match="1,024 positions"):
        check_stream(gpt2, [Arrival(0.0, 1000, 25)])


def test_disaggregated_kv_transfer_is_the_simulated_send_and_delays_decode():
    from simulator.engine.network import send
    from simulator.engine.system import System

    setup = ServeSetup(LLAMA, H100, prefill_mesh=Parallelism(1, 1), decode_mesh=Parallelism(1, 1),
                       topology="nodes:2:8")
    lat, bw, _ = kv_transfer_line(setup)
    system = System(H100, topology="nodes:2:8")
    chips = sorted(n for n in system.network.graph.nodes if isinstance(n, int))
    third = send(system, chips[0], chips[1], 3e8)["time_s"]
    assert lat + 3e8 / bw == pytest.approx(third, rel=1e-6)  # a send is affine in its bytes
    arrivals = [Arrival(0.0, 2000, 50), Arrival(0.5, 1000, 20)]
    run = run_stream(setup, arrivals, "bound", (lat, bw))
    alone = run_stream(ServeSetup(LLAMA, H100), [Arrival(0.0, 2000, 1)], "bound")
    assert run.done[0].first_token_s == pytest.approx(alone.done[0].first_token_s)
    assert run.transfer_s[0] == pytest.approx(lat + 2000 * 131072 / bw)
    assert run.done[0].finish_s > run.done[0].first_token_s + run.transfer_s[0]


def test_find_rate_brackets_the_slo_edge():
    setup = ServeSetup(LLAMA, H100)
    dist = parse_length("512"), parse_length("64")

    def stream(rate):
        return poisson_arrivals(rate, 20.0, *dist, seed=0)

    found = find_rate(setup, stream, "forecast", 0.2, 0.02, tolerance=0.05)
    rate = found["rate_per_s"]
    assert rate and found["at_rate"]["slo_attainment"] >= 0.9
    fails = [p["rate_per_s"] for p in found["probes"] if not p["passes"]]
    assert fails and min(fails) <= rate * 1.05 + 1e-9 and min(fails) > rate


def test_prefix_hits_skip_the_cached_part_of_the_prompt():
    r = _serve([Request(0, 0.0, 1000, 3, hit=500)], chunk_tokens=256, prefix_hit=0.5)[0]
    assert r.first_token_s == math.ceil(500 / 256)  # only the 500 uncached tokens are prefilled


def test_find_rate_with_an_unreachable_slo_says_none():
    setup = ServeSetup(LLAMA, H100)

    def stream(rate):
        return poisson_arrivals(rate, 20.0, parse_length("512"), parse_length("8"), seed=0)

    found = find_rate(setup, stream, "bound", 1e-4, None)  # a first token in 0.1 ms: no rate makes it
    assert found["rate_per_s"] is None and not any(p["passes"] for p in found["probes"])
