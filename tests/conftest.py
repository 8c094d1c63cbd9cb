"""Shared fixtures: a complete user chip file written with unit strings."""
from __future__ import annotations

from pathlib import Path

import pytest

#: Every required ChipSpec field, numbers written as a user would (a tpu-v5e-like chip, HBM at 819 GB/s).
FULL_CHIP_TOML = """
name = "my-chip"
peak_bf16_flops_per_s = "197TFLOP/s"
peak_int8_flops_per_s = "394TFLOP/s"
vpu_flops_per_s = "6.5TFLOP/s"
hbm_capacity_bytes = "16GiB"
hbm_bandwidth_bytes_per_s = "819GB/s"
vmem_capacity_bytes = "128MiB"
vmem_bandwidth_bytes_per_s = "18TB/s"
mxu_dim = 128
mxu_count = 4
tensor_cores = 1
ici_bandwidth_bytes_per_s = "45GB/s"
ici_links = 4
hop_latency_s = "1us"
pcie_bandwidth_bytes_per_s = "16GB/s"
dcn_bandwidth_bytes_per_s = 3.125e9
wraparound = "length16"
torus_dims = 2
"""


@pytest.fixture
def full_chip_file(tmp_path: Path) -> Path:
    path = tmp_path / "my_chip.toml"
    path.write_text(FULL_CHIP_TOML)
    return path


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``benchmark`` (slow scale runs) stay out of the default suite: ``pytest -m benchmark``
    runs them."""
    if "benchmark" in (config.getoption("markexpr") or ""):
        return
    skip = pytest.mark.skip(reason="slow scale run: select it with pytest -m benchmark")
    for item in items:
        if "benchmark" in item.keywords:
            item.add_marker(skip)
