"""Parallelism plans: the six mesh axes, their sizes and placement, and the options of a training step.

Axes, outermost (slowest links) first: ``data`` (replicas; gradients AllReduced), ``pipeline``
(layers split into stages), ``fsdp`` (data parallel with weights, gradients and optimizer state
sharded, ZeRO-1/2/3), ``expert`` (MoE experts split; tokens AllToAll'd to them; the rest of the model
sees it as data parallelism), ``sequence`` (context parallelism: each chip holds a slice of every
sequence), ``model`` (tensor parallelism, Megatron-style). The batch is split over data x fsdp x
expert, the sequence over sequence, heads / MLP columns / vocabulary over model.

Placement is innermost-fastest: the axes are laid on the topology in the order above, so ``model``
takes the last (fastest-varying) physical axes -- on a multislice system the slices (DCN) go to the
outermost axis, on GPU nodes the GPUs of one node (NVLink) to the innermost -- unless the user places
them (``fsdp=4@1,model=2@0``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from simulator.units import check_int
from simulator.workloads.budget import MAX_REQUESTS
from simulator.workloads.mesh import MeshSpec, parse_mesh
from simulator.workloads.transformer import ModelError, TransformerConfig

AXES = ("data", "pipeline", "fsdp", "expert", "sequence", "model")  #: outermost (slowest links) first
SCHEDULES = ("gpipe", "1f1b", "interleaved")
POLICIES = ("none", "minimal", "selective", "full")  #: named activation-checkpoint policies
KV_SHARDINGS = ("heads", "batch", "sequence", "auto")
SEQUENCE_ATTENTION = ("ring", "allgather")
MODES = ("train", "prefill", "decode")


class PlanError(ModelError):
    """A parallelism plan that does not fit the model, the batch or the chips."""


@dataclass(frozen=True)
class MeshPlan:
    """Sizes of the six axes (1 = absent) and any explicit physical placement (``X=4@1`` syntax)."""

    sizes: dict[str, int] = field(default_factory=dict)
    placement: dict[str, tuple[int, ...]] = field(default_factory=dict)

    def size(self, axis: str) -> int:
        return self.sizes.get(axis, 1)

    @property
    def chips(self) -> int:
        return math.prod(self.size(a) for a in AXES)

    @property
    def batch_ways(self) -> int:
        """Ways the batch is split: data x fsdp x expert."""
        return self.size("data") * self.size("fsdp") * self.size("expert")

    @property
    def used(self) -> tuple[str, ...]:
        """Axes of size > 1, outermost first."""
        return tuple(a for a in AXES if self.size(a) > 1)

    @property
    def text(self) -> str:
        return ",".join(f"{a}={self.size(a)}" for a in self.used) or "data=1"

    def mesh_spec(self) -> MeshSpec:
        """The logical mesh, axes outermost first (size-1 axes left out, one axis if all are 1)."""
        names = self.used or ("data",)
        explicit = bool(self.placement)
        return MeshSpec(names, tuple(self.size(a) for a in names),
                        tuple(self.placement.get(a) if explicit else None for a in names))


def parse_plan_mesh(text: str | None) -> MeshPlan:
    """``"fsdp=4,model=2"`` (any of the six axes, optionally placed: ``model=2@0``) -> `MeshPlan`."""
    if not text:
        return MeshPlan()
    spec = parse_mesh(text)
    unknown = [n for n in spec.names if n not in AXES]
    if unknown:
        raise PlanError(f"--mesh {text}: unknown axis {unknown[0]!r}; axes are {', '.join(AXES)}")
    placed = {n: p for n, p in zip(spec.names, spec.placement, strict=True) if p is not None}
    if placed and len(placed) != len(spec.names):
        raise PlanError(f"--mesh {text}: place every axis (e.g. fsdp=4@1,model=2@0) or none")
    return MeshPlan(dict(zip(spec.names, spec.sizes, strict=True)), placed)


@dataclass(frozen=True)
class TrainOptions:
    """How a training step runs on its mesh.

    ``zero`` is what the fsdp axis shards: 1 the optimizer state, 2 also the gradients, 3 also the
    weights (FSDP: gathered per layer, prefetched one layer ahead). ``master_copy`` keeps an fp32 copy
    of the weights beside the fp32 Adam moments (4 more bytes per parameter; mixed-precision default).
    ``checkpoint`` is a named policy or a number K of saved [tokens, d_model] tensors per layer.
    ``reshard_after_forward`` False keeps ZeRO-3's gathered weights from a layer's forward to its backward (FSDP
    without re-sharding: half the gathers, the whole stage's weights held at the peak).
    """

    microbatches: int = 1
    schedule: str = "1f1b"
    virtual_stages: int = 2  #: layer chunks per device with the interleaved schedule
    checkpoint: str | int = "none"
    zero: int = 3
    master_copy: bool = True
    tp_overlap: bool = False  #: overlap tensor-parallel collectives with the matmuls (collective matmul)
    sequence_attention: str = "ring"  #: ring attention, or all-gather the KV over the sequence axis
    #: ZeRO-3 / FSDP: free the gathered weights after each layer's forward (True) and gather them again for its
    #: backward, or keep them until the backward (False: PyTorch FSDP's SHARD_GRAD_OP, one gather per microbatch)
    reshard_after_forward: bool = True

    @property
    def chunks(self) -> int:
        return self.virtual_stages if self.schedule == "interleaved" else 1

    def check(self) -> None:
        for name, value, valid in (("--schedule", self.schedule, SCHEDULES),
                                   ("sequence_attention", self.sequence_attention, SEQUENCE_ATTENTION)):
            if value not in valid:
                raise PlanError(f"{name} {value!r}; valid: {', '.join(valid)}")
        if isinstance(self.checkpoint, str) and self.checkpoint not in POLICIES:
            raise PlanError(f"checkpoint policy {self.checkpoint!r}; valid: {', '.join(POLICIES)} or a number of "
                            "saved tensors per layer (--checkpoints-per-layer K)")
        if self.zero not in (0, 1, 2, 3):
            raise PlanError(f"zero={self.zero!r}; valid: 0 (replicate), 1 (optimizer), 2 (+ gradients), 3 (+ weights)")


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def nearest(value: int, valid: list[int]) -> int:
    """The valid choice closest to ``value`` (the smaller one on a tie)."""
    return min(valid, key=lambda v: (abs(v - value), v))


def _nearest_that_passes(value: int, valid: list[int], check: Any) -> int | None:
    """The choice closest to ``value`` (the smaller on a tie) among ``valid`` for which ``check(choice)`` raises no
    `PlanError` -- a suggestion is tried before it is printed -- or None when none passes."""
    for choice in sorted(valid, key=lambda v: (abs(v - value), v)):
        try:
            check(choice)
        except PlanError:
            continue
        return choice
    return None


def check_model_axes(cfg: TransformerConfig, plan: MeshPlan, even_stages: bool = True) -> None:
    """Raise `PlanError` naming the nearest valid size when an axis does not divide the model (``even_stages``
    False: pipeline stages may hold unequal layer counts, as Megatron's do)."""
    m = plan.size("model")
    ok = [d for d in divisors(cfg.n_heads) if cfg.d_ff % d == 0
          and (cfg.n_kv_heads % d == 0 or d % cfg.n_kv_heads == 0)]
    if m not in ok:
        raise PlanError(f"model={m} does not divide the {cfg.n_heads} heads, d_ff={cfg.d_ff} and {cfg.n_kv_heads} KV "
                        f"heads of {cfg.name}; the nearest valid choice is model={nearest(m, ok)}")
    p = plan.size("pipeline")
    if p > cfg.n_layers:
        raise PlanError(f"pipeline={p} is more stages than the {cfg.n_layers} layers of {cfg.name}; the nearest valid "
                        f"choice is pipeline={nearest(p, divisors(cfg.n_layers))}")
    if even_stages and cfg.n_layers % p:
        raise PlanError(f"pipeline={p} does not divide the {cfg.n_layers} layers of {cfg.name} into equal stages, "
                        f"which the simulated step needs; the nearest valid choice is "
                        f"pipeline={nearest(p, divisors(cfg.n_layers))}, or --no-simulate (the closed forms take "
                        "uneven stages)")
    e = plan.size("expert")
    if e > 1 and not cfg.n_experts:
        raise PlanError(f"expert={e} needs a mixture-of-experts model; {cfg.name} has none (use data={e})")
    if e > 1 and cfg.n_experts % e:
        raise PlanError(f"expert={e} does not divide the {cfg.n_experts} experts of {cfg.name}; the nearest valid "
                        f"choice is expert={nearest(e, divisors(cfg.n_experts))}")


def check_train_plan(cfg: TransformerConfig, plan: MeshPlan, opts: TrainOptions, batch: int, seq: int,
                     even_stages: bool = True, *, suggest: bool = True) -> None:
    """Every divisibility rule of a training step; each error names the nearest valid choice (``even_stages``
    False: the calibrated GPU step's uneven pipeline stages are allowed). A suggested batch or microbatch count
    passes every rule itself (tried with ``suggest`` False, which names none)."""
    check_int(batch, name="batch", maximum=MAX_REQUESTS, error=PlanError)
    check_int(seq, name="seq", maximum=2**24, error=PlanError)
    check_int(opts.microbatches, name="microbatches", maximum=MAX_REQUESTS, error=PlanError)
    check_int(opts.virtual_stages, name="virtual_stages", maximum=1024, error=PlanError)
    opts.check()
    check_model_axes(cfg, plan, even_stages)
    def trial(b: int = batch, **changes: Any) -> None:  # every rule again, for a suggestion (naming none)
        check_train_plan(cfg, plan, replace(opts, **changes), b, seq, even_stages, suggest=False)

    ways = plan.batch_ways
    if batch % ways:
        near = [ways * k for k in range(1, min(MAX_REQUESTS, 2 * batch + 64 * ways) // ways + 1)]
        good = _nearest_that_passes(batch, near, trial) if suggest else None
        raise PlanError(f"batch={batch} does not split over data x fsdp x expert = {ways} chips; " +
                        (f"the nearest valid batch is {good}" if good else f"a batch must be a multiple of {ways}, "
                         "and none near it also suits the other flags"))
    per_group, m = batch // ways, opts.microbatches
    if per_group % m:
        good = _nearest_that_passes(m, divisors(per_group), lambda k: trial(microbatches=k)) if suggest else None
        raise PlanError(f"--microbatches {m} does not divide the {per_group} sequences each data-parallel group "
                        "holds; " + (f"the nearest valid choice is --microbatches {good}" if good else
                                     f"valid: a divisor of {per_group}, none of which suits the other flags"))
    p, v = plan.size("pipeline"), opts.chunks
    if opts.schedule == "interleaved" and p > 1:
        if even_stages and cfg.n_layers % (p * v):
            fits = [d for d in divisors(cfg.n_layers // p) if d > 1] or [1]
            raise PlanError(f"the interleaved schedule with {v} virtual stages x pipeline={p} does not divide the "
                            f"{cfg.n_layers} layers of {cfg.name}; the nearest valid choice is {nearest(v, fits)} "
                            "virtual stages")
        if m % p:
            good = _nearest_that_passes(m, [d for d in divisors(per_group) if d % p == 0],
                                        lambda k: trial(microbatches=k)) if suggest else None
            raise PlanError(f"the interleaved schedule needs --microbatches a multiple of pipeline={p}; " +
                            (f"the nearest valid choice is --microbatches {good}" if good else
                             f"no multiple of {p} divides the {per_group} sequences each data-parallel group holds "
                             "(use --schedule 1f1b, or a batch that is)"))
    s = plan.size("sequence")
    if seq % s:
        raise PlanError(f"sequence={s} cannot split the {seq} positions of each sequence evenly (attention is split "
                        f"by positions); the nearest valid choice is sequence={nearest(s, divisors(seq))}")
