"""Structure of the topology graphs: edge counts and degrees against formulas, wraparound rules,
multi-level systems, hosts, spec parsing and error messages."""

from __future__ import annotations

import doctest
import importlib
import math
import pkgutil
from types import SimpleNamespace
from unittest import mock

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import topologies
from topologies import (
    TopologyError,
    axis_ring,
    chips,
    coord_to_node,
    line,
    mesh,
    multislice,
    nodes,
    num_links,
    parse_spec,
    ring,
    switch,
    torus,
    tpu_slice,
    with_hosts,
)

V5E = SimpleNamespace(
    name="tpu-v5e",
    wraparound="length16",
    torus_dims=2,
    ici_bandwidth_bytes_per_s=4.5e10,
    hop_latency_s=1e-6,
    ici_links=4,
    dcn_bandwidth_bytes_per_s=3.125e9,
)
V5P = SimpleNamespace(
    name="tpu-v5p",
    wraparound="multiple4",
    torus_dims=3,
    ici_bandwidth_bytes_per_s=9e10,
    hop_latency_s=2e-6,
    ici_links=6,
    dcn_bandwidth_bytes_per_s=6.25e9,
)
H100 = SimpleNamespace(
    name="h100",
    wraparound="switch",
    torus_dims=0,
    ici_bandwidth_bytes_per_s=2.5e10,
    hop_latency_s=1e-6,
    ici_links=18,
    dcn_bandwidth_bytes_per_s=None,
)


def torus_edges(shape: tuple[int, ...], wrap: tuple[bool, ...]) -> int:
    """Directed edge count: per axis, (n-1) links per line, plus one wraparound when n >= 3."""
    total = 0
    for a, n in enumerate(shape):
        lines = math.prod(shape) // n
        links_per_line = n - 1 + (1 if wrap[a] and n >= 3 else 0)
        total += 2 * links_per_line * lines
    return total


def wrap_edges(G: nx.DiGraph) -> list[tuple[int, int, int]]:
    return sorted((u, v, d["axis"]) for u, v, d in G.edges(data=True) if d.get("wrap"))


# --- rings, lines, tori, meshes -------------------------------------------------------------------


@pytest.mark.parametrize("n", [3, 4, 5, 8, 17])
def test_ring_has_2n_edges_and_is_a_cycle(n: int) -> None:
    G = ring(n)
    assert G.number_of_edges() == 2 * n
    assert nx.is_isomorphic(G.to_undirected(), nx.cycle_graph(n))
    assert G.graph == {"kind": "ring", "shape": (n,), "wrap": (True,)}


@pytest.mark.parametrize("n", [1, 2, 3, 8])
def test_line_has_2_n_minus_1_edges_and_is_a_path(n: int) -> None:
    G = line(n)
    assert G.number_of_edges() == 2 * (n - 1)
    assert nx.is_isomorphic(G.to_undirected(), nx.path_graph(n))
    assert G.graph["wrap"] == (False,) and not wrap_edges(G)


@pytest.mark.parametrize("shape", [(3,), (4, 4), (3, 5), (4, 4, 4), (3, 4, 5), (3, 3, 3, 3)])
def test_full_torus_edge_count_is_2_d_prod(shape: tuple[int, ...]) -> None:
    G = torus(shape)
    assert G.number_of_edges() == 2 * len(shape) * math.prod(shape)
    assert G.graph["wrap"] == (True,) * len(shape)


