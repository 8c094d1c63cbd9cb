"""Fuzz the spec-string parsers: any text either parses or raises the documented error, nothing else."""
import contextlib
import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import topologies
from simulator.errors import PodsimError
from simulator.frontend.scenario import load_scenario, parse_sets
from simulator.units import KINDS, parse_quantity
from simulator.workloads.budget import parse_parallelism
from simulator.workloads.mesh import parse_mesh
from simulator.workloads.sharding import parse_array, parse_matmul

ALPHABET = string.ascii_letters + string.digits + "=,@+_-.:[]{}x/ >eE"
TEXT = st.one_of(st.text(max_size=40), st.text(alphabet=ALPHABET, max_size=40))
ERRORS = (PodsimError, topologies.TopologyError)


def _only_documented_errors(fn, text):
    with contextlib.suppress(ERRORS):
        fn(text)


@settings(max_examples=300, deadline=None)
@given(text=TEXT, kind=st.sampled_from(KINDS))
def test_quantities(text, kind):
    _only_documented_errors(lambda t: parse_quantity(t, kind), text)


@settings(max_examples=300, deadline=None)
@given(text=st.one_of(TEXT, st.from_regex(r"[A-Z]=\d{1,3}(@\d(\+\d)?)?(,[A-Z]=\d{1,3}(@\d)?){0,3}", fullmatch=True)))
def test_mesh_specs(text):
    _only_documented_errors(parse_mesh, text)


@settings(max_examples=300, deadline=None)
@given(text=st.one_of(TEXT, st.from_regex(r"[A-C]\[[IJK](_[XYZ]{1,2})?,[IJK](_[XYZ]{1,2})?\](\{U_[XY]\})?"
                                          r"(@[A-C]\[[IJK](_[XY])?,[IJK](_[XY])?\])?(->C\[I,K\])?", fullmatch=True)))
def test_sharding_notation(text):
    _only_documented_errors(parse_matmul, text)
    _only_documented_errors(parse_array, text)


@settings(max_examples=200, deadline=None)
@given(text=st.one_of(TEXT, st.from_regex(r"(data|model|pipe)=\d{0,3}(,(data|model)=\d{0,2})?", fullmatch=True)))
def test_parallelism_specs(text):
    _only_documented_errors(parse_parallelism, text)


@settings(max_examples=200, deadline=None)
@given(key=st.sampled_from(["blocks", "buffers", "load_s", "load_bytes", "compute_flops", "trace", "chip", "nope"]),
       value=TEXT)
def test_scenario_parameter_values(key, value):
    module = load_scenario("double_buffer")
    _only_documented_errors(lambda v: parse_sets(module, [f"{key}={v}"]), value)


@pytest.mark.parametrize("spec", ["torus:" + "x".join(["2"] * 20), "ring:" + "9" * 30, "mesh:0x4", "switch:-1"])
def test_extreme_topology_specs_fail_fast(spec):
    with pytest.raises(topologies.TopologyError):
        topologies.parse_spec(spec)
