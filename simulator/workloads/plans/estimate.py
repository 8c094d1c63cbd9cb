"""Closed-form time of a training step under a parallelism plan (no simulation).

Per device and microbatch, each op costs its `Work` time plus its exposed collectives (`analytic.exposed_s`:
critical-path time when communication runs and compute does not): ``before`` and ``after`` in full, the
``overlapped`` ones (together, beside the work) only where the longest outlasts the work. FSDP (ZeRO-3)
gathers each layer's weights one layer ahead, so a layer costs max(ops, AllGather) forward and
max(ops, AllGather + ReduceScatter) backward (they share the links), and a task's first gather is exposed.
A device's per-microbatch time T_s sums its chunks; the pipelined part takes (M v - 1) of the slowest
chunks and then every stage's once: (M - 1/v) max_s T_s + sum_s T_s / v (v virtual stages; (M + p - 1) T
for uniform stages, bubble (p - 1)/(M + p - 1), exact for GPipe with unequal stages), plus 2 (p v - 1)
point-to-point transfers on the fill-and-drain path. Gradient reductions of the last microbatch run
behind its backward pass; what they do not hide is exposed, then the optimizer update (HBM-bound) and,
for ZeRO-1/2, the AllGather of the updated weights.

Each collective is priced as the simulated step runs it where `links.AxisLink` would not (a factor of a split
physical axis, an AllReduce along a line of more than two chips): the tuner's fastest algorithm over the mesh's
groups (`links.Tuned`). Where a split physical axis holds factors of fsdp and of another axis, their collectives
share its links: a layer's collectives beside fsdp's background gather (and reduce-scatter) split the links'
bandwidth by their flows while both run (`beside`, fluid), and the last microbatch's gradient AllReduces add
their time to fsdp's background in its backward pass (`_crowded`).
"""
from __future__ import annotations

from typing import Any

from simulator.analytic import exposed_s
from simulator.hardware.specs import ChipSpec
from simulator.workloads.plans.layout import AXES, MeshPlan, TrainOptions
from simulator.workloads.plans.links import AxisLink
from simulator.workloads.plans.memory import ADAM_BYTES, MASTER_BYTES
from simulator.workloads.plans.ops import IN_TURN, Comm, LayerWork, Op, Work, in_turn
from simulator.workloads.plans.schedules import bubble_fraction

OPTIMIZER_FLOPS_PER_PARAM = 12  #: Adam: moments, bias correction, update, weight decay (VPU)


def comm_s(c: Comm, links: dict[str, AxisLink]) -> float:
    """Closed form of one collective: on a torus or mesh (`links.Tuned`) the tuner's fastest algorithm over the
    mesh's groups, as the simulated step runs it; elsewhere by `AxisLink`, several axes at once acting as one
    axis over all their dimensions. Kept in ``links.memo`` (`links.AxisLinks`) by kind, axes and bytes."""
    memo = getattr(links, "memo", None)
    if memo is None:
        return _comm_s(c, links)
    key = (c.kind, c.axes, c.nbytes)
    seconds = memo.get(key)
    if seconds is None:
        seconds = memo[key] = _comm_s(c, links)
    return seconds


def _comm_s(c: Comm, links: dict[str, AxisLink]) -> float:
    parts = [links[a] for a in c.axes if a in links]
    if not parts:
        return 0.0
    tuned = getattr(links, "tuned", None)
    if tuned is not None and len(parts) > 1 and c.kind in IN_TURN and not tuned.joint(c.axes):  # as the step runs it
        axes = [a for a in c.axes if a in links and links[a].n > 1]
        return sum(_comm_s(Comm(kind, (a,), v, c.axis), links)
                   for kind, v, a in in_turn(c.kind, c.nbytes, axes, lambda a: links[a].n))
    seconds = tuned.time_s(c.kind, c.axes, c.nbytes) if tuned is not None else None
    if seconds is not None:
        return seconds
    link = parts[0] if len(parts) == 1 else AxisLink("+".join(c.axes), _prod(p.n for p in parts),
                                                     tuple(s for p in parts for s in p.stages),
                                                     any(p.hierarchical for p in parts))
    return link.time_s(c.kind, c.nbytes)