@pytest.mark.parametrize("shape", [(5,), (4, 4), (2, 3), (4, 4, 4), (1, 4, 2), (3, 4, 5)])
def test_mesh_edge_count_formula(shape: tuple[int, ...]) -> None:
    G = mesh(shape)
    expected = sum(2 * (n - 1) * math.prod(shape) // n for n in shape)
    assert G.number_of_edges() == expected
    assert G.graph["kind"] == "mesh" and G.graph["wrap"] == (False,) * len(shape)


def test_every_chip_of_a_4x4x4_torus_has_out_degree_6() -> None:
    G = torus((4, 4, 4))
    assert {d for _, d in G.out_degree()} == {6}
    assert {d for _, d in G.in_degree()} == {6}


def test_mesh_degrees_corner_edge_interior() -> None:
    G = mesh((4, 4))
    assert G.out_degree(coord_to_node(G, (0, 0))) == 2
    assert G.out_degree(coord_to_node(G, (3, 3))) == 2
    assert G.out_degree(coord_to_node(G, (0, 2))) == 3
    assert G.out_degree(coord_to_node(G, (1, 2))) == 4


def test_chips_are_row_major_with_coord_and_role() -> None:
    G = torus((2, 3, 4))
    assert chips(G) == list(range(24))
    assert G.nodes[0] == {"coord": (0, 0, 0), "role": "chip"}
    assert G.nodes[1]["coord"] == (0, 0, 1)
    assert G.nodes[4]["coord"] == (0, 1, 0)
    assert G.nodes[12]["coord"] == (1, 0, 0)
    assert all(coord_to_node(G, G.nodes[v]["coord"]) == v for v in G)


def test_edges_come_in_matching_pairs_with_opposite_directions() -> None:
    G = torus((3, 2, 4), bandwidth_bytes_per_s=1e9, latency_s=0.0, kind="ici")
    for u, v, d in G.edges(data=True):
        back = G.edges[v, u]
        assert back["direction"] == -d["direction"]
        assert (back["axis"], back["wrap"], back["kind"]) == (d["axis"], d["wrap"], "ici")
        assert (d["bandwidth_bytes_per_s"], d["latency_s"]) == (1e9, 0.0)


def test_direction_is_one_step_along_axis_modulo_length() -> None:
    G = torus((3, 4, 5))
    shape = G.graph["shape"]
    for u, v, d in G.edges(data=True):
        a = d["axis"]
        cu, cv = G.nodes[u]["coord"], G.nodes[v]["coord"]
        assert (cu[a] + d["direction"]) % shape[a] == cv[a]
        assert cu[:a] + cu[a + 1 :] == cv[:a] + cv[a + 1 :]
        assert d["wrap"] == (abs(cu[a] - cv[a]) == shape[a] - 1)


def test_wraparound_edges_sit_exactly_on_the_wrapped_axes() -> None:
    G = torus((4, 3), wrap=(True, False))
    assert G.graph["wrap"] == (True, False)
    assert wrap_edges(G) == sorted([(9, 0, 0), (0, 9, 0), (10, 1, 0), (1, 10, 0), (11, 2, 0), (2, 11, 0)])
    assert G.number_of_edges() == torus_edges((4, 3), (True, False))


# --- size-1 and size-2 axes ----------------------------------------------------------------------


def test_size_1_axis_has_no_links_and_no_self_loops() -> None:
    G = torus((1,))
    assert G.number_of_nodes() == 1 and G.number_of_edges() == 0
    assert G.graph["wrap"] == (False,)
    H = torus((4, 1))
    assert nx.number_of_selfloops(H) == 0
    assert H.graph["wrap"] == (True, False)
    assert {d["axis"] for _, _, d in H.edges(data=True)} == {0}
    assert H.number_of_edges() == 8


def test_size_2_axis_has_one_link_and_no_effective_wrap() -> None:
    G = ring(2)
    assert sorted(G.edges()) == [(0, 1), (1, 0)]
    assert G.graph["wrap"] == (False,)
    assert not wrap_edges(G)
    assert G.edges[0, 1]["direction"] == 1 and G.edges[1, 0]["direction"] == -1


def test_torus_2x2_and_2x4_effective_wrap() -> None:
    assert torus((2, 2)).number_of_edges() == 8
    assert torus((2, 2)).graph["wrap"] == (False, False)
    G = torus((2, 4))
    assert G.graph["wrap"] == (False, True)
    assert G.number_of_edges() == torus_edges((2, 4), (False, True)) == 4 * 2 + 2 * 4 * 2


def test_ring_of_one_chip() -> None:
    G = ring(1)
    assert list(G.nodes) == [0] and G.number_of_edges() == 0 and G.graph["wrap"] == (False,)


# --- TPU slices ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("shape", "wrap"),
    [
        ((8, 16), (False, True)),
        ((4, 4), (False, False)),
        ((16, 16), (True, True)),
        ((16, 8), (True, False)),
        ((2, 2), (False, False)),
        ((16,), (True,)),
        ((1, 16), (False, True)),
    ],
)
def test_v5e_rule_wraps_only_axes_of_length_16(shape: tuple[int, ...], wrap: tuple[bool, ...]) -> None:
    G = tpu_slice(shape, V5E)
    assert G.graph["wrap"] == wrap
    assert {d["axis"] for _, _, d in G.edges(data=True) if d["wrap"]} == {a for a, w in enumerate(wrap) if w}
    assert G.number_of_edges() == torus_edges(shape, wrap)


