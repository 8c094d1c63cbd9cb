"""What an overlapped collective costs the GPU compute beside it: the SMs its kernels hold
(`simulator.workloads.plans.calibrated_gpu.collective_sm_share`, ``GpuStepConstants.sm_interference``).

Oracles: NCCL's channel rule worked by hand (one thread block, one SM, per channel; ncclTopoDupChannels doubling
an inter-node ring), Transformer Engine's default userbuffers SM counts (1 and 16), and the step's closed form:
with every collective hidden, the step grows by sm_interference x SM share x the collective's time, nothing else."""
from __future__ import annotations

from dataclasses import replace

import pytest

from simulator.hardware.gpu_kernels import gpu_kernels
from simulator.hardware.specs import get_chip
from simulator.hardware.train_calibration import gpu_step_constants
from simulator.workloads.plans.calibrated_gpu import collective_sm_share, gpu_step_factors, require_kernels
from simulator.workloads.plans.gpu_network import axis_nets
from simulator.workloads.plans.layout import MeshPlan, TrainOptions
from simulator.workloads.transformer import TransformerConfig

H100 = get_chip("h100")
SMS = 132  # H100 SXM: 132 SMs
WIDE = TransformerConfig(name="wide", d_model=8192, d_ff=32768, n_layers=2, n_heads=64, vocab_size=128)


def test_a_ring_across_nodes_with_one_member_per_node_holds_two_sms() -> None:
    # search.cc on one 400 Gb/s NIC per GPU: one channel at 48 GB/s (the first inter-node speed under the NIC's 50),
    # then ncclTopoDupChannels doubles it to 2 channels of 24 GB/s; a channel is one thread block on one SM
    net = axis_nets(H100, MeshPlan({"model": 8, "fsdp": 48}), gpu_step_constants("h100"))["fsdp"]
    assert net.kind == "ib"
    assert collective_sm_share("reduce_scatter", 16e9, net, SMS) == pytest.approx(2 / SMS)
    assert collective_sm_share("all_gather", 8e9, net, SMS) == pytest.approx(2 / SMS)


def test_a_ring_inside_a_node_holds_more_sms_than_one_across_nodes() -> None:
    c = gpu_step_constants("h100")
    inside = axis_nets(H100, MeshPlan({"fsdp": 8}), c)["fsdp"]
    across = axis_nets(H100, MeshPlan({"model": 8, "fsdp": 8}), c)["fsdp"]
    share_in = collective_sm_share("reduce_scatter", 1e9, inside, SMS)
    assert share_in > 3 * collective_sm_share("reduce_scatter", 1e9, across, SMS)
    assert 0 < share_in <= 32 / SMS  # NCCL runs at most 32 ring channels (MAXCHANNELS / 2)
    assert collective_sm_share("all_reduce", 0, inside, SMS) == 0.0  # nothing moved, nothing held
    assert collective_sm_share("all_reduce", 1e9, None, SMS) == 0.0  # no axis


def test_hidden_gradient_reductions_slow_the_step_by_their_sm_share() -> None:
    # ZeRO-1 over 4 nodes (one member each): the gradients' reduce-scatter behind the backward and the weights'
    # gather behind the next forward, both covered by their windows; the step grows by k x 2/132 x their time
    c0 = replace(gpu_step_constants("h100", "megatron-core"), sm_interference=0.0, step_overhead_s=0.0)
    k = 3.0
    plan, opts = MeshPlan({"model": 8, "fsdp": 4}), TrainOptions(zero=1)
    args = (WIDE, H100, plan, opts, 4 * 64, 4096)
    kern = require_kernels(H100)
    base = gpu_step_factors(*args, c0, kern)
    slow = gpu_step_factors(*args, replace(c0, sm_interference=k), kern)
    rs, ag = base["per_layer_s"]["zero_after_backward"], base["per_layer_s"]["zero_before_forward"]
    layer_b = sum(v for n, v in base["per_layer_s"]["backward"].items() if n != "launch")
    layer_f = sum(v for n, v in base["per_layer_s"]["forward"].items() if n != "launch")
    assert rs < layer_b * (WIDE.n_layers - 1) and ag < layer_f * (WIDE.n_layers - 1)  # both windows cover them
    assert slow["step_time_s"] - base["step_time_s"] == pytest.approx(k * 2 / SMS * (rs + ag), rel=1e-6)


def test_overlapped_tensor_parallel_collectives_slow_each_layer_by_userbuffers_sms() -> None:
    # one node, TP 8 overlapped with the GEMMs (compute longer than the collectives): each layer pays
    # k x 8.5/132 x its four AllReduce-equivalents (two forward, two backward) and, sequence parallel, the backward's
    # two AllGathers of the weight-gradient inputs; 8.5 SMs: TE's initialize_ub defaults hold 1 SM for a
    # ring_exchange AllGather and 16 for a pipeline / bulk ReduceScatter, half the bytes each
    c0 = replace(gpu_step_constants("h100", "megatron-core"), sm_interference=0.0, step_overhead_s=0.0)
    k = 2.0
    opts = TrainOptions(zero=0, tp_overlap=True)
    args = (WIDE, H100, MeshPlan({"model": 8}), opts, 8, 4096)
    kern = gpu_kernels("h100")
    assert kern is not None
    base = gpu_step_factors(*args, c0, kern)
    slow = gpu_step_factors(*args, replace(c0, sm_interference=k), kern)
    tp = base["per_layer_s"]["tp_all_reduce"]
    fwd = sum(v for n, v in base["per_layer_s"]["forward"].items() if n != "launch")
    assert 2 * tp < fwd  # the forward GEMMs outlast the collectives beside them
    ag = base["per_layer_s"]["tp_wgrad_all_gather"]
    assert 0 < ag < tp  # an AllGather moves half an AllReduce's ring steps
    expected = k * (1 + 16) / 2 / SMS * WIDE.n_layers * (2 * tp + 2 * tp + 2 * ag)
    assert slow["step_time_s"] - base["step_time_s"] == pytest.approx(expected, rel=1e-6)
    assert base["factors"]["exposed_tp_s"] == pytest.approx(0.0, abs=1e-12)  # overlapped, no interference: free
