"""Fuzz every command family through the CLI, in-process: arguments, quantities, topology/mesh/sharding
specs, chip and model config files, user scenario files (sweep files: tests/test_fuzz_sweep.py).

Each generated invocation must exit 0 (a result) or 2 (one line per problem on stderr, each starting
``podsim:``), never show a traceback (except a user scenario's own, framed by podsim's line), never print
``inf`` or ``nan``, and stay inside its event budget: every command runs under a `RunWatch` of `BUDGET`
events, so a generated run that would be long is refused (status 2) instead of running. Boundary values
come from hand-written lists (unicode digits, 60-digit integers, 1e300, size-1 axes) mixed with
hypothesis text. One fuzz per command family (model, plan, shard, hlo, collective, send, roofline, sweep and the
fault flags: several hundred fixed invocations, about 15 s) also refuses an exit 0 with a result the run itself
flags as impossible (`check_possible`); the large sizes are benchmark-marked (tests/test_large_sizes.py).
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import re
import string

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator.engine.watch import TICK, RunWatch, watching
from simulator.frontend.cli import main
from simulator.frontend.scenario import list_scenarios, load_scenario, scenario_params

BUDGET = 3 * TICK  #: simulated events one fuzzed command may use (a few tenths of a second)
#: PODSIM_FUZZ_EXAMPLES=2000 fuzzes for real (random examples); the suite runs a fixed, fast few.
EXAMPLES = int(os.environ.get("PODSIM_FUZZ_EXAMPLES", "0"))
FUZZ = settings(max_examples=EXAMPLES or 25, deadline=None, derandomize=not EXAMPLES,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
NON_FINITE = re.compile(r"\b(inf|infinity|nan)\b", re.I)

#: Values a person could type that sit on a boundary or outside every range.
ODD = ["0", "1", "-1", "2", "2.5", "1e3", "1e30", "1e-300", "9" * 60, "²", "٣", "１２", "nan", "inf", "-inf", "",
       " ", "1_000", "0x10", "4k", "16GiB", "1MB", "0.4ms", "45GB/s", "-5GB", "1e18", "True", "[]", "X=1"]
VALUES = st.one_of(st.sampled_from(ODD), st.text(alphabet=string.printable + "²٣µ", max_size=12))


def run(argv: list[str]) -> tuple[int, str, str]:
    """``podsim ARGV`` in this process under the fuzz budget; (status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    watch = RunWatch(max_events=BUDGET)
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), watching(watch):
        status = main(argv)
    assert watch.events <= BUDGET + TICK  # the guard stopped it at the latest at the first report past it
    return status, out.getvalue(), err.getvalue()


def check(argv: list[str], *, user_traceback: bool = False) -> int:
    """Run and assert the contract; returns the status."""
    status, out, err = run(argv)
    assert status in (0, 2), (argv, status, err)
    lines = err.splitlines()
    if user_traceback and lines and lines[0].startswith("Traceback"):
        assert lines[-1].startswith("podsim: error: scenario file ") and "raised" in lines[-1]
    else:
        assert "Traceback" not in err, (argv, err)
        assert all(line.startswith("podsim: ") for line in lines), (argv, err)
    if status == 2:
        assert lines and lines[-1].startswith("podsim: error: "), (argv, err)
    assert not NON_FINITE.search(out), (argv, out)
    if status == 0 and "--json" in argv:
        json.loads(out, parse_constant=lambda name: pytest_fail(f"{name} in JSON of {argv}"))
    return status


def pytest_fail(message: str) -> None:
    raise AssertionError(message)


# -- CLI arguments ---------------------------------------------------------------------------------------

SMALL_TOPOLOGIES = ["ring:1", "ring:2", "line:3", "torus:1x1", "torus:2x2", "mesh:2x1", "switch:1", "switch:4",
                    "slice:1x1", "slice:2x2", "nodes:1:1", "nodes:2:2", "multislice:2:2x2"]
