"""A simulated decode or prefill step under a 2-D weight-stationary layout (`layout2d`).

Every chip of a data group runs the same ops per layer -- QKV projection, attention over its share of
the KV cache, output projection, MLP in (with the activation), MLP out -- streaming its 1/(XY) share of
each weight matrix (and its KV share) from HBM into VMEM in double-buffered blocks
(`simulator.workloads.pipeline`), matmuls on the MXU, element-wise work on the VPU. After each op the
chips meet for its collectives (`layout2d.layer_comms`: ReduceScatter / AllGather over the X or the Y
axis of the mesh, run one after another on the real links); the next op waits for them (the layout
does not overlap collectives with matmuls here, so the step approaches the budget's upper bound).
Attention over a request split uses the group's mean context.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import simpy

from simulator.collectives import start_collective
from simulator.engine.system import System
from simulator.hardware.specs import ChipSpec
from simulator.units import positive_int
from simulator.workloads.budget import Parallelism, kv_heads_per_chip, request_contexts, with_dtypes
from simulator.workloads.layout2d import Comm2D, Layout2D, kv_share, layout_2d, step_comms
from simulator.workloads.mesh import Mesh, default_topology_for
from simulator.workloads.pipeline import run_steps
from simulator.workloads.simulate import VECTOR_OPS_PER_ELEMENT, LayerOp, StepSimulation, _blocks, _matmul_flops
from simulator.workloads.simulate import _replace as replace_step
from simulator.workloads.transformer import TransformerConfig


def layer_ops_2d(cfg: TransformerConfig, spec: ChipSpec, lay: Layout2D, contexts: Sequence[int],
                 new_tokens: int) -> list[LayerOp]:
    """The five ops of one layer on one chip of a data group holding ``contexts``."""
    n, tokens = lay.model, len(contexts) * new_tokens
    e_w, e_kv = cfg.weight_elem_bytes, cfg.kv_elem_bytes
    d_x = cfg.d_model / lay.x
    q_y, kv_y, f_y = cfg.q_width / lay.y, kv_heads_per_chip(cfg, lay.y) * cfg.head_dim, cfg.d_ff / lay.y
    heads, share = kv_share(cfg, lay)
    kv_pos = 2 * heads * cfg.head_dim * e_kv  # K and V of one position, one layer, on this chip
    sources = sum(new_tokens * c + new_tokens * (new_tokens + 1) / 2 for c in contexts)
    scores = 4 * cfg.n_heads * cfg.head_dim * sources / n
    mats = 3 if cfg.gated_mlp else 2
    vec = VECTOR_OPS_PER_ELEMENT
    qkv = LayerOp("qkv", d_x * (q_y + 2 * kv_y) * e_w + 2 * cfg.norm_params() * e_w / n, 0.0,
                  _matmul_flops(spec, tokens, d_x, q_y + 2 * kv_y), vec * tokens * cfg.d_model / n,
                  useful_flops=2 * tokens * d_x * (q_y + 2 * kv_y))
    core = LayerOp("attention", 0.0, kv_pos * sum(contexts) * share, scores, vec * tokens * cfg.q_width / n,
                   kv_write_bytes=kv_pos * tokens * share)
    out = LayerOp("out projection", q_y * d_x * e_w, 0.0, _matmul_flops(spec, tokens, q_y, d_x), 0.0,
                  useful_flops=2 * tokens * q_y * d_x)
    mlp_in = LayerOp("mlp in", (mats - 1) * d_x * f_y * e_w, 0.0, (mats - 1) * _matmul_flops(spec, tokens, d_x, f_y),
                     vec * tokens * cfg.d_ff / n, useful_flops=2 * (mats - 1) * tokens * d_x * f_y)
    mlp_out = LayerOp("mlp out", f_y * d_x * e_w, 0.0, _matmul_flops(spec, tokens, f_y, d_x), 0.0,
                      useful_flops=2 * tokens * f_y * d_x)
    return [qkv, core, out, mlp_in, mlp_out]


class Step2D(StepSimulation):
    """One simulated step on a data x X x Y mesh; `summary` as `StepSimulation`'s."""

    def __init__(self, cfg: TransformerConfig, spec: ChipSpec, lay: Layout2D, trace: bool, calibrated: bool = False,
                 topology: str | None = None) -> None:
        self.cfg, self.spec, self.lay = cfg, spec, lay
        self.par = Parallelism(lay.data, lay.model)
        mesh_spec = lay.mesh_spec()
        self.system = System(spec, topology=topology or default_topology_for(mesh_spec, spec), trace=trace,
                             calibrated=calibrated)
        self.mesh = Mesh(mesh_spec, self.system.graph)
        self.env = self.system.env

    def run_2d(self, ops_per_group: list[list[LayerOp]], layer_of: list[int], comms: list[list[Comm2D]]) -> None:
        """Run every chip's ops; after op i all chips meet for ``comms[i]`` (in order) before op i + 1."""
        syncs = [i for i, c in enumerate(comms) if c]
        done = {i: {c.index: self.env.event() for c in self.system.chips} for i in syncs}
        gate = {i: self.env.event() for i in syncs}
        vmem = self.spec.vmem_capacity_bytes
        mesh = self.mesh
        assert mesh is not None  # a 2-D layout runs on its mesh
        for chip in self.system.chips:
            group = mesh.coords(chip.index)[0]
            steps, wait_for = [], None
            for i, op in enumerate(ops_per_group[group]):
                blocks = _blocks(op, layer_of[i], vmem)
                if wait_for is not None:
                    blocks[0] = replace_step(blocks[0], before=lambda k=wait_for: gate[k])
                if i in done:
                    blocks[-1] = replace_step(blocks[-1], after=lambda k=i, c=chip.index: done[k][c].succeed())
                wait_for = i if i in gate else None
                steps.extend(blocks)
            run_steps(self.system, steps, buffers=2, chip=chip, name=f"chip {chip.index} step")
        self.system.process(self._coordinator(syncs, comms, done, gate), "2-D layout collectives")
        self.system.run()

    def _coordinator(self, syncs: list[int], comms: list[list[Comm2D]],  # type: ignore[override]  # its own ops
                     done: dict, gate: dict) -> Any:
        for i in syncs:
            yield simpy.AllOf(self.env, list(done[i].values()))
            for kind, axes, nbytes in comms[i]:
                yield start_collective(kind, self.system, nbytes, axes=list(axes), mesh=self.mesh)
            gate[i].succeed()

    def summary(self) -> dict[str, Any]:
        out = super().summary()
        out.update(layout=self.lay.text, x=self.lay.x, y=self.lay.y, attention_split=self.lay.attention)
        return out


