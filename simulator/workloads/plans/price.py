"""Closed-form pricing of many training plans at once, for the plan search: each mesh laid out once.

`train.train_plan(simulate=False)` builds a `System` per call; a search prices dozens of option sets
(schedule, ZeRO stage, microbatches, checkpoint policy, TP overlap) on each of hundreds of meshes, so
`Pricer` keeps what depends only on the mesh -- the topology graph (one per topology spec), the mesh's
placement on it, its per-axis `AxisLink` closed forms and the pipeline's point-to-point routes -- and
recomputes per option set only the layer's work, the step's closed form (`estimate.train_estimate`) and
its memory (`memory.train_memory`). The numbers are those of `train_plan(simulate=False)` for the same
plan and options (tests hold them equal).

A point-to-point transfer of V bytes between neighbouring stages costs sum(hop latencies) + V / (the
slowest link on the route) (`links.p2p_s`); the route's two numbers are kept per stage pair, so pricing
another microbatch size evaluates max over pairs of that line instead of searching the graph again.
"""
from __future__ import annotations

from typing import Any

import networkx as nx
import simpy

from simulator.engine.network import Network
from simulator.errors import PodsimError
from simulator.hardware.specs import ChipSpec
from simulator.workloads.plans.estimate import train_estimate
from simulator.workloads.plans.layout import MeshPlan, TrainOptions, check_train_plan
from simulator.workloads.plans.links import AxisLink, axis_links, place
from simulator.workloads.plans.memory import stage_params, train_memory
from simulator.workloads.plans.ops import head_work, layer_work
from simulator.workloads.transformer import TransformerConfig
from topologies import TopologyError


class Layout:
    """One mesh on its topology: per-axis closed forms and the stage-to-stage routes (latency, bandwidth)."""

    def __init__(self, links: dict[str, AxisLink], routes: list[tuple[float, float]], topology: str | None) -> None:
        self.links, self.routes, self.topology = links, routes, topology

    def p2p_s(self, nbytes: float) -> float:
        """The slowest neighbouring pair's transfer of ``nbytes`` (0 without a pipeline)."""
        if not self.routes or nbytes <= 0:
            return 0.0
        return max(lat + nbytes / bw for lat, bw in self.routes)