FLAGS = {
    "run": ["--set", "--set", "--topology", "--mesh", "--chip", "--json"],
    "roofline": ["--chip", "--matmul", "--flops", "--bytes", "--dtype", "--json"],
    "collective": ["--topology", "--bytes", "--axes", "--chunks", "--root", "--mode", "--chip", "--json"],
    "send": ["--topology", "--src", "--dst", "--bytes", "--chunks", "--json"],
    "model": ["--batch", "--context", "--mesh", "--chip", "--kv-dtype", "--no-simulate", "--json"],
}
POSITIONAL = {"run": [*list_scenarios(), "nope", "tests/data/scenario_returns_none.py"],
              "collective": ["all_gather", "reduce_scatter", "all_reduce", "all_to_all", "broadcast", "all_sum"],
              "model": ["gpt2", "llama-2-7b", "mixtral-8x7b", "llama-9"], "roofline": [""], "send": [""]}


def _params(scenario: str) -> list[str]:
    """The parameters of a built-in scenario (none for anything else)."""
    return list(scenario_params(load_scenario(scenario))) if scenario in list_scenarios() else []


@st.composite
def command_lines(draw: st.DrawFn) -> list[str]:
    """A command, its positional argument, and a few of its flags with odd values."""
    command = draw(st.sampled_from(sorted(FLAGS)))
    argv = [command] + [a for a in [draw(st.sampled_from(POSITIONAL[command]))] if a]
    if command in ("collective", "send"):
        argv += ["--topology", draw(st.sampled_from(SMALL_TOPOLOGIES)),
                 "--bytes", draw(st.sampled_from(["1kB", "1MB"])),
                 ]
    if command == "send":
        argv += ["--src", "0", "--dst", draw(st.sampled_from(["0", "1", "1,0"]))]
    if command == "roofline":
        argv += ["--chip", "tpu-v5e"]
    if command == "run":
        argv += ["--set", "cases=false"] if argv[1] == "sharded_matmul" else []
    keys = [*_params(argv[1]), "nope"] if command == "run" else []
    for flag in draw(st.lists(st.sampled_from(FLAGS[command]), max_size=3)):
        if flag in ("--json", "--no-simulate"):
            argv.append(flag)
        elif flag == "--set":
            argv += [flag, f"{draw(st.sampled_from(keys))}={draw(VALUES)}"]
        else:
            argv += [flag, draw(VALUES)]
    return argv


@settings(FUZZ, max_examples=EXAMPLES or 15)  # these run whole scenarios: fewer fixed examples
@given(argv=command_lines())
def test_command_lines(argv):
    check(argv)


# -- quantities ------------------------------------------------------------------------------------------

NUMBERS = st.one_of(st.floats(allow_nan=True, allow_infinity=True).map(repr),
                    st.integers(-10**70, 10**70).map(str), st.sampled_from(ODD))
UNITS = st.sampled_from(["", "B", "kB", "MiB", "GB", "TB", "EB", "PiB", "s", "ms", "us", "ns", "B/s", "GB/s",
                         "FLOP", "TFLOP", "TFLOP/s", "b", "Mb", "%"])
QUANTITIES = st.builds(lambda n, u, space: f"{n}{' ' if space else ''}{u}", NUMBERS, UNITS, st.booleans())


@FUZZ
@given(quantity=QUANTITIES, where=st.sampled_from(["bytes", "load_s", "load_bytes", "compute_flops", "flops",
                                                   "send", "blocks"]))
def test_quantities(quantity, where):
    argv = {"bytes": ["collective", "all_gather", "--topology", "ring:4", "--bytes", quantity],
            "flops": ["roofline", "--chip", "tpu-v5e", "--flops", quantity, "--bytes", quantity, "--json"],
            "send": ["send", "--topology", "ring:4", "--src", "0", "--dst", "2", "--bytes", quantity]
            }.get(where, ["run", "double_buffer", "--set", f"{where}={quantity}", "--json"])
    check(argv)


# -- topology, mesh and sharding specs -------------------------------------------------------------------