@pytest.mark.parametrize(
    ("shape", "wrap"),
    [
        ((4, 4, 4), (True, True, True)),
        ((4, 4, 8), (True, True, True)),
        ((8, 8, 16), (True, True, True)),
        ((2, 2, 4), (False, False, False)),
        ((2, 2, 2), (False, False, False)),
        ((2, 2, 1), (False, False, False)),
        ((4, 4), (False, False)),
        ((4, 4, 6), (True, True, False)),
    ],
)
def test_v5p_rule_multiples_of_4_wrap_only_from_a_full_cube(
    shape: tuple[int, ...], wrap: tuple[bool, ...]
) -> None:
    G = tpu_slice(shape, V5P)
    assert G.graph["wrap"] == wrap
    assert G.number_of_edges() == torus_edges(shape, wrap)


def test_slice_uses_chip_link_numbers_and_records_rule() -> None:
    G = tpu_slice((4, 4, 4), V5P)
    assert G.graph["kind"] == "torus"
    assert (G.graph["slice_rule"], G.graph["chip"]) == ("multiple4", "tpu-v5p")
    assert G.edges[0, 1]["bandwidth_bytes_per_s"] == 9e10 and G.edges[0, 1]["latency_s"] == 2e-6


def test_slice_accepts_a_rule_string_and_has_one_name() -> None:
    assert not hasattr(topologies, "slice") and not hasattr(topologies, "slice_")  # no alias shadows the builtin
    G = topologies.tpu_slice((8, 16), "length16", bandwidth_bytes_per_s=1e9)
    assert G.graph["wrap"] == (False, True) and G.edges[0, 1]["bandwidth_bytes_per_s"] == 1e9


@pytest.mark.parametrize(
    ("shape", "chip", "needles"),
    [
        ((4, 4, 4), V5E, ["4x4x4", "2-D", "at most 2 axes"]),
        ((8, 32), V5E, ["8x32", "16x16"]),
        ((4, 4, 4, 4), V5P, ["4x4x4x4", "at most 3 axes"]),
        ((8,), H100, ["h100", "switch:8"]),
        ((4, 4), "hexagonal", ["'hexagonal'", "length16", "multiple4"]),
        ((4, 0), V5E, ["4x0", ">= 1"]),
    ],
)
def test_slice_errors_name_the_bad_value(shape: tuple[int, ...], chip: object, needles: list[str]) -> None:
    with pytest.raises(TopologyError) as info:
        tpu_slice(shape, chip)
    assert all(n in str(info.value) for n in needles), str(info.value)


# --- switch, multislice, nodes, hosts ------------------------------------------------------------


def test_switch_has_n_chips_one_switch_and_2n_edges() -> None:
    G = switch(8)
    assert chips(G) == list(range(8))
    assert G.nodes["sw0"] == {"role": "switch"}
    assert G.number_of_nodes() == 9 and G.number_of_edges() == 16
    assert all(G.has_edge(i, "sw0") and G.has_edge("sw0", i) for i in range(8))
    assert {d["kind"] for _, _, d in G.edges(data=True)} == {"nvlink"}
    assert G.edges[3, "sw0"]["bandwidth_bytes_per_s"] == 4.5e11
    assert G.graph == {"kind": "switch", "shape": (8,), "wrap": (False,)}


