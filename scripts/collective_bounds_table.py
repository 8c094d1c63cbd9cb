"""Regenerate docs/collective_bounds.md: time / topology bound of every registered algorithm on a fixed list of shapes.

Each row is one (shape, kind, algorithm) that applies, simulated at 1 GB (V as `run_collective` defines it) on ideal
links. ``time / bound`` is the simulated time over `simulator.collectives.bounds.topology_bound`; ``own`` is the
bound for algorithms that stay on their groups' own links, where it is higher. Anything over `FLAG` carries a
reason: by algorithm where the slack is its design (a one-way ring, a tree), else by (shape, kind). A row over the
flag without a reason makes the script exit 1, so the table cannot silently grow an unexplained gap.

Run: ``python scripts/collective_bounds_table.py [--out docs/collective_bounds.md] [--quick]`` (--quick: the
first three shapes).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from simulator import System
from simulator.collectives import run_collective
from simulator.collectives.algorithm import algorithms, applicable
from simulator.collectives.groups import Group, collective_groups
from simulator.engine.faults import ChipSlow, LinkDegraded, LinkDown
from simulator.errors import PodsimError

NBYTES = 1e9
FLAG = 1.3
KINDS = ("all_gather", "reduce_scatter", "all_reduce", "all_to_all", "broadcast", "reduce", "gather", "scatter")
#: (chip, topology, axes: None for all, a list, "row": one group along axis 0, "slow": all axes with cable 0-1 at
#: half speed, "dead": axis 1 with cable (0,0)-(0,1) down, or "slowchip": all axes with chip 3 at slow:0.5[, kinds:
#: only these, on shapes of 512 chips where every kind and algorithm would take minutes]) in table order
SHAPES: list[tuple[Any, ...]] = [
    ("tpu-v5e", "torus:8", None),
    ("tpu-v5e", "torus:8", "slow"),  # one cable (0 - 1) at half speed: where split_ring applies
    ("tpu-v5e", "torus:4x4", "dead"),  # --axes 1, cable (0,0)-(0,1) down: where detour_split applies
    ("tpu-v5e", "torus:8", "slowchip"),  # chip 3 at slow:0.5 (its cables at half speed): where slow_chip_line applies
    ("tpu-v5e", "torus:4x4", None),
    ("tpu-v5e", "slice:4x4", None),
    ("tpu-v5p", "slice:2x2x4", None),
    ("tpu-v5p", "mesh:2x4x4", None),
    ("tpu-v5p", "slice:4x4x4", [0]),
    ("tpu-v5p", "slice:4x4x4", "row"),  # one group: the row along axis 0 through chip 0 (the others idle)
    ("tpu-v5p", "mesh:8x8x8", None, ("all_reduce",)),  # 3-D grid without wraparound: grid_pipelined
    ("tpu-v5p", "mesh:2x16x16", None, ("all_reduce",)),
    ("tpu-v5p", "slice:8x8x8", None, ("all_to_all",)),  # AllToAll at 2 MB per chip (issue 31)
    ("tpu-v5e", "multislice:2:4x4", None),
    ("tpu-v5p", "multislice:4:4x4x4", None),
    ("tpu-v5e", "multipod:2:2:4x4", None),  # three levels: hierarchical3(_pipelined), pod_rails, pod_gather
    ("h100", "switch:8", None),
    ("h100", "nodes:2:8", None),
    ("h100", "nodes:4:8", None),
]
#: why an algorithm is slower than the bound by design (applies wherever it runs)
BY_ALGORITHM = {
    "unidirectional": "one direction of each ring link: half the bandwidth by design",
    "line": "one way along each line: on a ring it leaves the wraparound idle (2x); on a line a chip's shard "
            "crosses every link once, the ends' links carrying n - 1 shards a phase",
    "binary_tree": "a tree: the root's links carry every piece, depth x latency",
    "double_binary_tree": "two trees: interior chips' links carry each piece twice",
    "recursive_doubling": "log2(n) steps of the whole array: V per step, latency-optimal, not bandwidth",
    "recursive_halving_doubling": "halving steps span 2^k hops on a ring or torus, sharing links",
    "one_shot": "every chip sends V to every other: latency-optimal, n - 1 times the bytes",
    "two_shot": "direct ReduceScatter then AllGather over the switch: full-mesh routes share links on grids",
    "direct": "every pair over its own route: routes of distant pairs share links on grids",
    "dimension_order": "",  # (AllToAll's optimum on tori; reasons by shape below)
    "root_direct": "the root talks to every chip over its own links one pair at a time",
}
#: (topology, kind) -> reason, for slack that is the shape's, not one algorithm's
BY_KIND_ALGORITHM: dict[tuple[str, str], str] = {
    ("broadcast", "bidirectional"): "a ring broadcast sends the whole array each way round (pipelined in pieces): "
                                    "each of the root's ring links carries V, on a grid axis after axis; "
                                    "spanning_trees splits it over all of the root's links; {auto}",
    ("reduce", "unidirectional"): "NCCL's ring Reduce: every piece one way round (pipelined, n - 1 hops), so the "
                                  "root's one ring link in carries V of what its links in could share; {auto}",
    ("all_to_all", "bidirectional"): "chunks forwarded round rings one axis at a time, each chunk stored at every "
                                     "hop; dimension_order routes them; {auto}",
    ("gather", "root_chains"): "axis by axis along the root's lines: only the root's own axis links carry the "
                               "last stage; spanning_trees uses all of the root's links; {auto}",
    ("scatter", "root_chains"): "axis by axis along the root's lines (the Gather reversed); {auto}",
    ("reduce", "root_chains"): "axis by axis along the root's lines, pipelined: the root's axis links carry every "
                               "piece; {auto}",
    ("reduce", "root_rings"): "half the pieces round each ring: the root's two ring links carry V/2 each, not its "
                              "four; {auto}",
    ("all_reduce", "nvls"): "NVLS moves V (1 + 1/n) out of each GPU port (its contributions, then the store of its "
                            "own shard's sum: 1.125x the per-port bound on 8 GPUs by design) and pipelines 8 chunks "
                            "whose fill adds the rest (nvls.py)",
    ("all_reduce", "nvls_tree"): "NVLS inside each node (its V (1 + 1/n) per port, above) then a double binary "
                                 "tree per rail over InfiniBand: a rail's NIC, interior in one tree, carries 2 V/m "
                                 "each way where a ring over the K nodes carries 2 (K - 1)/K V/m (4/3 of it on 4 "
                                 "nodes; within 1.1x of that floor, nvls_tree.py)",
    ("all_reduce", "hierarchical_pipelined"): "4 chunks through three stages: the pipeline's fill and drain "
                                              "(1.58x on nodes:2:8); {auto}",
    ("broadcast", "rail_chains"): "a piece per rail chained over InfiniBand node after node, the root's rail "
                                  "idle (V / (G - 1) a rail): K - 1 IB hops deep plus the NVLink relay in the "
                                  "root's node and the spread in the last",
    ("reduce", "rail_chains"): "the Broadcast reversed (same depth and relays)",
}
for _kind in ("all_gather", "reduce_scatter", "all_reduce"):
    BY_KIND_ALGORITHM[(_kind, "hierarchical3")] = ("three levels one after the other: each idles while the others "
                                                   "run; hierarchical3_pipelined overlaps them")
    BY_KIND_ALGORITHM[(_kind, "hierarchical")] = ("two levels one after the other (reduce-scatter inside, rails "
                                                  "across, all-gather inside): the fast level idles while the "
                                                  "slow one runs; hierarchical_pipelined overlaps them")
_ROOT_ON_SLOW = ("the root (chip 0) sits on the slow cable: its trees take even shares of the array, so its "
                 "slow link carries V/2 at half speed (V / b) where an uneven split by link speed would allow "
                 "V / (1.5 b), the bound; spanning_trees splits unevenly by its trees' slowest links "
                 "(spanning_trees.deal, gather_shares); {auto}")
#: the faulted row (cable 0-1 at half speed): (kind, algorithm) -> reason
FAULTED: dict[tuple[str, str], str] = {
    ("all_gather", "bidirectional"): "the ring through the slow cable: every step behind it waits (split_ring "
                                     "runs a share of it; {auto}); or, the cable dead, every row's "
                                     "ring with the broken row's detour through row 1's link (twice its load)",
    ("all_gather", "detour_split"): "the broken row's missing step detoured through row 1 alone, whose link then "
                                    "carries twice a ring's load (multi_detour spreads it over every row; {auto}); "
                                    "the bound counts the column cut",
    ("reduce_scatter", "detour_split"): "the broken row's missing step detoured through row 1 alone (twice its "
                                        "link's load; multi_detour spreads it over every row; {auto})",
    ("reduce_scatter", "multi_detour"): "the AllGather's trees backwards, each hop over its own routes reversed "
                                        "(16 chunks: closed form 10.13 ms, multi_detour.py); a chain's last hops "
                                        "wait on pieces round a detour sharing a borrowed link",
    ("all_reduce", "multi_detour"): "each chunk's ReduceScatter then its AllGather, 32 chunks: 1.065x its closed "
                                    "form (18.26 ms): the broken row's link 0,2->0,1 idles on pieces round detours "
                                    "and ends last (multi_detour.py) -- open",
    ("all_reduce", "line_pipelined"): "every row a line: line_pipelined reaches V / b; the rings' 2 a V / (2 b) "
                                      "would need the broken row's detour (detour_split: 20.8 ms by closed form, "
                                      "within the margin for unlike links of the line's 22.7 ms, so not chosen)",
    ("all_reduce", "detour_split"): "as the ReduceScatter row, then the AllGather",
    ("reduce_scatter", "bidirectional"): "the ring through the slow cable (see the AllGather row)",
    ("all_reduce", "bidirectional"): "the ring through the slow cable (see the AllGather row)",
    ("all_to_all", "dimension_order"): "chunks on their shortest routes, the slow cable's as many as any other's "
                                       "-- open: routes weighted by link speed are not built",
    ("all_to_all", "bidirectional"): "chunks forwarded round the ring through the slow cable",
    ("broadcast", "spanning_trees"): _ROOT_ON_SLOW,
    ("reduce", "spanning_trees"): _ROOT_ON_SLOW,
    ("gather", "spanning_trees"): _ROOT_ON_SLOW,
    ("scatter", "spanning_trees"): _ROOT_ON_SLOW,
    ("reduce", "root_rings"): _ROOT_ON_SLOW.replace("its trees take", "its two rings take"),
}
_ROOT_ON_LINE = ("the dead cable unwrapped axis 1 for every row, so each row's root sends along a line of 4 (one or "
                 "two links); the bound also counts the idle axis-0 links a detour could use -- open: root "
                 "collectives round a dead cable are not built")
#: the shape with a slow chip (torus:8, chip 3 at slow:0.5): (kind, algorithm) -> reason
_AROUND_SLOW_CHIP = ("the ring through the slow chip: every step behind its half-speed cables waits (slow_chip_line "
                     "runs the other chips' line, the slow chip feeding both its ends; {auto})")
_ROOT_SPLIT_SLOW_CHIP = ("the root (chip 0) splits the ring's chips evenly between its two trees; the side "
                         "through chip 3 crosses its half-speed cables; each tree crosses one of them, so shares "
                         "by the trees' slowest links stay even -- open: shares weighted by where in a tree the "
                         "slow hop sits are not built")
SLOWCHIP: dict[tuple[str, str], str] = {
    **{(kind, "bidirectional"): _AROUND_SLOW_CHIP for kind in ("all_gather", "reduce_scatter", "all_reduce")},
    ("all_to_all", "dimension_order"): "chunks on their shortest routes, those through chip 3 over its half-speed "
                                       "cables (auto's trial routed round it; {auto}) -- open: routes weighted by link "
                                       "speed are not built",
    ("all_to_all", "bidirectional"): "chunks forwarded round the ring through the slow chip",
    **{(kind, alg): _ROOT_SPLIT_SLOW_CHIP for kind in ("gather", "scatter")
       for alg in ("spanning_trees", "root_chains")},
}
#: the shape with a dead cable (torus:4x4 --axes 1, cable (0,0)-(0,1) down): (kind, algorithm) -> reason
DEAD: dict[tuple[str, str], str] = {
    **{(kind, alg): _ROOT_ON_LINE for kind in ("broadcast", "reduce", "gather", "scatter")
       for alg in ("spanning_trees", "root_chains", "root_rings")},
    ("all_to_all", "dimension_order"): "every row a line (the dead cable unwrapped axis 1): a line's middle links "
                                       "carry what a ring splits both ways -- open: a detoured AllToAll is not built",
}
#: (topology, kind[, algorithm]) -> reason, for slack that is the shape's, not one algorithm's
BY_SHAPE: dict[tuple[str, ...], str] = {
    ("slice:4x4x4", "all_to_all", "dimension_order"): "one row of 4 alone: its 8 own link directions must carry 16 "
                                                      "chunk-hops of V/16 (2 each: V / (8 b), what it takes); the "
                                                      "own-links column counts each chip's 2 links in (1.5 chunks) "
                                                      "and the bound all 6; borrowing rows is not built for AllToAll",
    ("slice:4x4x4", "all_to_all", "bidirectional"): "chunks forwarded round the axis-0 rings, stored at every hop; "
                                                    "{auto}",
    ("slice:4x4x4", "broadcast", "bidirectional"): "the whole array each way round each row's ring (pipelined): "
                                                   "each root link carries V; spanning_trees uses more links; {auto}",
    ("slice:8x8x8", "all_to_all", "bidirectional"): "chunks forwarded round rings one axis at a time, each stored at "
                                                    "every hop; {auto}",
    **{("multipod:2:2:4x4", kind, "hierarchical_pipelined"): (
        "two levels on three: every slice of both pods one DCN level, so its rails' rings cross the slower core "
        "between the pods at every step; hierarchical3_pipelined splits the tiers; {auto}")
       for kind in ("all_gather", "reduce_scatter", "all_reduce")},
    ("mesh:2x4x4", "all_reduce", "line"): "each axis's ReduceScatter then AllGather on lines loads the end links "
                                          "with 2 (n-1)/n V; grid_pipelined (a share per line of every axis, "
                                          "balanced over all link directions); {auto}",
}


def rows(shapes: list[tuple[Any, ...]]) -> list[dict]:
    """One row per (shape, kind, auto or applicable algorithm), and one per candidate ``auto`` simulated round a
    fault other than the one it ran (the fault-only algorithms, such as multi_detour, run only that way)."""
    out = []
    for chip, topology, axes, *only in shapes:
        kinds = only[0] if only else KINDS
        faults = {"slow": [LinkDegraded(0, 1, 0.5)], "dead": [LinkDown((0, 0), (0, 1))],
                  "slowchip": [ChipSlow(3, 0.5)]}.get(axes, []) if isinstance(axes, str) else []
        probe = System(chip, topology=topology, faults=faults)
        groups = _row(probe) if axes == "row" else collective_groups(probe.network, _axes(axes))
        for kind in kinds:
            for name in ["auto", *applicable(kind, probe.network, groups)]:
                start = time.perf_counter()
                try:
                    system = System(chip, topology=topology, faults=faults)
                    where = {"groups": _row(system)} if axes == "row" else {"axes": _axes(axes)}
                    r = run_collective(kind, system, NBYTES, algorithm=name, **where)
                except PodsimError as err:
                    out.append({"chip": chip, "topology": topology, "axes": axes, "kind": kind, "algorithm": name,
                                "error": str(err).split(";")[0]})
                    continue
                label = f"auto ({r.algorithm})" if name == "auto" else name
                out.append({"chip": chip, "topology": topology, "axes": axes, "kind": kind, "algorithm": label,
                            "chosen": r.algorithm, "time_s": r.time_s, "bound_s": r.topology_bound_s,
                            "own_s": r.own_links_bound_s,
                            "wall_s": time.perf_counter() - start})
                if name == "auto":
                    out.extend({**out[-1], "algorithm": f"{alt['algorithm']} (auto's trial, {alt['route']})",
                                "chosen": alt["algorithm"], "time_s": alt["simulated_s"], "wall_s": 0.0}
                               for alt in r.alternatives if alt.get("route") and "simulated_s" in alt
                               and alt["algorithm"] != r.algorithm)
    return out


def uncovered(table: list[dict]) -> list[str]:
    """Registered algorithms that no row of the table ran."""
    ran = {row["chosen"] for row in table if "chosen" in row}
    return [alg.name for alg in algorithms() if alg.name not in ran]


def _axes(axes: Any) -> list[int] | None:
    """The axes of a shape's collective ("slow": all; "dead": axis 1)."""
    named: dict[str, list[int] | None] = {"slow": None, "dead": [1], "slowchip": None}
    return named.get(axes) if isinstance(axes, str) else axes


