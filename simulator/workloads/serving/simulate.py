"""A request stream served on a mesh: replicas, optional disaggregated prefill and decode, bound and forecast.

The mesh is ``data`` x ``model`` chips (`simulator.workloads.budget.Parallelism`): ``data`` replicas, each a
tensor-parallel group of ``model`` chips with its own scheduler and paged KV cache
(`simulator.workloads.serving.scheduler`); requests go to the replicas round-robin in arrival order (a
stateless router). Disaggregated (``prefill`` and ``decode`` meshes): prefill replicas only prefill; each
request's KV cache then crosses to a decode replica over the topology's real links -- priced by
simulating the message on the topology (`simulator.engine.network.send`, from the first prefill chip to the
first decode chip, each of the ``model`` ranks sending its share at once over its own route) at two sizes
and taking the affine fit (latency + bytes / bandwidth, what a point-to-point send is) -- and decodes there.
The first token comes from the prefill replica (TTFT ends there, as DistServe and Splitwise count it).
No back-pressure from decode to prefill: a decode replica queues what it cannot admit.

Every run is timed twice when ``calibrated``: by the **bound** (ideal steps) and by the **forecast**
(calibrated steps); each result says which it is.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from simulator.errors import PodsimError
from simulator.hardware.specs import ChipSpec
from simulator.workloads.budget import Parallelism, kv_bytes_per_position
from simulator.workloads.serving.arrivals import Arrival
from simulator.workloads.serving.costs import StepCosts, kv_capacity_tokens
from simulator.workloads.serving.host import HostCost, host_applies, vllm_v0_frontend_s, vllm_v0_host
from simulator.workloads.serving.kvcache import BlockPool, blocks_for
from simulator.workloads.serving.metrics import summarize
from simulator.workloads.serving.scheduler import Replica, Request, SchedulerConfig, Timeline
from simulator.workloads.transformer import TransformerConfig

PREEMPT_MODES = ("recompute", "swap")


@dataclass(frozen=True)
class ServeSetup:
    """What serves the stream: model, chip, mesh (or prefill and decode meshes), scheduler knobs."""

    cfg: TransformerConfig
    chip: ChipSpec
    mesh: Parallelism = Parallelism()
    prefill_mesh: Parallelism | None = None
    decode_mesh: Parallelism | None = None
    topology: str | None = None
    sched: SchedulerConfig = field(default_factory=SchedulerConfig)
    max_model_len: int = 131_072
    memory_fraction: float = 0.9
    engine: str | None = None

    @property
    def disaggregated(self) -> bool:
        return self.prefill_mesh is not None

    @property
    def chips(self) -> int:
        if self.disaggregated:
            assert self.prefill_mesh is not None and self.decode_mesh is not None
            return self.prefill_mesh.chips + self.decode_mesh.chips
        return self.mesh.chips


def _pool(setup: ServeSetup, par: Parallelism) -> BlockPool:
    tokens = kv_capacity_tokens(setup.cfg, setup.chip, par.model, setup.memory_fraction)
    return BlockPool(max(tokens, 0) // 16)


def check_stream(setup: ServeSetup, arrivals: list[Arrival]) -> None:
    """`PodsimError` (one line) for an empty stream, a request past the context, or KV that cannot hold one."""
    if not arrivals:
        raise PodsimError("the request stream is empty: no request arrives (raise --rate or --duration, or give a "
                          "trace with rows)")
    longest = max(arrivals, key=lambda a: a.prompt_tokens + a.output_tokens)
    total = longest.prompt_tokens + longest.output_tokens
    if total > setup.max_model_len:
        raise PodsimError(f"a request of {longest.prompt_tokens:,} prompt + {longest.output_tokens:,} output tokens "
                          f"is longer than the context (--max-model-len {setup.max_model_len:,}); shorten "
                          "--prompt-len / --output-len or raise --max-model-len")
    if setup.cfg.max_positions and total > setup.cfg.max_positions:
        raise PodsimError(f"a request of {longest.prompt_tokens:,} prompt + {longest.output_tokens:,} output tokens "
                          f"runs past {setup.cfg.name}'s {setup.cfg.max_positions:,} positions (its learned position "
                          "table, max_positions, has no row beyond); shorten --prompt-len / --output-len")
    meshes = [setup.decode_mesh or setup.mesh] + ([setup.prefill_mesh] if setup.prefill_mesh else [])
    for par in meshes:
        cap = kv_capacity_tokens(setup.cfg, setup.chip, par.model, setup.memory_fraction)
        need = blocks_for(total) * 16
        if cap < need:
            weights = setup.cfg.params() * setup.cfg.weight_elem_bytes / par.model / 2**30
            raise PodsimError(
                f"the KV cache of one replica (model={par.model} x {setup.chip.name}: {max(cap, 0):,} positions after "
                f"{weights:.1f} GiB of weights a chip) cannot hold one request of {total:,} tokens; use a wider "
                f"model axis or shorter requests")


def _requests(arrivals: list[Arrival], hit: float, frontend_s: float = 0.0) -> list[Request]:
    """The requests as the engine's queue receives them: ``frontend_s`` after the client sent each."""
    out = []
    for i, a in enumerate(arrivals):
        r = Request(i, a.time_s + frontend_s, a.prompt_tokens, a.output_tokens,
                    hit=min(int(hit * a.prompt_tokens), a.prompt_tokens - 1))
        r.sent_s = a.time_s
        out.append(r)
    return out


