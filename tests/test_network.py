"""Links, routing and point-to-point messages against REFERENCE.md's latency + bandwidth forms."""
import networkx as nx
import pytest

import topologies
from simulator import analytic
from simulator.engine.network import Network, send
from simulator.engine.system import System
from simulator.errors import PodsimError

B, A = 4.5e10, 1e-6  # tpu-v5e ICI one-way bandwidth per link, hop latency


@pytest.mark.parametrize("spec,src,dst,hops", [
    ("torus:8x8", 0, 8 * 3 + 3, 6),   # (0,0) -> (3,3): 3 + 3 hops
    ("torus:8x8", 0, 8 * 7 + 7, 2),   # (0,0) -> (7,7): wraparound makes it 1 + 1
    ("mesh:8x8", 0, 8 * 7 + 7, 14),   # no wraparound: 7 + 7
    ("ring:16", 0, 9, 7),             # shortest way round
])
def test_dimension_order_route_lengths(spec, src, dst, hops):
    net = Network(System().env, topologies.parse_spec(spec))
    (path,) = net.routes(src, dst)
    assert len(path) - 1 == hops
    assert all(net.graph.has_edge(u, v) for u, v in zip(path, path[1:], strict=False))


@pytest.mark.parametrize("nbytes", [1e3, 1e6, 1e9])
@pytest.mark.parametrize("hops_to", [1, 3, 5])
def test_cut_through_adds_latency_and_bandwidth(nbytes, hops_to):
    system = System("tpu-v5e", topology="mesh:8")
    out = send(system, 0, hops_to, nbytes, multipath=False)
    assert out["time_s"] == pytest.approx(hops_to * A + nbytes / B, rel=1e-12)
    assert out["first_byte_s"] == pytest.approx(hops_to * A, rel=1e-12)
    assert out["time_s"] == pytest.approx(analytic.point_to_point_time(nbytes, hops_to, B, A))


@pytest.mark.parametrize("chunks", [1, 2, 8])
def test_store_and_forward_pipelines_chunks(chunks):
    system = System("tpu-v5e", topology="mesh:8", switching="store_and_forward")
    out = send(system, 0, 4, 1e6, chunks=chunks, multipath=False)
    piece = 1e6 / chunks / B
    assert out["time_s"] == pytest.approx((4 + chunks - 1) * (A + piece), rel=1e-12)
    assert out["first_byte_s"] == pytest.approx(3 * (A + piece) + A, rel=1e-12)


def test_store_and_forward_is_slower_than_cut_through_over_several_hops():
    times = {mode: send(System(topology="mesh:8", switching=mode), 0, 5, 1e7, multipath=False)["time_s"]
             for mode in ("cut_through", "store_and_forward")}
    assert times["store_and_forward"] == pytest.approx(5 * times["cut_through"] - 4 * 5 * A, rel=1e-9)


def test_multipath_uses_link_disjoint_routes_in_parallel():
    out = send(System(topology="torus:4x4x4"), 0, 16 + 4 + 1, 3e6)  # (0,0,0) -> (1,1,1)
    assert out["links_used"] == 3 and out["hops"] == 3
    assert out["time_s"] == pytest.approx(3 * A + 3e6 / (3 * B), rel=1e-12)
    edges = [tuple(p[i:i + 2]) for p in out["routes"] for i in range(len(p) - 1)]
    assert len(edges) == len(set(edges))  # no link direction shared between the routes


def test_two_flows_on_one_link_each_see_half_the_bandwidth():
    system = System(topology="line:3")
    net = system.network
    first, second = net.message(0, 1, 9e6), net.message(0, 2, 9e6)  # both use link 0->1
    system.run()
    # both share 0->1 at B/2 until 9e6 bytes each have crossed: 2 * 9e6 / B after the latency
    assert first.value == pytest.approx(A + 2 * 9e6 / B, rel=1e-9)
    assert second.value == pytest.approx(A + 2 * 9e6 / B + A, rel=1e-9)
    assert net.link_bytes() == {"0->1": 18e6, "1->2": 9e6}


