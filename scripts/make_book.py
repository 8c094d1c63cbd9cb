"""Regenerate docs/book.md: every worked question of the book's chapters, its podsim command and answer.

``python scripts/make_book.py`` runs each command in-process (``--json`` appended), reads the named field of
its output and writes the table beside the book's answer; tests/test_book_questions.py runs the same commands and
holds each row to the page (the podsim figure still what the page says, a "match" within its tolerance of
the book's), so the page never goes stale. The book is jax-ml/scaling-book (How To Scale Your Model):
chapters roofline, tpus, sharding, transformers, training, inference (the Feb 2025 edition, commit
0819a7d) and gpus (Aug 2025, commit 1a55377); where the current edition changed a formula (the FSDP +
tensor-parallel critical batch), the current one is the book's answer and podsim gives the older beside it.

Verdicts: ``match (within N%)``: the field is the book's answer within N% (the book rounds, and some of its
chip numbers differ slightly from REFERENCE.md's: v5e HBM 8.1e11 against 8.2e11); ``differs: why``: both
figures shown, the reason documented; ``not expressible: why``: no single command answers it (a plot, a
design choice, symbolic algebra or a multi-part pipeline), said plainly.
"""
from __future__ import annotations

import contextlib
import io
import json
import shlex
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "book.md"

L3 = "model llama-3-70b --chip tpu-v5e"  #: the applied-inference chapter's model and chip
#: training Q4: LLaMA-2 13B projected on the question's 16x16x16 v5p slice (4096 chips)
T13 = ("model llama-2-13b --mode train --chip tpu-v5p --mesh fsdp=8 --no-simulate --tokens-total 1e12 "
       "--assume-mfu 0.4 --chips 4096")
R8, R8V = "collective ", "--chip tpu-v5e --topology torus:8 --bytes 67108864"  #: sharding Q10: int8[8192, 8192], D = 8
#: the applied-training chapter's run projected on a full v5p pod: 4e6 tokens a batch as its memory table counts
#: them (1000 x 4000), 4.19e6 (1024 x 4096) as its FSDP questions do
AT = ("model llama-3-70b --mode train --chip tpu-v5p --mesh fsdp=8 --checkpoints-per-layer 4 --no-simulate "
      "--tokens-total 15e12 --assume-mfu 0.4 --chips 8960")
AT4M = AT + " --batch 1000 --seq 4000"
AT419 = AT + " --batch 1024 --seq 4096"

