"""The one-line help of the subcommands whose parsers live in their own modules, in one light module: the
module registers its parser with it, and `simulator.frontend.cli` registers a stub with the same line for
every command not being run (so `podsim --help` and a one-block run import none of those modules)."""
from __future__ import annotations

#: command -> (the module holding its ``add_<command>_parser`` and ``cmd_<command>``, its help line)
EXTERNAL: dict[str, tuple[str, str]] = {
    "roofline": ("simulator.frontend.roofline_cmd", "roofline bounds of a task or a matmul on a chip"),
    "shard": ("simulator.frontend.shard_cmd", "local shape and bytes of a sharded array on each device"),
    "model": ("simulator.frontend.model_cmd",
              "budgets, fit and a simulated decode, prefill or training step of a Transformer"),
    "plan": ("simulator.frontend.plan_cmd", "rank the parallelism layouts of a model on N chips; simulate the best"),
    "serve": ("simulator.frontend.serve_cmd", "serve a stream of requests: TTFT, TPOT, latency percentiles, goodput"),
    "sweep": ("simulator.frontend.sweep", "run a scenario over a grid of parameters, one CSV row per point"),
    "hlo": ("simulator.frontend.hlo_cmd", "simulate a compiled JAX/XLA program (HLO text) on a topology"),
    "compare": ("simulator.frontend.compare_cmd", "what changed between two saved runs (--json or --trace files)"),
}
HELP = {name: text for name, (_, text) in EXTERNAL.items()}  #: command -> its help line
