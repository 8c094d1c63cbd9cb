"""The HLO text reader (no JAX): shapes, operands, attributes, replica groups in three spellings, loops,
source lines, and errors that name the line and column.

Fixtures in tests/data/hlo/ come from scripts/make_hlo_fixtures.py; expected replica groups are worked out
by hand from the spelling's definition.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from simulator.workloads.hlo import HloParseError, Shape, parse_hlo, read_hlo
from simulator.workloads.hlo.replica_groups import parse_groups, parse_pairs
from simulator.workloads.hlo.syntax import SyntaxFault, parse_shape

DATA = Path(__file__).parent / "data" / "hlo"


def module(body: str, header: str = "HloModule m, num_partitions=8") -> str:
    return f"{header}\n\nENTRY %main (p: f32[8,8]) -> f32[8,8] {{\n{body}\n}}\n"


@pytest.mark.parametrize("text, groups", [
    ("{{0,1},{2,3},{4,5},{6,7}}", [[0, 1], [2, 3], [4, 5], [6, 7]]),
    ("{}", [[0, 1, 2, 3, 4, 5, 6, 7]]),
    ("[4,2]<=[8]", [[0, 1], [2, 3], [4, 5], [6, 7]]),
    # iota(8) as 4x2 [[0,1],[2,3],[4,5],[6,7]], transposed to 2x4 [[0,2,4,6],[1,3,5,7]]
    ("[2,4]<=[4,2]T(1,0)", [[0, 2, 4, 6], [1, 3, 5, 7]]),
    # device d = 2x + y on a 4x2 mesh: y varies within a group, then x
    ("mesh['axis_0'=4,'axis_1'=2] {'axis_1'}", [[0, 1], [2, 3], [4, 5], [6, 7]]),
    ("mesh['axis_0'=4,'axis_1'=2] {'axis_0'}", [[0, 2, 4, 6], [1, 3, 5, 7]]),
    ("mesh['axis_0'=4,'axis_1'=2] {'axis_0','axis_1'}", [[0, 1, 2, 3, 4, 5, 6, 7]]),
    ("mesh[x=4,y=2] {y}", [[0, 1], [2, 3], [4, 5], [6, 7]]),
    # devices laid as iota(8).reshape(2,2,2).transpose(0,2,1) = 0,2,1,3,4,6,5,7 on a 1x4x2 mesh: rows of axis_1
    # are [0,2],[1,3],[4,6],[5,7]; grouping axis_1 keeps axis_2 fixed: {0,1,4,5} and {2,3,6,7}
    ("mesh['axis_0'=1,'axis_1'=4,'axis_2'=2], device_ids=([2,2,2]T(0,2,1)) {'axis_1'}", [[0, 1, 4, 5], [2, 3, 6, 7]]),
    ("mesh['a'=4,'b'=2], device_ids=(7,6,5,4,3,2,1,0) {'b'}", [[7, 6], [5, 4], [3, 2], [1, 0]]),
    # sub-axis a:(1)2 of a=8 is the major half (a = 4i + j): devices j and 4 + j pair up
    ("mesh['a'=8] {'a':(1)2}", [[0, 4], [1, 5], [2, 6], [3, 7]]),
    # a:(2)2 is the middle factor of 2x2x2 (a = 4i + 2j + k): 4i + k and 4i + 2 + k pair up
    ("mesh['a'=8] {'a':(2)2}", [[0, 2], [1, 3], [4, 6], [5, 7]]),
])
def test_replica_group_spellings(text: str, groups: list[list[int]]):
    assert parse_groups(text, 8) == groups


@pytest.mark.parametrize("text, fragment", [
    ("{{0,9}}", "device(s) [9]"),
    ("[2,4]<=[4,3]", "must hold as many ids"),
    ("mesh['a'=4,'b'=2] {'c'}", "not an axis of the mesh"),
    ("groups", "must read"),
])
def test_bad_replica_groups_say_what_is_wrong(text: str, fragment: str):
    with pytest.raises(SyntaxFault, match=re.escape(fragment)):
        parse_groups(text, 8)


def test_source_target_pairs():
    assert parse_pairs("{{0,2},{2,4},{6,0}}", 8) == [(0, 2), (2, 4), (6, 0)]
    with pytest.raises(SyntaxFault, match="pairs"):
        parse_pairs("{{0,1,2}}", 8)


@pytest.mark.parametrize("text, shape, nbytes", [
    ("f32[256,512]{1,0}", Shape("f32", (256, 512)), 256 * 512 * 4),
    ("bf16[]", Shape("bf16", ()), 2),
    ("bf16[1024,2048]{1,0:T(8,128)(2,1)}", Shape("bf16", (1024, 2048)), 1024 * 2048 * 2),
    ("(s32[], bf16[8]{0}, (f32[2]{0}))", None, 4 + 16 + 8),
    ("u32[]{:S(2)}", Shape("u32", ()), 4),
    ("pred[10]", Shape("pred", (10,)), 10),
    ("s4[6]", Shape("s4", (6,)), 3),
])
def test_shapes_and_their_bytes(text: str, shape: Shape | None, nbytes: float):
    got, end = parse_shape(text, 0)
    assert end == len(text)
    assert got.nbytes == nbytes
    if shape is not None:
        assert got == shape


def test_instructions_keep_shapes_operands_attributes_and_metadata():
    m = read_hlo(DATA / "scan.txt")
    assert (m.name, m.n_devices, m.num_partitions) == ("jit_layers_fn", 8, 8)
    loop = next(i for i in m.instructions() if i.opcode == "while")
    assert loop.trip_count() == 4
    assert set(loop.called()) == {loop.attrs["body"].lstrip("%"), loop.attrs["condition"].lstrip("%")}
    gather = next(i for i in m.instructions() if i.opcode == "all-gather")
    assert gather.groups == [[0, 1], [2, 3], [4, 5], [6, 7]]  # the weights are split over Y
    assert gather.channel_id == 1 and gather.int_list("dimensions") == [1]
    assert m.source_line(gather).startswith("tests/hlo_programs.py:")
    dot = next(i for i in m.instructions() if i.opcode == "dot")
    assert dot.int_list("lhs_contracting_dims") == [1] and dot.int_list("rhs_contracting_dims") == [0]
    assert "dot_general" in dot.op_name


def test_tpu_spelling_typed_operands_comments_async_pairs():
    m = read_hlo(DATA / "async_tpu_style.txt")
    entry = m.entry_computation
    start = entry.by_name["all-gather-start"]
    assert start.operands == ("w2",) and start.base_opcode == "all-gather"
    assert start.shape == Shape(None, (), (Shape("bf16", (256, 2048)), Shape("bf16", (1024, 2048))))
    assert entry.by_name["all-gather-done"].operands == ("all-gather-start",)
    assert entry.root.operands[-1] == "all-gather-done"  # after a /*index=5*/ comment
    assert start.groups == [[0, 2, 4, 6], [1, 3, 5, 7]]
    assert entry.by_name["collective-permute-start"].pairs[3] == (6, 0)
    assert m.source_line(start) == "model.py:12"
    wrapped = m.computation(entry.by_name["reduce-scatter-start"].called()[0]).root
    assert wrapped.opcode == "reduce-scatter" and wrapped.groups == [[0, 2, 4, 6], [1, 3, 5, 7]]


def test_named_mesh_groups_with_device_ids_survive_the_attribute_comma():
    text = module("  %p = f32[8,8]{1,0} parameter(0)\n  ROOT %ar = f32[8,8]{1,0} all-reduce(%p), channel_id=1, "
                  "replica_groups=mesh['axis_0'=1,'axis_1'=4,'axis_2'=2], device_ids=([2,2,2]T(0,2,1)) {'axis_1'}, "
                  "use_global_device_ids=true, to_apply=%main")
    ar = parse_hlo(text).entry_computation.root
    assert ar.groups == [[0, 1, 4, 5], [2, 3, 6, 7]]
    assert ar.attrs["use_global_device_ids"] == "true"


BAD_LINES = [  # (line 5 of a module, the token the column must point at, what the message says)
    ("ROOT %n = f32[8,8]{1,0} negate(%p", "(%p", "'(' is never closed"),
    ("ROOT %n = f33[8,8]{1,0} negate(%p)", "f33", "unknown element type 'f33'"),
    ("ROOT %n = f32[8,8]{1,0} negate(%q)", "%q", "operand %q of %n is not defined"),
    ("ROOT %n = f32[8,x]{1,0} negate(%p)", "x]", "dimension 'x' is not a whole number"),
    ("ROOT %n = f32[8,8]{1,0} fusion(%p), calls=%nowhere", "%nowhere", "calls computation 'nowhere'"),
    ("ROOT %n = f32[8,8]{1,0} all-reduce(%p), replica_groups={{0,12}}", "{{0,12}}", "device(s) [12]"),
    ("ROOT %n = f32[8,8]{1,0} negate(%p) junk", "junk", "expected ','"),
    ("ROOT %n = f32[8,8]{1,0} frobnicate x", " x", "expected '(' after opcode 'frobnicate'"),
    ("what is this", "what", "expected an instruction"),
]


@pytest.mark.parametrize("line, token, fragment", BAD_LINES)
def test_parse_errors_name_line_and_column(line: str, token: str, fragment: str):
    with pytest.raises(HloParseError) as err:
        parse_hlo(module(f"  %p = f32[8,8]{{1,0}} parameter(0)\n  {line}"), "f.txt")
    column = len("  ") + line.index(token) + 1
    assert str(err.value).startswith(f"f.txt:5:{column}: ")
    assert fragment in str(err.value)


def test_bad_files():
    with pytest.raises(HloParseError, match=r"bad_syntax.txt:5:35: '\(' is never closed"):
        read_hlo(DATA / "bad_syntax.txt")
    with pytest.raises(HloParseError, match="does not exist"):
        read_hlo(DATA / "missing.txt")
    with pytest.raises(HloParseError, match="no 'HloModule NAME' line"):
        parse_hlo("ENTRY %main () -> f32[] {\n  ROOT %c = f32[] constant(1)\n}\n")
    with pytest.raises(HloParseError, match="never closed with '}'"):
        parse_hlo("HloModule m\n\nENTRY %main () -> f32[] {\n  ROOT %c = f32[] constant(1)\n")


def test_every_fixture_reads(tmp_path: Path):
    for path in sorted(DATA.glob("*.txt")):
        if path.name != "bad_syntax.txt":
            assert read_hlo(path).entry_computation.instructions
    binary = tmp_path / "x.txt"
    binary.write_bytes(b"HloModule \xff\xfe")
    with pytest.raises(HloParseError, match="not UTF-8"):
        read_hlo(binary)
