"""Interleaved pipelines on GPUs: each chunk's gradient reduction and weight gather behind the other chunks' passes.

Oracles, from first principles (a queue of equal transfers on one NIC, Megatron-Core's launch points):
- reductions: chunk c of v launches c x g before the end and the v transfers of T/v queue, so the last one ends
  at max over c of (-c g + (c + 1) T / v), linear in c: max(T / v, T - (v - 1) g);
- gathers: chunks 0 and 1 start at once, chunk c >= 2 with chunk c - 1's first pass; when the NIC never idles the
  last gather ends at T and chunk v - 1's first pass (due at (v - 1) g + the in-pass cover) waits the rest.
"""
from __future__ import annotations

import math

import pytest

from simulator.hardware.specs import get_chip
from simulator.workloads.plans.calibrated_gpu import (
    calibrated_gpu_step,
    chunked_grad_sync_exposed_s,
    chunked_param_gather_exposed_s,
)
from simulator.workloads.plans.layout import MeshPlan, TrainOptions
from simulator.workloads.transformer import get_model


@pytest.mark.parametrize(("total", "chunks", "group"), [(1.0, 4, 0.1), (1.0, 4, 1.0), (0.6, 2, 0.2), (2.0, 8, 0.05),
                                                        (0.3, 3, 0.0)])
def test_reductions_queue_behind_the_later_chunks_backwards(total: float, chunks: int, group: float) -> None:
    by_hand = max(total / chunks, total - (chunks - 1) * group)
    assert math.isclose(chunked_grad_sync_exposed_s(total, chunks, group), by_hand, rel_tol=1e-12)


def test_the_last_chunk_is_always_exposed_and_nothing_more_than_the_whole() -> None:
    for group in (0.0, 0.01, 0.1, 10.0):
        exposed = chunked_grad_sync_exposed_s(1.0, 5, group)
        assert 1.0 / 5 - 1e-12 <= exposed <= 1.0 + 1e-12
    assert chunked_grad_sync_exposed_s(0.0, 4, 0.1) == 0.0


def test_gathers_on_a_busy_nic_delay_the_last_chunk_by_what_is_left() -> None:
    # 4 chunks of 0.25 s, 0.1 s of forwards per chunk, 0.05 s covered inside each chunk's first pass: the NIC is
    # never idle, so the last gather ends at 1.0 s where chunk 3's pass was due at 3 x 0.1 + 0.05
    assert math.isclose(chunked_param_gather_exposed_s(1.0, 4, 0.1, 0.05), 1.0 - 3 * 0.1 - 0.05, rel_tol=1e-12)


def test_gathers_with_wide_windows_expose_only_the_first_chunks_remainder() -> None:
    # forwards of 10 s a chunk: every later gather hides; the first waits T/v - in-pass cover
    assert math.isclose(chunked_param_gather_exposed_s(1.0, 4, 10.0, 0.05), 0.25 - 0.05, rel_tol=1e-12)
    # one chunk: the whole gather less its in-pass cover (the one-chunk schedule's rule)
    assert math.isclose(chunked_param_gather_exposed_s(0.8, 1, 0.3, 0.3), 0.5, rel_tol=1e-12)


def test_more_chunks_never_expose_more_gradient_reduction_on_the_same_layout() -> None:
    """Megatron-style data-parallel replicas over pipeline stages: the interleaved step's exposed reductions shrink
    as the chunks multiply (each chunk's reduction hides behind more of the others' backwards)."""
    cfg, h100 = get_model("llama-3-8b"), get_chip("h100")
    plan = MeshPlan({"data": 4, "pipeline": 4, "model": 8})
    exposed = []
    for v in (2, 4, 8):
        opts = TrainOptions(microbatches=16, schedule="interleaved", virtual_stages=v, checkpoint="selective")
        out = calibrated_gpu_step(cfg, h100, plan, opts, 64, 4096, framework="megatron-core")
        exposed.append(out["factors"]["exposed_grads_s"])
        assert out["step_time_s"] >= out["ideal"]["step_time_s"] > 0
    assert exposed[0] >= exposed[1] >= exposed[2] > 0, exposed