def simulate_2d(cfg: TransformerConfig, spec: ChipSpec, batch: int = 1, context: int | Sequence[int] = 0,
                par: Parallelism | None = None, layout: str = "2d", weight_dtype: str | None = None,
                kv_dtype: str | None = None, new_tokens: int = 1, trace: bool = True, calibrated: bool = False,
                topology: str | None = None) -> Step2D:
    """Simulate one decode step (``new_tokens=1``) or prefill under the 2-D layout ``layout`` ("2d" or
    "2d:XxY") of the mesh's model axis (`layout2d.layout_2d`)."""
    par = par or Parallelism()
    cfg = with_dtypes(cfg, weight_dtype, kv_dtype)
    contexts = request_contexts(batch, context)
    positive_int(new_tokens, name="new_tokens")
    lay = layout_2d(cfg, par, batch, layout, spec, topology, batch // par.data * new_tokens)
    sim = Step2D(cfg, spec, lay, trace, calibrated, topology)
    per = batch // par.data
    groups, layers = [], [0]
    for g in range(par.data):
        ctx = contexts[g * per:(g + 1) * per]
        ops = [LayerOp("embedding", 0.0, 0.0, 0.0, 0.0)]
        for layer in range(cfg.n_layers):
            ops += layer_ops_2d(cfg, spec, lay, ctx, new_tokens)
            if g == 0:
                layers += [layer] * 5
        tokens = len(ctx) * new_tokens
        head = cfg.vocab_size * cfg.d_model / lay.model  # D over X, vocabulary over Y
        ops.append(LayerOp("lm head", (head + cfg.norm_params() / lay.model) * cfg.weight_elem_bytes, 0.0,
                           _matmul_flops(spec, tokens, cfg.d_model / lay.x, cfg.vocab_size / lay.y),
                           VECTOR_OPS_PER_ELEMENT * tokens * cfg.vocab_size / lay.model,
                           useful_flops=2 * tokens * head))
        groups.append(ops)
    comms = step_comms(cfg, lay, per * new_tokens)
    sim.run_2d(groups, layers + [cfg.n_layers], comms)
    return sim
