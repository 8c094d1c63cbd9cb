"""GPU kernels as they run: the fitted time of one GEMM, attention or memory-bound kernel on a GPU preset.

Every number these functions return is a **forecast** (calibrated): seconds of one kernel, launch included.

- **GEMM** (`GpuKernels.matmul_s`): cuBLAS-style tiles. The output is cut into ``tm x tn`` tiles (k padded to the
  dtype's ``tile_k``); the tiles spread over the SMs in waves (wave quantization: a 1024^3 GEMM in 128 x 256
  tiles is 32 tiles, one part-full wave of 132 SMs on an H100). A tile's SM runs at ``peak_fraction[dtype]`` of its
  share of the dtype's peak in the largest tile, and less in smaller ones, which pay for their extra operand
  traffic (`GpuKernels.tile_efficiency`), and its k loop runs at k / (k + ``k_half[dtype]``) of that rate: the
  pipeline's fill before the first multiply-accumulate and the epilogue's drain after the last are a fixed time per
  tile, worth ``k_half`` elements of k (`GpuKernels.main_loop_efficiency`; ``peak_fraction`` is the asymptote as k
  grows); a split of k over ``s`` tiles (split-K) adds ``s`` partial outputs to reduce. The kernel picks the
  candidate tile and split that finishes first (as cuBLAS's heuristics do), and is never faster than streaming its
  operands through HBM at ``matmul_hbm_fraction`` (the roofline: whichever binds). Each kernel pays ``kernel_s`` of
  fixed device time (plus ``dtype_kernel_s`` for a dtype whose kernels start slower: TF32) and ``launch_s`` to launch.
- **Attention** (`GpuKernels.attention_s`): a FlashAttention-2 (A100) / -3 (H100, H200; B200 reuses it) kernel.
  Useful FLOPs are the closed form 4 b h q kv d (half of it causal; backward 2.5x forward), as the FlashAttention
  papers count them. The kernel runs waves of thread blocks (b h ceil(q / 128) forward, one per key block
  backward) over the SMs; each block computes its 128 x 128 tiles at ``attention[direction][head_dim]`` of its
  SM's share of the dtype's peak after a fixed start worth ``kv_half`` keys (prologue and epilogue); a causal
  mask skips the tiles above the diagonal and computes the diagonal ones whole. With too few blocks to fill
  the SMs (decoding) the forward splits its key loop (flash-decoding), a KV head's query heads sharing the
  tile rows when queries are few (packed GQA, rows in steps of 64); and the kernel is never faster than
  streaming Q, K, V and O through HBM (K and V per KV head: grouped-query attention reads less).
- **Memory-bound** (`GpuKernels.memory_bound_s`): element-wise (adds, copies), norm, optimizer and activation
  (SiLU-and-multiply, GELU: element-wise with transcendental math) kernels move their bytes at a fitted share of
  HBM bandwidth per kind, plus a fixed time per kind (``memory_kernel_s``) and a launch.

``launch_s`` is what eager PyTorch pays per kernel; ``graph_launch_s`` what one kernel costs inside a CUDA graph
(what serving engines use): `GpuKernels.kernel_s` variants leave the launch out so a caller can add either.

Peak rates come from the chip preset (`ChipSpec.peak_flops_per_s`): bf16 and fp16 at the bf16 rate, fp8 and
int8 at the 8-bit rate, fp32 as TF32 on the tensor cores at half the bf16 rate (NVIDIA datasheets: A100 156 of
312, H100 495 of 989, B200 1125 of 2250 TFLOP/s). The A100 has no fp8 tensor cores: fp8 there is refused.
The constants live in ``simulator/hardware/data/gpu_kernels.json``, written by ``scripts/fit_gpu_kernels.py`` from
the measurement files in ``simulator/hardware/data/calibration/`` (sources in the data README).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from simulator.errors import PodsimError
from simulator.hardware.specs import PRESETS

DATA = Path(__file__).resolve().parent / "data" / "gpu_kernels.json"

#: dtype -> (bytes per element of an operand, preset rate it runs at, share of that rate)
DTYPES: dict[str, tuple[int, str, float]] = {
    "bf16": (2, "bf16", 1.0), "fp16": (2, "bf16", 1.0), "fp8": (1, "int8", 1.0), "int8": (1, "int8", 1.0),
    "fp32": (4, "bf16", 0.5),  # TF32 tensor cores: half the bf16 rate
}
KINDS = ("elementwise", "norm", "optimizer", "activation")  #: memory-bound kernel kinds
BLOCK = 128  #: FlashAttention query / key block (FA2 and FA3, head dims up to 256)


def _positive_int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise PodsimError(f"{name}={value!r} must be a positive integer")
    return value


def attention_flops(batch: int, q_len: int, kv_len: int, heads: int, head_dim: int, causal: bool = True,
                    backward: bool = False) -> float:
    """Useful FLOPs of one attention kernel as FlashAttention counts them: 4 b h q kv d (QK^T and PV), half of it
    under a causal mask, and 2.5x for the backward pass (five matmuls against the forward's two)."""
    flops = 4.0 * batch * heads * q_len * kv_len * head_dim
    return flops * (0.5 if causal else 1.0) * (2.5 if backward else 1.0)


@dataclass(frozen=True)
class GpuKernels:
    """The fitted kernel model of one GPU preset (seconds, FLOP/s, bytes/s; see the module docstring)."""

    chip: str
    sms: int  #: streaming multiprocessors the tiles spread over
    hbm_bytes_per_s: float  #: the preset's HBM bandwidth
    peak_flops_per_s: dict[str, float] = field(hash=False)  #: tensor-core peak per dtype (from the preset)
    peak_fraction: dict[str, float] = field(hash=False)  #: fitted share of that peak a large tile reaches, per dtype
    tiles: tuple[tuple[int, int], ...] = ((128, 256), (128, 128), (64, 128))  #: candidate (tm, tn) output tiles
    tile_k: dict[str, int] = field(default_factory=dict, hash=False)  #: k padding per dtype
    tile_cost: float = 0.0  #: operand-traffic cost c of small tiles (`tile_efficiency`)
    split_k: tuple[int, ...] = (1,)  #: split-K factors the kernel may choose
    #: a tile's main-loop fill and drain per dtype, in k elements (`main_loop_efficiency`; absent: none)
    k_half: dict[str, float] = field(default_factory=dict, hash=False)
    kernel_s: float = 0.0  #: fixed device seconds per GEMM kernel
    dtype_kernel_s: dict[str, float] = field(default_factory=dict, hash=False)  #: extra fixed seconds per dtype
    matmul_hbm_fraction: float = 1.0  #: share of HBM bandwidth a GEMM's operands stream at
    hbm_fraction: dict[str, float] = field(default_factory=dict, hash=False)  #: per memory-bound kind
    memory_kernel_s: dict[str, float] = field(default_factory=dict, hash=False)  #: fixed device s per kernel, per kind
    #: {"forward": {head_dim: fraction}, "backward": {...}, "kv_half": {"forward": tokens, "backward": tokens}}
    attention: dict[str, Any] = field(default_factory=dict, hash=False)
    #: other FlashAttention generations fitted on this chip (e.g. ``"fa2"`` on H100), in ``attention``'s form
    attention_impls: dict[str, dict[str, Any]] = field(default_factory=dict, hash=False)
    launch_s: float = 0.0  #: seconds per kernel launch (eager PyTorch)
    graph_launch_s: float = 0.0  #: seconds per kernel inside a CUDA graph (what serving engines use)
    sources: dict[str, str] = field(default_factory=dict, hash=False, compare=False)

    # -- dtypes -----------------------------------------------------------------------------------------------
    def peak(self, dtype: str) -> float:
        """Tensor-core peak FLOP/s of ``dtype`` (a `PodsimError` naming the valid dtypes otherwise)."""
        if not isinstance(dtype, str) or dtype not in self.peak_flops_per_s:
            valid = ", ".join(d for d in DTYPES if d in self.peak_flops_per_s)
            raise PodsimError(f"dtype={dtype!r} has no tensor-core rate on {self.chip}; valid dtypes: {valid}")
        return self.peak_flops_per_s[dtype]

    # -- GEMM -------------------------------------------------------------------------------------------------
    def matmul_s(self, m: int, k: int, n: int, dtype: str = "bf16", batch: int = 1) -> float:
        """Seconds of one (batched) ``[m, k] @ [k, n]`` GEMM kernel, launch included (forecast)."""
        return self.launch_s + self.matmul_kernel_s(m, k, n, dtype, batch)

    def matmul_kernel_s(self, m: int, k: int, n: int, dtype: str = "bf16", batch: int = 1) -> float:
        """Device seconds of the GEMM kernel alone (no launch): fixed ``kernel_s`` + the slower of the tiled
        compute and the HBM roofline of its operands."""
        for value, name in ((m, "m"), (k, "k"), (n, "n"), (batch, "batch")):
            _positive_int(value, name)
        fixed = self.kernel_s + self.dtype_kernel_s.get(dtype, 0.0)
        return fixed + max(self.tiled_s(m, k, n, dtype, batch), self.operand_s(m, k, n, dtype, batch))

    def operand_s(self, m: int, k: int, n: int, dtype: str = "bf16", batch: int = 1) -> float:
        """Seconds to stream the operands (inputs at the dtype's width, output at least 2 bytes) through HBM."""
        elem = DTYPES[dtype][0] if dtype in DTYPES else 2
        nbytes = batch * (elem * (m * k + k * n) + max(elem, 2) * m * n)
        return nbytes / (self.hbm_bytes_per_s * self.matmul_hbm_fraction)

    def tiled_s(self, m: int, k: int, n: int, dtype: str = "bf16", batch: int = 1) -> float:
        """Seconds of the tiled compute: the best of the candidate tiles and split-K factors."""
        tile, split = self.best_tile(m, k, n, dtype, batch)
        return self.tile_s(m, k, n, dtype, batch, tile, split)

    def best_tile(self, m: int, k: int, n: int, dtype: str = "bf16", batch: int = 1) -> tuple[tuple[int, int], int]:
        """The (tile, split-K) the kernel runs: the candidate that finishes first. Every candidate is open to every
        shape (a part holds at least one k-tile), so a longer k never finishes sooner."""
        return min(((tile, split) for tile in self.tiles for split in self.split_k),
                   key=lambda c: self.tile_s(m, k, n, dtype, batch, c[0], c[1]))

    def tile_s(self, m: int, k: int, n: int, dtype: str, batch: int, tile: tuple[int, int], split: int = 1) -> float:
        """Seconds of the compute in ``tile`` with k split ``split`` ways: waves x one tile's time, plus the
        split's partial outputs (fp32) written and read back through HBM."""
        tm, tn = tile
        tk = self.tile_k.get(dtype, 64)
        k_chunk = math.ceil(math.ceil(k / tk) / split) * tk  # k padded to the tile, then cut in `split` chunks
        tiles = batch * math.ceil(m / tm) * math.ceil(n / tn) * split
        waves = math.ceil(tiles / self.sms)
        per_sm = self.peak(dtype) * self.peak_fraction[dtype] / self.sms * self.tile_efficiency(tile)
        seconds = waves * 2.0 * tm * tn * k_chunk / (per_sm * self.main_loop_efficiency(k_chunk, dtype))
        if split > 1:
            seconds += batch * m * n * 4.0 * (split + 1) / (self.hbm_bytes_per_s * self.matmul_hbm_fraction)
        return seconds

    def main_loop_efficiency(self, k: float, dtype: str = "bf16") -> float:
        """Share of a tile's time its k loop runs at the steady rate: k / (k + k_half[dtype]) for a tile that
        loops over ``k`` elements of k. Before the first multiply-accumulate the pipeline's stages fill with operand
        tiles, and after the last the accumulators drain to HBM (the epilogue); both are a fixed time per tile,
        worth ``k_half`` elements of k at the steady rate, so the efficiency is 1/2 at k = k_half and tends to 1
        (``peak_fraction`` is the asymptote) as k grows. A dtype without a fitted ``k_half``: 1."""
        if not k > 0:
            raise PodsimError(f"k={k!r} must be a positive number of elements")
        return k / (k + self.k_half.get(dtype, 0.0))

    def tile_efficiency(self, tile: tuple[int, int]) -> float:
        """A tile's rate relative to the largest candidate's: (1 + c (1/tm0 + 1/tn0)) / (1 + c (1/tm + 1/tn)), so
        ``peak_fraction`` is what the largest tile reaches and smaller tiles pay for their extra operand traffic."""
        tm0, tn0 = self.tiles[0]
        return (1 + self.tile_cost * (1 / tm0 + 1 / tn0)) / (1 + self.tile_cost * (1 / tile[0] + 1 / tile[1]))

    def wave_fill(self, m: int, n: int, tile: tuple[int, int] | None = None, batch: int = 1) -> float:
        """Share of the SM slots in the last-counted waves that hold a tile (1 = no wave quantization loss)."""
        tm, tn = tile or self.tiles[0]
        tiles = batch * math.ceil(m / tm) * math.ceil(n / tn)
        return tiles / (math.ceil(tiles / self.sms) * self.sms)

    def matmul_efficiency(self, m: int, k: int, n: int, dtype: str = "bf16", batch: int = 1) -> float:
        """Useful 2 b m k n FLOPs over (peak x kernel seconds, no launch): the share of peak the kernel reaches."""
        return 2.0 * batch * m * k * n / (self.peak(dtype) * self.matmul_kernel_s(m, k, n, dtype, batch))

    # -- attention --------------------------------------------------------------------------------------------
    def attention_s(self, batch: int, q_len: int, kv_len: int, heads: int, kv_heads: int, head_dim: int,
                    causal: bool = True, backward: bool = False, dtype: str = "bf16", impl: str | None = None) -> float:
        """Seconds of one FlashAttention kernel (forward, or backward with ``backward``), launch included
        (forecast). ``kv_heads`` (grouped-query attention) changes the bytes (the HBM roofline a decode step's
        attention runs at), not the FLOPs or the schedule."""
        return self.launch_s + self.attention_kernel_s(batch, q_len, kv_len, heads, kv_heads, head_dim, causal,
                                                       backward, dtype, impl)

    def attention_kernel_s(self, batch: int, q_len: int, kv_len: int, heads: int, kv_heads: int, head_dim: int,
                           causal: bool = True, backward: bool = False, dtype: str = "bf16",
                           impl: str | None = None) -> float:
        """Device seconds of the attention kernel alone (no launch): waves of thread blocks, each running its
        ``BLOCK x BLOCK`` tiles of QK^T and PV (backward: 2.5x the FLOPs) after a fixed start worth
        ``kv_half / BLOCK`` tiles; a causal mask skips the tiles above the diagonal (the queries aligned to the
        end of the keys) and computes the diagonal ones whole. ``impl`` (e.g. ``"fa2"``) picks another fitted
        FlashAttention generation; None or an unfitted one: the chip's own."""
        table = self.attention_impls.get(impl or "", self.attention)
        for value, name in ((batch, "batch"), (q_len, "q_len"), (kv_len, "kv_len"), (heads, "heads"),
                            (kv_heads, "kv_heads"), (head_dim, "head_dim")):
            _positive_int(value, name)
        if heads % kv_heads:
            raise PodsimError(f"heads={heads} must be a multiple of kv_heads={kv_heads}")
        direction = "backward" if backward else "forward"
        kv_blocks, height, lanes = math.ceil(kv_len / BLOCK), 1.0, heads  # lanes: heads with their own blocks
        if not backward and q_len < BLOCK:  # decoding / short chunks: a KV head's query heads share the tile rows
            lanes, rows = kv_heads, q_len * (heads // kv_heads)  # (FA3's packed GQA), in rows of 64 (wgmma M)
            q_blocks = math.ceil(rows / BLOCK)
            height = min(1.0, math.ceil(rows / 64) * 64 / BLOCK) if q_blocks == 1 else 1.0
            tiles = q_blocks * kv_blocks  # every query row sees (nearly) every key
        elif causal:  # query block i sees the keys up to its last row: (kv - q) / BLOCK + i + 1 key tiles
            q_blocks = math.ceil(q_len / BLOCK)
            offset = (kv_len - q_len) / BLOCK
            tiles = sum(min(kv_blocks, max(1, math.ceil(offset + i + 1))) for i in range(q_blocks))
        else:
            q_blocks = math.ceil(q_len / BLOCK)
            tiles = q_blocks * kv_blocks
        blocks = batch * lanes * (kv_blocks if backward else q_blocks)  # FA2/FA3 backward runs a block per key block
        # too few blocks to fill the SMs (decoding: one query block per head): the forward splits the key loop
        # (flash-decoding), at most one key block per part
        splits = 1 if backward else max(1, min(self.sms // blocks, kv_blocks))
        tile_flops = 4.0 * BLOCK * BLOCK * head_dim * (2.5 if backward else 1.0)
        tile_s = height * tile_flops * self.sms / (self.peak(dtype) * _by_head_dim(table[direction], head_dim))
        start = table["kv_half"][direction] / BLOCK  # a block's fixed cost, in tiles
        parts = blocks * splits
        per_part = max(1.0, batch * lanes * tiles / parts)  # a part runs at least one tile
        compute_s = math.ceil(parts / self.sms) * (start + per_part) * tile_s
        return max(compute_s, self.attention_bytes(batch, q_len, kv_len, heads, kv_heads, head_dim, backward, dtype)
                   / (self.hbm_bytes_per_s * self.matmul_hbm_fraction))

    def attention_bytes(self, batch: int, q_len: int, kv_len: int, heads: int, kv_heads: int, head_dim: int,
                        backward: bool = False, dtype: str = "bf16") -> float:
        """Bytes an attention kernel moves through HBM at least once: Q and O per query head, K and V per KV head
        (forward); backward also reads O and dO and writes dQ, dK and dV."""
        elem = DTYPES[dtype][0] if dtype in DTYPES else 2
        q_side = batch * heads * q_len * head_dim * elem
        kv_side = batch * kv_heads * kv_len * head_dim * elem
        return (4 * q_side + 4 * kv_side) if backward else (2 * q_side + 2 * kv_side)

    def attention_efficiency(self, batch: int, q_len: int, kv_len: int, heads: int, head_dim: int,
                             causal: bool = True, backward: bool = False, impl: str | None = None) -> float:
        """Useful FLOPs (`attention_flops`) per peak-second of the bf16 kernel (``impl``: as `attention_kernel_s`)."""
        seconds = self.attention_kernel_s(batch, q_len, kv_len, heads, heads, head_dim, causal, backward, "bf16",
                                          impl)
        return attention_flops(batch, q_len, kv_len, heads, head_dim, causal, backward) / (self.peak("bf16") * seconds)

    # -- memory-bound -----------------------------------------------------------------------------------------
    def memory_bound_s(self, nbytes: float, kind: str = "elementwise") -> float:
        """Seconds of an element-wise / norm / optimizer kernel moving ``nbytes`` through HBM, launch included
        (forecast)."""
        return self.launch_s + self.memory_kernel_time_s(nbytes, kind)

    def memory_kernel_time_s(self, nbytes: float, kind: str = "elementwise") -> float:
        """Device seconds of the memory-bound kernel alone (no launch)."""
        if kind not in self.hbm_fraction:
            raise PodsimError(f"kind={kind!r}; valid memory-bound kernel kinds: {', '.join(KINDS)}")
        if isinstance(nbytes, bool) or not isinstance(nbytes, (int, float)) or not 0 <= nbytes < math.inf:
            raise PodsimError(f"nbytes={nbytes!r} must be a finite number of bytes >= 0")
        return self.memory_kernel_s[kind] + nbytes / (self.hbm_bytes_per_s * self.hbm_fraction[kind])


def _by_head_dim(fractions: dict[int, float], head_dim: int) -> float:
    """The fraction at ``head_dim``, interpolated in log2(head_dim) between fitted head dims, clamped outside."""
    dims = sorted(fractions)
    if head_dim <= dims[0]:
        return fractions[dims[0]]
    if head_dim >= dims[-1]:
        return fractions[dims[-1]]
    hi = next(d for d in dims if d >= head_dim)
    lo = dims[dims.index(hi) - 1]
    t = (math.log2(head_dim) - math.log2(lo)) / (math.log2(hi) - math.log2(lo))
    return fractions[lo] + t * (fractions[hi] - fractions[lo])


@cache
def _table() -> dict[str, Any]:
    return json.loads(DATA.read_text())


def kernel_chips() -> list[str]:
    """GPU presets with a fitted kernel model."""
    return sorted(_table()["chips"])


def peak_rates(chip: str) -> dict[str, float]:
    """Tensor-core peak FLOP/s per dtype of preset ``chip`` (fp32 as TF32; fp8 only where the chip has it)."""
    spec = PRESETS[chip]
    rates = {d: spec.peak_flops_per_s(rate) * share for d, (_, rate, share) in DTYPES.items()}
    if chip == "a100":
        del rates["fp8"]  # Ampere's 8-bit tensor cores run int8 only
    return rates


def _attention_table(att: dict[str, Any]) -> dict[str, Any]:
    """An attention fit from JSON: head-dim keys as ints."""
    return {"forward": {int(d): v for d, v in att["forward"].items()},
            "backward": {int(d): v for d, v in att["backward"].items()}, "kv_half": dict(att["kv_half"])}


def build(chip: str, constants: dict[str, Any]) -> GpuKernels:
    """A `GpuKernels` for preset ``chip`` from its JSON ``constants`` (what `gpu_kernels` reads)."""
    spec = PRESETS[chip]
    attention = _attention_table(constants["attention"])
    return GpuKernels(
        chip=chip, sms=spec.tensor_cores, hbm_bytes_per_s=spec.hbm_bandwidth_bytes_per_s,
        peak_flops_per_s=peak_rates(chip), peak_fraction=dict(constants["peak_fraction"]),
        tiles=tuple(tuple(t) for t in constants["tiles"]), tile_k=dict(constants["tile_k"]),
        tile_cost=constants["tile_cost"], split_k=tuple(constants["split_k"]),
        k_half=dict(constants.get("k_half", {})), kernel_s=constants["kernel_s"],
        dtype_kernel_s=dict(constants.get("dtype_kernel_s", {})),
        matmul_hbm_fraction=constants["matmul_hbm_fraction"], hbm_fraction=dict(constants["hbm_fraction"]),
        memory_kernel_s=dict(constants["memory_kernel_s"]), attention=attention,
        attention_impls={name: _attention_table(t) for name, t in constants.get("attention_impls", {}).items()},
        launch_s=constants["launch_s"],
        graph_launch_s=constants["graph_launch_s"], sources=dict(constants.get("sources", {})))


@cache
def gpu_kernels(chip: str) -> GpuKernels | None:
    """The kernel model of preset ``chip``; None for a chip without one (TPUs)."""
    constants = _table()["chips"].get(chip)
    return build(chip, constants) if constants is not None else None


def fit_report() -> dict[str, Any]:
    """The fit errors recorded by ``scripts/fit_gpu_kernels.py`` (per family: fit and held-out sets)."""
    return _table().get("fit", {})
