"""Tensor-parallel serving: what one Megatron AllReduce of a served decode or prefill step costs, as each
engine runs it.

With the model axis over ``n`` GPUs every layer AllReduces its [tokens, d_model] activations twice (after
attention and after the MLP), ``tokens x d_model x 2`` bytes each in bf16: 8 KiB for one Llama-2-7B token.
At decode sizes the bytes are nothing; the cost is latency, and the engines pay it differently:

- **vllm**: its own custom AllReduce (``csrc/custom_all_reduce.cuh``, on 2, 4, 6 or 8 fully NVLinked GPUs):
  one-shot (``cross_device_reduce_1stage``: every GPU reads every peer's buffer and sums) on 2 GPUs, on up
  to 4 GPUs under 512 KiB and on up to 8 under 256 KiB; two-shot (``cross_device_reduce_2stage``:
  reduce-scatter, then all-gather) above, up to its 8 MiB buffer (``custom_all_reduce.py`` ``max_size``);
  NCCL (PyNCCL) beyond and on other GPU counts. Decode runs in CUDA graphs.
- **gpt-fast**: PyTorch's intra-node AllReduce (``ENABLE_INTRA_NODE_COMM=1`` in its README; c10d
  ``intra_node_comm.cu``: one-shot up to 256 KiB, two-shot up to 10 MiB, NCCL beyond -- and on a hybrid
  cube mesh, gpt-fast's measured node, its own HCM kernel up to 256 KiB, priced here as one-shot),
  compiled with ``mode="reduce-overhead"`` (CUDA graphs).
- **tensorrt-llm** (NeMo's 2023 stack and TensorRT-LLM v0.5, the measurements it is fitted to): the NCCL
  AllReduce plugin (the custom one- / two-shot kernels were opt-in, ``use_custom_all_reduce``), no CUDA
  graphs. Newer TensorRT-LLM picks ONESHOT / TWOSHOT kernels itself (``AllReduceStrategy.AUTO``); none
  of the rows here ran them.

Priced per AllReduce of ``nbytes`` over ``n`` GPUs of one NVSwitch node, each with ``link_bw`` one way
(``ici_bandwidth_bytes_per_s x ici_links``), from NCCL's own latency model
(`simulator.collectives.protocol`; a step is two hops, GPU -> switch -> GPU, at ``2 x hop_latency_s``)::

    NCCL ring, protocol p:  p.launch_s + 2 (n - 1) step_p + 2 (n - 1) / n x nbytes / (link_bw x p.efficiency)
                            (NCCL's tuner takes the fastest of LL, LL128, Simple: LL at decode sizes)
    one-shot:               2 step_LL + (n - 1) x nbytes / link_bw          (barrier in, barrier out)
    two-shot:               3 step_LL + 2 (n - 1) / n x nbytes / link_bw    (barriers in, between, out)

the custom kernels' barriers being one flag store and poll over NVLink, as an LL step is. Kernel launches
(through CUDA graphs or from the host) are each engine's fitted per-layer overhead, the same on a mesh. On top of the
algorithm each AllReduce pays ``sync_s x log2(n)``: launching it and waiting for the slowest GPU (kernel
skew grows with the GPUs waited for), the engine's fitted ``allreduce_sync_s`` (`simulator.hardware.
decode_calibration`), or 0 -- and then named uncalibrated -- for an engine without multi-GPU fit rows.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from simulator.collectives.protocol import LL, PROTOCOLS, Protocol
from simulator.errors import PodsimError
from simulator.hardware.specs import ChipSpec

ONE_SHOT, TWO_SHOT, NCCL = "one-shot", "two-shot", "nccl-ring"
MAX_GPUS = 8  #: tensor parallelism inside one NVLink node (what every measurement ran)
KiB, MiB = 2**10, 2**20


@dataclass(frozen=True)
class EngineComm:
    """How a serving engine AllReduces across tensor-parallel GPUs."""

    name: str
    custom: bool  #: one-/two-shot custom kernels for small messages (else NCCL for all)
    cuda_graphs: bool
    source: str


ENGINES = {
    "vllm": EngineComm("vllm", True, True, "vLLM csrc/custom_all_reduce.cuh (1stage / 2stage by size and GPUs), "
                       "custom_all_reduce.py max_size 8 MiB; CUDA graphs for decode"),
    "gpt-fast": EngineComm("gpt-fast", True, True, "gpt-fast README: ENABLE_INTRA_NODE_COMM=1 (PyTorch IntraNodeComm "
                           "one-/two-shot), torch.compile mode reduce-overhead (CUDA graphs)"),
    "tensorrt-llm": EngineComm("tensorrt-llm", False, False, "TensorRT-LLM v0.5 / NeMo 2023: NCCL AllReduce plugin "
                               "(custom all-reduce opt-in), no CUDA graphs"),
}


def check_gpus(n: int) -> int:
    """``n`` if it is a tensor-parallel width this model prices (1 to `MAX_GPUS`); `PodsimError` otherwise."""
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_GPUS:
        raise PodsimError(f"tensor parallelism over model={n!r} GPUs: the served model prices AllReduces inside one "
                          f"NVLink node, 1 to {MAX_GPUS} GPUs; use model <= {MAX_GPUS} (and a data axis for more "
                          "replicas)")
    return n


def engine_comm(engine: str) -> EngineComm:
    """The AllReduce facts of ``engine``; `PodsimError` naming the known engines otherwise."""
    if engine not in ENGINES:
        raise PodsimError(f"no tensor-parallel AllReduce model for engine {engine!r}; engines: {', '.join(ENGINES)}")
    return ENGINES[engine]


def link_bandwidth_bytes_per_s(spec: ChipSpec) -> float:
    """One GPU's NVLink bandwidth, one way (all its links into the switch)."""
    return spec.ici_bandwidth_bytes_per_s * spec.ici_links