#: (chapter, question, command without "podsim" (or None), JSON field, book answer, verdict)
#: verdict: "match 2%" (tolerance), "differs: reason" or "none: reason".
QUESTIONS: list[tuple[str, str, str | None, str | None, float | None, str]] = [
    # --- roofline ------------------------------------------------------------------------------------------
    ("roofline", "Q1 int8 matmul: batch above which it is compute-bound (B > 486 / 2 = 243)",
     "roofline --chip tpu-v5e --matmul 1,8192,32768 --dtype int8 --find batch", "critical_batch_book", 243,
     "match 2%"),
    ("roofline", "Q2 int8 weights, bf16 activations and FLOPs: compute-bound batch (B > 120)",
     "roofline --chip tpu-v5e --matmul 1,8192,32768 --dtype bf16 --weight-dtype int8 --find batch",
     "critical_batch_book", 120, "match 2%"),
    ("roofline", "Q3 roofline plot of FLOP/s against B, a point below the knee: D = 8192, F = 32768, B = 64 (no "
     "printed answer; the chapter's roofline, 2BDF / (2BD + 2DF + 2BF) x 8.2e11 = 5.2e13 FLOP/s)",
     "roofline --chip tpu-v5e --matmul 1,8192,32768 --batches 64,1024", "batches.0.flops_per_s", 5.197e13,
     "match 1%"),
    ("roofline", "Q3 the same plot past the knee, B = 1024: the bf16 peak (1.97e14 FLOP/s)",
     "roofline --chip tpu-v5e --matmul 1,8192,32768 --batches 64,1024", "batches.1.flops_per_s", 1.97e14,
     "match 0.1%"),
    ("roofline", "Q4 int8[B,D] x int8[B,D,F]: arithmetic intensity (about 2)",
     "roofline --chip tpu-v5e --dtype int8 --flops 17179869184 --bytes 8592031744", "intensity_flops_per_byte", 2,
     "match 1%"),
    ("roofline", "In-text: v5e peak bf16 intensity, 1.97e14 / 8.2e11 (240)",
     "roofline --chip tpu-v5e --flops 1 --bytes 1", "peak_intensity_flops_per_byte", 240, "match 1%"),
    ("roofline", "In-text: bf16 [B, 8192] x [8192, 32768] on v5e is compute-bound past B = 240",
     "roofline --chip tpu-v5e --matmul 1,8192,32768 --find batch", "critical_batch_book", 240, "match 1%"),
    ("roofline", "Problem 5 H100 (990e12 without sparsity, 3.35e12 B/s): compute-bound batch (298)",
     "roofline --chip h100 --matmul 1,8192,32768 --find batch", "critical_batch_book", 298, "match 1%"),
    # --- tpus ------------------------------------------------------------------------------------------------
    ("tpus", "Q1 200B bf16 parameters on 32 v4p: time to load them from HBM (about 10 ms)",
     "model --params 200e9 --kv-bytes-per-token 0 --chip tpu-v4 --mesh model=32 --batch 1 --context 0",
     "t_memory_s", 10e-3, "match 5%"),
    ("tpus", "Q1 the same as a roofline of the whole model's bytes over 32 chips (about 10 ms)",
     "roofline --chip tpu-v4 --flops 0 --bytes 400e9 --chips 32", "lower_bound_s", 10e-3, "match 5%"),
    ("tpus", "Q2 v5e pod: CPU hosts (32)", "chips tpu-v5e", "facts.pod.hosts_per_pod", 32, "match 0%"),
    ("tpus", "Q2 v5e pod: TensorCores (256)", "chips tpu-v5e", "facts.pod.tensor_cores_per_pod", 256, "match 0%"),
    ("tpus", "Q2 v5e pod: bf16 FLOP/s (5.1e16)", "chips tpu-v5e", "facts.pod.pod_peak_bf16_flops_per_s", 5.1e16,
     "match 2%"),
    ("tpus", "Q2 v5e pod: HBM (4 TB)", "chips tpu-v5e", "facts.pod.pod_hbm_capacity_bytes", 4e12,
     "differs: podsim reads a chip's 16 GB as GiB (4.4e12 bytes); the book multiplies 256 x 16 GB "
     "(pod_hbm_capacity_bytes_book, next row)"),
    ("tpus", "Q2 v5e pod: HBM as the book counts it, 256 x 16e9 (4 TB)", "chips tpu-v5e",
     "facts.pod.pod_hbm_capacity_bytes_book", 4e12, "match 3%"),
    ("tpus", "Q2 v5p pod: CPU hosts (2,240)", "chips tpu-v5p", "facts.pod.hosts_per_pod", 2240, "match 0%"),
    ("tpus", "Q2 v5p pod: TensorCores (17,920)", "chips tpu-v5p", "facts.pod.tensor_cores_per_pod", 17920,
     "match 0%"),
    ("tpus", "Q2 v5p pod: bf16 FLOP/s (4e18)", "chips tpu-v5p", "facts.pod.pod_peak_bf16_flops_per_s", 4e18,
     "match 3%"),
    ("tpus", "Q2 v5p pod: HBM (860 TB)", "chips tpu-v5p", "facts.pod.pod_hbm_capacity_bytes", 860e12,
     "differs: podsim reads 96 GB as GiB (9.2e14 bytes); the book multiplies 8960 x 96 GB "
     "(pod_hbm_capacity_bytes_book, next row)"),
    ("tpus", "Q2 v5p pod: HBM as the book counts it, 8960 x 96e9 (860 TB)", "chips tpu-v5p",
     "facts.pod.pod_hbm_capacity_bytes_book", 860e12, "match 0.1%"),
    ("tpus", "In-text: v5e bf16 FLOP/s per MXU, 1.97e14 / 4 ('about 5e13')", "chips tpu-v5e",
     "facts.per_core.bf16_flops_per_s_per_mxu", 5e13, "match 2%"),
    ("tpus", "Q3 v6e over PCIe: smallest batch that stays FLOPs-bound (61,000 at 1.5e10 B/s)",
     "roofline --chip tpu-v6e --memory pcie --matmul 1,8192,32768 --find batch", "critical_batch_book", 61000,
     "differs: the question assumes 1.5e10 B/s of PCIe; podsim's v6e preset has 3.2e10 (REFERENCE.md), so "
     "9.2e14 / 3.2e10 = 28,750 (the question's 1.5e10 through --bandwidth: next row)"),
    ("tpus", "Q3 the same at the question's assumed PCIe bandwidth, 1.5e10 B/s (61,000)",
     "roofline --chip tpu-v6e --memory pcie --bandwidth 1.5e10 --matmul 1,8192,32768 --find batch",
     "critical_batch_book", 61000, "match 1%"),
    ("tpus", "Q4.1 int8[16384,4096] x int8[B,4096] on v5e from HBM: compute-bound batch (271)",
     "roofline --chip tpu-v5e --matmul 1,4096,16384 --dtype int8 --find batch", "critical_batch", 271,
     "match 5%"),
    ("tpus", "Q4.2 the same from VMEM (B > 11)",
     "roofline --chip tpu-v5e --memory vmem --matmul 1,4096,16384 --dtype int8 --find batch", "critical_batch",
     11, "match 5%"),
    ("tpus", "Q5.1 bf16[8,128,8192] from TPU{0,0} to TPU{3,3} of a v5e 4x4: first byte (6 us)",
     "send --chip tpu-v5e --topology mesh:4x4 --src 0,0 --dst 3,3 --bytes 16777216", "first_byte_s", 6e-6,
     "match 1%"),
    ("tpus", "Q5.2 the whole transfer (194 us)",
     "send --chip tpu-v5e --topology mesh:4x4 --src 0,0 --dst 3,3 --bytes 16777216", "time_s", 194e-6,
     "match 2%"),
    ("tpus", "Q6 stage 1: each chip's 1 GB over its own PCIe link (8 GB over 8 links at 1.5e10: 66 ms)",
     "roofline --chip tpu-v5e --memory pcie --flops 0 --bytes 1e9", "lower_bound_s", 66e-3,
     "differs: podsim's v5e PCIe is 1.6e10 B/s per chip (REFERENCE.md, 1.28e11 per host of 8), the question's "
     "1.5e10, so 62.5 ms (the question's 1.5e10 through --bandwidth: next row)"),
    ("tpus", "Q6 stage 1 at the question's 1.5e10 B/s per PCIe link (66 ms)",
     "roofline --chip tpu-v5e --memory pcie --bandwidth 1.5e10 --flops 0 --bytes 1e9", "lower_bound_s", 66e-3,
     "match 2%"),
    ("tpus", "Q6 stage 2: gather the 16 GB array to TPU{0,0} over its 2 ICI links, 15e9 / 9e10 (167 ms)",
     "collective gather --chip tpu-v5e --topology mesh:4x4 --root 0,0 --bytes 16e9", "book_s", 167e-3,
     "match 1%"),
    ("tpus", "Q6 stage 3: 16e9 bytes from HBM into the MXU, 16e9 / 8.1e11 (19 ms)",
     "roofline --chip tpu-v5e --flops 0 --bytes 16e9", "lower_bound_s", 19e-3, "match 3%"),
    ("tpus", "Q6 stage 4: 2 x 8 x 131072^2 = 2.7e11 FLOPs at 1.97e14 (1.3 ms)",
     "roofline --chip tpu-v5e --flops 2.7e11 --bytes 0", "t_compute_s", 1.3e-3, "match 6%"),
    ("tpus", "Q6 16 GB int8 matrix from host DRAM to TPU{0,0} and a matmul, the stages overlapped (150-200 ms: "
     "the range's middle, 175 ms, within 15%)", "run host_gather", "end_to_end_s", 0.175, "match 15%"),
    # --- sharding --------------------------------------------------------------------------------------------
    ("sharding", "Pop quiz int8[128, 2048] as A[I_XY, J] on X=2, Y=8, Z=2: bytes per device (16,384)",
     'shard "int8[128,2048]" "A[I_XY,J]" --mesh X=2,Y=8,Z=2', "bytes_per_device", 16384, "match 0%"),
    ("sharding", "Pop quiz the same: bytes over all devices (512 KiB)",
     'shard "int8[128,2048]" "A[I_XY,J]" --mesh X=2,Y=8,Z=2', "total_bytes", 524288, "match 0%"),
    ("sharding", "Pop quiz 2 AllGather_Y([E_Y, F]) on v5e {X: 8, Y: 4}, E=2048, F=8192 bf16, no wraparound (560 us)",
     "collective all_gather --chip tpu-v5e --topology mesh:8x4 --array bf16[2048,8192] --sharding A[E_Y,F] "
     "--mesh X=8,Y=4", "book_s", 560e-6,
     "match 1%"),
    ("sharding", "Pop quiz 2 the same with E = F = 256: latency-bound, 3 hops (about 3 us)",
     "collective all_gather --chip tpu-v5e --topology mesh:8x4 --array bf16[256,256] --sharding A[E_Y,F] "
     "--mesh X=8,Y=4", "book_s", 3e-6,
     "match 1%"),
    ("sharding", "Q1 A[I_X,J,K] on X=4,Y=8,Z=2: total bytes over one copy (16)",
     'shard "bf16[1024,512,256]" "A[I_X,J,K]" --mesh X=4,Y=8,Z=2', "replication", 16, "match 0%"),
    ("sharding", "Q2.1 AllGather_X([B_X, D_Y]) on v4p 4x4x4, B=1024, D=4096 bf16 (23 us)",
     "collective all_gather --chip tpu-v4 --topology torus:4x4x4 --array bf16[1024,4096] --sharding A[B_X,D_Y] "
     "--mesh X=4,Y=4,Z=4 --axes X", "book_s", 23e-6,
     "match 2%"),
    ("sharding", "Q2.2 AllGather_XY([B_X, D_Y]) (46 us)",
     "collective all_gather --chip tpu-v4 --topology torus:4x4x4 --array bf16[1024,4096] --sharding A[B_X,D_Y] "
     "--mesh X=4,Y=4,Z=4 --axes X,Y", "book_s", 46e-6,
     "match 2%"),
    ("sharding", "Q2.3 AllReduce_Z([B_X, D_Y]{U_Z}) (190 us)",
     "collective all_reduce --chip tpu-v4 --topology torus:4x4x4 --array bf16[1024,4096] "
     "--sharding A[B_X,D_Y]{U_Z} --mesh X=4,Y=4,Z=4", "book_s", 190e-6,
     "differs: the book's 4BD/W moves the whole array; sharded over X and Y only 1/16 of it (2BD/16 bytes) "
     "moves over Z, 2 x 524,288 / 9e10 = 11.7 us"),
    ("sharding", "Q3 AllGather_X([B_X]) of bf16[128] on v4p 4x4x4: latency-bound (about 2 us)",
     "collective all_gather --chip tpu-v4 --topology torus:4x4x4 --array bf16[128] --sharding A[B_X] "
     "--mesh X=4,Y=4,Z=4", "book_s", 2e-6,
     "match 1%"),
    ("sharding", "Q4 matmul-then-AllReduce beats AllGather-then-matmul once D > 2 C / W_ici (5,100 on v5p)",
     "roofline --chip tpu-v5p --memory ici --flops 1 --bytes 1", "contracting_dim_crossover", 5100, "match 0.1%"),
    ("sharding", "Q5-Q7 choose shardings for the lowest latency / a memory limit", None, None, None,
     "none: design questions, no printed answer in the Feb 2025 edition; podsim plan ranks layouts for a model and "
     "podsim shard / collective --array price each candidate"),
    ("sharding", "Q8 benchmark the four collectives in JAX", None, None, None,
     "none: a measurement on hardware (podsim validate holds its calibration to published ones)"),
    ("sharding", "Q10.1 AllGather of an N x N array over a one-way ring of D: scalars over one link, N^2 (1 - 1/D) "
     "(N = 8192 int8, D = 8: 58,720,256)", R8 + "all_gather " + R8V + " --algorithm unidirectional",
     "max_link_bytes", 8192**2 * 7 / 8, "match 0.01%"),
    ("sharding", "Q10.2 AllToAll over the one-way ring: N^2 / 2 (1 - 1/D) (29,360,128)",
     R8 + "all_to_all " + R8V + " --algorithm unidirectional", "max_link_bytes", 8192**2 * 7 / 16, "match 0.01%"),
    ("sharding", "Q10.4 AllGather over a bidirectional ring: half the one-way ring's, N^2 (1 - 1/D) / 2 (29,360,128)",
     R8 + "all_gather " + R8V, "max_link_bytes", 8192**2 * 7 / 16, "match 0.01%"),
    ("sharding", "Q10.5 AllToAll over the bidirectional ring: blocks of N^2 / D^2 sent at most D/2 each way, "
     "(1 + 2 + 3 + 4/2) N^2 / 64 = N^2 / 8 (8,388,608)", R8 + "all_to_all " + R8V, "max_link_bytes", 8192**2 / 8,
     "match 0.01%"),
    ("sharding", "Q10.3 the one-way ring's AllGather over its AllToAll: N^2 (1 - 1/D) over N^2 / 2 (1 - 1/D) (2)",
     R8 + "all_gather " + R8V + " --algorithm unidirectional --versus all_to_all", "versus.max_link_bytes_ratio", 2,
     "match 0.01%"),
    ("sharding", "Q10.6 the bidirectional ring's AllGather over its AllToAll: 4 as D grows (D = 64: (1 - 1/D) x 4 = "
     "3.94)", "collective all_gather --chip tpu-v5e --topology ring:64 --bytes 67108864 --versus all_to_all",
     "versus.max_link_bytes_ratio", 4, "match 2%"),
    ("sharding", "Q9 the matmul-then-ReduceScatter algorithm", None, None, None,
     "none: an algorithm written out, no number to give (podsim collective reduce_scatter and podsim roofline price "
     "its two parts for a concrete size)"),
    # --- transformers ----------------------------------------------------------------------------------------
    ("transformers", "Q1 D=4096, F=4D, V=32,000, L=64: parameters (16e9)",
     "model --config docs/book_models/transformers_q1.toml --chip tpu-v5e --no-simulate", "params_total", 16e9,
     "differs: the book rounds D to 4e3 and F to 16e3; its own formula L (3DF + 4D^2 + D) + 2DV gives 17.4e9"),
    ("transformers", "Q1 the same model's int8 KV cache per token (512 kB)",
     "model --config docs/book_models/transformers_q1.toml --kv-dtype int8 --chip tpu-v5e --no-simulate",
     "kv_bytes_per_position", 524288, "match 0%"),
    ("transformers", "Q1 the same model: attention's share of the layers' parameters, 4D^2 / (4D^2 + 12D^2) (1/4)",
     "model --config docs/book_models/transformers_q1.toml --chip tpu-v5e --no-simulate",
     "params_by_part.attention_fraction", 0.25, "match 0%"),
    ("transformers", "Q5 the context where attention FLOPs equal the QKVO projections', T = 2D (8,192 for D = 4096)",
     "model --config docs/book_models/transformers_q1.toml --chip tpu-v5e --no-simulate",
     "context_attention_equals_projections", 8192, "match 0%"),
    ("transformers", "Q2-Q4, Q6 FLOP and intensity algebra", None, None, None,
     "none: answers in symbols (2BDF / (XY) per device, 2 IJKLMNO, TG / (G + 1)) with no numbers to put in; Q4's "
     "one figure, prefill attention 'compute bound at S=240', is v5e's critical intensity read as a context, where "
     "its own TG / (G + 1) puts the crossing at 240 (G + 1) / G (480 with no grouped heads), for no stated model; Q6 "
     "has no printed answer; podsim model --config F.toml gives flops_per_token and per_op intensities for a "
     "concrete model"),
    ("transformers", "Q7 DeepSeek v3: MFU from 2.79M H800-hours, 14.8T tokens, 37B active (21.7%)",
     "model --params 37e9 --mode train --tokens-total 14.8e12 --measured-chip-hours 2.79e6 --chip h100",
     "measured_mfu_8bit", 0.217,
     "differs: the book divides by 1.513e15 FP8 FLOP/s (an H800 PCIe sheet); podsim's h100 preset has 2.0e15, "
     "so 16.4% (the book's 1.513e15 in a --chip-file: next row)"),
    ("transformers", "Q7 the same on the book's H800 figure, 1.513e15 FP8 FLOP/s dense (21.7%)",
     "model --params 37e9 --mode train --tokens-total 14.8e12 --measured-chip-hours 2.79e6 "
     "--chip-file docs/book_models/h800_book.toml", "measured_mfu_8bit", 0.217, "match 1%"),
    # --- training --------------------------------------------------------------------------------------------
    ("training", "Q1 LLaMA-2 13B parameters (13B)", "model llama-2-13b --chip tpu-v5p --no-simulate",
     "params_total", 13e9, "match 2%"),
    ("training", "Q3 data parallelism on v5p: critical batch per chip (2,550)",
     "roofline --chip tpu-v5p --memory ici --flops 1 --bytes 1", "critical_batch_per_chip.data_parallel", 2550,
     "match 0.1%"),
    ("training", "Q3 FSDP over all three axes of v5p 16x16x16 (850)",
     "roofline --chip tpu-v5p --memory ici --axes 3 --flops 1 --bytes 1", "critical_batch_per_chip.fsdp", 850,
     "match 0.1%"),
    ("training", "Q3 mixed FSDP + tensor parallelism, FSDP on two axes (alpha^2 / (2F) = 235)",
     "model llama-2-13b --mode train --chip tpu-v5p --topology torus:4x4x4 --mesh fsdp=16,model=4 --batch 16 "
     "--seq 1024 --no-simulate", "critical_batch_per_chip.fsdp+model", 235,
     "match 1%"),
    ("training", "Q3.3 the same, the Feb 2025 edition's printed 2 x 2550^2 / F (940)",
     "model llama-2-13b --mode train --chip tpu-v5p --topology torus:4x4x4 --mesh fsdp=16,model=4 --batch 16 "
     "--seq 1024 --no-simulate", "critical_batch_per_chip_older_edition.fsdp+model", 940, "match 1%"),
    ("training", "Q2 LLaMA-2 13B, bf16 parameters and fp32 Adam: (2 + 4 + 4) x 13e9 (130 GB)",
     "model llama-2-13b --mode train --chip tpu-v5p --batch 16000 --seq 1000 --no-simulate",
     "book_memory.state_bytes", 130e9, "match 1%"),
    ("training", "Q2 its activations at 16M tokens, saved after the three big matmuls: 2 L B (D + 2F) (42 TB)",
     "model llama-2-13b --mode train --chip tpu-v5p --batch 16000 --seq 1000 --no-simulate",
     "book_memory.ffw_outputs.checkpoint_bytes", 42e12, "match 1%"),
    ("training", "Q3.2 pure FSDP at 3M tokens: the same checkpoints and state in all (8 TB)",
     "model llama-2-13b --mode train --chip tpu-v5p --batch 3000 --seq 1000 --no-simulate",
     "book_memory.ffw_outputs.total_bytes", 8e12, "match 1%"),
    ("training", "Q4 at 1M tokens on the 4096-chip slice: pure FSDP's tokens per chip, 1e6 / 4096 (no printed "
     "answer; the chapter's method: 244, below FSDP's 850: comms-bound)", T13 + " --batch 1000 --seq 1000",
     "book_fsdp_model.tokens_per_chip", 1e6 / 4096, "match 0.1%"),
    ("training", "Q4 at 10M tokens: 1e7 / 4096 (no printed answer; 2,441, above 850: compute-bound)",
     T13 + " --batch 10000 --seq 1000", "book_fsdp_model.tokens_per_chip", 1e7 / 4096, "match 0.1%"),
    ("training", "Q4 at 10M tokens: state and the three big matmuls' checkpoints in all (no printed answer; "
     "130e9 + 2 L B (D + 2F) = 26.3 TB, under the slice's 393 TB)", T13 + " --batch 10000 --seq 1000",
     "book_memory.ffw_outputs.total_bytes", 130e9 + 2 * 40 * 1e7 * (5120 + 2 * 13824), "match 0.1%"),
    ("training", "In-text: LLaMA-3 70B's 16M-token batch over 16e6 / (2550 / 3) = 18,823 v5p at 50% MFU (about 17 "
     "days)", "model llama-3-70b --mode train --chip tpu-v5p --mesh fsdp=8 --batch 4000 --seq 4000 --no-simulate "
     "--tokens-total 15e12 --assume-mfu 0.5 --chips 18823", "time_to_train_days", 17, "match 1%"),
    ("training", "In-text: pure data parallelism over DCN is comms-bound below C_pod / W_dcn per pod (76,000; the "
     "book's 8k x 4.5e14 = 3.8e18 over 2000 hosts x 2.5e10: podsim's 4.59e14 / 6.25e9 a chip is 73,440)",
     "roofline --chip tpu-v5p --memory dcn --flops 1 --bytes 1", "critical_batch_per_slice.data_parallel", 76000,
     "match 5%"),
    # --- applied-training (Training LLaMA 3 on TPUs) ---------------------------------------------------------
    ("applied-training", "LLaMA 3-70B parameter count from its table (70.4e9)",
     "model llama-3-70b --chip tpu-v5p --no-simulate", "params_total", 70.4e9, "match 1%"),
    ("applied-training", "its table: FFW parameters, 8192 x 28672 x 3 x 80 (56.3e9)",
     "model llama-3-70b --chip tpu-v5p --no-simulate", "params_by_part.mlp", 56.3e9, "match 1%"),
    ("applied-training", "its table: vocabulary parameters, 2 x 128,256 x 8192 (2.1e9)",
     "model llama-3-70b --chip tpu-v5p --no-simulate", "params_by_part.embeddings", 2.1e9, "match 1%"),
    ("applied-training", "its table: attention parameters, 80 (2 x 8192 x 64 x 128 + 2 x 8192 x 8 x 128) (12e9)",
     "model llama-3-70b --chip tpu-v5p --no-simulate", "params_by_part.attention", 12e9, "match 1%"),
    ("applied-training", "FLOPs per token of a training step, 6 x 70e9 (4.2e11; podsim counts attention, 1% at "
     "seq 1024)", "model llama-3-70b --mode train --chip tpu-v5p --mesh fsdp=8 --batch 8 --seq 1024 --no-simulate",
     "model_flops_per_token", 4.2e11, "match 1%"),
    ("applied-training", "one token's step on a single v5p at full utilisation, 4.2e11 / 4.59e14 ('roughly 1 ms': "
     "0.92 ms)", "model llama-3-70b --mode train --chip tpu-v5p --mesh fsdp=8 --batch 8 --seq 1024 --no-simulate "
     "--tokens-total 1 --assume-mfu 1 --chips 1", "time_to_train_s", 4.2e11 / 4.59e14, "match 1%"),
    ("applied-training", "LLaMA 3-70B on 15T tokens: training FLOPs, 6 N T (6.3e24)",
     "model llama-3-70b --mode train --chip tpu-v5p --mesh fsdp=8 --batch 8 --seq 1024 --no-simulate "
     "--tokens-total 15e12 --assume-mfu 0.4 --chips 8960", "train_flops", 6.3e24, "match 1%"),
    ("applied-training", "the same on a full v5p pod of 8,960 chips at 40% MFU (44 days)",
     "model llama-3-70b --mode train --chip tpu-v5p --mesh fsdp=8 --batch 8 --seq 1024 --no-simulate "
     "--tokens-total 15e12 --assume-mfu 0.4 --chips 8960", "time_to_train_days", 44, "match 2%"),
    ("applied-training", "pure FSDP over the pod's 3 axes: the per-chip batch it needs (2550 / 3 = 850)",
     "roofline --chip tpu-v5p --memory ici --axes 3 --flops 1 --bytes 1", "critical_batch_per_chip.fsdp", 850,
     "match 0.1%"),
    ("applied-training", "mixed FSDP + tensor parallelism: comms-bound below 2 x 2550^2 / F per chip (453, Feb 2025)",
     "model llama-3-70b --mode train --chip tpu-v5p --topology torus:4x4x4 --mesh fsdp=16,model=4 --batch 16 "
     "--seq 1024 --no-simulate", "critical_batch_per_chip_older_edition.fsdp+model", 453, "match 1%"),
    ("applied-training", "on a single v5p at full utilisation, 6.3e24 / 4.59e14 (435 years)",
     "model llama-3-70b --mode train --chip tpu-v5p --mesh fsdp=8 --batch 8 --seq 1024 --no-simulate "
     "--tokens-total 15e12 --assume-mfu 1 --chips 1", "time_to_train_s", 435 * 365.25 * 86400, "match 1%"),
    ("applied-training", "4M tokens a batch (4e6, as the book counts), 4 bf16 checkpoints a layer: parameters "
     "(140 GB)", AT4M, "book_memory.params_bytes", 140e9, "match 1%"),
    ("applied-training", "the same: fp32 optimizer state, 8 x 70e9 (560 GB)", AT4M, "book_memory.optimizer_bytes",
     560e9, "match 1%"),
    ("applied-training", "the same: gradient checkpoints, 2 x 8192 x 4e6 x 4 x 80 (20.9 TB)", AT4M,
     "book_memory.checkpoint_bytes", 20.9e12, "match 1%"),
    ("applied-training", "the same: total (21.6 TB)", AT4M, "book_memory.total_bytes", 21.6e12, "match 1%"),
    ("applied-training", "the same: fewest v5p that hold it, 21.6e12 / 96e9 (225)", AT4M, "book_memory.min_chips",
     225, "match 1%"),
    ("applied-training", "the same on 8,960 chips: memory per chip (2.4 GB)", AT4M, "book_memory.per_chip_bytes",
     2.4e9, "match 1%"),
    ("applied-training", "FSDP alone over 8,960 chips: tokens per chip, 4 x 1024 x 1024 / 8960 (468)", AT419,
     "book_fsdp_model.tokens_per_chip", 468, "match 0.1%"),
    ("applied-training", "on the 225 chips that hold it: 44 days x 8960 / 225 (1,752 days; the book writes '/ 171' "
     "but divides by 225)", AT4M + " --chips 225", "time_to_train_days", 44 * 8960 / 225, "match 2%"),
    ("applied-training", "with 12 checkpoints a layer on 8,960 chips: memory per chip (8 GB)",
     AT4M.replace("--checkpoints-per-layer 4", "--checkpoints-per-layer 12"), "book_memory.per_chip_bytes", 8e9,
     "differs: (2 x 8192 x 4e6 x 12 x 80 + 700e9) / 8960 = 7.1 GB; the book's 'we'd still only be at 8 GB' is a "
     "round upper figure"),
    ("applied-training", "mixed FSDP + tensor parallelism: X_opt = sqrt(2 x 4.19e6 x 8960 / 28672) (1618)", AT419,
     "book_fsdp_model.x_opt", 1618, "match 0.1%"),
    # --- inference -------------------------------------------------------------------------------------------
    ("inference", "Pop quiz 30B int8 weights, bf16 FLOPs, 100 kB/token KV at 8192, v5e 4x4, batch 4 (2.5 ms)",
     "model --params 30e9 --kv-bytes-per-token 100e3 --chip tpu-v5e --mesh model=16 --batch 4 --context 8192 "
     "--weight-dtype int8 --compute-dtype bf16 --no-simulate", "book_t_memory_s", 2.5e-3, "match 2%"),
    ("inference", "Pop quiz the same at batch 256: MLP compute-bound plus attention's KV reads (21 ms)",
     "model --params 30e9 --kv-bytes-per-token 100e3 --chip tpu-v5e --mesh model=16 --batch 256 --context 8192 "
     "--weight-dtype int8 --compute-dtype bf16 --no-simulate", "lower_bound_per_op_s", 21e-3, "match 1%"),
    ("inference", "In-text: model parallelism past F / (B beta) turns ICI-bound against HBM (F = 16,384, B = 32: 64)",
     "model --config docs/book_models/transformers_q1.toml --chip tpu-v5e --layout 2d --mesh model=16 --batch 32 "
     "--context 0 --no-simulate", "comm_bound_chips.1d_vs_hbm", 64,
     "differs: the book rounds beta = W_hbm / W_ici to 8; v5e's is 8.2e11 / 9e10 = 9.1, so 16384 / (32 x 9.1) = 56"),
    ("inference", "Q7 2-D weight-stationary beats 1-D past N chips (book: 81 for F = 4D)",
     "model llama-2-7b --chip tpu-v5e --layout 2d --mesh model=8 --batch 8 --context 1024 --no-simulate",
     "comm_bound_chips.crossover_1d_2d_book", 81,
     "differs: the book's own formula 32 (F/D)(3/4)^2 gives 128 x 9/16 = 72 for F = 4D, not 81; for llama-2-7b "
     "(F = 2.69 D) it is 48.4"),
    ("inference", "Q1 the chapter's LLaMA-2-13B-like model: parameters (18.4e9)",
     "model --config docs/book_models/inference_worked.toml --chip tpu-v5e --no-simulate", "params_total", 18.4e9,
     "match 1%"),
    ("inference", "Q1 the same model's KV cache per token (no printed answer; the chapter's 2 H K L x 2 B = 2 x 256 x "
     "8 x 64 x 2: 524,288 in bf16)", "model --config docs/book_models/inference_worked.toml --chip tpu-v5e "
     "--no-simulate", "kv_bytes_per_position", 2 * 256 * 8 * 64 * 2, "match 0%"),
    ("inference", "In-text: LLaMA 2-13B's bf16 weights for inference (26 GB)",
     "model llama-2-13b --chip tpu-v5e --batch 1 --context 8192 --no-simulate", "weight_bytes", 26e9, "match 1%"),
    ("inference", "In-text: LLaMA 2-13B's bf16 KV cache of one 8192 sequence, 8192 x 40 x 128 x 40 x 2 x 2 (6.7 GB)",
     "model llama-2-13b --chip tpu-v5e --batch 1 --context 8192 --no-simulate", "kv_cache_bytes", 6.7e9,
     "match 1%"),
    ("inference", "Q3 int8 weights from HBM on a v5e 4x4 (no printed answer; the chapter's method: 18.4e9 B / (16 x "
     "8.1e11) = 1.42 ms)", "model --config docs/book_models/inference_worked.toml --chip tpu-v5e --mesh model=16 "
     "--weight-dtype int8 --kv-dtype int8 --no-simulate", "t_memory_s", 1.42e-3, "match 2%"),
    ("inference", "Q5.1 the model as an MoE, E=16, k=2: parameters (no printed answer; L (3DFE + 2DH(N+K)) + DV "
     "= 211.7e9)", "model --config docs/book_models/inference_moe.toml --chip tpu-v5e --no-simulate", "params_total",
     211.7e9, "match 1%"),
    ("inference", "Q5.2 the MoE's compute-bound batch (no printed answer; the dense 240 scaled by E / k: 1,920)",
     "model --config docs/book_models/inference_moe.toml --chip tpu-v5e --no-simulate", "critical_batch", 1920,
     "differs: podsim reads only the experts a batch's tokens reach, E (1 - (1 - k/E)^B) of them, so fewer weight "
     "bytes per token than all E experts (the book's rule, all E read: critical_batch_book, next row)"),
    ("inference", "Q5.2 the same by the book's rule, the dense C / W_hbm times E / k (1,920)",
     "model --config docs/book_models/inference_moe.toml --chip tpu-v5e --no-simulate", "critical_batch_book", 1920,
     "match 1%"),
    ("inference", "Q5.3 the MoE's KV cache per token: the dense model's, experts hold no KV (no printed answer; "
     "524,288 in bf16)", "model --config docs/book_models/inference_moe.toml --chip tpu-v5e --no-simulate",
     "kv_bytes_per_position", 2 * 256 * 8 * 64 * 2, "match 0%"),
    ("inference", "Q6.1 the MoE's int8 weights from HBM on a v5e 8x16, Y=8, Z=16 (no printed answer; the chapter's "
     "method: Q5.1's 211.7e9 B / (128 x 8.1e11) = 2.04 ms)", "model --params 211.66e9 --kv-bytes-per-token 262144 "
     "--chip tpu-v5e --mesh model=128 --weight-dtype int8 --no-simulate", "t_memory_s", 211.7e9 / (128 * 8.1e11),
     "match 2%"),
    ("inference", "Q6.1 the same: free HBM per TPU (no printed answer; 16e9 - 211.7e9 / 128 = 14.35e9)",
     "model --params 211.66e9 --kv-bytes-per-token 262144 --chip tpu-v5e --mesh model=128 --weight-dtype int8 "
     "--no-simulate", "book_hbm.spare_per_chip_bytes", 16e9 - 211.7e9 / 128, "match 1%"),
    ("inference", "Q6.2 the smallest slice for the MoE's int8 weights (no printed answer; 211.7e9 / 16e9 = 13.2 "
     "chips: a 4x4)", "model --config docs/book_models/inference_moe.toml --chip tpu-v5e --mesh model=16 "
     "--weight-dtype int8 --kv-dtype int8 --no-simulate", "book_hbm.chips_for_weights", 211.7e9 / 16e9,
     "match 1%"),
    ("inference", "Q2, Q4 the largest int8 batch and a sharding on a v5e 4x4", None, None, None,
     "none: no printed answer in the current edition, and Q2 gives no context length to size a batch at; with "
     "one, podsim model --config docs/book_models/inference_worked.toml --mesh model=16 --weight-dtype int8 "
     "--kv-dtype int8 --context N answers it (max_batch, book_hbm.max_batch); Q4 is a design question (podsim "
     "plan ranks layouts). Q6.1 is priced from the whole model's bytes (--params, Q5.1's count): podsim's decode "
     "shards over data and model axes only, and model=128 does not divide the config's 32 heads -- expert "
     "sharding (E over Z) is a training axis in podsim"),
    # --- applied-inference (Serving LLaMA 3-70B on TPUs) -----------------------------------------------------
    ("applied-inference", "LLaMA 3-70B int8 KV cache per token, 2 K H L (160 kB)",
     L3 + " --kv-dtype int8 --no-simulate", "kv_bytes_per_position", 160e3, "match 3%"),
    ("applied-inference", "the same over a 32k sequence (5.3 GB)",
     L3 + " --kv-dtype int8 --batch 1 --context 32768 --no-simulate", "kv_cache_bytes", 5.3e9, "match 2%"),
    ("applied-inference", "batch 32 at 8192, params and KV in int8: total memory (112 GB)",
     L3 + " --batch 32 --context 8192 --weight-dtype int8 --kv-dtype int8 --no-simulate", "weights_plus_kv_bytes",
     112e9, "match 2%"),
    ("applied-inference", "the same on a v5e 4x2, bf16 FLOPs: step time, (KV + params) / (8 W_hbm) (17 ms)",
     L3 + " --mesh model=8 --batch 32 --context 8192 --weight-dtype int8 --kv-dtype int8 --compute-dtype bf16 "
     "--no-simulate", "t_memory_s", 17e-3, "match 2%"),
    ("applied-inference", "the same: throughput, 32 / 17 ms (1,882 tokens/s)",
     L3 + " --mesh model=8 --batch 32 --context 8192 --weight-dtype int8 --kv-dtype int8 --compute-dtype bf16 "
     "--no-simulate", "tokens_per_s", 1882, "match 2%"),
    ("applied-inference", "the same on a 4x4, the KV cache split by heads and batch (8.5 ms)",
     L3 + " --mesh model=16 --kv-sharding auto --batch 32 --context 8192 --weight-dtype int8 --kv-dtype int8 "
     "--compute-dtype bf16 --no-simulate", "t_memory_s", 8.5e-3, "match 2%"),
    ("applied-inference", "compute-bound batch, bf16 weights and FLOPs (240)",
     "roofline --chip tpu-v5e --matmul 1,8192,28672 --find batch", "critical_batch_book", 240, "match 1%"),
    ("applied-inference", "int8 weights, bf16 FLOPs (120)",
     "roofline --chip tpu-v5e --matmul 1,8192,28672 --dtype bf16 --weight-dtype int8 --find batch",
     "critical_batch_book", 120, "match 1%"),
    ("applied-inference", "int8 weights, int8 FLOPs (240)",
     "roofline --chip tpu-v5e --matmul 1,8192,28672 --dtype int8 --find batch", "critical_batch_book", 240,
     "match 1%"),
    ("applied-inference", "a step that reads a whole v5e's HBM, 16 GB / 8.2e11 (19 ms)",
     "roofline --chip tpu-v5e --flops 0 --bytes 16e9", "lower_bound_s", 19e-3, "match 3%"),
    ("applied-inference", "prefill of 8,192 tokens on 16 v5e at 40% MFU (0.91 s)",
     L3 + " --mode prefill --mesh model=16 --batch 1 --seq 8192 --assume-mfu 0.4 --no-simulate",
     "assumed_mfu_step_time_s", 0.91,
     "differs: podsim counts attention's FLOPs (7% of them at 8k) and 70.55e9 parameters; the book 2 x 70e9 x T "
     "(book_assumed_mfu_step_time_s, next row)"),
    ("applied-inference", "the same as the book counts it, 2 N T FLOPs without attention (0.91 s)",
     L3 + " --mode prefill --mesh model=16 --batch 1 --seq 8192 --assume-mfu 0.4 --no-simulate",
     "book_assumed_mfu_step_time_s", 0.91, "match 1%"),
    ("applied-inference", "batch 32 at 8192 in int8: the smallest slice, 112e9 / 16e9 (7 chips)",
     L3 + " --batch 32 --context 8192 --weight-dtype int8 --kv-dtype int8 --no-simulate",
     "book_hbm.chips_for_weights_plus_kv", 7, "match 2%"),
    ("applied-inference", "the smallest slice for bf16 weights alone, 70e9 x 2 / 16e9 (8.75 chips)",
     L3 + " --batch 1 --context 8192 --no-simulate", "book_hbm.chips_for_weights", 8.75, "match 1%"),
    ("applied-inference", "the same for int8 weights, 70e9 / 16e9 (4.38 chips)",
     L3 + " --batch 1 --context 8192 --weight-dtype int8 --kv-dtype int8 --no-simulate", "book_hbm.chips_for_weights",
     4.38, "match 1%"),
    ("applied-inference", "bf16 on a 4x4: KV caches of 8k that fit beside the weights, 116e9 / (324e3 x 8192) (43)",
     L3 + " --mesh model=16 --kv-sharding auto --batch 1 --context 8192 --no-simulate", "book_hbm.max_batch", 43,
     "match 3%"),
    ("applied-inference", "the smallest-slice table: bf16 KV cache per token, 2 K H L x 2 B (324 kB)",
     L3 + " --batch 1 --context 8192 --no-simulate", "kv_bytes_per_position", 324e3, "match 2%"),
    ("applied-inference", "the same table, int4 (KV and parameters): KV cache per token (81 kB)",
     L3 + " --batch 1 --context 8192 --weight-dtype int4 --kv-dtype int4 --no-simulate", "kv_bytes_per_position",
     81e3, "match 2%"),
    ("applied-inference", "int4: parameter bytes (45 GB)",
     L3 + " --batch 1 --context 8192 --weight-dtype int4 --kv-dtype int4 --no-simulate", "weight_bytes", 45e9,
     "differs: a slip in the book's table: half a byte a parameter is 70e9 x 0.5 = 35 GB (35.3e9 for LLaMA 3-70B's "
     "70.55e9 parameters), not 45 GB"),
    ("applied-inference", "int4: fewest v5e for the weights, 45e9 / 16e9 (2.81)",
     L3 + " --batch 1 --context 8192 --weight-dtype int4 --kv-dtype int4 --no-simulate", "book_hbm.chips_for_weights",
     2.81, "differs: follows the table's 45 GB slip; 35.3e9 / 16e9 = 2.2 (the 2x2 slice is still the smallest)"),
    ("applied-inference", "bf16 on a 4x4: HBM left for KV caches, 16 x 16 GB - 140 GB (116 GB)",
     L3 + " --mesh model=16 --kv-sharding auto --batch 1 --context 8192 --no-simulate", "book_hbm.kv_room_bytes",
     116e9, "match 2%"),
    ("applied-inference", "int8 on a 4x2: HBM left for KV caches (68 GB)",
     L3 + " --mesh model=8 --kv-sharding auto --batch 1 --context 8192 --weight-dtype int8 --kv-dtype int8 "
     "--no-simulate", "book_hbm.kv_room_bytes", 68e9,
     "differs: a slip in the book's table: 8 x 16 GB - 70 GB = 58 GB (57.4e9 for 70.55e9 int8 parameters)"),
    ("applied-inference", "int8 on a 4x2: KV caches of 8k that fit (52)",
     L3 + " --mesh model=8 --kv-sharding auto --batch 1 --context 8192 --weight-dtype int8 --kv-dtype int8 "
     "--no-simulate", "book_hbm.max_batch", 52,
     "differs: follows the 68 GB slip; the 58 GB left hold 58e9 / (162e3 x 8192) = 43 caches (podsim 42: 163,840 B "
     "a token), as many as bf16 on a 4x4, since the KV cache halves with the weights"),
    ("applied-inference", "int4 on a 2x2: HBM left for KV caches (19 GB)",
     L3 + " --mesh model=4 --kv-sharding auto --batch 1 --context 8192 --weight-dtype int4 --kv-dtype int4 "
     "--no-simulate", "book_hbm.kv_room_bytes", 19e9,
     "differs: follows the table's 45 GB int4 weights; 4 x 16 GB - 35 GB = 29 GB (28.7e9)"),
    ("applied-inference", "int4 on a 2x2: KV caches of 8k that fit (67)",
     L3 + " --mesh model=4 --kv-sharding auto --batch 1 --context 8192 --weight-dtype int4 --kv-dtype int4 "
     "--no-simulate", "book_hbm.max_batch", 67,
     "differs: neither of the book's HBM figures gives 67 (19e9 / (81e3 x 8192) = 28); the 29 GB left hold 43 "
     "(podsim 42)"),
    ("applied-inference", "the largest bf16 batch on a 4x4 (42 here): a step reads a full HBM (19 ms)",
     L3 + " --mesh model=16 --kv-sharding auto --batch 42 --context 8192 --no-simulate", "t_memory_s", 0.019,
     "match 2%"),
    ("applied-inference", "int4 weights on a 2x2, a tiny batch: the weights' load alone (about 10 ms)",
     L3 + " --mesh model=4 --batch 1 --context 8192 --weight-dtype int4 --kv-dtype int4 --no-simulate", "t_memory_s",
     0.010, "match 10%"),
    ("applied-inference", "a median decode of 512 tokens at that step, 19 ms x 512 (9.7 s; 'about 9 s')",
     L3 + " --mesh model=16 --kv-sharding auto --batch 42 --context 8192 --decode-length 512 --no-simulate",
     "decode_time_s", 0.019 * 512, "match 2%"),
    ("applied-inference", "QPS per chip in bf16 on a 4x4, B / (step x 512 x N) = 43 / (0.019 x 512 x 16) (0.27)",
     L3 + " --mesh model=16 --kv-sharding auto --batch 42 --context 8192 --decode-length 512 --no-simulate",
     "queries_per_s_per_chip", 0.27, "match 2%"),
    ("applied-inference", "QPS per chip in int8 on a 4x2 (0.66)",
     L3 + " --mesh model=8 --kv-sharding auto --batch 42 --context 8192 --decode-length 512 --weight-dtype int8 "
     "--kv-dtype int8 --no-simulate", "queries_per_s_per_chip", 0.66,
     "differs: the book's batch of 52 follows its 68 GB slip; at the 42 that fit: 42 / (0.0192 x 512 x 8) = 0.53"),
    ("applied-inference", "QPS per chip in int4 on a 2x2 (1.72)",
     L3 + " --mesh model=4 --kv-sharding auto --batch 42 --context 8192 --decode-length 512 --weight-dtype int4 "
     "--kv-dtype int4 --no-simulate", "queries_per_s_per_chip", 1.72,
     "differs: the book's batch of 67 (see its row above); at the 42 that fit: 42 / (0.0192 x 512 x 4) = 1.07"),
    ("applied-inference", "the topology doubled, bf16 on a 4x8: HBM left for KV caches (186 GB)",
     L3 + " --mesh model=32 --kv-sharding auto --batch 1 --context 8192 --no-simulate", "book_hbm.kv_room_bytes",
     186e9, "differs: a slip: 32 x 16 GB - 140 GB = 372 GB (370.9e9), twice the book's 186"),
    ("applied-inference", "bf16 on a 4x8: KV caches of 8k that fit (161)",
     L3 + " --mesh model=32 --kv-sharding auto --batch 1 --context 8192 --no-simulate", "book_hbm.max_batch", 161,
     "differs: neither 186 GB (70 caches) nor 372 GB (140; podsim 138 at 163,840 B a token) gives the book's 161"),
    ("applied-inference", "bf16 on a 4x8: QPS per chip (0.51)",
     L3 + " --mesh model=32 --kv-sharding auto --batch 138 --context 8192 --decode-length 512 --no-simulate",
     "queries_per_s_per_chip", 0.51,
     "differs: follows the book's batch of 161; at the 138 that fit, 138 / (0.0194 x 512 x 32) = 0.43"),
    ("applied-inference", "bf16 on a 4x8 at batch 64: model parallelism stays HBM-bound up to F / (8 B) = 28,672 / "
     "(8 x 64) (56)", L3 + " --layout 2d --mesh model=32 --batch 64 --context 0 --no-simulate",
     "comm_bound_chips.1d_vs_hbm", 56,
     "differs: the book weighs one matmul's weights against one [B, D] collective and rounds beta = W_hbm / W_ici to "
     "8; podsim weighs a whole layer (attention and the gated MLP's 3 matrices, (3F + 2q + 2kv) / 4 = 26,112 columns "
     "against its two AllReduces) with v5e's beta of 9.1: 44.8"),
    ("applied-inference", "prefill 8192, decode 4096, batch 32: sequences finishing a step, 32 / 4096 (0.0078)",
     L3 + " --mesh model=16 --batch 32 --context 8192 --decode-length 4096 --no-simulate",
     "sequences_finished_per_step", 32 / 4096, "match 0%"),
    ("applied-inference", "the same: KV tokens evicted a step, B (P + G) / G = 32 (8192 + 4096) / 4096 (96)",
     L3 + " --mesh model=16 --batch 32 --context 8192 --decode-length 4096 --no-simulate",
     "kv_tokens_evicted_per_step", 96, "match 0%"),
    ("applied-inference", "disaggregated serving, prefill 8192 at 40% MFU, decode 512, batch 32: prefill:generate "
     "servers, 0.91 x 32 / (0.019 x 512) (3)",
     L3 + " --mesh model=16 --kv-sharding auto --batch 32 --context 8192 --decode-length 512 --prefill-mfu 0.4 "
     "--no-simulate", "book_prefill_to_generate_servers", 3,
     "differs: the book multiplies by a batch of 32 but divides by the 19 ms step of batch 43; batch 32's step is "
     "17.1 ms, so 0.917 x 32 / (0.0171 x 512) = 3.34 on the book's 2 N T prefill (3.55 with attention's FLOPs: "
     "prefill_to_generate_servers)"),
    # --- gpus ------------------------------------------------------------------------------------------------
    ("gpus", "Quiz 1 Q1 H100 fp32 CUDA cores (16,896)", "chips h100", "facts.gpu.cuda_cores", 16896, "match 0%"),
    ("gpus", "Quiz 1 Q1 B200 fp32 CUDA cores (18,944)", "chips b200", "facts.gpu.cuda_cores", 18944, "match 0%"),
    ("gpus", "Quiz 1 Q2 H100 vector fp32 FLOP/s at 1.59 GHz, 1 op per cycle (26.9e12)", "chips h100",
     "facts.gpu.cuda_core_flops_per_s_base", 26.9e12, "match 1%"),
    ("gpus", "Quiz 1 Q2 with boost, 1.98 GHz (33.5e12)", "chips h100", "facts.gpu.cuda_core_flops_per_s_boost",
     33.5e12, "match 1%"),
    ("gpus", "Quiz 1 Q3 H100 peak bf16 intensity (295)", "roofline --chip h100 --flops 1 --bytes 1",
     "peak_intensity_flops_per_byte", 295, "match 1%"),
    ("gpus", "Quiz 1 Q3 B200 peak bf16 intensity (281)", "roofline --chip b200 --flops 1 --bytes 1",
     "peak_intensity_flops_per_byte", 281, "match 3%"),
    ("gpus", "Quiz 1 Q3 H100 fp8 intensity (590)", "roofline --chip h100 --dtype fp8 --flops 1 --bytes 1",
     "peak_intensity_flops_per_byte", 590, "match 2%"),
    ("gpus", "Quiz 1 Q4 fp16[64,4096] x fp16[4096,8192] on B200 (8.6 us)",
     "roofline --chip b200 --matmul 64,4096,8192", "lower_bound_s", 8.6e-6, "match 2%"),
    ("gpus", "Quiz 1 Q4 fp16[512,4096] x fp16[4096,8192] on B200 (15 us)",
     "roofline --chip b200 --matmul 512,4096,8192", "lower_bound_s", 15e-6, "match 2%"),
    ("gpus", "Quiz 1 Q3 B200 fp8 intensity (562)", "roofline --chip b200 --dtype fp8 --flops 1 --bytes 1",
     "peak_intensity_flops_per_byte", 562, "match 1%"),
    ("gpus", "In-text: H100 bf16 FLOP/s per SM, 990e12 / 132 (7.5e12)", "chips h100",
     "facts.per_core.bf16_flops_per_s_per_tensor_core", 7.5e12, "match 1%"),
    ("gpus", "In-text: H100 Tensor Core bf16 FLOPs per cycle, 7.5e12 / 1.76e9 / 4 (about 1024)", "chips h100",
     "facts.gpu.tensor_core_bf16_flops_per_cycle", 1024, "match 5%"),
    ("gpus", "Quiz 1 Q5 H100 SMEM in all (33 MB)", "chips h100", "facts.gpu.smem_bytes", 33e6, "match 3%"),
    ("gpus", "Quiz 1 Q6 B200 clock from 80 TFLOP/s of fp32 FMAs (2.1 GHz)", "chips b200",
     "facts.gpu.fma_clock_hz_from_vpu", 2.1e9, "match 1%"),
    ("gpus", "Quiz 1 Q7 fp32[N] + fp32[N], N = 1024^3, on H100 (3.84 ms)",
     "roofline --chip h100 --dtype fp32 --flops 1073741824 --bytes 12884901888", "lower_bound_s", 3.84e-3,
     "match 1%"),
    ("gpus", "Quiz 1 Q7 fp32[N] + fp32[N], N = 65,536, on H100: 12 N / 3.35e12 (0.23 us)",
     "roofline --chip h100 --dtype fp32 --flops 65536 --bytes 786432", "lower_bound_s", 0.23e-6, "match 3%"),
    ("gpus", "Quiz 1 Q7 H100 peak vector intensity, 33.5e12 / 3.35e12 (10)",
     "roofline --chip h100 --dtype fp32 --flops 1 --bytes 1", "peak_intensity_flops_per_byte", 10,
     "differs: podsim's fp32 rate counts an FMA as 2 FLOPs (66.9e12, the spec sheet's), so 20; the book's one op "
     "per cycle is facts.gpu.cuda_core_flops_per_s_boost (33.5e12, row above) and book_peak_intensity_flops_per_byte "
     "(next row)"),
    ("gpus", "Quiz 1 Q7 the same as the book counts it, one op a CUDA core a cycle (10)",
     "roofline --chip h100 --dtype fp32 --flops 1 --bytes 1", "book_peak_intensity_flops_per_byte", 10, "match 1%"),
    ("gpus", "Quiz 2 Q1 total bandwidth of an 8xH100 node (3.6 TB/s)", "chips h100",
     "facts.gpu.node_nvlink_bytes_per_s", 3.6e12, "match 0%"),
    ("gpus", "Quiz 2 Q2 bisection bandwidth of the node (3.6 TB/s)", "chips h100",
     "facts.gpu.node_nvlink_bytes_per_s", 3.6e12, "match 0%"),
    ("gpus", "Quiz 2 Q3 AllGather of bf16[4096, 65536] on 8xH100 (1.04 ms)",
     "collective all_gather --chip h100 --topology switch:8 --bytes 536870912", "book_s", 1.04e-3, "match 1%"),
    ("gpus", "Pop quiz 1 AllGather of bf16[1024, 16384] in a node (65 us)",
     "collective all_gather --chip h100 --topology switch:8 --bytes 33554432", "book_s", 65e-6, "match 1%"),
    ("gpus", "Quiz 3 Q1 node-level bandwidth of the fat tree (400 GB/s a node)", "chips h100",
     "facts.gpu.node_egress_bytes_per_s", 400e9, "match 0%"),
    ("gpus", "Cross-node AllGather bandwidth of the 1,024-GPU SuperPOD (413 GB/s)",
     "collective all_gather --chip h100 --topology superpod:4 --bytes 1GB", "book_levels_bandwidth_bytes_per_s",
     413e9, "match 1%"),
    ("gpus", "Quiz 4 Q5 AllGather over exactly 2 nodes: bounded by the node (B / 514e9)",
     "collective all_gather --chip h100 --topology nodes:2:8 --bytes 514e9", "book_s", 1.0, "match 1%"),
    ("gpus", "Data parallelism inside a node: tokens per GPU (2,200)",
     "roofline --chip h100 --memory nvlink --flops 1 --bytes 1", "critical_batch_per_chip.data_parallel", 2200,
     "match 0.1%"),
    ("gpus", "Data parallelism across nodes: tokens per GPU (2,475)",
     "roofline --chip h100 --memory ib --flops 1 --bytes 1", "critical_batch_per_gpu.data_parallel", 2475,
     "match 0.1%"),
    ("gpus", "Data parallelism across nodes, a training step's mesh (2,475)",
     "model llama-2-7b --mode train --chip h100 --mesh data=16 --batch 64 --seq 1024 --no-simulate",
     "critical_batch_per_chip_book.data", 2475, "match 0.1%"),
    ("gpus", "Data parallelism over exactly 2 nodes: alpha (X - 1) / X per GPU (1,237)",
     "model llama-2-7b --mode train --chip h100 --mesh data=16 --batch 64 --seq 1024 --no-simulate",
     "critical_batch_per_chip_book.data_small_x", 1237, "match 1%"),
    ("gpus", "Quiz 5 Q1 B200 tensor parallelism inside a node (2,500)",
     "roofline --chip b200 --memory nvlink --flops 1 --bytes 1", "critical_batch_per_chip.data_parallel", 2500,
     "match 3%"),
    ("gpus", "Quiz 5 Q1 B200 data parallelism across nodes (5,625)",
     "roofline --chip b200 --memory ib --flops 1 --bytes 1", "critical_batch_per_gpu.data_parallel", 5625,
     "match 3%"),
    ("gpus", "Quiz 5 Q2.1 LLaMA-3 70B: fewest H100s for bf16 weights and fp32 Adam, 700 GB / 80 GB (9)",
     "model llama-3-70b --mode train --chip h100 --mesh fsdp=8 --batch 8 --seq 1024 --no-master-copy --no-simulate",
     "min_chips", 9, "differs: podsim's training state also holds the gradients (2 B/param) and the step's "
     "activations beside weights (2) and Adam (8): 12 H100s (the book's count: next row)"),
    ("gpus", "Quiz 5 Q2.1 the same as the book counts it, (2 + 8) x 70e9 / 80e9 (9)",
     "model llama-3-70b --mode train --chip h100 --mesh fsdp=8 --batch 8 --seq 1024 --no-simulate",
     "book_memory.min_chips_for_state", 9, "match 0%"),
    ("gpus", "Quiz 5 Q2.2 LLaMA-3 70B, 15T tokens on 4096 H100 at 45% MFU (40 days)",
     "model llama-3-70b --mode train --chip h100 --mesh fsdp=8 --batch 8 --seq 1024 --no-simulate "
     "--tokens-total 15e12 --assume-mfu 0.45 --chips 4096", "time_to_train_days", 40, "match 2%"),
    ("gpus", "Quiz 4 Q1 AllGather of B bytes over one SU of M = 32 nodes: bound at the top switch, B (M - 1) / (M x "
     "400e9) (B = 1 GB: 2.42 ms)", "collective all_gather --chip h100 --topology nodes:32:8 --bytes 1e9", "book_s",
     1e9 * 31 / (32 * 400e9), "match 0.1%"),
    ("gpus", "Quiz 4 Q2 AllReduce in a node with in-network reduction (SHARP): exactly B / W_egress (B = 1 GB: "
     "2.22 ms; the switch-reduction bound)", "collective all_reduce --chip h100 --topology switch:8 --bytes 1e9 "
     "--algorithm nvls", "topology_bound_s", 1e9 / 450e9, "match 1%"),
    ("gpus", "Quiz 5 Q2.3 ZeRO-3 over 4096 H100 at 4M tokens: per-GPU batch, 4e6 / 4096 (976)",
     "model llama-3-70b --mode train --chip h100 --mesh fsdp=8 --batch 1000 --seq 4000 --no-simulate "
     "--tokens-total 15e12 --assume-mfu 0.45 --chips 4096", "book_fsdp_model.tokens_per_chip", 976, "match 0.1%"),
    ("gpus", "Quiz 5 Q3 Megatron-LM's 70B run, 384 sequences of 4096 on 768 GPUs: tokens per GPU (2,048)",
     "model llama-3-70b --mode train --chip h100 --mesh data=48,model=8,pipeline=2 --batch 384 --seq 4096 "
     "--no-simulate", "tokens_per_chip", 2048, "match 0%"),
    ("gpus", "Pop quiz 2 AllToAll of B bytes in an 8xH100 node, B (N - 1) / (W N^2) (B = 1 GB: 243 us)",
     "collective all_to_all --chip h100 --topology switch:8 --bytes 1e9", "time_s", 1e9 * 7 / (450e9 * 64),
     "match 1%"),
    ("gpus", "In-text: in a node an AllToAll costs B / (8 W) where an AllGather costs B / W (8x less)",
     "collective all_gather --chip h100 --topology switch:8 --bytes 1e9 --versus all_to_all", "versus.time_ratio", 8,
     "match 1%"),
    ("gpus", "In-text: an AllReduce costs 2x an AllGather without in-network reductions (2)",
     "collective all_reduce --chip h100 --topology switch:8 --bytes 1e9 --algorithm unidirectional --versus "
     "all_gather", "versus.time_ratio", 2, "match 1%"),
    ("gpus", "Pop quiz 3 AllGather_X(bf16[D_X, F_Y]) over one SU, Y <= 8: 2 D F (32 - 1) / (32 x 400e9) (D = 8192, "
     "F = 32768: 1.30 ms)", "collective all_gather --chip h100 --topology nodes:32:8 --bytes 536870912", "book_s",
     2 * 8192 * 32768 * 31 / (32 * 400e9), "match 0.1%"),
    ("gpus", "In-text: DeepSeek v3's H800 at 300 GB/s: data parallelism needs 990e12 / 300e9 (3,300 tokens per GPU)",
     "roofline --chip h100 --memory nvlink --bandwidth 300e9 --flops 1 --bytes 1",
     "critical_batch_per_chip.data_parallel", 3300, "match 0.1%"),
    ("gpus", "Quiz 5 Q2.3.1 8-way TP and pure DP: state per GPU, 700 GB / 8 (87.5 GB: does not fit 80 GB)",
     "model llama-3-70b --mode train --chip h100 --mesh data=512,model=8 --batch 1024 --seq 4096 --no-simulate",
     "book_memory.state_per_chip_model_sharded_bytes", 87.5e9, "match 1%"),
    ("gpus", "Quiz 5 Q2.3.3 8-way TP x 8-way pipelining, DP outside: 990e12 / (8 x 400e9) (309)",
     "model llama-3-70b --mode train --chip h100 --mesh data=64,model=8,pipeline=8 --batch 1024 --seq 4096 "
     "--no-simulate", "critical_batch_per_chip_book.data_outside_model", 309, "match 1%"),
    ("gpus", "Quiz 5 Q3 Megatron-LM's 16B, 192 sequences of 4096 on 192 GPUs: tokens per GPU (4,096)",
     "model --params 16e9 --mode train --chip h100 --batch 192 --seq 4096 --chips 192", "tokens_per_chip", 4096,
     "match 0%"),
    ("gpus", "Quiz 5 Q3 Megatron-LM's 314B, 1536 sequences of 4096 on 3072 GPUs: tokens per GPU (2,048)",
     "model --params 314e9 --mode train --chip h100 --mesh data=48,model=8,pipeline=8 --batch 1536 --seq 4096",
     "tokens_per_chip", 2048, "match 0%"),
    ("gpus", "Quiz 5 Q3 the 70B's 16-way model sharding spans 2 nodes: compute-bound at 2,475 / 2 (roughly 1k: "
     "1,237)", "model llama-3-70b --mode train --chip h100 --mesh data=48,model=8,pipeline=2 --batch 384 --seq 4096 "
     "--no-simulate", "critical_batch_per_chip_book.data_outside_model", 2475 / 2, "match 1%"),
    ("gpus", "Quiz 5 Q3 the 314B's 64-way model sharding spans 8 nodes: 2,475 / 8 (roughly 300: 309)",
     "model --params 314e9 --mode train --chip h100 --mesh data=48,model=8,pipeline=8 --batch 1536 --seq 4096",
     "critical_batch_per_chip_book.data_outside_model", 2475 / 8, "match 1%"),
    ("gpus", "Quiz 3 Q2 / Quiz 4 Q3-Q4: cluster design, symbolic SHARP costs", None, None, None,
     "none: a switch layout for 2048 or 4096 GPUs has no single number; Q4 Q3-Q4 are formulas in D, F, Y "
     "(podsim collective --algorithm nvls prices a concrete size)"),
]

