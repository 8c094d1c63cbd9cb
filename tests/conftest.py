"""Shared fixtures: a complete user chip file written with unit strings; `load_script`, a repository script as a
module (tests import it: ``from conftest import load_script``)."""
from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]


def load_script(path: str | Path) -> ModuleType:
    """The Python file at ``path`` (a name under scripts/, e.g. "make_book", or a path) loaded as a module."""
    file = Path(path) if isinstance(path, Path) or "/" in str(path) else ROOT / "scripts" / f"{path}.py"
    spec = importlib.util.spec_from_file_location(file.stem, file)
    assert spec is not None and spec.loader is not None, file
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module

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
