"""Reading the configuration files users hand podsim (chip TOML, model TOML, Hugging Face JSON).

One reader for all of them, so every file gets the same limits before any field is looked at: at most
`MAX_DOCUMENT_BYTES` read (a device file or a huge log cannot hang or exhaust memory), UTF-8 text,
valid syntax, a table (mapping) at the top, and nesting at most `MAX_DEPTH` levels deep (a parser
never recurses past Python's limit). Field types and ranges are checked by whoever owns the fields.
"""
from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from simulator.errors import PodsimError
from simulator.units import show

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

MAX_DOCUMENT_BYTES = 2**20  #: 1 MiB: a chip or model config is a few hundred bytes
MAX_DEPTH = 8  #: tables inside tables; podsim's own files use two levels at most

_PARSERS: dict[str, Callable[[str], Any]] = {"TOML": tomllib.loads, "JSON": json.loads}


def read_document(path: str | Path, kind: str, what: str, error: type[PodsimError]) -> dict[str, Any]:
    """Parse the ``kind`` ("TOML" or "JSON") file at ``path`` into a dict; ``error`` (naming the file as
    ``what``, e.g. "chip file") for a missing, unreadable, oversized, malformed or too deeply nested one."""
    path = Path(path)
    name = f"{what} {str(path)!r}"
    text = _read_text(path, name, error)
    try:
        data = _PARSERS[kind](text)
    except RecursionError:
        raise error(f"{name} nests tables or arrays more than {MAX_DEPTH} levels deep") from None
    except (ValueError, UnicodeDecodeError) as err:  # TOMLDecodeError and JSONDecodeError are ValueErrors
        raise error(f"{name} is not valid {kind}: {err}") from None
    if not isinstance(data, dict):
        raise error(f"{name} must hold a table of fields at the top level, not {type(data).__name__} {show(data)}")
    if depth(data) > MAX_DEPTH:
        raise error(f"{name} nests tables or arrays more than {MAX_DEPTH} levels deep")
    return data


def _read_text(path: Path, name: str, error: type[PodsimError]) -> str:
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_DOCUMENT_BYTES + 1)
    except FileNotFoundError:
        raise error(f"{name} does not exist") from None
    except OSError as err:
        raise error(f"{name} cannot be read: {err.strerror or err}") from None
    if len(raw) > MAX_DOCUMENT_BYTES:
        raise error(f"{name} is larger than {MAX_DOCUMENT_BYTES // 1024} KiB; a config file is a few hundred bytes")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise error(f"{name} is not UTF-8 text (is it a binary file?)") from None


def depth(value: Any) -> int:
    """Levels of nested dicts and lists in ``value`` (a scalar is 0), walked without recursion."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            item = list(item.values())
        if isinstance(item, list):
            deepest = max(deepest, level + 1)
            stack.extend((child, level + 1) for child in item if isinstance(child, (dict, list)))
    return deepest


def table(data: dict[str, Any], key: str, name: str, error: type[PodsimError]) -> dict[str, Any]:
    """``data[key]`` when the file has a ``[key]`` table, else ``data`` itself; ``error`` if ``key`` holds
    something other than a table (``model = 5``)."""
    if key not in data:
        return data
    inner = data[key]
    if not isinstance(inner, dict):
        raise error(f"{name}: {key} = {show(inner)} must be a [{key}] table of fields")
    return inner