#: a `podsim model` question asks for the book's figures whether or not its state fits one chip's HBM (the
#: book's own examples often do not): priced anyway, as `--ignore-memory` says in its output
QUESTIONS = [(ch, q, f"{c} --ignore-memory" if c and c.startswith("model ") else c, f, a, v)
             for ch, q, c, f, a, v in QUESTIONS]


def field(out: dict[str, Any], path: str) -> Any:
    """``out``'s value at a dotted ``path`` (keys may hold '+', e.g. critical_batch_per_chip.fsdp+model)."""
    value: Any = out
    for key in path.split("."):
        value = value[int(key)] if isinstance(value, list) else value[key]
    return value


def run(command: str) -> dict[str, Any]:
    """``podsim COMMAND --json``, in-process, as a dict (from the repository root)."""
    from simulator.frontend.cli import main

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = main([*shlex.split(command), "--json"])
    if code != 0:
        raise SystemExit(f"podsim {command} exited {code}")
    return json.loads(buf.getvalue())


def tolerance(verdict: str) -> float | None:
    """The relative tolerance of a "match N%" verdict; None for the others."""
    if not verdict.startswith("match "):
        return None
    return float(verdict.split()[1].rstrip("%")) / 100


def show(x: float | None) -> str:
    return "" if x is None else f"{x:.6g}"