def _prod(values: Any) -> int:
    out = 1
    for v in values:
        out *= v
    return out


def op_s(op: Op, chip: ChipSpec, links: dict[str, AxisLink], exposed: dict[str, float], times: float = 1.0) -> float:
    """Time of one op with its collectives; books ``times`` x their exposed time (`analytic.exposed_s`) per axis.

    ``before`` and ``after`` collectives run alone (all exposed); the ``overlapped`` ones start together beside
    the work and the op ends when the last has (the simulated step waits on all of them, `step.TrainStep.op`, and
    `beside` prices them so): what outlasts the work is exposed, booked on the first one's axis."""
    work = op.work.time_s(chip)
    total = work
    for c in op.before + op.after:
        t = comm_s(c, links)
        book(exposed, c.axis, times * exposed_s(t, 0.0))
        total += t
    if op.overlapped:
        span = max(work, max(comm_s(c, links) for c in op.overlapped))
        book(exposed, op.overlapped[0].axis, times * exposed_s(span, work))
        total += span - work
    return total


def book(exposed: dict[str, float], axis: str, seconds: float) -> None:
    """Add ``seconds`` of exposed time to ``axis`` in ``exposed``."""
    exposed[axis] = exposed.get(axis, 0.0) + seconds


def beside(ops: tuple[Op, ...], chip: ChipSpec, links: dict[str, AxisLink], background: float,
           alone: float | None = None) -> float:
    """One layer's ops with fsdp's collectives of ``background`` seconds (alone) under way from its start: the
    longer of the ops and the background where they share no link; where a collective of the ops shares links with
    fsdp's (`links.AxisLinks.flows`: a split physical axis), the two share those links' bandwidth by their flows
    while both run (fluid: each progresses at its flows' share), so each takes longer than alone. ``alone``: the
    ops' own time (`op_s` summed), when known."""
    flows = getattr(links, "flows", None)
    shared = flows is not None and any(flows(c.axes) for op in ops for c in op.before + op.overlapped + op.after)
    if not shared:
        return max(sum(op_s(op, chip, links, {}) for op in ops) if alone is None else alone, background)
    clock, left = 0.0, background

    assert flows is not None  # `shared` needs it

    def run(c: Comm, alone: float) -> float:  # seconds the collective takes from now; advances the background
        nonlocal left
        share = flows(c.axes)
        if share is None or left <= 0.0:
            left -= alone
            return alone
        mine, theirs = share[0] / sum(share), share[1] / sum(share)
        if alone / mine <= left / theirs:
            left -= alone / mine * theirs
            return alone / mine
        t = left / theirs
        left = 0.0
        return t + alone - t * mine

    for op in ops:
        for c in op.before:
            clock += run(c, comm_s(c, links))
        work = op.work.time_s(chip)
        over = max((run(c, comm_s(c, links)) for c in op.overlapped), default=0.0)
        left -= max(0.0, work - over) if op.overlapped else work
        clock += max(work, over)
        for c in op.after:
            clock += run(c, comm_s(c, links))
    return clock + max(0.0, left)


