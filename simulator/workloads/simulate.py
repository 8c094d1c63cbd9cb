"""Simulated Transformer steps: decode, prefill and training, on one chip or a data x model mesh.

Built from the core's pieces: per layer, every chip streams its share of the weights (and of the KV
history) from HBM into VMEM in blocks (double-buffered), runs the layer's matmuls and attention on
the MXU and its norms / softmax / activations on the VPU, writes new KV back, and -- with model
parallelism -- all chips of a data group AllReduce the activations after attention and after the MLP
(Megatron-style), on the interconnect. The step time is simulated; the closed-form budget
(`simulator.workloads.budget`) stands beside it.

Assumptions: weight matmul time uses padded FLOPs (m to the MXU's sublanes, k and n to its width);
attention FLOPs are unpadded; element-wise work counts ~10 operations per element of each layer's
activations; the embedding lookup is free; a block never exceeds a third of VMEM.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import simpy

from simulator import analytic
from simulator.acceleration.executor import Attempt, Representatives, executor
from simulator.collectives import start_collective
from simulator.collectives.schedule import gc_paused
from simulator.engine.system import System
from simulator.errors import PodsimError
from simulator.hardware.specs import ChipSpec
from simulator.units import positive_int
from simulator.workloads.budget import (
    Parallelism,
    check_layout,
    experts_touched,
    kv_heads_per_chip,
    kv_share_per_chip,
    request_contexts,
    with_dtypes,
)
from simulator.workloads.mesh import Mesh, MeshSpec, default_topology_for
from simulator.workloads.pipeline import MAX_STEPS, Operand, Step, run_steps
from simulator.workloads.transformer import TransformerConfig

VECTOR_OPS_PER_ELEMENT = 10  #: norms, residual adds, softmax, activation: a rough element-wise budget


@dataclass
class LayerOp:
    """One op of a layer on one chip (attention, MLP, the LM head, or its backward): bytes to stream in
    from HBM, MXU and VPU FLOPs, bytes to write back, and the AllReduces that follow it."""

    name: str
    weight_bytes: float
    kv_read_bytes: float
    flops: float
    vector_flops: float
    kv_write_bytes: float = 0.0
    sync_bytes: float = 0.0  #: activations AllReduced over the model axis after this op (0 = none)
    grad_bytes: float = 0.0  #: gradients AllReduced over the data axis after this op, in the background
    act_store_bytes: float = 0.0  #: activations saved to HBM for the backward pass
    act_load_bytes: float = 0.0  #: saved activations read back
    useful_flops: float | None = None  #: ``flops`` without MXU padding (None: the same)


def _matmul_flops(spec: ChipSpec, m: int, k: float, n: float) -> float:
    """Padded MXU FLOPs of an [m, k] @ [k, n] matmul (k, n may be per-chip shares)."""
    return analytic.padded_matmul_flops(max(1, m), max(1, round(k)), max(1, round(n)), spec.mxu_dim, spec.sublanes)


def layer_ops(cfg: TransformerConfig, spec: ChipSpec, par: Parallelism, contexts: Sequence[int],
              new_tokens: int, kv_heads: float | None = None) -> list[LayerOp]:
    """Attention and MLP ops of one layer on one chip of a data group holding ``contexts``.

    ``kv_heads``: KV heads' worth of cache this chip holds (default: its heads, `kv_heads_per_chip`;
    fewer when the cache is also split by batch or sequence).
    """
    m = par.model
    tokens = len(contexts) * new_tokens
    e_w, e_kv, e_a = cfg.weight_elem_bytes, cfg.kv_elem_bytes, cfg.act_elem_bytes
    kvh = kv_heads_per_chip(cfg, m)
    kv_pos = 2 * (kvh if kv_heads is None else kv_heads) * cfg.head_dim * e_kv  # K and V of one position, layer, chip
    d, q, kvw = cfg.d_model, cfg.q_width / m, kvh * cfg.head_dim
    sources = sum(new_tokens * c + new_tokens * (new_tokens + 1) / 2 for c in contexts)  # causal over new tokens
    scores = 4 * (cfg.n_heads / m) * cfg.head_dim * sources
    attn_flops = _matmul_flops(spec, tokens, d, q + 2 * kvw) + _matmul_flops(spec, tokens, q, d) + scores
    attn = LayerOp("attention", cfg.attention_params() * e_w / m + 2 * cfg.norm_params() * e_w,
                   kv_pos * sum(contexts), attn_flops, VECTOR_OPS_PER_ELEMENT * tokens * (d + q),
                   kv_pos * tokens, tokens * d * e_a if m > 1 else 0.0,
                   useful_flops=2 * tokens * (d * (q + 2 * kvw) + q * d) + scores)
    experts = experts_touched(cfg, tokens) if cfg.n_experts else 1.0
    used = (cfg.experts_per_token + cfg.n_shared_experts) if cfg.n_experts else 1
    mats = 3 if cfg.gated_mlp else 2
    routing = 2 * tokens * d * cfg.n_experts / m
    mlp_flops = used * mats * _matmul_flops(spec, tokens, d, cfg.d_ff / m) + routing
    router = cfg.d_model * cfg.n_experts * e_w
    mlp = LayerOp("mlp", experts * cfg.expert_params() * e_w / m + router, 0.0, mlp_flops,
                  VECTOR_OPS_PER_ELEMENT * tokens * used * cfg.d_ff / m, 0.0, tokens * d * e_a if m > 1 else 0.0,
                  useful_flops=2 * tokens * used * mats * d * cfg.d_ff / m + routing)
    return [attn, mlp]


def head_op(cfg: TransformerConfig, spec: ChipSpec, par: Parallelism, tokens: int) -> LayerOp:
    """Final norm and output projection (vocabulary split over model chips)."""
    e = cfg.weight_elem_bytes
    weights = cfg.vocab_size * cfg.d_model * e / par.model + cfg.norm_params() * e
    return LayerOp("lm head", weights, 0.0, _matmul_flops(spec, tokens, cfg.d_model, cfg.vocab_size / par.model),
                   VECTOR_OPS_PER_ELEMENT * tokens * cfg.vocab_size / par.model,
                   useful_flops=2 * tokens * cfg.d_model * cfg.vocab_size / par.model)


def _block_count(op: LayerOp, vmem: float) -> int:
    """How many steps an op takes when its streamed bytes (in and out) fit a third of VMEM each."""
    stream = op.weight_bytes + op.kv_read_bytes + op.act_load_bytes
    out = op.kv_write_bytes + op.act_store_bytes
    return max(1, math.ceil(stream / (vmem / 3)), math.ceil(out / (vmem / 3)))


def _blocks(op: LayerOp, layer: int, vmem: float) -> list[Step]:
    """Split an op into steps whose streamed bytes fit a third of VMEM."""
    n = _block_count(op, vmem)
    label = f"L{layer} {op.name}"
    steps = []
    for i in range(n):
        ops = tuple(Operand(f"{label} {kind} {i}", kind, size / n)
                    for kind, size in (("weights", op.weight_bytes), ("kv", op.kv_read_bytes),
                                       ("activations", op.act_load_bytes)) if size)
        outs = tuple(Operand(f"{label} {kind} out {i}", kind, size / n)
                     for kind, size in (("kv", op.kv_write_bytes), ("activations", op.act_store_bytes)) if size)
        useful = None if op.useful_flops is None else op.useful_flops / n
        steps.append(Step(f"{label} {i}", ops, flops=op.flops / n, outputs=outs,
                          vector_flops=op.vector_flops / n, useful_flops=useful))
    return steps


class _StepRun:
    """One attempt of `StepSimulation.run`, as `simulator.acceleration.reruns.run_with_reruns` drives it."""

    def __init__(self, sim: StepSimulation, ops_per_group: list[list[LayerOp]], layer_of: list[int],
                 attempt: Attempt) -> None:
        self.step, self.args, self.attempt = sim, (ops_per_group, layer_of), attempt

    @property
    def sym(self) -> Representatives | None:
        """The attempt's `Symmetry` (None: every chip ran)."""
        return self.step.sym

    def run(self) -> None:
        self.step._run(*self.args, self.attempt)