SIZES = st.sampled_from(["0", "1", "1", "2", "2", "3", "4", "9" * 30, "²", ""])
TOPOLOGY_SPECS = st.one_of(
    st.builds(lambda k, a: f"{k}:{a}", st.sampled_from(["ring", "line", "switch", "torus", "mesh", "slice"]), SIZES),
    st.builds(lambda k, a, b: f"{k}:{a}x{b}", st.sampled_from(["torus", "mesh", "slice", "ring"]), SIZES, SIZES),
    st.builds(lambda k, a, b: f"{k}:{a}:{b}", st.sampled_from(["nodes", "multislice"]), SIZES,
              st.sampled_from(["1", "2", "2x2", "1x1", "0"])),
    st.text(alphabet="ringtoruswch:x0123456789-", max_size=14))
MESH_SPECS = st.one_of(
    st.builds(lambda a, b, p: f"X={a}{p},Y={b}", SIZES, SIZES, st.sampled_from(["", "@0", "@1", "@0+0", "@0+1", "@9"])),
    st.builds(lambda a: f"X={a}", SIZES), st.text(alphabet="XY=,@+0124²", max_size=10))
SHARDINGS = st.one_of(
    st.from_regex(r"A\[I(_X|_Y|_XY)?,J(_X|_Y)?\]@B\[J(_X|_Y)?,K(_Y|_X)?\](->C\[I(_X)?,K(_Y)?\])?", fullmatch=True),
    st.text(alphabet="ABCIJK[]_XY,@->{}U", max_size=20))


@FUZZ
@given(topology=TOPOLOGY_SPECS, kind=st.sampled_from(["all_reduce", "all_to_all", "broadcast"]))
def test_topology_specs(topology, kind):
    check(["collective", kind, "--topology", topology, "--bytes", "64kB", "--chip", "tpu-v5e", "--json"])


@FUZZ
@given(mesh=MESH_SPECS, spec=SHARDINGS, topology=st.sampled_from([None, "torus:2x2", "torus:1x1", "ring:4"]))
def test_mesh_and_sharding_specs(mesh, spec, topology):
    argv = ["run", "sharded_matmul", "--mesh", mesh, "--set", f"spec={spec}", "--set", "cases=false",
            "--set", "I=64", "--set", "J=64", "--set", "K=64"]
    check(argv + (["--topology", topology] if topology else []))


# -- chip and model config files -------------------------------------------------------------------------

SCALARS = st.one_of(st.integers(-10**30, 10**30), st.floats(allow_nan=False, allow_infinity=False),
                    st.sampled_from([0, 1, 2, 1e300, 1e-300, -1.0, True, "16GiB", "819GB/s", "1us", "fast", "²", ""]))
NESTED = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=2),
                                                       st.dictionaries(st.sampled_from("ab"), inner, max_size=2)),
                      max_leaves=6)
CHIP_FIELDS = ["peak_bf16_flops_per_s", "hbm_bandwidth_bytes_per_s", "hbm_capacity_bytes", "vmem_capacity_bytes",
               "ici_bandwidth_bytes_per_s", "hop_latency_s", "dcn_bandwidth_bytes_per_s", "mxu_dim", "ici_links",
               "torus_dims", "wraparound", "name", "base", "colour"]
MODEL_FIELDS = ["d_model", "d_ff", "n_layers", "n_heads", "n_kv_heads", "head_dim", "vocab_size", "n_experts",
                "experts_per_token", "gated_mlp", "norm", "weight_elem_bytes", "name", "base", "model"]
HF_LLAMA = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
            "num_key_value_heads": 2, "vocab_size": 256, "num_local_experts": 4, "num_experts_per_tok": 2}
HF_GPT2 = {"n_embd": 64, "n_layer": 2, "n_head": 4, "vocab_size": 256, "n_positions": 128}
HF_FIELDS = ["hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
             "head_dim", "vocab_size", "tie_word_embeddings", "n_embd", "n_layer", "n_head", "n_positions",
             "num_local_experts", "num_experts_per_tok", "_name_or_path"]