def grad_comms(plan: MeshPlan, opts: TrainOptions, dense: float, expert: float, last: bool) -> list[Comm]:
    """Gradient collectives after one layer's backward of one microbatch (``last``: the step's last one).

    ZeRO-2/3 reduce-scatter over fsdp every microbatch; the replicas (data, sequence, and expert for the
    dense weights) AllReduce the shard after the last one. ZeRO-1 reduce-scatters once, at the end;
    without fsdp sharding the gradients are AllReduced once over every replica axis."""
    f = plan.size("fsdp") > 1 and opts.zero >= 1
    reps_d = tuple(a for a in ("data", "sequence", "expert") if plan.size(a) > 1)
    reps_e = tuple(a for a in ("data", "sequence") if plan.size(a) > 1)
    out: list[Comm] = []
    if f and (opts.zero >= 2 or last):
        out.append(Comm("reduce_scatter", ("fsdp",), dense + expert, "fsdp"))
    if not last:
        return out
    shard = plan.size("fsdp") if f else 1
    if not f and plan.size("fsdp") > 1:
        reps_d, reps_e = ("fsdp", *reps_d), ("fsdp", *reps_e)
    for axes, nbytes in ((reps_d, dense / shard), (reps_e, expert / shard)):
        if axes and nbytes:
            out.append(Comm("all_reduce", axes, nbytes, "data" if "data" in axes else axes[0]))
    return out


def optimizer_work(plan: MeshPlan, opts: TrainOptions, held_params: float, weight_bytes: float) -> Work:
    """Adam on this chip's shard: read moments (and master), gradients; write them and the weights."""
    f = plan.size("fsdp")
    shard = held_params / (f if opts.zero >= 1 else 1)
    state = shard * (ADAM_BYTES + (MASTER_BYTES if opts.master_copy else 0))
    grads = held_params / (f if opts.zero >= 2 else 1) * weight_bytes
    return Work(0.0, 0.0, OPTIMIZER_FLOPS_PER_PARAM * shard, state + grads, state + shard * weight_bytes)


def chunk_s(layer: LayerWork, n_layers: int, chip: ChipSpec, links: dict[str, AxisLink], plan: MeshPlan,
            opts: TrainOptions, head: tuple[Op, Op] | None, exposed: dict[str, float],
            times: float) -> tuple[float, float]:
    """(forward, backward) time of one chunk of ``n_layers`` layers for one microbatch."""
    ag = comm_s(Comm("all_gather", ("fsdp",), layer.gather_bytes, "fsdp"), links) if layer.gather_bytes else 0.0
    rs = sum(comm_s(c, links) for c in grad_comms(plan, opts, *layer.grad_bytes, last=False))
    fwd = sum(op_s(o, chip, links, exposed, times * n_layers) for o in layer.forward)
    bwd = sum(op_s(o, chip, links, exposed, times * n_layers) for o in layer.backward)
    ag_b = ag if opts.reshard_after_forward else 0.0  # weights kept from the forward: no second gather
    f_total = ag + (n_layers - 1) * beside(layer.forward, chip, links, ag, fwd) + fwd
    b_total = ag_b + (n_layers - 1) * beside(layer.backward, chip, links, ag_b + rs, bwd) + bwd + rs
    if ag or rs:  # the first gather of a task and the last reduce-scatter are never hidden; beyond the ops' own
        book(exposed, "fsdp", times * (exposed_s(f_total, n_layers * fwd) + exposed_s(b_total, n_layers * bwd)))
    if head is not None:
        f_total += op_s(head[0], chip, links, exposed, times)
        b_total += op_s(head[1], chip, links, exposed, times)
    return f_total, b_total


def _crowded(layer: LayerWork, n_layers: int, chip: ChipSpec, links: dict[str, AxisLink], plan: MeshPlan,
             opts: TrainOptions, final: list[Comm]) -> float:
    """What the last microbatch's gradient reductions add to its backward pass where they share links with fsdp's
    gather and reduce-scatter (`links.AxisLinks.flows`): each layer's background then carries their bytes too."""
    flows = getattr(links, "flows", None)
    shared = [c for c in final if flows is not None and flows(c.axes)]
    if not shared or n_layers < 2 or not layer.gather_bytes:
        return 0.0
    ag = comm_s(Comm("all_gather", ("fsdp",), layer.gather_bytes, "fsdp"), links)
    rs = sum(comm_s(c, links) for c in grad_comms(plan, opts, *layer.grad_bytes, last=False))
    more = sum(comm_s(c, links) for c in shared)
    return (n_layers - 1) * (beside(layer.backward, chip, links, ag + rs + more) -
                             beside(layer.backward, chip, links, ag + rs))