class Pricer:
    """Prices (plan, options) pairs for one model, chip, batch and sequence; caches graphs and layouts."""

    def __init__(self, cfg: TransformerConfig, chip: ChipSpec, batch: int, seq: int,
                 topology: str | None = None) -> None:
        from simulator.workloads.plans.train import model_flops

        self.cfg, self.chip, self.batch, self.seq, self.topology = cfg, chip, batch, seq, topology
        self._graphs: dict[str, nx.DiGraph] = {}
        self._layouts: dict[str, Layout | None] = {}
        self._nets: dict[str, Network] = {}  #: a graph's network, to route its collectives on (`links.Tuned`)
        self._tuned: dict[Any, Any] = {}  #: `links.Tuned`'s cache, shared by every mesh
        #: layer_work and train_memory by the plan and the option fields each reads (`_work_key`, `_memory_key`):
        #: a layout's option sets differ in fields one of them ignores (the schedule, for layer_work), and
        #: both return frozen or fresh values, so a cached one is the same answer
        self._work: dict[Any, Any] = {}
        self._memory: dict[Any, tuple[float, bool]] = {}
        self._cached_plan = ""
        self.flops = model_flops(cfg, batch, seq)

    def graph(self, spec: str) -> nx.DiGraph:
        if spec not in self._graphs:
            from simulator.engine.system import resolve_topology

            self._graphs[spec] = resolve_topology(spec, self.chip)
        return self._graphs[spec]

    def layout(self, plan: MeshPlan) -> Layout | None:
        """The plan's mesh on the topology (as `links.build_system` lays it); None if it cannot be laid."""
        key = plan.text + repr(sorted(plan.placement.items()))
        if key not in self._layouts:
            self._layouts[key] = self._lay(plan)
        return self._layouts[key]

    def _lay(self, plan: MeshPlan) -> Layout | None:
        from simulator.workloads.plans.links import _default_topologies

        spec = plan.mesh_spec()
        if plan.chips == 1 and self.topology is None:
            return Layout({}, [], None)
        for text in [self.topology] if self.topology else _default_topologies(spec, self.chip):
            try:
                graph = self.graph(text)
                mesh = place(spec, graph)
            except (PodsimError, TopologyError):
                continue
            if text not in self._nets:
                self._nets[text] = Network(simpy.Environment(), graph)
            return Layout(axis_links(mesh, graph, self.chip, self._nets[text], self._tuned), _routes(graph, mesh, plan),
                          text)
        return None

    def price(self, plan: MeshPlan, opts: TrainOptions, layout: Layout | None = None) -> dict[str, Any] | None:
        """The closed-form numbers of one plan (those `train_plan(simulate=False)` reports); None if its mesh
        cannot be laid on the topology. Raises `PlanError` when the plan does not divide the model."""
        check_train_plan(self.cfg, plan, opts, self.batch, self.seq)
        layout = layout or self.layout(plan)
        if layout is None:
            return None
        cfg, chip = self.cfg, self.chip
        plan_key = plan.text + repr(sorted(plan.placement.items()))
        if plan_key != self._cached_plan:  # one layout's option sets at a time (`search.best_options`): bounded
            self._work.clear()
            self._memory.clear()
            self._cached_plan = plan_key
        work_key = (plan_key, opts.microbatches, opts.checkpoint, opts.zero, opts.tp_overlap, opts.sequence_attention)
        layer = self._work.get(work_key)
        if layer is None:
            layer = self._work[work_key] = layer_work(cfg, chip, plan, opts, self.batch, self.seq)
        head_f, head_b, head_grad = head_work(cfg, chip, plan, opts, self.batch, self.seq)
        act = self.batch / (plan.batch_ways * opts.microbatches) * self.seq / plan.size("sequence") * \
            cfg.d_model * cfg.act_elem_bytes
        dense, expert, _ = stage_params(cfg, plan, plan.size("pipeline") - 1)
        closed = train_estimate(chip, plan, opts, layer, cfg.n_layers, (head_f, head_b), layout.links,
                                layout.p2p_s(act) if plan.size("pipeline") > 1 else 0.0, dense + expert, head_grad,
                                cfg.weight_elem_bytes)
        memory_key = (plan_key, opts.microbatches, opts.schedule, opts.chunks, opts.checkpoint, opts.zero,
                      opts.master_copy, opts.reshard_after_forward)
        memory = self._memory.get(memory_key)
        if memory is None:
            whole = train_memory(cfg, chip, plan, opts, self.batch, self.seq)
            memory = self._memory[memory_key] = (whole["memory_per_chip_bytes"], whole["fits"])
        step = closed["step_time_s"]
        return {"step_time_s": step, "closed_form_s": step, "closed_form": closed,
                "mfu": self.flops / (plan.chips * chip.peak_flops_per_s() * step),
                "tokens_per_s": self.batch * self.seq / step, "exposed_comm_s": closed["exposed_comm_s"],
                "bubble_fraction": closed["bubble_fraction"], "memory_per_chip_bytes": memory[0],
                "fits": memory[1], "topology": layout.topology}


def _routes(graph: nx.DiGraph, mesh: Any, plan: MeshPlan) -> list[tuple[float, float]]:
    """(sum of hop latencies, slowest link bandwidth) from each pipeline stage to the next, round the ring
    (as `train._p2p`: the stage coordinates with every other axis at 0)."""
    p = plan.size("pipeline")
    if p == 1 or mesh is None:
        return []
    i = mesh.index("pipeline")

    def at(stage: int) -> Any:
        coords = [0] * len(mesh.sizes)
        coords[i] = stage
        return mesh.device(tuple(coords))

    out = []
    for s in range(p):
        src, dst = at(s), at((s + 1) % p)
        if src == dst:
            continue
        path = nx.shortest_path(graph, src, dst)
        edges = [graph.edges[u, v] for u, v in zip(path, path[1:], strict=False)]
        out.append((sum(e["latency_s"] for e in edges), min(e["bandwidth_bytes_per_s"] for e in edges)))
    return out