def test_multislice_structure() -> None:
    G = multislice(2, (16, 16), V5E)
    assert len(chips(G)) == 512 and G.nodes["dcn0"]["role"] == "switch"
    assert G.number_of_edges() == 2 * torus_edges((16, 16), (True, True)) + 2 * 512
    assert G.graph["shape"] == (2, 16, 16) and G.graph["wrap"] == (False, True, True)
    assert G.nodes[256] == {"coord": (1, 0, 0), "role": "chip", "group": 1, "local_coord": (0, 0)}
    assert G.edges[300, "dcn0"] == {"bandwidth_bytes_per_s": 3.125e9, "latency_s": 1e-5, "kind": "dcn"}
    assert {d["axis"] for _, _, d in G.edges(data=True) if d["kind"] == "ici"} == {1, 2}
    chip_edges = [(u, v) for u, v in G.edges if isinstance(u, int) and isinstance(v, int)]
    assert all(G.nodes[u]["group"] == G.nodes[v]["group"] for u, v in chip_edges)
    assert axis_ring(G, 3, 0) == [3, 259]


def test_multislice_dcn_bandwidth_default_and_override() -> None:
    assert multislice(2, (4, 4), "length16").edges[0, "dcn0"]["bandwidth_bytes_per_s"] == 6.25e9
    G = multislice(3, (2, 2, 4), V5P, dcn_bandwidth_bytes_per_s=1e9)
    assert G.edges["dcn0", 47]["bandwidth_bytes_per_s"] == 1e9
    assert G.graph["wrap"] == (False, False, False, False) and num_links(G, "dcn") == 48


def test_nodes_structure() -> None:
    G = nodes(4, 8)
    assert len(chips(G)) == 32
    assert [v for v, r in G.nodes(data="role") if r == "switch"] == ["sw0", "sw1", "sw2", "sw3", "ib0"]
    assert G.number_of_edges() == 4 * 32
    assert num_links(G, "nvlink") == 32 and num_links(G, "ib") == 32
    assert G.nodes[9] == {"coord": (1, 1), "role": "chip", "group": 1, "local_coord": (1,)}
    assert set(G.successors(9)) == {"sw1", "ib0"}
    assert G.edges[9, "sw1"]["bandwidth_bytes_per_s"] == 4.5e11
    assert G.edges[9, "ib0"]["bandwidth_bytes_per_s"] == 5e10 and G.edges[9, "ib0"]["kind"] == "ib"
    assert G.graph["shape"] == (4, 8) and G.graph["wrap"] == (False, False)
    assert axis_ring(G, 9, 0) == [1, 9, 17, 25]


def test_with_hosts_copies_and_links_each_chip_once() -> None:
    G = torus((4, 4))
    H = with_hosts(G, 4)
    assert "host0" not in G and G.number_of_edges() == 64
    assert [v for v, r in H.nodes(data="role") if r == "host"] == ["host0", "host1", "host2", "host3"]
    assert H.nodes["host2"]["chips"] == (8, 9, 10, 11)
    assert num_links(H, "pcie") == 16 and H.number_of_edges() == 64 + 32
    assert H.edges[9, "host2"] == {"bandwidth_bytes_per_s": 1.6e10, "latency_s": 1e-6, "kind": "pcie"}


def test_with_hosts_ragged_last_host_and_double_hosting() -> None:
    H = with_hosts(switch(6), 4, pcie_bandwidth_bytes_per_s=3.2e10)
    assert H.nodes["host1"]["chips"] == (4, 5)
    assert H.edges["host1", 5]["bandwidth_bytes_per_s"] == 3.2e10
    with pytest.raises(TopologyError, match="host0"):
        with_hosts(H, 4)
    with pytest.raises(TopologyError, match="chips per host 0"):
        with_hosts(ring(4), 0)


# --- helpers -------------------------------------------------------------------------------------


