"""Comparing two results of the same simulation run two ways (a fast path and the plain one)."""
from __future__ import annotations

import math
from typing import Any


def assert_same(a: Any, b: Any, path: str = "") -> None:
    """Nested dicts / lists / tuples equal key for key; floats to 1e-9 relative (1e-18 absolute near 0)."""
    if isinstance(a, dict):
        assert set(a) == set(b), (path, set(a) ^ set(b))
        for key in a:
            assert_same(a[key], b[key], f"{path}.{key}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), (path, len(a), len(b))
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same(x, y, f"{path}[{i}]")
    elif isinstance(a, float):
        assert math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-18), (path, a, b)
    else:
        assert a == b, (path, a, b)