def step_s(protocol: Protocol) -> float:
    """NCCL's per-step latency of ``protocol`` over NVLink (two hops: GPU -> switch -> GPU)."""
    return 2 * protocol.hop_latency_s["nvlink"]


def custom_algorithm(engine: str, n: int, nbytes: float) -> str | None:
    """The custom kernel ``engine`` picks for ``nbytes`` over ``n`` GPUs (vLLM's or PyTorch's rule); None where it
    falls back to NCCL."""
    if engine == "vllm":
        if nbytes > 8 * MiB or n not in (2, 4, 6, 8):
            return None
        return ONE_SHOT if n == 2 or (n <= 4 and nbytes < 512 * KiB) or nbytes < 256 * KiB else TWO_SHOT
    return ONE_SHOT if nbytes <= 256 * KiB else TWO_SHOT if nbytes <= 10 * MiB else None  # PyTorch IntraNodeComm


def nccl_ring_s(n: int, nbytes: float, link_bw: float) -> tuple[float, str]:
    """(seconds, protocol) of NCCL's ring AllReduce with its fastest protocol."""
    times = {name: p.launch_s + 2 * (n - 1) * step_s(p) + 2 * (n - 1) / n * nbytes / (link_bw * p.efficiency)
             for name, p in PROTOCOLS.items()}
    best = min(times, key=times.__getitem__)
    return times[best], best


def custom_s(algorithm: str, n: int, nbytes: float, link_bw: float) -> float:
    """Seconds of a one-shot or two-shot custom AllReduce (barriers at NCCL's LL step latency)."""
    if algorithm == ONE_SHOT:
        return 2 * step_s(LL) + (n - 1) * nbytes / link_bw
    return 3 * step_s(LL) + 2 * (n - 1) / n * nbytes / link_bw


def allreduce_cost(engine: str, spec: ChipSpec, n: int, nbytes: float, sync_s: float) -> dict[str, Any]:
    """One AllReduce of ``nbytes`` over ``n`` tensor-parallel GPUs as ``engine`` runs it: ``algorithm``,
    ``protocol`` (NCCL's, else None), ``algorithm_s``, ``sync_s`` (launch and waiting for the slowest GPU,
    ``sync_s x log2(n)``) and ``seconds`` (their sum); all 0 on one GPU."""
    if n <= 1:
        return {"algorithm": None, "protocol": None, "algorithm_s": 0.0, "sync_s": 0.0, "seconds": 0.0}
    comm, bw = engine_comm(engine), link_bandwidth_bytes_per_s(spec)
    algorithm = custom_algorithm(engine, n, nbytes) if comm.custom else None
    if algorithm is None:
        seconds, protocol = nccl_ring_s(n, nbytes, bw)
        algorithm = NCCL
    else:
        seconds, protocol = custom_s(algorithm, n, nbytes, bw), None
    sync = sync_s * math.log2(n)
    return {"algorithm": algorithm, "protocol": protocol, "algorithm_s": seconds, "sync_s": sync,
            "seconds": seconds + sync}


def ideal_allreduce_s(spec: ChipSpec, n: int, nbytes: float) -> float:
    """The bound: the AllReduce's bandwidth term at line rate (``2 (n - 1) / n x nbytes / link_bw``), no latency."""
    if n <= 1:
        return 0.0
    return 2 * (n - 1) / n * nbytes / link_bandwidth_bytes_per_s(spec)