def test_axis_ring_lists_chips_in_coordinate_order() -> None:
    G = torus((2, 3, 4))
    assert axis_ring(G, 0, 2) == [0, 1, 2, 3]
    assert axis_ring(G, 6, 1) == [2, 6, 10]
    assert axis_ring(G, 6, 0) == [6, 18]


def test_num_links_counts_pairs() -> None:
    assert num_links(torus((4, 4, 4))) == 192
    assert num_links(ring(2)) == 1 and num_links(ring(1)) == 0
    assert num_links(switch(8), "nvlink") == 8 and num_links(switch(8), "ici") == 0


@pytest.mark.parametrize(
    ("call", "needles"),
    [
        (lambda: coord_to_node(torus((4, 4)), (4, 0)), ["(4, 0)", "4x4"]),
        (lambda: coord_to_node(torus((4, 4)), (1, 1, 0)), ["(1, 1, 0)", "4x4"]),
        (lambda: coord_to_node(torus((4, 4)), "ab"), ["'ab'", "4x4"]),
        (lambda: axis_ring(torus((4, 4)), 0, 2), ["axis 2", "0 to 1"]),
        (lambda: axis_ring(switch(4), "sw0", 0), ["'sw0'", "not a chip"]),
    ],
)
def test_helper_errors_name_the_bad_value(call, needles: list[str]) -> None:
    with pytest.raises(TopologyError) as info:
        call()
    assert all(n in str(info.value) for n in needles), str(info.value)


# --- validation ----------------------------------------------------------------------------------


def test_zero_axis_message() -> None:
    with pytest.raises(TopologyError) as info:
        torus((4, 0))
    assert str(info.value) == "torus shape '4x0' has an axis of length 0; each axis must be an integer >= 1"


@pytest.mark.parametrize(
    ("call", "needles"),
    [
        (lambda: ring(0), ["ring size 0", ">= 1"]),
        (lambda: line(-3), ["line size -3", ">= 1"]),
        (lambda: ring(2.5), ["2.5", "integer"]),
        (lambda: ring(True), ["True", "integer"]),
        (lambda: torus(()), ["()", "at least one axis"]),
        (lambda: torus("4x4"), ["'4x4'", "(4, 4)"]),
        (lambda: torus((4, 4), wrap=(True,)), ["(True,)", "2 bools"]),
        (lambda: torus((4, 4), wrap=(1, 0)), ["(1, 0)", "True or False"]),
        (lambda: torus((1001, 1000)), ["1001000 chips", "65536"]),
        (lambda: switch(2_000_000), ["2000000", "65536"]),
        (lambda: nodes(1001, 1000), ["1001000", "65536"]),
        (lambda: multislice(1000, (32, 32, 32), V5P), ["32768000", "65536"]),
        (lambda: ring(8, bandwidth_bytes_per_s=0), ["bandwidth_bytes_per_s=0", "> 0"]),
        (lambda: ring(8, bandwidth_bytes_per_s=-1e9), ["-1000000000.0", "> 0"]),
        (lambda: ring(8, bandwidth_bytes_per_s=float("nan")), ["nan", "finite"]),
        (lambda: ring(8, bandwidth_bytes_per_s=float("inf")), ["inf", "finite"]),
        (lambda: ring(8, bandwidth_bytes_per_s="fast"), ["'fast'", "finite"]),
        (lambda: ring(8, latency_s=-1e-6), ["latency_s=-1e-06", ">= 0"]),
        (lambda: ring(8, latency_s=float("nan")), ["nan", "finite"]),
        (lambda: ring(8, latency_s=float("inf")), ["inf", "finite"]),
        (lambda: switch(4, latency_s=-1.0), ["-1.0", ">= 0"]),
        (lambda: nodes(2, 8, ib_bandwidth_bytes_per_s=0.0), ["0.0", "> 0"]),
        (lambda: multislice(2, (4, 4), V5E, dcn_latency_s=float("inf")), ["inf", "finite"]),
        (lambda: with_hosts(ring(4), 2, pcie_bandwidth_bytes_per_s=float("nan")), ["nan", "finite"]),
        (lambda: ring(8, kind="ethernet"), ["'ethernet'", "ici, nvlink, pcie, dcn, ib"]),
    ],
)
def test_bad_arguments_raise_topology_error_naming_the_value(call, needles: list[str]) -> None:
    with pytest.raises(TopologyError) as info:
        call()
    assert isinstance(info.value, ValueError)
    assert all(n in str(info.value) for n in needles), str(info.value)