class StepSimulation:
    """One simulated step: the system, its per-chip step lists and the collectives between them.

    ``fast``: where every data group runs the same ops (and no fault, jitter or slow chip breaks the symmetry),
    one chip stands for all (`simulator.acceleration.step_symmetry`: its collectives over its own groups, one
    ring per axis where the axes wrap, repeated ones replayed, counters scaled back); ``sym`` is that
    `Symmetry` (None: every chip ran). False: every chip, as before.
    """

    sym: Representatives | None = None
    reruns: list[str] = []  #: the reruns `run` took (`simulator.acceleration.reruns`; set by each run)

    def __init__(self, cfg: TransformerConfig, spec: ChipSpec, par: Parallelism, trace: bool,
                 calibrated: bool = False, topology: str | None = None, fast: bool = True) -> None:
        self.cfg, self.spec, self.par, self.fast = cfg, spec, par, fast
        self._setup = (trace, calibrated, topology)
        self._build()

    def _build(self) -> None:
        """A fresh system (and mesh) to run on."""
        spec, par, (trace, calibrated, topology) = self.spec, self.par, self._setup
        if par.chips == 1 and topology is None:
            self.system, self.mesh = System(spec, trace=trace, calibrated=calibrated), None
        else:
            mesh_spec = MeshSpec(("data", "model"), (par.data, par.model), (None, None))
            self.system = System(spec, topology=topology or default_topology_for(mesh_spec, spec), trace=trace,
                                 calibrated=calibrated)
            self.mesh = Mesh(mesh_spec, self.system.graph)
            if self.system.network is not None:  # every row carries the step's own groups: none is idle to borrow
                self.system.network.rows_in_use = True
        self.env = self.system.env

    def run(self, ops_per_group: list[list[LayerOp]], layer_of: list[int]) -> None:
        """Run every chip's ops in order; ops with ``sync_bytes`` end with a model-axis AllReduce
        that the next op waits for, ops with ``grad_bytes`` start a data-axis AllReduce that runs
        in the background (the step ends when it is done)."""
        blocks = sum(_block_count(u, self.spec.vmem_capacity_bytes) for group in ops_per_group for u in group)
        if blocks * (self.par.model if self.par.chips > 1 else 1) > MAX_STEPS:
            raise PodsimError(f"this step streams {blocks:,} VMEM-sized blocks per model group, more than the "
                              f"{MAX_STEPS:,} podsim simulates; use a shorter context, a smaller batch, more chips, "
                              "or --no-simulate for the closed forms alone")
        self._ops = (ops_per_group, layer_of)
        built = [False]  # the first attempt runs on the system built already; every rerun on a fresh one

        def make(attempt: Attempt) -> _StepRun:
            if built[0]:
                self._build()
            built[0] = True
            return _StepRun(self, ops_per_group, layer_of, attempt)

        #: the reruns taken (`simulator.acceleration.reruns.REASONS`, in order)
        self.reruns = executor(self.fast).run_step(make).reasons

    def ideal_bound(self) -> float:
        """Closed-form lower bound (seconds) on the ideal step of the ops last `run`, with no second simulation.

        Per data group, the double-buffered block pipeline's max-plus recurrence
        (`simulator.analytic.pipeline_time_blocks`) at peak rates: load = streamed bytes / HBM bandwidth, compute
        = padded FLOPs / MXU peak + vector FLOPs / VPU peak; after an op with ``sync_bytes`` the next compute
        waits a model-axis AllReduce of at least V / (the chip's ingress bandwidth) (every chip must receive
        one element per position of the reduced array, whatever the algorithm). Stores, latencies, link
        contention and the background data-axis AllReduces are left out, so the bound is at most the ideal
        simulated step and equals it for one chip without stores (the simulation is then exactly this
        recurrence). A bound, not a forecast.
        """
        ops_per_group, layer_of = self._ops
        spec, vmem = self.spec, self.spec.vmem_capacity_bytes
        graph = self.system.graph
        chip0 = self.system.chips[0].index
        ingress = 0.0 if graph is None else sum(d.get("bandwidth_bytes_per_s", 0.0)
                                                for _u, _v, d in graph.in_edges(chip0, data=True))
        worst = 0.0
        for ops in ops_per_group:
            load_end, compute_end = 0.0, 0.0
            history: list[float] = []  # compute ends, for the buffer slots
            for i, op in enumerate(ops):
                blocks = _blocks(op, layer_of[i], vmem)
                for j, step in enumerate(blocks):
                    load = sum(o.nbytes for o in step.operands) / spec.hbm_bandwidth_bytes_per_s
                    compute = step.flops / spec.peak_flops_per_s(step.dtype) + step.vector_flops / spec.vpu_flops_per_s
                    slot_free = history[-2] if len(history) >= 2 else 0.0
                    load_end = max(load_end, slot_free) + load
                    compute_end = max(load_end, compute_end) + compute
                    history.append(compute_end)
                    if j == len(blocks) - 1 and op.sync_bytes and self.par.model > 1 and ingress > 0:
                        compute_end += op.sync_bytes / ingress  # the next op's compute waits the AllReduce
            worst = max(worst, compute_end)
        return worst

    def _run(self, ops_per_group: list[list[LayerOp]], layer_of: list[int], attempt: Attempt) -> None:
        ops = ops_per_group[0]
        syncs = [i for i, u in enumerate(ops) if u.sync_bytes or u.grad_bytes]
        self.sym = None
        if attempt.fast and self.mesh is not None and all(g == ops for g in ops_per_group):
            axes: list[tuple[str, ...]] = [(a,) for a in ("model", "data") if self.mesh.size(a) > 1]
            sym = executor(True).symmetry(self.system, self.mesh, {c.index: 0 for c in self.system.chips}, True,
                                          axes, attempt)
            self.sym = sym if sym.active else None
        running = set(self.sym.chips()) if self.sym is not None else {c.index for c in self.system.chips}
        chips = [c for c in self.system.chips if c.index in running]
        done = {i: {c.index: self.env.event() for c in chips} for i in syncs}
        gate = {i: self.env.event() for i in syncs if ops[i].sync_bytes}
        for chip in chips:
            group = self.mesh.coords(chip.index)[0] if self.mesh else 0
            steps = self._chip_steps(ops_per_group[group], layer_of, chip.index, done, gate)
            run_steps(self.system, steps, buffers=2, chip=chip, name=f"chip {chip.index} step")
        if syncs:
            self.system.process(self._coordinator(syncs, ops_per_group[0], done, gate), "model-axis AllReduces")
        with gc_paused():
            self.system.run()
        if self.sym is not None:
            self.sym.finish(self.system.trace)

    def _all_reduce(self, nbytes: float, axis: str) -> simpy.Event:
        """The AllReduce over ``axis`` of every group (by symmetry: the representative's, `Symmetry.start`)."""
        exact = {"axes": [axis], "mesh": self.mesh, "mode": "full"}
        if self.sym is not None:
            return self.sym.start("all_reduce", nbytes, [axis], 0, exact)
        return start_collective("all_reduce", self.system, nbytes, **exact)

    def _chip_steps(self, ops: list[LayerOp], layer_of: list[int], chip: Any, done: dict, gate: dict) -> list[Step]:
        steps: list[Step] = []
        wait_for: int | None = None
        for i, op in enumerate(ops):
            blocks = _blocks(op, layer_of[i], self.spec.vmem_capacity_bytes)
            if wait_for is not None:
                blocks[0] = _replace(blocks[0], before=lambda k=wait_for: gate[k])
            if i in done:
                blocks[-1] = _replace(blocks[-1], after=lambda k=i: done[k][chip].succeed())
            wait_for = i if i in gate else None
            steps.extend(blocks)
        return steps

    def _coordinator(self, syncs: list[int], ops: list[LayerOp], done: dict, gate: dict) -> Any:
        background = []
        for i in syncs:
            yield simpy.AllOf(self.env, list(done[i].values()))
            if ops[i].grad_bytes and self.par.data > 1:
                background.append(self._all_reduce(ops[i].grad_bytes, "data"))
            if ops[i].sync_bytes:
                yield self._all_reduce(ops[i].sync_bytes, "model")
                gate[i].succeed()
        if background:
            yield simpy.AllOf(self.env, background)

    def summary(self) -> dict[str, Any]:
        """Step time, busy fraction per unit and the busiest link's fraction."""
        with gc_paused():
            metrics = self.sym.replays.metrics(self.sym.upper_bound) if self.sym is not None else self.system.metrics()
        step = self.env.now
        busy = metrics["busy_s"] or {}  # empty when tracing was off
        units = {u: v / step for u, v in busy.items() if not u.startswith("link")} if step else {}
        links = [v for u, v in busy.items() if u.startswith("link")]
        where = self.mesh.describe() if self.mesh is not None else {"topology": None, "placement": {}}
        return {"step_time_s": step, "busy_fraction": units,
                "busiest_link_fraction": max(links) / step if links and step else 0.0,
                "simulated_bytes": metrics["bytes"], "overlap_s": metrics["overlap_s"], **where}


