"""Which trains faster: FSDP, tensor parallelism or both, and from what per-chip batch is each compute-bound?

The book (training chapter): pure data parallelism or FSDP hides its communication once each chip
holds more than C / W_ici tokens (alpha = 2550 on a v5p axis; divided by the number of axes it spans),
and FSDP combined with tensor parallelism (X-way by Y-way) does so down to alpha^2 / (M_X M_Y F) tokens
per chip when Y is at most M_Y F / alpha. Each layout here is simulated on the same chips (default: 16
tpu-v5p on a 4x4 torus, llama-2-7b's width at 4 layers so the run stays short), with its closed form,
exposed communication per axis, memory per chip and the book's thresholds for its mesh.
"""
from __future__ import annotations

from typing import Any

from simulator.engine.system import resolve_chip
from simulator.hardware.specs import ChipSpec
from simulator.report.result import Result
from simulator.workloads.plans import TrainOptions, parse_plan_mesh, train_plan
from simulator.workloads.transformer import get_model


def run(*, model: str = "llama-2-7b", layers: int = 4, chip: str | ChipSpec = "tpu-v5p", topology: str = "torus:4x4",
        meshes: tuple = ("fsdp=16", "model=16", "fsdp=4,model=4"), batch: int = 32, seq: int = 2048,
        tp_overlap: bool = True, trace: bool = True) -> Result:
    """Simulate one training step of ``model`` (cut to ``layers`` layers; 0 keeps them all) per layout."""
    spec, cfg = resolve_chip(chip), get_model(model)
    if layers:
        cfg = cfg.replace(n_layers=layers, name=f"{cfg.name} ({layers} layers)")
    rows, last = [], None
    for mesh in meshes:
        out = train_plan(cfg, spec, batch, seq, parse_plan_mesh(mesh), TrainOptions(tp_overlap=tp_overlap),
                         topology, trace=trace)
        last = out.pop("_system")
        rows.append({k: out[k] for k in ("mesh", "step_time_s", "closed_form_s", "mfu", "memory_per_chip_bytes",
                                          "fits", "exposed_comm_s", "critical_batch_per_chip", "tokens_per_chip")})
    best = min(rows, key=lambda r: r["step_time_s"])
    name = _mesh_text(best["mesh"])
    details = [f"{_mesh_text(r['mesh']):<18}{r['step_time_s'] * 1e3:>9.3f} ms sim "
               f"{r['closed_form_s'] * 1e3:>9.3f} ms cf "
               f"MFU {r['mfu']:>6.1%}  {r['memory_per_chip_bytes'] / 2**30:6.2f} GiB/chip  exposed "
               + (", ".join(f"{a} {t * 1e3:.3g} ms" for a, t in r["exposed_comm_s"].items()) or "none")
               + "  compute-bound from " + (", ".join(f"{k} {'any' if v == 0 else 'none' if v is None else f'{v:.0f}'}"
                                                      for k, v in r["critical_batch_per_chip"].items())
                                            or "-") + " tokens/chip" for r in rows]
    return Result(
        scenario="fsdp_vs_tp",
        params=dict(model=model, layers=layers, chip=spec.name, topology=topology, meshes=list(meshes), batch=batch,
                    seq=seq, tp_overlap=tp_overlap),
        metrics=last.metrics(), extra={"layouts": rows, "best": name}, trace=last.trace if trace else None,
        headline=(f"{cfg.name}, {batch} x {seq} tokens on {topology} {spec.name}: {name} is fastest at "
                  f"{best['step_time_s'] * 1e3:.4g} ms (MFU {best['mfu']:.0%}), {best['tokens_per_chip']:.0f} tokens "
                  "per chip"),
        details=details,
    )


def _mesh_text(mesh: dict[str, Any]) -> str:
    return ",".join(f"{k}={v}" for k, v in mesh.items())