def _row(system: System) -> list[Group]:
    """The one group of the "row" shapes: the chips along axis 0 through chip 0."""
    net = system.network
    n, rest = net.shape[0], (0,) * (len(net.shape) - 1)
    return [Group((n,), (net.wrap[0],), {(i,): net.chip_at((i, *rest)) for i in range(n)})]


AUTO = "{auto}"  #: where a reason names what auto runs: filled from the table's own auto row (`reason`)


def shape_key(row: dict) -> tuple[str, str, str, str]:
    """The (chip, topology, axes, kind) a row belongs to: its auto row is the one with the same key."""
    return row["chip"], row["topology"], repr(row["axes"]), row["kind"]


def auto_runs(table: list[dict]) -> dict[tuple[str, str, str, str], str]:
    """What ``auto`` ran on each (chip, topology, axes, kind) of ``table`` (its auto row's choice)."""
    return {shape_key(r): r["chosen"] for r in table if r["algorithm"].startswith("auto (") and "chosen" in r}


def reason(row: dict, autos: dict[tuple[str, str, str, str], str] | None = None) -> str:
    """Why ``row`` is over `FLAG` x its bound ("" where it is not); ``autos`` (`auto_runs` of the table) fills each
    reason's claim of what auto runs on that shape from the table's own auto row -- without it, or without an
    auto row there, the claim says so."""
    ratio = row["time_s"] / row["bound_s"] if row.get("bound_s") else 1.0
    if ratio <= FLAG:
        return ""
    auto = "auto: " if row["algorithm"].startswith("auto") else ""
    by_shape = {"slow": FAULTED, "dead": {**FAULTED, **DEAD}, "slowchip": SLOWCHIP}
    faulted = by_shape.get(row["axes"], {}).get((row["kind"], row["chosen"])) \
        if isinstance(row["axes"], str) else None
    text = faulted or BY_SHAPE.get((row["topology"], row["kind"], row["chosen"])) \
        or BY_SHAPE.get((row["topology"], row["kind"])) or BY_KIND_ALGORITHM.get((row["kind"], row["chosen"])) \
        or BY_ALGORITHM.get(row["chosen"], "")
    own = row.get("own_s")
    if not text and own and own > row["bound_s"] * 1.001 and row["time_s"] <= FLAG * own:
        text = (f"within {row['time_s'] / own:.2f}x of the own-links bound: it stays on its group's own links; only "
                "borrowing idle links of other chips closes the rest (borrowed_rings does for AllGather, "
                "ReduceScatter, AllReduce; not built for this kind)")
    if AUTO in text:
        chosen = (autos or {}).get(shape_key(row))
        text = text.replace(AUTO, f"auto runs {chosen}" if chosen else "auto's choice not in this table")
    return auto + text if text else ""


