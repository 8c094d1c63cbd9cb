"""`podsim chips`: the presets as a table, one preset's facts (peaks and counts: bounds), or JSON."""
from __future__ import annotations

import argparse
import json
from typing import Any

from simulator.hardware.specs import PRESETS, get_chip


def cmd_chips(args: argparse.Namespace) -> None:
    from simulator.hardware.facts import chip_facts

    if args.name is not None:
        spec = get_chip(args.name)
        out = {**spec.to_dict(), "facts": chip_facts(spec)}
        print(json.dumps(out, indent=2) if args.json else _render_facts(spec.name, out["facts"]))
        return
    if args.json:
        print(json.dumps({name: {**spec.to_dict(), "facts": chip_facts(spec)} for name, spec in PRESETS.items()},
                         indent=2))
        return
    header = f"{'chip':<9}{'bf16 TF/s':>10}{'int8 TOP/s':>11}{'HBM GiB':>9}{'HBM TB/s':>9}" \
             f"{'ICI GB/s':>9}{'links':>6}  wraparound"
    print(header)
    for s in PRESETS.values():
        print(f"{s.name:<9}{s.peak_bf16_flops_per_s / 1e12:>10.0f}{s.peak_int8_flops_per_s / 1e12:>11.0f}"
              f"{s.hbm_capacity_bytes / 2**30:>9.0f}{s.hbm_bandwidth_bytes_per_s / 1e12:>9.2f}"
              f"{s.ici_bandwidth_bytes_per_s / 1e9:>9.0f}{s.ici_links:>6}  {s.wraparound}")


def _render_facts(name: str, facts: dict[str, Any]) -> str:
    """One chip's derived facts, a line each (peaks: bounds)."""
    lines = [f"{name} (bounds: peaks and counts)"]
    for group, values in facts.items():
        lines += [f"  {group}.{key}: {value:,.4g}" if isinstance(value, float) else f"  {group}.{key}: {value}"
                  for key, value in values.items()]
    return "\n".join(lines)