def _serve(setup: ServeSetup, par: Parallelism, requests: list[Request], price: Any, prefill_only: bool = False,
           host: HostCost | None = None) -> tuple[list[Request], list[Replica]]:
    """Round-robin ``requests`` over ``par.data`` replicas and run each (``host``: host time per scheduler call)."""
    costs_kv = StepCosts(setup.cfg, setup.chip, par.model, calibrated=False).kv_bytes_per_token
    sched = SchedulerConfig(**{**setup.sched.__dict__, "prefill_only": prefill_only, "kv_bytes_per_token": costs_kv,
                               "host_bytes_per_s": setup.chip.pcie_bandwidth_bytes_per_s, "host": host or HostCost()})
    done, replicas = [], []
    for g in range(par.data):
        rep = Replica(price, _pool(setup, par), sched)
        done += rep.run(requests[g::par.data])
        replicas.append(rep)
    return done, replicas


@dataclass
class ServeRun:
    """One timing of the stream (``kind``: bound or forecast): finished requests, replicas, KV transfers."""

    kind: str
    done: list[Request]
    replicas: list[Replica]
    decode_replicas: list[Replica] = field(default_factory=list)
    transfer_s: list[float] = field(default_factory=list)
    shapes: int = 0


def kv_transfer_line(setup: ServeSetup) -> tuple[float, float, dict[str, Any]]:
    """(latency s, bytes/s) of the KV send from prefill rank 0 to decode rank 0 on the topology (affine fit of
    two simulated sends), and what was simulated."""
    from simulator.engine.network import send
    from simulator.engine.system import System

    assert setup.prefill_mesh is not None
    if setup.topology is None:
        raise PodsimError("--prefill-mesh / --decode-mesh need --topology (the links the KV cache crosses), e.g. "
                          "nodes:2:8 for two GPU nodes or slice:8x8 for a TPU slice")
    sizes = (2.0**20, 2.0**30)
    times = []
    dst = setup.prefill_mesh.chips
    for n in sizes:
        system = System(setup.chip, topology=setup.topology, trace=True)
        if system.network is None or dst >= len(system.network.graph.nodes):
            raise PodsimError(f"--topology {setup.topology} has too few chips for prefill {setup.prefill_mesh.chips} + "
                              f"decode {setup.decode_mesh.chips if setup.decode_mesh else 0}")
        chips = sorted(n_ for n_ in system.network.graph.nodes if isinstance(n_, int))
        times.append(send(system, chips[0], chips[dst], n)["time_s"])
    bw = (sizes[1] - sizes[0]) / max(times[1] - times[0], 1e-30)
    lat = max(times[0] - sizes[0] / bw, 0.0)
    return lat, bw, {"src_chip": 0, "dst_chip": dst, "latency_s": lat, "bandwidth_bytes_per_s": bw,
                     "simulated": [{"bytes": s, "time_s": t} for s, t in zip(sizes, times, strict=True)]}


def host_parts(setup: ServeSetup, frontend_s: float | None = None, par: Parallelism | None = None
               ) -> tuple[float, HostCost]:
    """(front-end seconds per request, host cost per scheduler call) the forecast of ``setup`` adds
    (`simulator.workloads.serving.host`: vLLM 0.6's fitted values under multi-step scheduling, with the
    tensor-parallel worker sync of ``par``'s model axis -- default the decode mesh, or the mesh --, else zeros);
    ``frontend_s`` replaces the fitted front-end time when given."""
    if not host_applies(setup.engine, setup.sched.num_steps):
        return (frontend_s or 0.0), HostCost()
    tp = (par or setup.decode_mesh or setup.mesh).model
    return (vllm_v0_frontend_s() if frontend_s is None else frontend_s), vllm_v0_host(tp)


