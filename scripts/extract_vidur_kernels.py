"""Reduce vidur's per-operator GPU profiles to the kernel rows podsim fits: writes
simulator/hardware/data/calibration/gpu_kernels_vidur.csv.

    python scripts/extract_vidur_kernels.py /path/to/microsoft/vidur   # a checkout (or git dir) of vidur

vidur (MIT licence) profiled one transformer block of each model with sarathi's layers in fp16 on one
A100 / H100 per tensor-parallel shard (``data/profiling/compute/<chip>/<model>/mlp.csv``): the CUDA kernel
time of each operator (median ms of its ``record_function`` range, kernels only, no launch gaps). Each row
here is one operator at one token count and tensor-parallel degree, with its GEMM shape or the bytes it
moves (derived from vidur's ``vidur/profiling/mlp/mlp_impl.py``):

- ``attn_pre_proj`` (QKV): [tokens, D] @ [D, (Nq + 2 Nkv) H / tp]; ``attn_post_proj`` (O): [tokens, Nq H / tp] @
  [Nq H / tp, D]; ``mlp_up_proj`` (gate and up together): [tokens, D] @ [D, 2 F / tp]; ``mlp_down_proj``:
  [tokens, F / tp] @ [F / tp, D];
- ``input_layernorm`` (RMSNorm, a norm kernel): reads and writes [tokens, D] fp16: 4 tokens D bytes;
- ``mlp_act`` (SiLU and multiply, an activation kernel: element-wise with transcendental math): reads
  [tokens, 2F/tp], writes [tokens, F/tp]: 6 tokens F / tp bytes;
- ``add`` (residual add, element-wise): reads two [tokens, D], writes one: 6 tokens D bytes.

Set rule (fixed before any error was computed): every row of CodeLlama-34b is held out, all others fit.
"""
from __future__ import annotations

import csv
import io
import subprocess
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "simulator" / "hardware" / "data" / "calibration" / "gpu_kernels_vidur.csv"
MODELS = ["meta-llama/Llama-2-7b-hf", "meta-llama/Llama-2-70b-hf", "codellama/CodeLlama-34b-Instruct-hf"]
HELD_OUT_MODEL = "codellama/CodeLlama-34b-Instruct-hf"
TOKENS = [1, 32, 128, 512, 1024, 2048, 4096]
COMMIT = "7d47513363ec447a741ac5e47241580b47724fbf"
URL = f"https://github.com/microsoft/vidur/blob/{COMMIT}/data/profiling/compute/{{chip}}/{{model}}/mlp.csv"
FIELDS = ["chip", "model", "tp", "tokens", "op", "kind", "m", "k", "n", "nbytes", "measured_s", "set", "source",
          "published", "measured"]


def _read(repo: Path, path: str) -> list[dict[str, str]]:
    text = subprocess.run(["git", "-C", str(repo), "show", f"{COMMIT}:{path}"], check=True, capture_output=True,
                          text=True).stdout
    return list(csv.DictReader(io.StringIO(text)))


def _published(repo: Path, path: str) -> str:
    """The date of the last vidur commit that changed ``path`` (up to COMMIT)."""
    return subprocess.run(["git", "-C", str(repo), "log", "-1", "--format=%cs", COMMIT, "--", path], check=True,
                          capture_output=True, text=True).stdout.strip()


def _rows(chip: str, model: str, r: dict[str, str], published: str) -> list[dict[str, object]]:
    tp, tokens = int(r["num_tensor_parallel_workers"]), int(r["num_tokens"])
    nq, nkv, d, f = (int(r[k]) for k in ("n_head", "n_kv_head", "n_embd", "n_expanded_embd"))
    h = d // nq
    gemms = {"attn_pre_proj": (d, (nq + 2 * nkv) * h // tp), "attn_post_proj": (nq * h // tp, d),
             "mlp_up_proj": (d, 2 * f // tp), "mlp_down_proj": (f // tp, d)}
    moved = {"input_layernorm": ("norm", 4 * tokens * d), "mlp_act": ("activation", 6 * tokens * f // tp),
             "add": ("elementwise", 6 * tokens * d)}
    common = {"chip": chip, "model": model, "tp": tp, "tokens": tokens,
              "set": "held_out" if model == HELD_OUT_MODEL else "fit",
              "source": URL.format(chip=chip, model=model), "published": published,
              "measured": "fp16 kernel time, median"}
    out = []
    for op, (k, n) in gemms.items():
        out.append({**common, "op": op, "kind": "gemm", "m": tokens, "k": k, "n": n, "nbytes": "",
                    "measured_s": float(r[f"time_stats.{op}.median"]) * 1e-3})
    for op, (kind, nbytes) in moved.items():
        out.append({**common, "op": op, "kind": kind, "m": "", "k": "", "n": "", "nbytes": nbytes,
                    "measured_s": float(r[f"time_stats.{op}.median"]) * 1e-3})
    return out


def main(repo: Path) -> None:
    rows = []
    for chip in ("a100", "h100"):
        for model in MODELS:
            seen = set()
            path = f"data/profiling/compute/{chip}/{model}/mlp.csv"
            published = _published(repo, path)
            for r in _read(repo, path):
                key = (int(r["num_tokens"]), int(r["num_tensor_parallel_workers"]))
                if key[0] in TOKENS and key not in seen:  # vidur repeats some configurations; the first is kept
                    seen.add(key)
                    rows += _rows(chip, model, r, published)
    rows.sort(key=lambda r: (r["chip"], r["model"], r["tp"], r["tokens"], r["op"]))
    with OUT.open("w", newline="") as f:
        writer = csv.DictWriter(f, FIELDS)
        writer.writeheader()
        writer.writerows(rows)
    print(f"wrote {len(rows)} rows to {OUT}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("/work/.mirror/microsoft+vidur/repo"))