def train_estimate(chip: ChipSpec, plan: MeshPlan, opts: TrainOptions, layer: LayerWork, n_layers: int,
                   head: tuple[Op, Op], links: dict[str, AxisLink], p2p_s: float, held_params: float,
                   head_grad_bytes: float, weight_bytes: float) -> dict[str, Any]:
    """Closed-form step time, bubble and exposed communication per axis (seconds)."""
    p, m = plan.size("pipeline"), opts.microbatches
    v = opts.chunks if p > 1 else 1
    per_chunk = n_layers // (p * v)
    exposed: dict[str, float] = {a: 0.0 for a in AXES if plan.size(a) > 1}
    once: dict[str, float] = {}  # one chunk's exposed communication, one microbatch: the last stage runs m v
    f_body, b_body = chunk_s(layer, per_chunk, chip, links, plan, opts, None, once, 1.0)
    f_top, b_top = f_body, b_body  # uneven stages (p v not dividing the layers): the first device's chunks hold one
    if n_layers % (p * v):  # layer more (Megatron puts the extra layers on the earliest stages)
        f_top, b_top = chunk_s(layer, per_chunk + 1, chip, links, plan, opts, None, {}, 1.0)
    first = (f_top + b_top) * v
    for axis, seconds in once.items():
        book(exposed, axis, m * v * seconds)
    f_last = f_body + op_s(head[0], chip, links, exposed, float(m))
    b_last = b_body + op_s(head[1], chip, links, exposed, float(m))
    last = f_last + b_last + (v - 1) * (f_body + b_body)
    slowest, mean = max(first, last), (first * (p - 1) + last) / p
    pipelined = m * slowest - slowest / v + p * mean / v  # (M v - 1) slowest chunks, then every stage's once
    bubble = pipelined - m * mean  # each stage idles for what the others keep it waiting, on average
    transfers = 2 * (p * v - 1) * p2p_s if p > 1 else 0.0
    if p > 1:
        exposed["pipeline"] = transfers
    final = [c for c in grad_comms(plan, opts, *layer.grad_bytes, last=True) if c.kind == "all_reduce" or opts.zero < 2]
    final_s = n_layers // p * sum(comm_s(c, links) for c in final)
    head_comms = grad_comms(plan, opts, head_grad_bytes, 0.0, last=True)
    final_s += sum(comm_s(c, links) for c in head_comms)
    crowded = _crowded(layer, per_chunk, chip, links, plan, opts, final)
    window = b_last + crowded - (b_last + crowded) / max(1, per_chunk * v)  # the last microbatch's backward after
    # its first layer
    tail = max(final_s / max(1, n_layers // p), final_s - window) if final_s else 0.0
    if tail:
        axis = next((c.axis for c in final + head_comms), "data")
        book(exposed, axis, tail)
    opt = optimizer_work(plan, opts, held_params, weight_bytes).time_s(chip)
    regather = 0.0
    if plan.size("fsdp") > 1 and opts.zero in (1, 2):
        regather = comm_s(Comm("all_gather", ("fsdp",), held_params * weight_bytes, "fsdp"), links)
        book(exposed, "fsdp", regather)
    if crowded:
        book(exposed, "fsdp", crowded)
    step = pipelined + transfers + tail + opt + regather + crowded
    return {"step_time_s": step, "pipelined_s": pipelined, "bubble_s": bubble,
            "bubble_fraction": bubble / pipelined if p > 1 else 0.0,
            "bubble_fraction_book": bubble_fraction(opts.schedule, p, m, v), "p2p_s": p2p_s,
            "per_microbatch_s": {"first_stage": first, "last_stage": last}, "optimizer_s": opt,
            "exposed_comm_s": exposed, "exposed_comm_total_s": sum(exposed.values())}