def _replace(step: Step, **changes: Any) -> Step:
    import dataclasses

    return dataclasses.replace(step, **changes)


def _split_contexts(contexts: list[int], data: int) -> list[list[int]]:
    per = len(contexts) // data
    return [contexts[g * per:(g + 1) * per] for g in range(data)]


def simulate_decode(cfg: TransformerConfig, spec: ChipSpec, batch: int = 1, context: int | Sequence[int] = 0,
                    par: Parallelism | None = None, weight_dtype: str | None = None, kv_dtype: str | None = None,
                    new_tokens: int = 1, trace: bool = True, calibrated: bool = False,
                    kv_sharding: str = "heads", topology: str | None = None, fast: bool = True) -> StepSimulation:
    """Simulate one decode step (``new_tokens=1``) or a prefill of ``new_tokens`` per request.

    ``kv_sharding`` (`simulator.workloads.budget.kv_share_per_chip`) sets how much of the KV cache each
    chip streams; combining partial attention over a batch- or sequence-split cache rides on the model
    axis's AllReduce after attention (a [tokens, d_model] array already), so it adds no collective.

    ``calibrated`` runs matmuls, HBM and collectives at the chip's fitted efficiencies
    (`simulator.hardware.calibration`; see `simulator.collectives.start_collective` for overlapping collectives).
    ``topology`` (a spec) chooses the hardware; by default the mesh lies on the chip's real slice of that many
    chips (`simulator.workloads.mesh.default_topology_for`). ``fast`` False simulates every chip even where one
    stands for all (`StepSimulation`).
    """
    par = par or Parallelism()
    cfg = with_dtypes(cfg, weight_dtype, kv_dtype)
    check_layout(cfg, par, batch)
    contexts = request_contexts(batch, context)
    positive_int(new_tokens, name="new_tokens")
    sim = StepSimulation(cfg, spec, par, trace, calibrated, topology, fast)
    kv_heads = kv_share_per_chip(cfg, par, batch, kv_sharding)[0] * cfg.n_kv_heads * par.data
    groups = []
    for ctx in _split_contexts(contexts, par.data):
        ops, layers = [], []
        for layer in range(cfg.n_layers):
            for u in layer_ops(cfg, spec, par, ctx, new_tokens, kv_heads):
                ops.append(u)
                layers.append(layer)
        ops.append(head_op(cfg, spec, par, len(ctx) * new_tokens))
        groups.append(ops)
    sim.run(groups, layers + [cfg.n_layers])
    return sim


