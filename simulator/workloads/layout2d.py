"""2-D weight-stationary inference layouts (Pope et al. 2022, "Efficiently Scaling Transformer Inference";
the book's inference chapter): closed-form budget and the comparison with the 1-D layout.

Layout. The model axis's M chips form an X x Y grid. Every weight matrix is split over both: its
d_model side over X, its d_ff (or heads) side over Y, so each chip holds 1/(XY) of it. Between blocks
the residual stream [T, D] is fully sharded, [T, D/(XY)]. One MLP, per chip:
  1. AllGather over Y of the input:            [T, D/(XY)] -> [T, D/X]        V = T D/X
  2. x @ W_in[D/X, F/Y] (and the gate):        partial sums over X
  3. ReduceScatter over X:                     [T, F/Y]{U_X} -> [T, F/(XY)]   V = (mats - 1) T F/Y
  4. activation, AllGather over X:             -> [T, F/Y]                    V = T F/Y
  5. h @ W_out[F/Y, D/X]:                      partial sums over Y
  6. ReduceScatter over Y:                     -> [T, D/(XY)]                 V = T D/X
Attention does the same with F/Y replaced by the chip's heads (Q, K, V: q/Y + 2 kv/Y; out: q/Y), and
after the ReduceScatter over X each chip holds its heads for a share of the work: the heads split
over all XY chips when they divide (``attention="heads"``), else the requests split over X
(``attention="requests"``); either way the KV cache is sharded over all the model axis's chips
(KV heads replicated only when there are fewer than the chips they are split over). The LM head
is split like W_in (D over X, vocabulary over Y) and ReduceScatters its partial logits over X.

Communication. A collective over k chips of an array V moves (k - 1)/k V per chip. Per layer the 2-D
layout moves about V_2D = 4 T D/X + T (2q + 2kv)/Y + mats T F/Y (mats = 3 gated, 2 plain), against
V_1D = 4 T D for the 1-D (Megatron) layout's two AllReduces of [T, D] over all M chips. With F' the
per-chip-width sum (2q + 2kv + mats F) the volume is smallest at X* = sqrt(4 D M / F') and there
V_2D = 2 T sqrt(4 D F' / M): it falls as 1/sqrt(M), while V_1D stays constant. 2-D moves less than
1-D once 2 sqrt(4 D F' / M) < 4 D, i.e. M > F'/D (llama-3-70b: F' = 12.75 D). On a torus the 1-D
collectives of a model axis that spans k physical axes use all their links at once, while each 2-D
collective uses only X's or Y's: with X and Y on one torus axis each, 2-D is faster only once V_2D <
V_1D / 2, i.e. M > 4 F'/D (tests/test_layout2d.py holds simulated steps either side of it).
Compute per chip is 2 x params x T / M FLOPs in both layouts, so the comm-to-compute ratio grows as M
for 1-D and as sqrt(M) for 2-D: 1-D turns communication-bound at M_1D = (FLOPs per token per layer)
W / (C x 4 D x bytes per element), 2-D at M_2D = M_1D^2 x D / F' (the ``comm_bound_chips`` keys; W is the
per-chip ICI bandwidth along the axis, C the peak FLOP/s, both from the chip spec).

Times. Each collective is priced by its closed form on the axis's real links (`plans.links.AxisLink`:
a ring both ways where the axis wraps, latency per step); ``t_comm_s`` is their sum over the step.
The lower bound is max(compute, memory, communication) (collectives could overlap the matmuls); the
upper bound, compute-or-memory plus communication, is what the simulation (`simulate2d`), which runs
collectives between ops, approaches.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from simulator.errors import PodsimError
from simulator.hardware.specs import ChipSpec, check_dtype
from simulator.units import show
from simulator.workloads.budget import (
    Parallelism,
    decode_flops,
    kv_bytes_per_position,
    kv_heads_per_chip,
    request_contexts,
    weight_bytes_read,
    with_dtypes,
)
from simulator.workloads.mesh import MeshSpec
from simulator.workloads.transformer import ModelError, TransformerConfig

LAYOUTS = ("1d", "2d")  #: 1-D (Megatron over one model axis) or 2-D weight-stationary; "2d:XxY" places it


@dataclass(frozen=True)
class Layout2D:
    """``data`` groups of an ``x`` (d_model split) by ``y`` (d_ff and heads split) grid of chips."""

    data: int
    x: int
    y: int
    attention: str  #: what the ReduceScatter over X splits in attention: "heads" or "requests"

    @property
    def model(self) -> int:
        return self.x * self.y

    @property
    def chips(self) -> int:
        return self.data * self.x * self.y

    @property
    def text(self) -> str:
        return f"2d:{self.x}x{self.y}"

    def mesh_spec(self) -> MeshSpec:
        return MeshSpec(("data", "x", "y"), (self.data, self.x, self.y), (None, None, None))


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _y_ok(cfg: TransformerConfig, y: int) -> bool:
    return cfg.d_ff % y == 0 and cfg.n_heads % y == 0 and (cfg.n_kv_heads % y == 0 or y % cfg.n_kv_heads == 0)


def _attention(cfg: TransformerConfig, x: int, y: int, per_group: int) -> str | None:
    """How attention splits over the grid: "heads" over all X Y chips when they divide, "requests" over X
    (heads over Y) when the group's requests divide -- whichever leaves each chip less of the KV cache (KV
    heads are replicated when fewer than the chips they split over), heads on a tie; None if neither."""
    n = x * y
    shares = []
    if cfg.n_heads % n == 0 and (cfg.n_kv_heads % n == 0 or n % cfg.n_kv_heads == 0):
        shares.append((kv_heads_per_chip(cfg, n), 0, "heads"))
    if per_group % x == 0:
        shares.append((kv_heads_per_chip(cfg, y) / x, 1, "requests"))
    return min(shares)[2] if shares else None


def valid_grids(cfg: TransformerConfig, model: int, per_group: int) -> list[tuple[int, int]]:
    """(X, Y) with X Y = ``model``, X dividing d_model, Y dividing d_ff and the heads, and attention splittable."""
    return [(x, model // x) for x in _divisors(model) if cfg.d_model % x == 0 and _y_ok(cfg, model // x)
            and _attention(cfg, x, model // x, per_group) is not None]


def widths(cfg: TransformerConfig) -> tuple[float, float]:
    """(D-side width 4 D, F-side width F' = 2 q + 2 kv + mats F) of one layer's gathered / scattered arrays."""
    mats = 3 if cfg.gated_mlp else 2
    return 4.0 * cfg.d_model, 2.0 * cfg.q_width + 2.0 * cfg.kv_width + mats * cfg.d_ff


def best_grid(cfg: TransformerConfig, grids: list[tuple[int, int]]) -> tuple[int, int]:
    """The grid moving the fewest bytes per layer (4 D/X + F'/Y; the smaller X on a tie)."""
    d_side, f_side = widths(cfg)
    return min(grids, key=lambda g: (d_side / g[0] + f_side / g[1], g[0]))


def layout_2d(cfg: TransformerConfig, par: Parallelism, batch: int, text: str = "2d", chip: ChipSpec | None = None,
              topology: str | None = None, tokens: float = 1.0) -> Layout2D:
    """The 2-D layout ``text`` of the mesh's model axis: "2d:XxY", or "2d" for the valid grid whose
    collectives take least time (closed form, ``tokens`` per data group) on the topology when a ``chip`` is
    given (else the fewest bytes). `ModelError` naming the nearest valid grid when it does not divide the
    model, the heads or the requests, or cannot be laid on the topology."""
    if cfg.n_experts:
        raise ModelError(f"--layout {show(text)}: 2-D weight-stationary layouts are for dense models; {cfg.name} has "
                         "experts (use --layout 1d)")
    if batch % par.data:
        raise ModelError(f"mesh data={par.data} does not divide batch={batch}; use a multiple of {par.data}")
    per_group = batch // par.data
    grids = valid_grids(cfg, par.model, per_group)
    if text != "2d" and chip is not None:  # a valid grid needs no look at the others
        g = _parse_grid(text)
        if g in grids and _placeable(Layout2D(par.data, *g, "heads"), chip, topology):
            return _grid(cfg, par, g, per_group)
    if chip is not None and grids:
        laid = [g for g in grids if _placeable(Layout2D(par.data, *g, "heads"), chip, topology)]
        if not laid:
            shown = ", ".join(f"2d:{x}x{y}" for x, y in grids)
            raise ModelError(f"--layout {show(text)}: none of the grids that divide {cfg.name} ({shown}) can be laid "
                             f"on {topology or 'the chip' + chr(39) + 's slice of ' + str(par.chips) + ' chips'} (each "
                             "axis takes whole physical axes); give --topology or use --layout 1d")
        grids = laid
    if not grids:
        raise ModelError(f"--layout {show(text)}: no X x Y grid of model={par.model} chips has X dividing "
                         f"d_model={cfg.d_model} (and the {per_group} requests of a data group, unless the heads split "
                         f"over all the chips) and Y dividing d_ff={cfg.d_ff} and the {cfg.n_heads} heads of "
                         f"{cfg.name}; use --layout 1d or model={_nearest_model(cfg, par.model, per_group)}")
    if text == "2d":
        if chip is None:
            x, y = best_grid(cfg, grids)
        else:
            x, y = min(grids, key=lambda g: (comm_2d_s(cfg, chip, _grid(cfg, par, g, per_group), tokens, topology)[0],
                                             g[0]))
    else:
        x, y = _parse_grid(text)
        if (x, y) not in grids:  # the nearest X, then the nearest Y
            near = min(grids, key=lambda g: (abs(math.log(g[0] / x)), abs(math.log(g[1] / y)), g[0]))
            why = _why(cfg, x, y, par.model, per_group)
            raise ModelError(f"--layout {show(text)} on model={par.model} chips: {why}; the nearest valid choice is "
                             f"--layout 2d:{near[0]}x{near[1]}")
    return _grid(cfg, par, (x, y), per_group)


def _grid(cfg: TransformerConfig, par: Parallelism, g: tuple[int, int], per_group: int) -> Layout2D:
    return Layout2D(par.data, g[0], g[1], _attention(cfg, g[0], g[1], per_group) or "requests")


def _placeable(lay: Layout2D, chip: ChipSpec, topology: str | None) -> bool:
    from topologies import TopologyError

    try:
        _links(lay.mesh_spec(), chip, topology)
    except (PodsimError, TopologyError):
        return False
    return True


def _nearest_model(cfg: TransformerConfig, model: int, per_group: int) -> int:
    ok = [m for m in range(1, 4 * model + 1) if valid_grids(cfg, m, per_group)]
    return min(ok, key=lambda m: (abs(m - model), m))


def _why(cfg: TransformerConfig, x: int, y: int, model: int, per_group: int) -> str:
    if x * y != model:
        return f"{x} x {y} = {x * y} chips, not {model}"
    if cfg.d_model % x:
        return f"X={x} does not divide d_model={cfg.d_model}"
    if valid_grids(cfg, model, per_group).count((x, y)):
        return "the grid cannot be laid on the topology's axes (each axis takes whole physical axes)"
    if not _y_ok(cfg, y):
        return f"Y={y} does not divide d_ff={cfg.d_ff}, the {cfg.n_heads} heads and {cfg.n_kv_heads} KV heads"
    return f"the heads do not split over {x * y} chips and the {per_group} requests of a data group not over X={x}"


def _parse_grid(text: str) -> tuple[int, int]:
    head, _, grid = text.partition(":")
    parts = grid.lower().split("x")
    if head != "2d" or len(parts) != 2 or not all(p.strip().isdigit() and int(p) > 0 for p in parts):
        raise PodsimError(f"--layout {show(text)}; valid: 1d, 2d (the best grid) or 2d:XxY (e.g. 2d:4x8)")
    return int(parts[0]), int(parts[1])


def parse_layout(text: str | None) -> str:
    """Check ``--layout`` text: 1d, 2d or 2d:XxY."""
    text = (text or "1d").strip().lower()
    if text not in LAYOUTS:
        _parse_grid(text)
    return text


def kv_share(cfg: TransformerConfig, lay: Layout2D) -> tuple[float, float]:
    """(KV heads each chip holds, share of its group's requests): the chip holds that many heads of that share."""
    if lay.attention == "heads":
        return kv_heads_per_chip(cfg, lay.model), 1.0
    return kv_heads_per_chip(cfg, lay.y), 1.0 / lay.x


Comm2D = tuple[str, tuple[str, ...], float]  #: (kind, axes, V bytes)


def layer_comms(cfg: TransformerConfig, lay: Layout2D, tokens: float) -> list[list[Comm2D]]:
    """The collectives after each of a layer's five ops -- QKV projection, attention, output projection,
    MLP in (with the activation), MLP out -- on one data group of ``tokens`` tokens. The last op's
    AllGather over Y is the next layer's input gather."""
    e, mats = cfg.act_elem_bytes, 3 if cfg.gated_mlp else 2
    d_x = tokens * cfg.d_model / lay.x * e
    q_y, kv_y, f_y = cfg.q_width / lay.y, kv_heads_per_chip(cfg, lay.y) * cfg.head_dim, cfg.d_ff / lay.y
    ag, rs = "all_gather", "reduce_scatter"
    return [[(rs, ("x",), tokens * (q_y + 2 * kv_y) * e)], [(ag, ("x",), tokens * q_y * e)],
            [(rs, ("y",), d_x), (ag, ("y",), d_x)], [(rs, ("x",), (mats - 1) * tokens * f_y * e),
                                                     (ag, ("x",), tokens * f_y * e)],
            [(rs, ("y",), d_x), (ag, ("y",), d_x)]]


def step_comms(cfg: TransformerConfig, lay: Layout2D, tokens: float) -> list[list[Comm2D]]:
    """Every op's collectives over a step: the embedding's gather over Y, five ops per layer, and the LM
    head's ReduceScatter over X of its partial logits [T, vocab/Y] (its weights split D over X, vocabulary
    over Y like the MLP's W_in)."""
    first: list[Comm2D] = [("all_gather", ("y",), tokens * cfg.d_model / lay.x * cfg.act_elem_bytes)]
    head: list[Comm2D] = [("reduce_scatter", ("x",), tokens * cfg.vocab_size / lay.y * cfg.act_elem_bytes)]
    ops = [c for _ in range(cfg.n_layers) for c in layer_comms(cfg, lay, tokens)]
    ops[-1] = ops[-1][:1]  # the last layer's output needs no gather over Y: the head reads [T, D/X] ...
    ops[-1] = ops[-1] + [("all_gather", ("y",), tokens * cfg.d_model / lay.x * cfg.act_elem_bytes)]  # ... after it
    return [first] + ops + [head]


def _links(spec: MeshSpec, chip: ChipSpec, topology: str | None) -> tuple[dict[str, Any], str]:
    from simulator.engine.system import resolve_topology
    from simulator.workloads.mesh import default_topology_for
    from simulator.workloads.plans.links import axis_links, place

    where = topology or default_topology_for(spec, chip)
    graph = resolve_topology(where, chip)
    return axis_links(place(spec, graph, split=topology is None), graph, chip), where


def comm_2d_s(cfg: TransformerConfig, chip: ChipSpec, lay: Layout2D, tokens: float,
              topology: str | None = None) -> tuple[float, float, str]:
    """(closed-form seconds, bytes each chip moves) of a step's collectives for one group of ``tokens``
    tokens, and the topology they run on."""
    links, where = _links(lay.mesh_spec(), chip, topology)
    sizes = {"x": lay.x, "y": lay.y}
    seconds: dict[Comm2D, float] = {}
    t = moved = 0.0
    for comms in step_comms(cfg, lay, tokens):
        for c in comms:
            if c not in seconds:
                seconds[c] = links[c[1][0]].time_s(c[0], c[2]) if c[1][0] in links else 0.0
            t += seconds[c]
            moved += (sizes[c[1][0]] - 1) / sizes[c[1][0]] * c[2]
    return t, moved, where


def comm_1d_s(cfg: TransformerConfig, chip: ChipSpec, data: int, model: int, tokens: float,
              topology: str | None = None) -> tuple[float, float]:
    """(closed-form seconds, bytes each chip moves) of the 1-D layout's two AllReduces of [T, D] per layer
    over ``model`` chips (`simulate.simulate_decode`), on the same chips."""
    if model == 1:
        return 0.0, 0.0
    spec = MeshSpec(("data", "model"), (data, model), (None, None))
    links, _ = _links(spec, chip, topology)
    v = tokens * cfg.d_model * cfg.act_elem_bytes
    return 2 * cfg.n_layers * links["model"].all_reduce_s(v), 2 * cfg.n_layers * 2 * (model - 1) / model * v


def comm_bound_chips(cfg: TransformerConfig, chip: ChipSpec, bandwidth_bytes_per_s: float, tokens: float = 0.0,
                     kv_bytes_per_layer: float = 0.0) -> dict[str, float]:
    """Model-axis chip counts (ignoring divisibility) where the layouts cross (see the module docstring):

    - ``1d``, ``2d``: past them a layer's collectives (at ``bandwidth_bytes_per_s`` per chip) outlast its
      matmuls at peak: M_1D, and M_1D^2 4D/F' for the best 2-D grid;
    - ``1d_vs_hbm`` (with ``tokens`` T > 0 in the step): past it the 1-D layer's two AllReduces of [T, D]
      (4 T D e / W for large M) outlast its HBM reads, (weights + ``kv_bytes_per_layer``) / (M W_hbm);
    - ``crossover_1d_2d``: 2-D moves fewer bytes than 1-D once M > F'/D; ``crossover_1d_2d_torus``: with X
      and Y each on one torus axis, 2-D is faster once M > 4 F'/D;
    - ``crossover_1d_2d_book``: the book's (inference, question 7) N > 32 (F/D) (3/4)^2 = 81 for F = 4D, which
      prices the MLP alone and 1-D over three axes (4 T D / (3 W))."""
    d_side, f_side = widths(cfg)
    mats = 3 if cfg.gated_mlp else 2
    d = cfg.d_model
    per_layer = d * (cfg.q_width + 2 * cfg.kv_width) + cfg.q_width * d + mats * d * cfg.d_ff
    flops_per_token = 2 * per_layer  # the layer's matmuls (the LM head is not per layer)
    e = cfg.act_elem_bytes
    m1 = flops_per_token * bandwidth_bytes_per_s / (chip.peak_flops_per_s() * d_side * e)
    # 2-D: T flops / (M C) = 2 T sqrt(d_side f_side / M) e / W  <=>  M = (flops W / (2 C e))^2 / (d_side f_side)
    m2 = (flops_per_token * bandwidth_bytes_per_s / (2 * chip.peak_flops_per_s() * e)) ** 2 / (d_side * f_side)
    f_prime = f_side  # 2q + 2kv + mats F, the per-chip width sum
    out = {"1d": m1, "2d": m2, "crossover_1d_2d": f_prime / d, "crossover_1d_2d_torus": 4 * f_prime / d,
           "crossover_1d_2d_book": 32 * cfg.d_ff / d * (3 / 4) ** 2}
    if tokens > 0:
        hbm_bytes = per_layer * cfg.weight_elem_bytes + kv_bytes_per_layer
        out["1d_vs_hbm"] = hbm_bytes * bandwidth_bytes_per_s / (4 * tokens * d * e * chip.hbm_bandwidth_bytes_per_s)
    return out


def budget_2d(cfg: TransformerConfig, chip: ChipSpec, batch: int = 1, context: int | Sequence[int] = 0,
              par: Parallelism | None = None, layout: str = "2d", new_tokens: int = 1,
              weight_dtype: str | None = None, kv_dtype: str | None = None, compute_dtype: str | None = None,
              topology: str | None = None) -> dict[str, Any]:
    """Closed-form decode (``new_tokens`` = 1) or prefill step under a 2-D weight-stationary layout, with the
    1-D layout's communication on the same chips beside it (``t_comm_1d_s``)."""
    par = par or Parallelism()
    cfg = with_dtypes(cfg, weight_dtype, kv_dtype)
    contexts = request_contexts(batch, context)
    group_tokens = batch // par.data * new_tokens
    lay = layout_2d(cfg, par, batch, layout, chip, topology, group_tokens)
    n = lay.model
    kv_pos = kv_bytes_per_position(cfg)
    heads, share = kv_share(cfg, lay)
    frac = heads / cfg.n_kv_heads * share / par.data  # of the whole cache, on each chip
    history, growth = kv_pos * sum(contexts), kv_pos * batch * new_tokens
    flops = decode_flops(cfg, contexts, new_tokens)["flops"]
    dtype = compute_dtype or ("int8" if cfg.weight_elem_bytes == 1 else "bf16")
    check_dtype(dtype)
    weights = cfg.params() * cfg.weight_elem_bytes
    per_chip = {"weight_bytes": weights / n, "kv_cache_bytes": history * frac,
                "hbm_bytes_per_step": weight_bytes_read(cfg, group_tokens) / n + (history + growth) * frac,
                "flops_per_step": flops / (par.data * n)}
    t_comm, moved, where = comm_2d_s(cfg, chip, lay, group_tokens, topology)
    per_chip["comm_bytes_per_step"] = moved
    t_compute = per_chip["flops_per_step"] / chip.peak_flops_per_s(dtype)
    t_memory = per_chip["hbm_bytes_per_step"] / chip.hbm_bandwidth_bytes_per_s
    one_d = _one_d(cfg, chip, par, group_tokens, topology)
    cap = chip.hbm_capacity_bytes
    need = per_chip["weight_bytes"] + kv_pos * sum(c + new_tokens for c in contexts) * frac
    per_request = kv_pos * (max(contexts) + new_tokens) * frac
    max_batch = math.floor((cap - weights / n) / per_request) if cap > weights / n else 0
    max_batch -= max_batch % (par.data * (lay.x if lay.attention == "requests" else 1))
    bound = max((t_compute, "compute"), (t_memory, "memory"), (t_comm, "communication"))
    gib = 2.0**30
    note = (f"fits: {need / gib:.3f} GiB of {cap / gib:.3f} GiB per chip" if need <= cap else
            f"does not fit: {need / gib:.3f} GiB per chip is {(need - cap) / gib:.3f} GiB over the {cap / gib:.3f} GiB "
            "of HBM")
    return {"model": cfg.name, "chip": chip.name, "batch": batch, "context": contexts[0] if len(set(contexts)) == 1
            else contexts, "new_tokens": new_tokens, "layout": lay.text, "x": lay.x, "y": lay.y, "data": par.data,
            "model_parallel": n, "attention_split": lay.attention, "kv_sharding": f"2d ({lay.attention})",
            "topology": where, "weight_bytes": weights, "kv_cache_bytes": history, "flops_per_step": flops,
            "params_total": cfg.params(), "params_active": cfg.params(active=True),
            "hbm_read_bytes_per_step": weight_bytes_read(cfg, batch * new_tokens) + history,
            "per_chip": per_chip, "t_compute_s": t_compute, "t_memory_s": t_memory, "t_comm_s": t_comm,
            "lower_bound_s": bound[0], "upper_bound_s": max(t_compute, t_memory) + t_comm, "bound": bound[1],
            **one_d, "comm_bound_chips": comm_bound_chips(cfg, chip, _axis_bandwidth(chip), group_tokens,
                                                            (history + growth) / par.data / cfg.n_layers),
            "compute_dtype": dtype, "fits": need <= cap, "hbm_needed_per_chip_bytes": need, "hbm_capacity_bytes": cap,
            "hbm_spare_bytes": cap - need, "max_batch": max_batch, "fit_note": note}


def _one_d(cfg: TransformerConfig, chip: ChipSpec, par: Parallelism, tokens: float,
           topology: str | None) -> dict[str, Any]:
    """The 1-D layout's communication on the same chips, when its model axis divides the model."""
    m = par.model
    if cfg.n_heads % m or cfg.d_ff % m or (cfg.n_kv_heads % m and m % cfg.n_kv_heads):
        return {"t_comm_1d_s": None, "comm_1d_note": f"model={m} does not divide the heads and d_ff: no 1-D layout"}
    t, moved = comm_1d_s(cfg, chip, par.data, m, tokens, topology)
    return {"t_comm_1d_s": t, "comm_1d_bytes_per_chip": moved}


def _axis_bandwidth(chip: ChipSpec) -> float:
    """Per-chip bandwidth of one wrapped ICI axis, both ways (the book's W_ici); a switch's egress."""
    if chip.wraparound == "switch":
        return chip.ici_egress_bytes_per_s
    return 2 * chip.ici_bandwidth_bytes_per_s
