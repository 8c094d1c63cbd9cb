"""What one engine iteration costs: a batch of decode tokens and prefill chunks on one replica of ``model`` chips.

An iteration runs ``D`` decoding requests (one new token each, ``S`` cached positions in all) and prefill
chunks (chunk i: ``c_i`` new prompt tokens after ``p_i`` already cached). Two prices, side by side:

- **bound** (closed form, ideal peak): per chip, every weight streamed once and the KV cache read and
  written at spec HBM bandwidth, every FLOP at peak, the larger of the two (streaming overlaps compute),
  plus the tensor-parallel AllReduces' bandwidth term (2 per layer of [tokens, d_model]) at line rate::

      bound = max(flops / (model x peak), bytes / (model x HBM bandwidth)) + 2 L x allreduce_bw(tokens x d_model)

- **forecast** (calibrated): `simulator.workloads.served.served_step` (fitted HBM fraction, batch slowdown,
  per-layer launches, the engine's AllReduce) for a decode step of ``D`` requests at their mean context,
  plus what folding the prefill chunks into it adds: the ``n`` chunks priced together as one prefill step
  of ``n`` requests of their mean length at their mean context (one pass over the weights for all their
  tokens), less one decode token of one request at that context (the weights and launches the step pays
  once) -- as `simulator.workloads.served.served_concurrent` prices a mixed step; no fitted constant of its
  own. A step of prefills alone pays the prefill step whole. vLLM runs decode in CUDA graphs and pads a
  pure-decode batch to the next captured size (1, 2, 4, 8, 16, ..., 256: vLLM ``_BATCH_SIZES_TO_CAPTURE``),
  so the step is priced at that many rows over the same cached positions. With ``eager_prefill`` (vLLM 0.6's V0
  engine, which runs any step with a prefill in it outside CUDA graphs) the prefill step is priced kernel by
  kernel instead (`simulator.workloads.serving.eager`), and a mixed step adds that less one decode token as
  above; decode-only steps keep their graph price. Chips without serving factors
  (TPUs), or model axes wider than one NVLink node, forecast the ideal step plus each AllReduce's hop
  latencies on the ring (`simulator.analytic.all_reduce_time`), and say so in ``uncalibrated``.

The forecast is cached per batch shape: ``D`` exactly, contexts on a grid of quarter octaves above 64
positions, interpolated linearly between grid points (the KV part of a step is linear in context), and
mean chunk lengths on the same grid (``n`` exactly) -- so an hour of traffic prices a few thousand distinct
steps, not millions.
"""
from __future__ import annotations

import bisect
import math
from functools import lru_cache

from simulator import analytic
from simulator.hardware.decode_calibration import DEFAULT_ENGINE, decode_calibrated_chips
from simulator.hardware.specs import ChipSpec
from simulator.workloads.budget import (
    Parallelism,
    check_layout,
    kv_bytes_per_position,
    kv_share_per_chip,
    weight_bytes_read,
)
from simulator.workloads.served_tp import MAX_GPUS, ideal_allreduce_s
from simulator.workloads.serving.eager import applies as eager_applies
from simulator.workloads.serving.eager import eager_prefill_s
from simulator.workloads.transformer import TransformerConfig

CUDA_GRAPH_BATCHES = (1, 2, 4, *range(8, 257, 8))  #: vLLM's decode CUDA-graph batch sizes (model_runner.py)


def graph_batch(n: int) -> int:
    """The CUDA graph a decode batch of ``n`` runs in: the smallest captured size >= ``n`` (vLLM pads the batch
    with dummy sequences, ``_get_graph_batch_size``); ``n`` itself above 256 (run eagerly)."""
    return next((b for b in CUDA_GRAPH_BATCHES if b >= n), n)


GRID = sorted({0, *range(1, 65), *(round(64 * 2 ** (k / 4)) for k in range(1, 60))})  #: context / chunk grid


def _below(x: float) -> tuple[int, int, float]:
    """The grid points around ``x`` and the weight of the upper one."""
    i = bisect.bisect_right(GRID, x) - 1
    lo = GRID[min(i, len(GRID) - 2)]
    hi = GRID[min(i, len(GRID) - 2) + 1]
    return lo, hi, (x - lo) / (hi - lo)