def simulate_train(cfg: TransformerConfig, spec: ChipSpec, batch: int, seq: int, par: Parallelism | None = None,
                   recompute: bool = False, trace: bool = True, calibrated: bool = False,
                   fast: bool = True) -> StepSimulation:
    """Simulate one training step: forward, then backward layer by layer in reverse.

    Forward ops save their activations to HBM (only the layer input with ``recompute``); backward
    ops re-read the layer's weights and saved activations, recompute the forward first when asked
    (one more forward's FLOPs), spend twice the forward's matmul FLOPs, write the gradients, and start the
    layer's gradient AllReduce over the data axis in the background. ``fast``: as `simulate_decode`'s.
    """
    from simulator.workloads.budget import saved_activation_elements

    par = par or Parallelism()
    check_layout(cfg, par, batch)
    positive_int(seq, name="seq")
    sim = StepSimulation(cfg, spec, par, trace, calibrated, fast=fast)
    tokens = batch // par.data * seq
    saved = saved_activation_elements(cfg, recompute) * cfg.act_elem_bytes * tokens / par.model
    forward = [layer_ops(cfg, spec, par, [0] * (batch // par.data), seq) for _ in range(cfg.n_layers)]
    head = head_op(cfg, spec, par, tokens)
    ops, layers = [], []
    for layer, pair in enumerate(forward):
        for u in pair:
            ops.append(_train_forward(u, saved / 2))
            layers.append(layer)
    ops += [_train_forward(head, 0.0), _train_backward(head, 0.0, recompute)]
    layers += [cfg.n_layers, cfg.n_layers]
    for layer in reversed(range(cfg.n_layers)):
        for u in reversed(forward[layer]):
            ops.append(_train_backward(u, saved / 2, recompute))
            layers.append(layer)
    sim.run([ops] * par.data, layers)
    return sim


def _train_forward(u: LayerOp, saved_bytes: float) -> LayerOp:
    return LayerOp(u.name, u.weight_bytes, 0.0, u.flops, u.vector_flops, 0.0, u.sync_bytes,
                   act_store_bytes=saved_bytes, useful_flops=u.useful_flops)


def _train_backward(u: LayerOp, saved_bytes: float, recompute: bool) -> LayerOp:
    passes = 3 if recompute else 2  # backward matmuls (two), plus the recomputed forward
    useful = None if u.useful_flops is None else passes * u.useful_flops
    return LayerOp(f"{u.name} backward", u.weight_bytes, 0.0, passes * u.flops, passes * u.vector_flops,
                   u.weight_bytes, u.sync_bytes, grad_bytes=u.weight_bytes, act_load_bytes=saved_bytes,
                   useful_flops=useful)