def render(table: list[dict]) -> str:
    lines = ["# Collectives: time / topology bound at 1 GB", "",
             "Generated by `python scripts/collective_bounds_table.py` (ideal links, but for the three faulted shapes; "
             "every registered algorithm that applies; the bound is `topology_bound_s`, a **bound**; times are "
             "simulated; the 512-chip shapes run only the kinds named beside them in the script; rows marked "
             "`(auto's trial, ...)` are the candidates `auto` simulated round a fault and did not run). `own` is the "
             "bound for "
             f"algorithms that stay on their groups' own links, where higher. Rows over {FLAG}x carry a reason.", "",
             "The bound counts what must move (issue 31): each chip's bytes in and out over its links; the group's "
             "2(n-1)V for AllReduce; hop-weighted link load along each axis over every group at once (a shard must "
             "cross k - 1 links of an axis to reach k coordinates, detour or not); the roots of all groups together; "
             "the nodes or slices a group spans, 2(K-1)/K x V through their links in (AllReduce); AllToAll's "
             "link-load and cut bounds. `book_s` (not shown) is the book's estimate on healthy hardware only.", "",
             "On the faulted shapes `auto` prices every way round the fault by closed form, simulates the leading "
             "candidates (`simulator.collectives.fault_routes.TRIALS`) and runs the fastest, so its row can differ "
             "from the algorithm with the least closed form (docs/collective_faults.md).", "",
             "| chip | topology | kind | algorithm | time | bound | time / bound | own / bound | reason |",
             "|---|---|---|---|---|---|---|---|---|"]
    autos = auto_runs(table)
    for row in table:
        axes = row["axes"]
        where = row["topology"] + {"row": " one row (groups=)", "slow": " link 0-1 at 0.5",
                                   "dead": " --axes 1, link 0,0-0,1 down",
                                   "slowchip": " chip 3 at slow:0.5"}.get(axes, "") if isinstance(axes, str) \
            else row["topology"] + (f" --axes {','.join(map(str, axes))}" if axes else "")
        if "error" in row:
            lines.append(f"| {row['chip']} | {where} | {row['kind']} | {row['algorithm']} | - | - | - | - | "
                         f"refused: {row['error']} |")
            continue
        own = f"{row['own_s'] / row['bound_s']:.2f}" if row["own_s"] and row["own_s"] > row["bound_s"] * 1.001 else ""
        lines.append(f"| {row['chip']} | {where} | {row['kind']} | {row['algorithm']} | {row['time_s'] * 1e3:.3f} ms | "
                     f"{row['bound_s'] * 1e3:.3f} ms | {row['time_s'] / row['bound_s']:.2f} | {own} | "
                     f"{reason(row, autos)} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="docs/collective_bounds.md")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    table = rows(SHAPES[:3] if args.quick else SHAPES)
    Path(args.out).write_text(render(table))
    autos = auto_runs(table)
    missing = [r for r in table if "error" not in r and not reason(r, autos) and r["time_s"] > FLAG * r["bound_s"]]
    for r in missing:
        print(f"over {FLAG}x without a reason: {r['chip']} {r['topology']} {r['kind']} {r['algorithm']} "
              f"{r['time_s'] / r['bound_s']:.2f}x", file=sys.stderr)
    absent = [] if args.quick else uncovered(table)
    if absent:
        print(f"registered algorithms no row ran: {', '.join(absent)}", file=sys.stderr)
    slow = sorted(table, key=lambda r: -r.get("wall_s", 0))[:3]
    print("slowest rows:", ", ".join(f"{r['topology']} {r['kind']} {r['algorithm']} {r.get('wall_s', 0):.1f}s"
                                     for r in slow))
    return 1 if missing or absent else 0


if __name__ == "__main__":
    sys.exit(main())