class StepCosts:
    """Bound and forecast seconds of engine iterations for ``cfg`` on ``model`` chips of ``chip``.

    ``engine`` picks the fitted serving engine (`simulator.hardware.decode_calibration`); ``calibrated`` False
    skips the forecast (the bound stands for it)."""

    def __init__(self, cfg: TransformerConfig, chip: ChipSpec, model: int = 1, calibrated: bool = True,
                 engine: str | None = None, eager_prefill: bool = False) -> None:
        check_layout(cfg, Parallelism(1, model), 1)
        self.cfg, self.chip, self.model, self.engine = cfg, chip, model, engine
        self.fitted = calibrated and chip.name in decode_calibrated_chips() and model <= MAX_GPUS
        self.calibrated = calibrated
        self.graphs = (engine or DEFAULT_ENGINE) == "vllm"  #: decode batches padded to a captured CUDA graph
        #: prefill steps priced kernel by kernel, run eagerly (vLLM 0.6's V0 engine: `serving.eager`)
        self.eager_prefill = eager_prefill and self.fitted and eager_applies(cfg, chip)
        dtype = "int8" if cfg.weight_elem_bytes == 1 else "bf16"
        self._peak = chip.peak_flops_per_s(dtype) * model
        self._bw = chip.hbm_bandwidth_bytes_per_s * model
        share, _ = kv_share_per_chip(cfg, Parallelism(1, model), 1)
        self.kv_bytes_per_token = kv_bytes_per_position(cfg) * share  #: per chip
        self._kv_all = kv_bytes_per_position(cfg) * share * model  #: what the replica's chips stream per position
        self._matmul = 2.0 * cfg.matmul_params_per_token()
        self._attn = 4.0 * cfg.n_layers * cfg.q_width
        self._ar_bytes = cfg.d_model * cfg.act_elem_bytes
        self._decode = lru_cache(maxsize=None)(self._decode_s)
        self._prefill = lru_cache(maxsize=None)(self._prefill_s)

    @property
    def uncalibrated(self) -> list[str]:
        """What the forecast prices without a fitted constant."""
        if not self.calibrated:
            return ["everything (not --calibrated: the bound stands in for the forecast)"]
        if self.fitted:
            return []
        why = ("no published serving measurements" if self.chip.name not in decode_calibrated_chips() else
               f"model={self.model} is wider than the {MAX_GPUS}-GPU node the serving factors were fitted in")
        return [f"serving factors of chip {self.chip.name} ({why}): each step's HBM, compute and launches at the "
                "ideal; AllReduces at their ring closed form with hop latencies"]

    # -- bound -------------------------------------------------------------------------------------------
    def _allreduce_bound_s(self, tokens: int) -> float:
        if self.model <= 1:
            return 0.0
        nbytes = tokens * self._ar_bytes
        per = (ideal_allreduce_s(self.chip, self.model, nbytes) if self.chip.wraparound == "switch" else
               analytic.all_reduce_time(nbytes, self.model, self.chip.ici_bandwidth_bytes_per_s))
        return 2 * self.cfg.n_layers * per

    def bound_s(self, n_decode: int, decode_ctx: int, chunks: list[tuple[int, int]]) -> float:
        """Ideal seconds of one iteration: ``n_decode`` requests decoding with ``decode_ctx`` cached positions in all,
        prefill ``chunks`` of (new tokens, cached positions before them)."""
        tokens = n_decode + sum(c for c, _ in chunks)
        if tokens == 0:
            return 0.0
        sources = decode_ctx + n_decode + sum(c * p + c * (c + 1) // 2 for c, p in chunks)
        flops = self._matmul * tokens + self._attn * sources
        kv = self._kv_all * (decode_ctx + sum(p for _, p in chunks) + tokens)
        nbytes = weight_bytes_read(self.cfg, tokens) + kv
        return max(flops / self._peak, nbytes / self._bw) + self._allreduce_bound_s(tokens)

    # -- forecast ----------------------------------------------------------------------------------------
    def _served(self, batch: int, context: int, new: int) -> float:
        from simulator.workloads.served import served_step

        return served_step(self.cfg, self.chip, batch, context, new, simulate=False, engine=self.engine,
                           model=self.model)["step_time_s"]

    def _ideal_forecast(self, batch: int, context: int, new: int) -> float:
        step = self.bound_s(batch, batch * context, []) if new == 1 else self.bound_s(0, 0, [(new, context)] * batch)
        if self.model > 1:
            tokens = batch * new
            step += 2 * self.cfg.n_layers * analytic.all_reduce_time(
                tokens * self._ar_bytes, self.model, self.chip.ici_bandwidth_bytes_per_s, self.chip.hop_latency_s)
            step -= self._allreduce_bound_s(tokens)
        return step

    def _price(self, batch: int, context: int, new: int) -> float:
        return self._served(batch, context, new) if self.fitted else self._ideal_forecast(batch, context, new)

    def _decode_s(self, batch: int, context: int) -> float:
        return self._price(batch, context, 1)

    def _prefill_s(self, n: int, tokens: int, context: int) -> float:
        if self.eager_prefill:
            eager = eager_prefill_s(self.cfg, self.chip, self.model, n, tokens, context, self.engine or DEFAULT_ENGINE)
            assert eager is not None  # eager_applies held at construction
            return eager
        return self._price(n, context, tokens)

    def _decode_at(self, batch: int, mean_ctx: float) -> float:
        lo, hi, w = _below(mean_ctx)
        return (1 - w) * self._decode(batch, lo) + w * self._decode(batch, hi)

    def _prefill_at(self, n: int, mean_tokens: float, mean_ctx: float) -> float:
        """``n`` prefill chunks of ``mean_tokens`` new tokens after ``mean_ctx`` cached ones, as one step."""
        tl, th, wt = _below(mean_tokens)
        cl, ch, wc = _below(mean_ctx)
        f = self._prefill
        tl = max(tl, 1)
        return ((1 - wt) * ((1 - wc) * f(n, tl, cl) + wc * f(n, tl, ch)) +
                wt * ((1 - wc) * f(n, th, cl) + wc * f(n, th, ch)))

    def forecast_s(self, n_decode: int, decode_ctx: int, chunks: list[tuple[int, int]]) -> float:
        """Calibrated seconds of one iteration (arguments as `bound_s`); the bound when not ``calibrated``."""
        if not self.calibrated:
            return self.bound_s(n_decode, decode_ctx, chunks)
        if n_decode and not chunks and self.fitted and self.graphs:
            padded = graph_batch(n_decode)  # the dummy rows stream no KV: the same positions over more rows
            return self._decode_at(padded, decode_ctx / padded)
        step = self._decode_at(n_decode, decode_ctx / n_decode) if n_decode else 0.0
        if chunks:
            n = len(chunks)
            tokens = sum(c for c, _ in chunks)
            ctx = sum(p for _, p in chunks) / n
            prefill = self._prefill_at(n, tokens / n, ctx)
            step = prefill if not n_decode else step + max(prefill - self._decode_at(1, ctx), 0.0)
        return step

    @property
    def distinct_shapes(self) -> int:
        """Step shapes priced so far (the cache's size)."""
        return self._decode.cache_info().currsize + self._prefill.cache_info().currsize


def kv_capacity_tokens(cfg: TransformerConfig, chip: ChipSpec, model: int, memory_fraction: float = 0.9) -> int:
    """Token positions of KV cache one replica holds: ``memory_fraction`` of each chip's HBM (vLLM's
    ``gpu_memory_utilization`` default 0.9) less its share of the weights, over the KV bytes per position per
    chip. May be <= 0 when the weights alone do not fit."""
    share, _ = kv_share_per_chip(cfg, Parallelism(1, model), 1)
    per_chip = kv_bytes_per_position(cfg) * share
    free = chip.hbm_capacity_bytes * memory_fraction - cfg.params() * cfg.weight_elem_bytes / model
    return math.floor(free / per_chip) if free > 0 else 0