def test_links_appear_as_tracks_in_the_trace():
    system = System(topology="ring:4")
    send(system, 0, 2, 1e6, multipath=False)
    units = {s.unit for s in system.trace.spans}
    assert units == {"link 0->1", "link 1->2"} or units == {"link 0->3", "link 3->2"}


@pytest.mark.parametrize("trace", [True, False])
def test_a_link_is_built_with_its_edge_figures_and_described_only_when_traced(trace):
    """A link's channel carries its edge's rate, latency and kind (and, calibrated, the calibrated ones over the
    nominal); the trace describes it for the report's link groups only where there are busy times to group."""
    system = System("h100", topology="switch:4", trace=trace)
    net = system.network
    data = net.graph.edges[0, "sw0"]
    net.set_link_efficiency(lambda kind: 0.5, lambda kind, latency: 3 * latency)
    link = net.link(0, "sw0")
    assert (link.name, link.kind, link.chip) == ("link 0->sw0", data["kind"], 0)
    assert (link.nominal_bandwidth_bytes_per_s, link.nominal_latency_s) == (data["bandwidth_bytes_per_s"],
                                                                            data["latency_s"])
    assert (link.bandwidth_bytes_per_s, link.latency_s) == (0.5 * data["bandwidth_bytes_per_s"],
                                                            3 * data["latency_s"])
    assert net.link(0, "sw0") is link
    assert system.trace.links == ({"link 0->sw0": {**data, "src_role": "chip", "dst_role": "switch"}}
                                  if trace else {})


def test_switch_route_goes_through_the_switch():
    system = System("h100", topology="switch:8")
    out = send(system, 2, 5, 4.5e8)
    assert out["routes"] == [[2, "sw0", 5]]
    assert out["time_s"] == pytest.approx(2e-6 + 4.5e8 / 4.5e11, rel=1e-12)


def test_disconnected_topology_is_rejected():
    graph = topologies.ring(4)
    graph.remove_edge(1, 2)
    graph.remove_edge(2, 1)
    graph.remove_edge(3, 0)
    graph.remove_edge(0, 3)
    with pytest.raises(PodsimError, match="disconnected"):
        Network(System().env, graph)


@pytest.mark.parametrize("key,value,ok", [
    ("bandwidth_bytes_per_s", 45_000_000_000, True),  # an int is a number (the slow path takes it)
    ("latency_s", 0, True), ("latency_s", 0.0, True),
    ("bandwidth_bytes_per_s", float("nan"), False), ("bandwidth_bytes_per_s", 0.0, False),
    ("bandwidth_bytes_per_s", float("inf"), False), ("bandwidth_bytes_per_s", True, False),
    ("bandwidth_bytes_per_s", None, False), ("latency_s", -1e-9, False), ("latency_s", float("nan"), False),
])
def test_a_bad_link_is_named(key, value, ok):
    graph = topologies.ring(4)
    graph.edges[2, 3][key] = value
    if ok:
        Network(System().env, graph)
        return
    with pytest.raises(PodsimError, match=f"link 2->3 {key}=.*every link needs a bandwidth > 0 and a latency >= 0"):
        Network(System().env, graph)


def test_unknown_switching_and_bad_chunks():
    with pytest.raises(PodsimError, match="switching='wormhole'"):
        System(topology="ring:4", switching="wormhole")
    with pytest.raises(PodsimError, match="chunks"):
        System(topology="ring:4").network.message(0, 1, 10, chunks=0)