def rows() -> list[str]:
    """The page's table rows, each command run now."""
    out = []
    for i, (chapter, question, command, path, book, verdict) in enumerate(QUESTIONS, 1):
        podsim = None if command is None or path is None else float(field(run(command), path))
        tol = tolerance(verdict)
        if tol is not None and podsim is not None and book is not None and abs(podsim - book) > tol * abs(book):
            raise SystemExit(f"row {i}: podsim {podsim:.4g} is not within {tol:.0%} of the book's {book:.4g}")
        text = ("match (exact)" if tol == 0 else f"match (within {verdict.split()[1]})" if tol is not None else
                verdict.replace("none:", "not expressible:", 1) if verdict.startswith("none:") else verdict)
        cmd = f"`podsim {command}`" if command else "—"
        out.append(f"| {i} | {chapter} | {question} | {cmd} | {path or '—'} | {show(book)} | {show(podsim)} | "
                   f"{text} |")
    return out


def page() -> str:
    table = rows()
    matched = sum("| match" in r for r in table)
    differs = sum("| differs" in r for r in table)
    none = sum("| not expressible" in r for r in table)
    return "\n".join([
        "# The book's worked questions in podsim",
        "",
        "Generated by `python scripts/make_book.py` (`--check` to compare without writing) and checked by",
        "`tests/test_book_questions.py` (each command run, its field compared with the book's answer within the",
        "stated tolerance, or marked with the documented reason it differs). Do not edit by hand. The book:",
        "jax-ml/scaling-book, chapters roofline, tpus, sharding, transformers, training, applied-training (Training",
        "LLaMA 3 on TPUs), inference and applied-inference (Serving LLaMA 3-70B) at commit 0819a7d (Feb 2025) and",
        "gpus at 1a55377 (Aug 2025); the FSDP + tensor-parallel critical batch is the current edition's alpha^2 /",
        "(M_X M_Y F) (podsim gives the older 4 alpha^2 / (F M_X M_Y) beside it in",
        "`critical_batch_per_chip_older_edition`, and rows quoting the Feb 2025 edition's printed answer use that",
        "field). Every podsim figure here is a bound (ideal peaks), as the book's are. Times in seconds, rates in",
        "FLOP/s or B/s, sizes in bytes.",
        "",
        f"{len(table)} questions: {matched} match, {differs} differ with a documented reason, {none} are not "
        "expressible as one command (plots, design choices, symbolic algebra).",
        "",
        "| # | chapter | question (book's answer) | command | field | book | podsim | verdict |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
        *table,
        "",
    ])


def main(argv: list[str]) -> int:
    """Write docs/book.md, or with ``--check`` only compare it with what the commands give now (exit 1 if stale)."""
    text = page()
    if "--check" in argv:
        if DOC.read_text() != text:
            sys.stderr.write(f"{DOC.relative_to(ROOT)} is stale: run python scripts/make_book.py\n")
            return 1
        sys.stdout.write(f"{DOC.relative_to(ROOT)} is up to date\n")
        return 0
    DOC.write_text(text)
    sys.stdout.write(f"wrote {DOC.relative_to(ROOT)}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