def run_stream(setup: ServeSetup, arrivals: list[Arrival], kind: str = "forecast",
               transfer: tuple[float, float] | None = None, frontend_s: float | None = None) -> ServeRun:
    """Serve ``arrivals`` once, every step timed by the ``kind`` (``bound`` or ``forecast``) price. The forecast
    adds `host_parts` (the front-end time before each request reaches the engine, the host time of each
    scheduler call; ``frontend_s`` overrides the fitted front-end); the bound adds neither."""
    calibrated = kind == "forecast"
    hit = setup.sched.prefix_hit
    fe, host = host_parts(setup, frontend_s) if calibrated else (0.0, HostCost())
    eager = host_applies(setup.engine, setup.sched.num_steps)  # vLLM 0.6's V0 engine: prefill outside CUDA graphs
    if not setup.disaggregated:
        costs = StepCosts(setup.cfg, setup.chip, setup.mesh.model, calibrated=calibrated, engine=setup.engine,
                          eager_prefill=eager)
        price = costs.forecast_s if calibrated else costs.bound_s
        done, reps = _serve(setup, setup.mesh, _requests(arrivals, hit, fe), price, host=host)
        return ServeRun(kind, sorted(done, key=lambda r: r.rid), reps, shapes=costs.distinct_shapes)
    assert setup.prefill_mesh is not None and setup.decode_mesh is not None and transfer is not None
    pc = StepCosts(setup.cfg, setup.chip, setup.prefill_mesh.model, calibrated=calibrated, engine=setup.engine,
                   eager_prefill=eager)
    dc = StepCosts(setup.cfg, setup.chip, setup.decode_mesh.model, calibrated=calibrated, engine=setup.engine,
                   eager_prefill=eager)
    first, prep = _serve(setup, setup.prefill_mesh, _requests(arrivals, hit, fe), pc.forecast_s if calibrated else
                         pc.bound_s, prefill_only=True,
                         host=host_parts(setup, frontend_s, setup.prefill_mesh)[1] if calibrated else host)
    lat, bw = transfer
    per_position = kv_bytes_per_position(setup.cfg) / setup.prefill_mesh.model
    moved, waits = [], []
    for r in sorted(first, key=lambda r: r.rid):
        if r.output <= 1:
            continue
        wait = lat + r.prompt * per_position / bw
        waits.append(wait)
        assert r.first_token_s is not None  # a prefilled request has its first token
        d = Request(r.rid, r.first_token_s + wait, r.prompt, r.output, generated=1, computed=r.prompt)
        d.admitted, d.first_token_s = True, r.first_token_s
        moved.append(d)
    moved.sort(key=lambda r: (r.arrival_s, r.rid))
    decoded, drep = _serve(setup, setup.decode_mesh, moved, dc.forecast_s if calibrated else dc.bound_s, host=host)
    by_id = {r.rid: r for r in first}
    for d in decoded:
        p = by_id[d.rid]
        p.finish_s, p.generated, p.preemptions = d.finish_s, d.generated, p.preemptions + d.preemptions
    return ServeRun(kind, sorted(first, key=lambda r: r.rid), prep, drep, waits,
                    pc.distinct_shapes + dc.distinct_shapes)


def timeline_of(replicas: list[Replica]) -> list[Timeline]:
    """Each replica's samples."""
    return [r.timeline for r in replicas]


def report(run: ServeRun, slo_ttft_s: float | None, slo_tpot_s: float | None) -> dict[str, Any]:
    """``run``'s metrics (`summarize`) with what timed them (``kind``), iterations and distinct step shapes."""
    out = {"kind": run.kind, **summarize(run.done, slo_ttft_s, slo_tpot_s),
           "iterations": sum(r.iterations for r in run.replicas + run.decode_replicas),
           "step_shapes_priced": run.shapes}
    if run.transfer_s:
        out["kv_transfer_s"] = {"mean": sum(run.transfer_s) / len(run.transfer_s), "max": max(run.transfer_s)}
    peak = max((max(t.kv, default=0.0) for t in timeline_of(run.replicas + run.decode_replicas)), default=0.0)
    out["kv_peak_occupancy"] = peak
    return out


def check_setup(setup: ServeSetup) -> None:
    """`PodsimError` for knobs out of range."""
    s = setup.sched
    if s.preempt not in PREEMPT_MODES:
        raise PodsimError(f"--preempt {s.preempt!r}; valid: {', '.join(PREEMPT_MODES)}")
    if not (isinstance(s.max_batch, int) and 1 <= s.max_batch <= 65_536):
        raise PodsimError(f"--max-batch {s.max_batch!r} must be a whole number in [1, 65536]")
    if not (isinstance(s.chunk_tokens, int) and 0 <= s.chunk_tokens <= 1_048_576):
        raise PodsimError(f"--chunked-prefill {s.chunk_tokens!r} must be a whole number of tokens in [0, 1048576] "
                          "(0: no chunking)")
    if not (isinstance(s.num_steps, int) and 1 <= s.num_steps <= 1024):
        raise PodsimError(f"--scheduler-steps {s.num_steps!r} must be a whole number of decode steps in [1, 1024]")
    if not (0 <= s.prefix_hit < 1) or math.isnan(s.prefix_hit):
        raise PodsimError(f"--prefix-hit {s.prefix_hit!r} must be a fraction in [0, 1)")
    if (setup.prefill_mesh is None) != (setup.decode_mesh is None):
        raise PodsimError("--prefill-mesh and --decode-mesh go together (both, or neither)")
