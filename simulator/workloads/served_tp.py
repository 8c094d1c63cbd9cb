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
(``ici_bandwidth_bytes_per_s x ici_links``). The two kinds of kernel are priced from different measurements:

- **custom kernels** (vllm, gpt-fast) at their own fitted constants (`AllReduceKernel`: a fixed latency -- the
  kernel's start and its barriers, as a CUDA graph replays it -- a second stage's extra latency for two-shot,
  and the share of NVLink bandwidth its peer reads reach), each fitted to that kernel's published
  microbenchmarks (``allreduce_kernels.csv``, by ``scripts/fit_decode.py``)::

      one-shot:  latency + (n - 1) x nbytes / (link_bw x efficiency)       (every GPU reads every peer's buffer)
      two-shot:  latency + stage + 2 (n - 1) / n x nbytes / (link_bw x efficiency)
                                                  (reduce-scatter then all-gather: a ring's bytes, one more barrier)

  vLLM's kernel (``vllm-custom``) from vLLM's own CUDA-graph benchmark on H100 (2 to 6 GPUs); gpt-fast's
  (``torch-one-shot``: PyTorch's one-shot kernel) from PyTorch's symmetric-memory one-shot measured per call
  on 8 H100. The measured time already holds the launch and the wait for every GPU's barrier, so these
  engines' ``sync_s`` is 0 (none on top). A kernel fitted on another chip's NVLink is named uncalibrated.
- **NCCL** (tensorrt-llm, and every engine's fallback) from NCCL's own latency model
  (`simulator.collectives.protocol`; a step is two hops, GPU -> switch -> GPU, at ``2 x hop_latency_s``)::

      NCCL ring, protocol p:  p.launch_s + 2 (n - 1) step_p + 2 (n - 1) / n x nbytes / (link_bw x p.efficiency)
                              (NCCL's tuner takes the fastest of LL, LL128, Simple: LL at decode sizes)

  plus ``sync_s x log2(n)``: launching it from the host (no CUDA graphs) and waiting for the slowest GPU
  (host-launch skew grows with the GPUs waited for), the engine's fitted ``allreduce_sync_s``
  (`simulator.hardware.decode_calibration`: tensorrt-llm's, fitted to NeMo's 8-GPU rows).

A hand-made calibration without a kernel fit prices a custom kernel from first principles alone (``2 step_LL``
of barriers for one-shot, ``3 step_LL`` for two-shot, the bytes at line rate) plus its ``sync_s x log2(n)``.
Kernel launches between the AllReduces are each engine's fitted per-layer overhead, the same on a mesh.
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
    kernel: str | None = None  #: the fitted custom kernel it runs (``allreduce_kernels.csv``'s ``kernel``)


@dataclass(frozen=True)
class AllReduceKernel:
    """A custom AllReduce kernel's fitted constants (seconds, a fraction), and the chip whose NVLink fitted them."""

    name: str
    latency_s: float  #: fixed time of one call: kernel start and barriers, in a CUDA graph or per call as measured
    two_shot_stage_s: float  #: a two-shot's second stage: one more barrier and pass
    link_efficiency: float  #: share of one-way NVLink bandwidth the kernel's peer reads and writes reach
    chip: str  #: the preset whose measurements fitted it

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AllReduceKernel:
        """A kernel from its JSON entry (``decode_calibration.json``: ``engines.<name>.allreduce_kernel``)."""
        return cls(str(data["name"]), float(data["latency_s"]), float(data["two_shot_stage_s"]),
                   float(data["link_efficiency"]), str(data["chip"]))


ENGINES = {
    "vllm": EngineComm("vllm", True, True, "vLLM csrc/custom_all_reduce.cuh (1stage / 2stage by size and GPUs), "
                       "custom_all_reduce.py max_size 8 MiB; CUDA graphs for decode", "vllm-custom"),
    "gpt-fast": EngineComm("gpt-fast", True, True, "gpt-fast README: ENABLE_INTRA_NODE_COMM=1 (PyTorch IntraNodeComm "
                           "one-/two-shot), torch.compile mode reduce-overhead (CUDA graphs)", "torch-one-shot"),
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


def custom_s(algorithm: str, n: int, nbytes: float, link_bw: float, kernel: AllReduceKernel | None = None) -> float:
    """Seconds of a one-shot or two-shot custom AllReduce: at ``kernel``'s fitted latency and link efficiency, or,
    with none, from first principles (barriers at NCCL's LL step latency, the bytes at line rate)."""
    one = algorithm == ONE_SHOT
    moved = (n - 1) * nbytes if one else 2 * (n - 1) / n * nbytes  # bytes each GPU reads over NVLink
    if kernel is None:
        return (2 if one else 3) * step_s(LL) + moved / link_bw
    return kernel.latency_s + (0.0 if one else kernel.two_shot_stage_s) + moved / (link_bw * kernel.link_efficiency)


def allreduce_cost(engine: str, spec: ChipSpec, n: int, nbytes: float, sync_s: float,
                   kernel: AllReduceKernel | None = None) -> dict[str, Any]:
    """One AllReduce of ``nbytes`` over ``n`` tensor-parallel GPUs as ``engine`` runs it, its custom kernels at
    ``kernel``'s fitted constants (None: first principles): ``algorithm``, ``protocol`` (NCCL's, else None),
    ``algorithm_s``, ``sync_s`` (launch and waiting for the slowest GPU beyond the algorithm, ``sync_s x
    log2(n)``) and ``seconds`` (their sum); all 0 on one GPU."""
    if n <= 1:
        return {"algorithm": None, "protocol": None, "algorithm_s": 0.0, "sync_s": 0.0, "seconds": 0.0}
    comm, bw = engine_comm(engine), link_bandwidth_bytes_per_s(spec)
    algorithm = custom_algorithm(engine, n, nbytes) if comm.custom else None
    if algorithm is None:
        seconds, protocol = nccl_ring_s(n, nbytes, bw)
        algorithm = NCCL
    else:
        seconds, protocol = custom_s(algorithm, n, nbytes, bw, kernel), None
    sync = sync_s * math.log2(n)
    return {"algorithm": algorithm, "protocol": protocol, "algorithm_s": seconds, "sync_s": sync,
            "seconds": seconds + sync}


def ideal_allreduce_s(spec: ChipSpec, n: int, nbytes: float) -> float:
    """The bound: the AllReduce's bandwidth term at line rate (``2 (n - 1) / n x nbytes / link_bw``), no latency."""
    if n <= 1:
        return 0.0
    return 2 * (n - 1) / n * nbytes / link_bandwidth_bytes_per_s(spec)