def _toml_value(value) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {_toml_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return json.dumps(value, ensure_ascii=False)


def _fields(draw, names, base):
    data = draw(st.dictionaries(st.sampled_from(names), NESTED, max_size=4))
    if base and draw(st.booleans()):
        data["base"] = base
    return data


@FUZZ
@given(data=st.data())
def test_chip_files(tmp_path_factory, data):
    fields = _fields(data.draw, CHIP_FIELDS, "tpu-v5e")
    path = tmp_path_factory.mktemp("chip") / "chip.toml"
    path.write_text("".join(f"{k} = {_toml_value(v)}\n" for k, v in fields.items()), encoding="utf-8")
    command = data.draw(st.sampled_from([["roofline", "--matmul", "64,64,64", "--json"],
                                         ["run", "double_buffer", "--set", "blocks=2"],
                                         ["collective", "all_reduce", "--topology", "ring:4", "--bytes", "1MB"]]))
    check([*command, "--chip-file", str(path)])


@FUZZ
@given(data=st.data(), hf=st.booleans())
def test_model_config_files(tmp_path_factory, data, hf):
    folder = tmp_path_factory.mktemp("model")
    if hf:  # a complete small config with a few fields made odd, so the checks past "lacks a field" run too
        kind = data.draw(st.sampled_from(["llama", "gpt2", "mixtral", "t5", 5]))
        fields = dict(HF_GPT2 if kind == "gpt2" else HF_LLAMA, model_type=kind)
        fields.update(_fields(data.draw, HF_FIELDS, None))
        path = folder / "config.json"
        path.write_text(json.dumps(fields), encoding="utf-8")
        flag = "--hf-config"
    else:
        fields = _fields(data.draw, MODEL_FIELDS, "gpt2")
        if data.draw(st.integers(0, 3)):  # mostly a whole model with odd fields, not a missing-field error
            fields = {"d_model": 64, "d_ff": 128, "n_layers": 2, "n_heads": 4, "vocab_size": 256, **fields}
        path = folder / "model.toml"
        path.write_text("".join(f"{k} = {_toml_value(v)}\n" for k, v in fields.items()), encoding="utf-8")
        flag = "--config"
    check(["model", flag, str(path), "--batch", "2", "--json"])


# -- user scenario files ---------------------------------------------------------------------------------

RETURNS = {"a Result": "Result(scenario='mine', params={'n': n}, metrics=system.metrics())",
           "None": "None", "a number": "n", "a dict": "{'n': n}", "a string": "'done'",
           "an infinity": "Result(scenario='mine', params={}, metrics=system.metrics(), extra={'x': float('inf')})"}
RAISES = {"nothing": "", "a podsim error": "raise PodsimError(f'n={n} is not what I want')",
          "its own error": "raise RuntimeError('my bug')"}


@FUZZ
@given(returns=st.sampled_from(sorted(RETURNS)), raises=st.sampled_from(sorted(RAISES)),
       n=st.sampled_from(["1", "0", "2.5", "²", "1e30", "-3", "x"]))
def test_scenario_files(tmp_path_factory, returns, raises, n):
    path = tmp_path_factory.mktemp("scenario") / "mine.py"
    path.write_text(f'''"""A user scenario."""
from simulator import Result, System
from simulator.errors import PodsimError


def run(*, n: int = 1) -> Result:
    """Runs one block and returns {returns}."""
    system = System()
    system.chip.load(1e3 * max(n, 1), "x")
    system.run()
    {RAISES[raises] or "pass"}
    return {RETURNS[returns]}
''', encoding="utf-8")
    status = check(["run", str(path), "--set", f"n={n}", "--json"], user_traceback=True)
    if status == 0:
        assert returns == "a Result" and raises == "nothing"


# -- one fuzz per command family (issue 34 item 7) ---------------------------------------------------------
# Several hundred fixed (derandomized) invocations across model, plan, shard, hlo, collective (with send),
# roofline, sweep and the fault flags, each held to `check` and to `check_possible`: a result the run itself
# flags as impossible (a state that does not fit at exit 0 without --ignore-memory, a negative time) fails.

FAMILY = settings(FUZZ, max_examples=EXAMPLES or 80)
#: keys ending in _s that may be negative (signed differences)
SIGNED_S = {"hbm_spare_s"}


def check_possible(argv: list[str], status: int, out: str) -> None:
    """No exit 0 with a result the run flags as impossible: a training state over HBM priced without
    --ignore-memory, or a negative duration (a key ending in ``_s``). (A decode or prefill budget answers whether it
    fits: ``fits`` false is its answer, not an impossible result.)"""
    if status != 0:
        return
    training = argv[0] == "model" and "train" in argv
    if "--json" not in argv:
        if training and ("does NOT fit" in out or "does not fit" in out):
            assert "--ignore-memory" in argv, (argv, out)
        return
    data = json.loads(out)

    def walk(value, key=""):
        if isinstance(value, dict):
            if value.get("fits") is False and training:
                assert value.get("ignore_memory") is True or key, (argv, "does not fit yet exit 0")
            for k, v in value.items():
                walk(v, str(k))
        elif isinstance(value, list):
            for v in value:
                walk(v, key)
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and key.endswith("_s"):
            assert value >= 0 or key in SIGNED_S, (argv, key, value)

    walk(data)


def check_family(argv: list[str]) -> int:
    """`check`, then `check_possible` on the same invocation's output."""
    status, out, err = run(argv)
    check_output(argv, status, out, err)
    check_possible(argv, status, out)
    return status


def check_output(argv: list[str], status: int, out: str, err: str) -> None:
    """The contract `check` holds a run to (status 0 or 2, podsim's one-line errors, finite numbers); status 3
    where a failed chip (``--fault chip:ID=fail``) left the collective incomplete, which it says."""
    if status == 3 and any("=fail" in a for a in argv):
        assert err.startswith("podsim: incomplete: failed chip "), (argv, err)
        return
    assert status in (0, 2), (argv, status, err)
    lines = err.splitlines()
    assert "Traceback" not in err, (argv, err)
    assert all(line.startswith("podsim: ") for line in lines), (argv, err)
    if status == 2:
        assert lines and lines[-1].startswith("podsim: error: "), (argv, err)
    assert not NON_FINITE.search(out), (argv, out)
    if status == 0 and "--json" in argv:
        json.loads(out, parse_constant=lambda name: pytest_fail(f"{name} in JSON of {argv}"))


def mostly(valid: list[str], odd: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    """One of ``valid`` three times in four, else an ``odd`` value."""
    return st.integers(0, 3).flatmap(lambda k: odd if k == 0 else st.sampled_from(valid))


def _flags(draw: st.DrawFn, options: dict[str, list[str] | None], most: int = 4) -> list[str]:
    """A few of ``options`` (flag -> values; None: a switch), each with a listed or an odd value."""
    argv: list[str] = []
    for flag in draw(st.lists(st.sampled_from(sorted(options)), max_size=most, unique=True)):
        values = options[flag]
        if values is None:
            argv.append(flag)
        else:
            argv += [flag, draw(st.sampled_from(ODD if draw(st.integers(0, 3)) == 0 else values))]
    return argv


MODELS = ["gpt2", "llama-2-7b", "llama-3-8b", "llama-3-70b", "mixtral-8x7b"]
MESHES = ["data=2", "model=2", "fsdp=2", "pipeline=2", "sequence=2", "expert=2", "data=1", "model=4",
          "fsdp=2,model=2", "data=2,pipeline=2", "model=3", "data=0"]
MODEL_FLAGS: dict[str, list[str] | None] = {
    "--batch": ["1", "2", "4", "8", "3"], "--context": ["0", "128", "1Ki", "2000,10", "1e9"],
    "--seq": ["128", "1024", "2Ki", "1"], "--mesh": MESHES, "--zero": ["0", "1", "2", "3", "4"],
    "--microbatches": ["1", "2", "4"], "--checkpoints-per-layer": ["none", "selective", "full", "2"],
    "--virtual-stages": ["1", "2", "3"], "--tp-overlap": None, "--no-master-copy": None,
    "--kv-dtype": ["bf16", "int8", "fp8", "fp4"], "--weight-dtype": ["bf16", "int8"],
    "--compute-dtype": ["bf16", "int8", "fp8"], "--price-per-chip-hour": ["1.5", "1e308", "1e-320"],
    "--tokens-total": ["1e9", "1e30"], "--assume-mfu": ["0.4", "1.5", "0"], "--chips": ["2", "8", "0"],
    "--ignore-memory": None, "--layout": ["1d", "2d", "2d:2x1"], "--kv-sharding": ["heads", "batch", "sequence"],
    "--schedule": ["1f1b", "gpipe", "interleaved"], "--chip": ["tpu-v5e", "tpu-v5p", "h100"],
    "--sequence-attention": ["ring", "allgather"],
}


@st.composite
def model_lines(draw: st.DrawFn) -> list[str]:
    """``podsim model``: a preset (or an abstract --params), a mode, and a few flags; closed forms mostly."""
    head = [draw(st.sampled_from(MODELS))]
    if draw(st.integers(0, 4)) == 0:  # an abstract model now and then
        head = ["--params", draw(st.sampled_from(["7e9", "1e300", "0"])), "--kv-bytes-per-token", "1e5"]
    argv = ["model", *head, "--mode", draw(st.sampled_from(["decode", "prefill", "train"]))]
    argv += _flags(draw, MODEL_FLAGS)
    if head != ["gpt2"] or draw(st.integers(0, 3)):  # simulate only the small model, now and then
        argv.append("--no-simulate")
    return [*argv, "--json"] if draw(st.booleans()) else argv


@settings(FUZZ, max_examples=EXAMPLES or 150)
@given(argv=model_lines())
def test_model_family(argv):
    check_family(argv)


@settings(FUZZ, max_examples=EXAMPLES or 12)  # plans price every layout: a few, tiny
@given(chips=st.sampled_from(["1", "2", "4", "0", "3", "1e9"]), mode=st.sampled_from(["train", "decode", "prefill"]),
       batch=st.sampled_from(["4", "8", "0", "3"]), seq=st.sampled_from(["64", "128", "1", "2k"]),
       top=st.sampled_from(["0", "1", "-1"]), as_json=st.booleans())
def test_plan_family(chips, mode, batch, seq, top, as_json):
    argv = ["plan", "gpt2", "--chips", chips, "--mode", mode, "--batch", batch, "--seq", seq, "--top", top,
            "--workers", "1"]
    check_family(argv + (["--json"] if as_json else []))


SPECS = ["A[I_X,J]", "A[I_XY,J]", "A[I,J_Y]", "A[I_X,J_Y]", "A[I]", "A[I_X]", "A[I_Z,J]", "A[I_X,J_X]"]
ARRAYS = ["fp32[1024,4096]", "bf16[8]", "fp32[0,4]", "int8[" + "9" * 20 + ",2]", "fp32[]", "fp33[4,4]",
          "bf16[64,64,64]", "fp32[1024;4096]", "fp32[-4,4]"]


@FAMILY
@given(array=mostly(ARRAYS[:2] * 3 + ARRAYS, st.text(alphabet="fpbint3268[],x0-9", max_size=12)),
       spec=mostly(SPECS, SHARDINGS), mesh=mostly(["X=8,Y=2", "X=4", "X=2,Y=2", "X=1"], MESH_SPECS),
       as_json=st.booleans())
def test_shard_family(array, spec, mesh, as_json):
    check_family(["shard", array, spec.split("@")[0] or spec, "--mesh", mesh] + (["--json"] if as_json else []))


HLO_FILES = ["matmul_case1.txt", "matmul_case2.txt", "all_to_all.txt", "async_tpu_style.txt", "bad_syntax.txt",
             "missing.txt"]
HLO_FLAGS: dict[str, list[str] | None] = {
    "--mesh": ["X=4,Y=2", "X=8", "X=2,Y=4", "X=4,Y=2@0", "Y=2"], "--topology": ["slice:4x2", "ring:8", "torus:2x4",
                                                                                "ring:4"],
    "--placement": ["0,1,2,3,4,5,6,7", "7,6,5,4,3,2,1,0", "0,0,1,2,3,4,5,6", "0,1"],
    "--dtype": ["source", "compiled"], "--async-collectives": None, "--top": ["0", "3", "10001"],
    "--calibrated": None, "--links": ["grouped", "all"], "--chip": ["tpu-v5e", "h100"],
}


@settings(FUZZ, max_examples=EXAMPLES or 40)
@given(data=st.data(), name=st.sampled_from(HLO_FILES))
def test_hlo_family(data, name):
    argv = ["hlo", f"tests/data/hlo/{name}", *_flags(data.draw, HLO_FLAGS, 3)]
    if "--placement" not in argv and "--mesh" not in argv and data.draw(st.integers(0, 5)):
        argv += ["--mesh", "X=4,Y=2"]  # mostly a program's own mesh, so the run gets past its flags
    check_family(argv + (["--json"] if data.draw(st.booleans()) else []))


ALGORITHMS = ["auto", "bidirectional", "direct", "dimension_order", "binary_tree", "hierarchical", "nope"]
COLLECTIVE_FLAGS: dict[str, list[str] | None] = {
    "--chunks": ["1", "2", "8", "0"], "--axes": ["0", "1", "0,1", "2"], "--algorithm": ALGORITHMS,
    "--multi-axis": ["parallel", "sequential", "both"], "--root": ["0", "1", "3", "99"],
    "--mode": ["auto", "full", "reduced"], "--switching": ["cut_through", "store_and_forward", "wormhole"],
    "--calibrated": None, "--protocol": ["LL", "LL128", "Simple", "auto", "ll"],
    "--chip": ["tpu-v5e", "h100", "tpu-v5p"], "--max-memory": ["1GiB", "1kB", "0", "1e30"],
}
COLLECTIVE_KINDS = ["all_gather", "reduce_scatter", "all_reduce", "all_to_all", "broadcast", "gather", "scatter",
                    "reduce"]


@settings(FUZZ, max_examples=EXAMPLES or 100)
@given(data=st.data(), kind=st.sampled_from(COLLECTIVE_KINDS), topology=st.sampled_from(SMALL_TOPOLOGIES),
       nbytes=mostly(["1kB", "64kB", "1MB"], QUANTITIES))
def test_collective_family(data, kind, topology, nbytes):
    argv = ["collective", kind, "--topology", topology, "--bytes", nbytes, *_flags(data.draw, COLLECTIVE_FLAGS, 3)]
    check_family(argv + (["--json"] if data.draw(st.booleans()) else []))


@settings(FUZZ, max_examples=EXAMPLES or 30)
@given(topology=st.sampled_from(SMALL_TOPOLOGIES), src=st.sampled_from(["0", "1", "0,0", "9", "-1", "²"]),
       dst=st.sampled_from(["0", "1", "1,1", "3", "1e3"]), nbytes=mostly(["1MB", "1kB"], QUANTITIES),
       chunks=st.sampled_from(["1", "4", "0", "1e9"]))
def test_send_family(topology, src, dst, nbytes, chunks):
    check_family(["send", "--topology", topology, "--src", src, "--dst", dst, "--bytes", nbytes, "--chunks", chunks,
                  "--json"])


ROOFLINE_FLAGS: dict[str, list[str] | None] = {
    "--dtype": ["fp32", "bf16", "fp8", "int8", "fp4"], "--memory": ["hbm", "vmem", "ici", "dcn", "pcie", "nvlink",
                                                                     "ib"],
    "--axes": ["1", "2", "3", "0"], "--calibrated": None, "--chip": ["tpu-v5e", "h100", "tpu-v5p", "b200"],
}


@FAMILY
@given(data=st.data())
def test_roofline_family(data):
    argv = ["roofline", "--chip", "tpu-v5e"]
    if data.draw(st.booleans()):
        argv += ["--matmul", data.draw(mostly(["64,64,64", "1,1,1", "4096,8192,128", "8,8"], st.sampled_from(ODD)))]
    if argv[-2:-1] != ["--matmul"] or not data.draw(st.integers(0, 5)):  # both now and then: refused
        argv += ["--flops", data.draw(mostly(["2e12", "1", "1e30"], NUMBERS)),
                 "--bytes", data.draw(mostly(["1GB", "1e-300", "1", "64kB"], QUANTITIES))]
    argv += _flags(data.draw, ROOFLINE_FLAGS, 3)
    check_family(argv + (["--json"] if data.draw(st.booleans()) else []))


GRIDS = ["blocks=1,2", "blocks=1;2", "blocks=0,1", "buffers=1,2,3", "blocks=" + ",".join(["1"] * 3), "nope=1,2",
         "blocks=", "blocks=1e30", "load_s=1us,1ms"]


@settings(FUZZ, max_examples=EXAMPLES or 15)
@given(grids=st.lists(st.sampled_from(GRIDS), min_size=0, max_size=2),
       fixed=st.lists(st.builds(lambda k, v: f"{k}={v}", st.sampled_from(["blocks", "buffers", "load_s", "nope"]),
                                st.sampled_from(ODD)), max_size=1), as_json=st.booleans())
def test_sweep_family(grids, fixed, as_json):
    argv = ["sweep", "double_buffer", "--workers", "1"]
    argv += [x for g in grids for x in ("--grid", g)] + [x for s in fixed for x in ("--set", s)]
    check_family(argv + (["--json"] if as_json else []))


FAULTS = st.one_of(
    st.builds(lambda a, b, v: f"link:{a}->{b}={v}", st.sampled_from(["0", "1", "0,0", "9"]),
              st.sampled_from(["1", "0,1", "2", "0"]),
              st.sampled_from(["down", "0.5", "1e-300", "1e-5", "1.5", "0", "latency:1us", "latency:-1s", "50%"])),
    st.builds(lambda c, v: f"chip:{c}={v}", st.sampled_from(["0", "1", "0,0", "99"]),
              st.sampled_from(["slow:0.5", "slow:2", "slow:0.5:mxu", "slow:1e-300", "pause:1us:1us", "pause:0:-1s",
                               "fail", "fail:1us", "slow:0"])),
    st.text(alphabet="linkchp:0123->=,.downslowfai", max_size=16))


@FAMILY
@given(faults=st.lists(FAULTS, max_size=2), jitter=st.sampled_from([None, "5%", "gamma:0.05", "uniform:90%", "-5%"]),
       samples=st.sampled_from([None, "2", "0", "1e9"]), seed=st.sampled_from([None, "0", "-1", "3"]),
       command=st.sampled_from([["collective", "all_gather", "--topology", "ring:4", "--bytes", "64kB"],
                                ["collective", "all_reduce", "--topology", "torus:2x2", "--bytes", "64kB"],
                                ["send", "--topology", "ring:4", "--src", "0", "--dst", "2", "--bytes", "1MB"],
                                ["run", "double_buffer", "--set", "blocks=2"]]),
       as_json=st.booleans())
def test_fault_family(faults, jitter, samples, seed, command, as_json):
    argv = [*command, *[x for f in faults for x in ("--fault", f)]]
    for flag, value in (("--jitter", jitter), ("--samples", samples), ("--seed", seed)):
        argv += [flag, value] if value is not None else []
    check_family(argv + (["--json"] if as_json else []))
