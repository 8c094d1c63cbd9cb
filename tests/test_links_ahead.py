"""Links given bytes before they are built (`Network.carry`): a fast step's unfolding onto the links its
representatives stood for builds none of them with tracing off; each gets its bytes when it is built, and `links`
and `link_bytes` build them all first, so every reader sees what the eager unfolding (tracing on) gives."""
from __future__ import annotations

import dataclasses

from simulator import get_chip, get_model
from simulator.engine.system import System
from simulator.workloads.plans.layout import TrainOptions, parse_plan_mesh
from simulator.workloads.plans.step import simulate_step


def test_carried_bytes_wait_for_their_link():
    net = System("tpu-v5e", topology="torus:4x4", trace=False).network
    net.carry(0, 1, 5.0)
    net.carry(0, 1, 2.5)
    assert (0, 1) not in net.built
    net.link(1, 2).bytes_carried += 1.0
    net.carry(1, 2, 4.0)  # built already: straight onto its channel
    assert net.built[(1, 2)].bytes_carried == 5.0
    assert net.link(0, 1).bytes_carried == 7.5  # built now, with its bytes
    net.carry(4, 0, 3.0)
    assert (4, 0) not in net.built
    assert net.link_bytes() == {"0->1": 7.5, "1->2": 5.0, "4->0": 3.0}  # (built first)
    assert set(net.built) == {(0, 1), (1, 2), (4, 0)}
    net.carry(8, 12, 1.0)
    assert net.links[(8, 12)].bytes_carried == 1.0  # `links` builds them first too


def test_a_fast_step_without_a_trace_builds_no_link_it_only_unfolded_onto():
    cfg = dataclasses.replace(get_model("llama-2-7b"), n_layers=1)
    plan, opts = parse_plan_mesh("data=3,fsdp=256"), TrainOptions(checkpoint="full")
    runs = [simulate_step(cfg, get_chip("tpu-v5e"), plan, opts, 768, 256, "multislice:3:16x16", trace=trace,
                          calibrated=True)[0] for trace in (False, True)]
    (off, on) = (run.system.network for run in runs)
    assert runs[0].sym.node_action.order == 768  # one representative chip of 768
    assert len(off.built) < len(on.built) / 100  # the eager unfolding built them all
    assert off.link_bytes() == on.link_bytes()  # (the same sums, in the same order: exactly)
    assert set(off.built) == set(on.built)
    assert all(off.built[k].bytes_carried == c.bytes_carried for k, c in on.built.items())

