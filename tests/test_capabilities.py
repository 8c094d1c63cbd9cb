"""Algorithms declare the fast paths they support (`Capabilities`); the registry checks them and the API takes
a fast path only where the chosen algorithm declares it."""
import json

import numpy as np
import pytest

from simulator.collectives import Algorithm, Job, Schedule, algorithms, register, run_collective, unregister
from simulator.collectives.algorithm import REDUCED_KINDS, Capabilities
from simulator.engine.system import System
from simulator.errors import PodsimError
from simulator.frontend.cli import main

V5E_W, V5E_A = 4.5e10, 1e-6  # tpu-v5e ICI: bytes/s per link direction, latency per hop


class OneWayRing(Algorithm):
    """A test plug-in: AllGather round a one-way ring in every group (one-axis groups), every group built
    whatever ``job.reduced`` says -- the plug-in a new author writes first."""

    name = "one_way_ring_test"
    summary = "one-way ring per group, every group built"
    kinds = ("all_gather",)
    topologies = ("torus",)

    def build(self, job: Job, schedule: Schedule) -> None:
        for group in self.built_groups(job):
            (n,) = group.sizes
            dev = [group.members[(i,)] for i in range(n)]
            into: dict[int, int] = {}  # position -> the transfer that brought its latest shard
            for step in range(n - 1):
                arrived = {}
                for i in range(n):
                    origin = (i - step) % n
                    keys = (((0, (origin,)),) if job.numeric else 1)
                    to = (i + 1) % n
                    arrived[to] = schedule.add(dev[i], dev[to], keys, "copy", [into[i]] if step else [],
                                               ("ag", origin), dev[to])
                into = arrived

    def built_groups(self, job: Job) -> list:
        return job.groups

    def closed_form(self, job: Job) -> float:
        """n - 1 steps, each a hop latency and one shard (V / n) over one link direction."""
        return (job.group.n - 1) * (V5E_A + job.key_bytes / V5E_W)


class ReducedRing(OneWayRing):
    """The same plug-in, declaring reduced mode and honouring it (the first group only when reduced)."""

    name = "reduced_ring_test"
    capabilities = Capabilities(reduced=True)

    def built_groups(self, job: Job) -> list:
        return job.groups[:1] if job.reduced else job.groups


class TimingOnly(OneWayRing):
    name = "timing_only_test"
    capabilities = Capabilities(numeric=False)


@pytest.fixture
def plug_ins():
    made = [register(cls()) for cls in (OneWayRing, ReducedRing, TimingOnly)]
    yield {a.name: a for a in made}
    for a in made:
        unregister(a.name)


def _run(algorithm: str, mode: str, **kw):
    return run_collective("all_gather", System("tpu-v5e", topology="torus:4x4", trace=False), 16e6, axes=[0],
                          algorithm=algorithm, mode=mode, **kw)


def test_a_plug_in_that_ignores_reduced_mode_gets_the_full_figures_in_auto(plug_ins):
    """torus:4x4, axis 0: 4 rings of 4 chips; each ring moves n (n - 1) shards of V / n = 4 MB: 48 MB a ring,
    192 MB in all. Before capabilities, auto chose reduced mode from the topology and counted 768 MB."""
    auto, full = _run("one_way_ring_test", "auto"), _run("one_way_ring_test", "full")
    expected_total = 4 * 4 * 3 * 4e6
    assert auto.mode == full.mode == "full"
    assert auto.total_link_bytes == pytest.approx(expected_total, rel=1e-12)
    assert full.total_link_bytes == pytest.approx(expected_total, rel=1e-12)
    assert auto.link_bytes == full.link_bytes
    assert auto.time_s == pytest.approx(3 * (V5E_A + 4e6 / V5E_W), rel=1e-9) == full.time_s
    with pytest.raises(PodsimError, match=r"mode='reduced': algorithm 'one_way_ring_test' does not declare reduced "
                                          r"mode .*algorithms that do: .*bidirectional"):
        _run("one_way_ring_test", "reduced")


def test_a_plug_in_that_declares_reduced_mode_runs_one_ring_and_counts_them_all(plug_ins):
    auto, full = _run("reduced_ring_test", "auto"), _run("reduced_ring_test", "full")
    assert auto.mode == "reduced" and full.mode == "full"
    assert auto.n_transfers == 4 * 3 and full.n_transfers == 4 * 4 * 3  # one ring of the four, built
    assert auto.total_link_bytes == pytest.approx(4 * 4 * 3 * 4e6, rel=1e-12) == full.total_link_bytes
    assert auto.time_s == pytest.approx(full.time_s, rel=1e-12)


def test_a_timing_only_plug_in_refuses_data_and_auto_passes_it_over(plug_ins):
    data = np.arange(16 * 4, dtype=np.float64).reshape(16, 4)
    system = System("tpu-v5e", topology="torus:4x4", trace=False)
    with pytest.raises(PodsimError, match=r"algorithm 'timing_only_test' moves timing and bytes only "
                                          r"\(capabilities.numeric=False\)"):
        run_collective("all_gather", system, data=data, axes=[0], algorithm="timing_only_test")
    r = run_collective("all_gather", System("tpu-v5e", topology="torus:4x4", trace=False), data=data, axes=[0])
    assert "timing_only_test" not in {a["algorithm"] for a in r.alternatives}
    gathered = run_collective("all_gather", System("tpu-v5e", topology="torus:4x4", trace=False), data=data,
                              axes=[0], algorithm="one_way_ring_test")
    for chip in range(16):  # chips 4 apart (axis 0 of a row-major 4x4) share a ring
        ring = [c for c in range(16) if c % 4 == chip % 4]
        np.testing.assert_array_equal(gathered.outputs[chip], data[ring].reshape(-1))


