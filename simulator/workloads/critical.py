"""The book's communication critical batches: the per-chip batch (tokens) above which a strategy's
inter-chip traffic hides under its FLOPs (How To Scale Your Model, training and inference chapters).

C is the chip's peak FLOP/s; W an axis's bandwidth in the book's sense (what a chip moves per second
along the mesh axis, both ways, over every physical axis under it: M axes of W_ici give M W_ici), so
the book's alpha / M is C / W here. D is d_model, F d_ff. Per layer and per token of a chip:

- data parallelism and FSDP: the weights' traffic is fixed per step while the FLOPs grow with the batch,
  so they turn compute-bound at ``C / W`` tokens per chip;
- tensor (Megatron) parallelism over Y chips moves activations, which grow with the batch as the FLOPs
  do: T_math / T_comms = (F / Y) / (C / W_model), whatever the batch. It is compute-bound at any batch
  when F / Y >= C / W_model (the book: comms-bound once Y > M_Y F / alpha) and at none otherwise;
- mixed FSDP (W_X) and tensor parallelism (W_Y): the current edition overlaps the two axes' traffic, so
  the step is compute-bound when T_math exceeds the larger of the two communication terms: B / X > C / W_X
  and F / Y > C / W_Y with X Y = N, i.e. a per-chip batch above ``(C / W_X)(C / W_Y) / F`` -- the book's
  alpha^2 / (M_X M_Y F), alpha^2 / (2F) with FSDP over two axes and the model over one (`fsdp_tensor`).
  The older edition (Feb 2025) added the two terms and minimised their sum over the split: 8 D sqrt(B F /
  (N M_X M_Y)) / W, compute-bound above ``4 (C / W_X)(C / W_Y) / F`` = 4 alpha^2 / (F M_X M_Y)
  (`fsdp_tensor_older_edition`, four times the current figure);
- 2-D weight-stationary inference over N = X x YZ chips (D split over X, F over YZ; the book's
  inference chapter, question 7): T_math = 4 B D F / (N C) against T_comms = 2 B D / (X W) + 4 B F /
  (YZ W); both grow with the batch, so again any batch or none, at the split with the least traffic.

Strategies whose ratio does not depend on the batch report 0.0 (compute-bound at any batch) or None
(at none), with a note giving the book's condition in numbers. `axis_terms` gives the book's own terms
behind them: alpha = C / W_ici (W_ici: one wrapped ICI axis, both ways) and M, each axis's W in units of
W_ici (the book's M_X for FSDP, M_Y for the model axis), so that C / W = alpha / M.
"""
from __future__ import annotations

from typing import Any


def weight_traffic(c_flops_per_s: float, w_bytes_per_s: float) -> float:
    """Data parallelism or FSDP: ``C / W`` tokens per chip."""
    return c_flops_per_s / w_bytes_per_s


def fsdp_tensor(c_flops_per_s: float, w_fsdp: float, w_model: float, d_ff: int) -> float:
    """Mixed FSDP + tensor parallelism, the book's current edition (max of the two communication terms):
    ``(C / W_fsdp)(C / W_model) / F`` tokens per chip = alpha^2 / (M_X M_Y F)."""
    return (c_flops_per_s / w_fsdp) * (c_flops_per_s / w_model) / d_ff


def fsdp_tensor_older_edition(c_flops_per_s: float, w_fsdp: float, w_model: float, d_ff: int) -> float:
    """Mixed FSDP + tensor parallelism, the book's older edition (sum of the two communication terms,
    minimised over the split): ``4 (C / W_fsdp)(C / W_model) / F`` tokens per chip = 4 alpha^2 / (F M_X M_Y)."""
    return 4 * fsdp_tensor(c_flops_per_s, w_fsdp, w_model, d_ff)


def tensor(c_flops_per_s: float, w_model: float, d_ff: int, ways: int) -> tuple[float | None, str]:
    """Tensor parallelism over ``ways`` chips: 0.0 or None, and the book's condition in numbers."""
    need = c_flops_per_s / w_model
    have = d_ff / ways
    verdict = "compute-bound at any batch" if have >= need else "communication-bound at every batch"
    note = (f"tensor parallelism moves activations, which grow with the batch as the FLOPs do: {verdict}, since "
            f"F / Y = {have:,.0f} {'>=' if have >= need else '<'} C / W = {need:,.0f} (at most "
            f"{int(d_ff // need) if need > 0 else 0} ways stay compute-bound)")
    return (0.0 if have >= need else None), note


def weight_stationary_2d(c_flops_per_s: float, w_bytes_per_s: float, d_model: int, d_ff: int,
                         chips: int) -> tuple[float | None, str, dict[str, Any]]:
    """2-D weight-stationary inference over ``chips`` chips of one axis (bandwidth W): 0.0 or None, the
    note, and the split ``{"x": X, "yz": YZ}`` with the least traffic (X divides the chips)."""
    x, yz = min(((x, chips // x) for x in range(1, chips + 1) if chips % x == 0),
                key=lambda s: 2 * d_model / s[0] + 4 * d_ff / s[1])
    comms = (2 * d_model / x + 4 * d_ff / yz) / w_bytes_per_s  # seconds per token of the batch
    math_s = 4 * d_model * d_ff / (chips * c_flops_per_s)
    bound = math_s >= comms
    note = (f"2-D weight-stationary over {chips} chips (D over X = {x}, F over YZ = {yz}): per token 4DF/(NC) = "
            f"{math_s:.3g} s {'>=' if bound else '<'} 2D/(XW) + 4F/(YZ W) = {comms:.3g} s, so "
            f"{'compute-bound at any batch' if bound else 'communication-bound at every batch'}")
    return (0.0 if bound else None), note, {"x": x, "yz": yz}


def axis_terms(c_flops_per_s: float, link_bytes_per_s: float, w_by_axis: dict[str, float]) -> dict[str, Any]:
    """The book's terms of the thresholds: ``alpha`` = C / W_ici with W_ici = 2 x ``link_bytes_per_s`` (one
    link, one way: a wrapped axis moves both ways), ``w_ici_bytes_per_s``, ``M`` per axis (its W / W_ici; a
    fraction where an axis is slower than a wrapped ICI axis, e.g. over DCN or a line), and ``M_X`` (fsdp) and
    ``M_Y`` (model) where the mesh has those axes, so alpha^2 / (M_X M_Y F) is the FSDP + TP threshold
    (4 alpha^2 / (F M_X M_Y) in the older edition)."""
    w_ici = 2 * link_bytes_per_s
    m = {axis: w / w_ici for axis, w in w_by_axis.items()}
    out: dict[str, Any] = {"alpha": c_flops_per_s / w_ici, "w_ici_bytes_per_s": w_ici, "M": m}
    out.update({key: m[axis] for key, axis in (("M_X", "fsdp"), ("M_Y", "model")) if axis in m})
    return out