def test_zero_latency_is_allowed() -> None:
    assert ring(4, latency_s=0).edges[0, 1]["latency_s"] == 0.0


# --- spec strings --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "kind", "shape", "wrap", "n_nodes"),
    [
        ("ring:8", "ring", (8,), (True,), 8),
        ("line:8", "line", (8,), (False,), 8),
        ("torus:4x4x4", "torus", (4, 4, 4), (True, True, True), 64),
        ("torus:2x8", "torus", (2, 8), (False, True), 16),
        ("mesh:4x4", "mesh", (4, 4), (False, False), 16),
        ("switch:8", "switch", (8,), (False,), 9),
        ("nodes:4:8", "nodes", (4, 8), (False, False), 32 + 5),
        (" Torus:4x4 ", "torus", (4, 4), (True, True), 16),
    ],
)
def test_parse_spec_without_chip(spec: str, kind: str, shape: tuple, wrap: tuple, n_nodes: int) -> None:
    G = parse_spec(spec)
    assert (G.graph["kind"], G.graph["shape"], G.graph["wrap"]) == (kind, shape, wrap)
    assert G.number_of_nodes() == n_nodes
    assert G.graph["spec"] == spec


def test_parse_spec_slices_follow_the_chip() -> None:
    assert parse_spec("slice:8x16", V5E).graph["wrap"] == (False, True)
    assert parse_spec("slice:2x2x4", V5P).graph["wrap"] == (False, False, False)
    assert parse_spec("slice:4x4x8", V5P).graph["wrap"] == (True, True, True)
    G = parse_spec("multislice:2:16x16", V5E)
    assert G.graph["kind"] == "multislice" and len(chips(G)) == 512
    assert G.edges[0, "dcn0"]["bandwidth_bytes_per_s"] == 3.125e9
    assert G.graph["spec"] == "multislice:2:16x16"


def test_parse_spec_takes_link_numbers_from_the_chip() -> None:
    assert parse_spec("torus:4x4x4", V5P).edges[0, 1]["bandwidth_bytes_per_s"] == 9e10
    assert parse_spec("ring:4", V5P).edges[0, 1]["latency_s"] == 2e-6
    sw = parse_spec("switch:8", H100).edges[0, "sw0"]
    assert sw["bandwidth_bytes_per_s"] == 2.5e10 * 18 and sw["kind"] == "nvlink"
    nv = parse_spec("nodes:2:8", H100)
    assert nv.edges[0, "sw0"]["bandwidth_bytes_per_s"] == 4.5e11 and nv.edges[0, "ib0"]["kind"] == "ib"