@pytest.mark.parametrize("caps,match", [
    ("fast", r"capabilities='fast'; valid: a simulator.collectives.algorithm.Capabilities"),
    (Capabilities(reduced=1), r"capabilities.reduced=1; valid: True or False"),
    (Capabilities(direct_quotient=True, quotient=False), "declares direct_quotient without quotient"),
    (Capabilities(direct_quotient=True), "declares direct_quotient but has no on_axis, gather_chains, reduce_chains"),
])
def test_the_registry_refuses_capabilities_an_algorithm_cannot_have(caps, match):
    plug_in = type("Bad", (OneWayRing,), {"name": "bad_caps_test", "capabilities": caps})()
    with pytest.raises(PodsimError, match=match):
        register(plug_in)
    assert "bad_caps_test" not in {a.name for a in algorithms()}


def test_reduced_mode_needs_a_kind_it_runs():
    plug_in = type("Bcast", (OneWayRing,), {"name": "bcast_test", "kinds": ("broadcast",),
                                            "capabilities": Capabilities(reduced=True)})()
    with pytest.raises(PodsimError, match="declares reduced mode but serves none of all_gather, reduce_scatter"):
        register(plug_in)


def test_every_algorithm_lists_its_capabilities(capsys):
    assert main(["algorithms", "--json"]) == 0
    rows = {row["name"]: row for row in json.loads(capsys.readouterr().out)["algorithms"]}
    fields = set(Capabilities.__dataclass_fields__)
    assert all(set(row["capabilities"]) == fields for row in rows.values())
    assert rows["bidirectional"]["capabilities"]["reduced"] and rows["bidirectional"]["capabilities"]["direct_quotient"]
    assert not rows["binary_tree"]["capabilities"]["reduced"]
    assert main(["algorithms"]) == 0
    text = capsys.readouterr().out
    assert text.count("supports:") == len(rows)


@pytest.mark.parametrize("kind", REDUCED_KINDS)
def test_every_algorithm_that_declares_reduced_mode_agrees_with_its_full_run(kind):
    """On a wrapped torus (and a line, for algorithms of lines) auto takes reduced mode for exactly the
    algorithms that declare it, with the full run's time, total link bytes and bytes on every link."""
    checked = 0
    for algorithm in algorithms():
        for topology in ("torus:4x4", "ring:6", "torus:2x4"):
            try:
                auto = run_collective(kind, System("tpu-v5e", topology=topology, trace=False), 6e6,
                                      algorithm=algorithm.name)
            except PodsimError:
                continue
            full = run_collective(kind, System("tpu-v5e", topology=topology, trace=False), 6e6,
                                  algorithm=algorithm.name, mode="full")
            assert (auto.mode == "reduced") <= algorithm.capabilities.reduced, (algorithm.name, topology)
            assert auto.time_s == pytest.approx(full.time_s, rel=1e-9), (algorithm.name, topology)
            assert auto.total_link_bytes == pytest.approx(full.total_link_bytes, rel=1e-9), (algorithm.name, topology)
            assert auto.link_bytes.keys() == full.link_bytes.keys(), (algorithm.name, topology)  # every link
            assert all(auto.link_bytes[k] == pytest.approx(v, rel=1e-9) for k, v in full.link_bytes.items()), \
                (algorithm.name, topology)
            checked += auto.mode == "reduced"
    assert checked >= 2


def test_a_step_whose_collective_auto_runs_without_reduced_mode_counts_its_bytes_once():
    """decode on torus:2x4x2, data=2 x model=8: the step's symmetry asks for reduced mode, and auto picks an
    AllReduce for the 2x4 model groups that does not declare it, so every group runs; the fast step used to
    add the other group's bytes again (twice the exact run's ICI bytes)."""
    import dataclasses

    from simulator.hardware.specs import get_chip
    from simulator.workloads.budget import Parallelism
    from simulator.workloads.simulate import simulate_decode
    from simulator.workloads.transformer import get_model

    cfg = dataclasses.replace(get_model("llama-2-7b"), n_layers=2)
    fast, exact = (simulate_decode(cfg, get_chip("tpu-v5e"), 8, 2048, Parallelism(2, 8), topology="torus:2x4x2",
                                   fast=f) for f in (True, False))
    assert fast.sym is not None and fast.sym.active
    for interface, nbytes in exact.system.trace.bytes_by_interface.items():
        assert fast.system.trace.bytes_by_interface[interface] == pytest.approx(nbytes, rel=1e-9), interface
    assert fast.summary()["step_time_s"] == pytest.approx(exact.summary()["step_time_s"], rel=1e-9)


def test_every_algorithm_whose_prepare_refuses_data_declares_it():
    """An algorithm that declares ``numeric`` must not refuse a numeric job in ``prepare`` (it would be offered
    to `data=` callers and then fail): its source may not hold a 'timing only' refusal."""
    import inspect

    from simulator.collectives.algorithm import algorithms

    for alg in algorithms():
        source = inspect.getsource(type(alg).prepare) if "prepare" in vars(type(alg)) else ""
        if "timing only" in source and "raise" in source:
            assert not alg.capabilities.numeric, f"{alg.name} refuses data in prepare but declares numeric"