def test_bad_link_bandwidth_in_a_graph():
    graph = nx.DiGraph(kind="custom", shape=(2,), wrap=(False,))
    graph.add_node(0, role="chip", coord=(0,))
    graph.add_node(1, role="chip", coord=(1,))
    graph.add_edge(0, 1, bandwidth_bytes_per_s=0.0, latency_s=1e-6)
    graph.add_edge(1, 0, bandwidth_bytes_per_s=1e9, latency_s=1e-6)
    with pytest.raises(PodsimError, match=r"link 0->1 bandwidth_bytes_per_s=0\.0"):
        System(topology=graph)
    graph.edges[0, 1].update(bandwidth_bytes_per_s=1e9, latency_s=-1.0)
    with pytest.raises(PodsimError, match=r"link 0->1 latency_s=-1\.0"):
        System(topology=graph)


def test_idle_follows_the_links_in_flight_even_when_the_link_last_found_busy_goes_idle():
    """`Network.idle` (the link last found busy asked first) against the times a lone transfer occupies its link:
    from its latency ``A`` to ``A + bytes / B`` (the latency wait does not occupy it)."""
    system = System("tpu-v5e", topology="mesh:8")
    net, env = system.network, system.env
    assert net.idle()  # no link built yet
    short, long = net.link(0, 1), net.link(2, 3)
    short.transfer(1e6)
    long.transfer(3e6)
    expected = [(0.5 * A, True), (A + 0.5e6 / B, False), (A + 2e6 / B, False), (A + 4e6 / B, True)]
    for at, idle in expected:
        env.run(until=at)
        assert net.idle() is idle, at
    short.transfer(1e6)  # a hint left on the long link (now idle) while the short one is busy again
    env.run(until=env.now + A + 0.5e6 / B)
    assert net.idle() is False


def test_link_efficiency_settings_leave_every_link_at_its_own_kinds_values():
    """`Network.set_link_efficiency` (which sets only the links whose values change, and where the settings' values
    are those already in force, only links with a flow on its way) against the rule itself, written out: after every
    setting, every built link runs at its nominal rate times ``fraction(kind)`` and at ``latency(kind, nominal)`` a
    hop (its own latency without one) -- links built between settings and kinds first seen late included -- and a
    flow admitted ahead of its arrival keeps arriving when its latency says."""
    system = System("h100", topology="nodes:2:8")
    net, env = system.network, system.env
    chips = net.chips

    def check(fraction, latency):
        for channel in net.links.values():
            factor = 1.0 if fraction is None else fraction(channel.kind)
            assert channel.bandwidth_bytes_per_s == channel.nominal_bandwidth_bytes_per_s * factor
            assert channel.latency_s == (channel.nominal_latency_s if latency is None else
                                         latency(channel.kind, channel.nominal_latency_s))

    def halves(kind):
        return 0.5 if kind == "nvlink" else 0.25

    def slow(kind, own):
        return own + (1e-6 if kind == "ib" else 2e-6)

    nvlink = net.link(chips[0], next(v for v in net.graph.successors(chips[0])
                                     if net.graph.edges[chips[0], v]["kind"] == "nvlink"))
    settings = [(halves, None), (halves, None), (halves, slow), (None, None), (halves, slow), (halves, slow)]
    for i, (fraction, latency) in enumerate(settings):
        net.set_link_efficiency(fraction, latency)
        check(fraction, latency)
        if i == 1:  # an InfiniBand link, a kind not seen before, built under the settings in force
            ib = net.link(chips[0], next(v for v in net.graph.successors(chips[0])
                                         if net.graph.edges[chips[0], v]["kind"] == "ib"))
            check(fraction, latency)
    assert {c.kind for c in net.links.values()} == {"nvlink", "ib"} and ib is not nvlink
    done: list[float] = []
    start = env.now
    nvlink.send(1e6, "x", "send", done.append, 0)  # admitted ahead: on its way for its latency, then moving
    net.set_link_efficiency(halves, slow)  # the same values: the flow put back on its way, as by any setting
    env.run()
    latency = slow("nvlink", nvlink.nominal_latency_s)
    assert len(done) == 1 and env.now == pytest.approx(start + latency + 1e6 / nvlink.bandwidth_bytes_per_s,
                                                       rel=1e-12)