@pytest.mark.parametrize(
    ("spec", "chip", "needles"),
    [
        ("", None, ["''", "ring:N"]),
        ("   ", None, ["'   '", "torus:AxBxC"]),
        ("torus:4x", None, ["'4x'", "torus:AxBxC"]),
        ("torus:", None, ["'torus:'", "torus:AxBxC"]),
        ("torus", None, ["'torus'", "0"]),
        ("ring:abc", None, ["'abc'", "ring:N"]),
        ("ring:0", None, ["'0'", ">= 1", "ring:N"]),
        ("ring:-4", None, ["'-4'", "ring:N"]),
        ("ring:8:3", None, ["'ring:8:3'", "got 2", "ring:N"]),
        ("ring:8.0", None, ["'8.0'", "ring:N"]),
        ("ring:٣", None, ["'٣'", "ring:N"]),
        ("hypercube:8", None, ["'hypercube'", "ring:N", "nodes:K:G"]),
        ("torus:4x0", None, ["'4x0'", "axis of length 0"]),
        ("torus:4x4x999999999999999999999", None, ["999999999999999999999", "65536"]),
        ("torus:1000x1001", None, ["1001000 chips", "65536"]),
        ("slice:8x16", None, ["'slice:8x16'", "needs a chip"]),
        ("multislice:2:16x16", None, ["'multislice:2:16x16'", "needs a chip"]),
        ("slice:8x32", V5E, ["8x32", "16x16"]),
        ("slice:8", H100, ["h100", "switch:8"]),
        ("multislice:2", V5E, ["'multislice:2'", "multislice:K:AxB"]),
        ("nodes:4:0", None, ["'0'", "nodes:K:G"]),
    ],
)
def test_parse_spec_errors(spec: str, chip: object, needles: list[str]) -> None:
    with pytest.raises(TopologyError) as info:
        parse_spec(spec, chip)
    assert all(n in str(info.value) for n in needles), str(info.value)


def test_parse_spec_rejects_non_strings() -> None:
    with pytest.raises(TopologyError, match="42"):
        parse_spec(42)  # type: ignore[arg-type]


SPECISH = st.builds(
    lambda kind, rest: f"{kind}:{rest}",
    st.sampled_from(["ring", "line", "torus", "mesh", "slice", "switch", "multislice", "nodes", "x"]),
    st.text(alphabet="0123456789x:- .", max_size=12),
)


@settings(max_examples=300, deadline=None)
@given(
    spec=st.one_of(st.text(max_size=30), SPECISH),
    chip=st.sampled_from([None, V5E, V5P, H100, "multiple4"]),
)
def test_parse_spec_returns_a_graph_or_raises_topology_error(spec: str, chip: object) -> None:
    # A small chip limit keeps every graph the fuzzer can name tiny; the parsing paths are unchanged.
    with mock.patch("topologies.validate.MAX_CHIPS", 512):
        try:
            G = parse_spec(spec, chip)
        except TopologyError as err:
            assert str(err)
            return
    assert isinstance(G, nx.DiGraph) and G.graph["spec"] == spec
    assert all(isinstance(v, int) == (G.nodes[v]["role"] == "chip") for v in G)


# --- documentation examples ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "module", ["topologies"] + [f"topologies.{m.name}" for m in pkgutil.iter_modules(topologies.__path__)]
)
def test_docstring_examples_run(module: str) -> None:
    result = doctest.testmod(importlib.import_module(module))
    assert result.failed == 0


@pytest.mark.parametrize("shape,wrap", [((4, 4), (True, True)), ((2, 3, 5), (True, False, True)), ((8,), (False,))])
def test_axis_links_added_at_once_are_the_link_by_link_ones(shape, wrap):
    """`torus._add_axis` (every link of an axis in one call) gives the graph `links.add_axis_link` builds a link at
    a time over the same pairs: the same links in the same order (routes break ties by it), with the same data."""
    import numpy as np

    from topologies.links import Link, add_axis_link

    torus = importlib.import_module("topologies.torus")  # (the package's ``torus`` is the builder function)

    link = Link(4.5e10, 1e-6, "ici")
    fast, slow = nx.DiGraph(), nx.DiGraph()
    for axis in range(len(shape)):
        torus._add_axis(fast, shape, axis, wrap[axis], link, 100, 1)
        for i in range(math.prod(shape)):  # +1 along the axis, wrapping only where asked and the ring has 3 or more
            coord = list(np.unravel_index(i, shape))
            step = coord[axis] + 1
            if step == shape[axis] and not (wrap[axis] and shape[axis] >= 3):
                continue
            coord[axis] = step % shape[axis]
            add_axis_link(slow, 100 + i, 100 + int(np.ravel_multi_index(coord, shape)), link, axis + 1,
                          step == shape[axis])
    assert list(fast.edges(data=True)) == list(slow.edges(data=True)) and list(fast) == list(slow)
