"""Finding scenarios and turning ``--set KEY=VALUE`` strings into their typed keyword arguments.

A scenario is a module with a docstring (its first line is the question it answers) and a
``run(**params) -> Result`` whose keyword defaults reproduce its headline example. Built-in scenarios
live in the ``scenarios`` package; a path to a ``.py`` file works too.
"""
from __future__ import annotations

import importlib
import importlib.util
import inspect
import math
import pkgutil
import sys
import traceback
import types
import typing
from pathlib import Path
from typing import Any

from simulator.errors import NonFiniteError, PodsimError, ScenarioError, UserScenarioError
from simulator.hardware.specs import ChipSpec
from simulator.report.result import Result, jsonable
from simulator.units import MAX_COUNT, check_bytes, parse_quantity, parse_tokens, show

_SUFFIX_KIND = (("_per_s", "bandwidth"), ("_s", "time"), ("_bytes", "bytes"), ("_flops", "flops_count"))
#: Integer parameters that count tokens: ``8Ki`` is 8192 and ``8k`` is refused as ambiguous (`parse_tokens`).
TOKEN_PARAMS = frozenset({"context", "seq", "prompt", "tokens", "tokens_per_chip", "seq_len"})


def scenario_names() -> list[str]:
    """The built-in scenarios' names, sorted, read from the package without importing any of them."""
    import scenarios

    return sorted(info.name for info in pkgutil.iter_modules(scenarios.__path__) if not info.name.startswith("_"))


def list_scenarios() -> dict[str, str]:
    """Built-in scenario names mapped to the first line of their docstring (this imports every scenario)."""
    out = {}
    for name in scenario_names():
        module = importlib.import_module(f"scenarios.{name}")
        out[name] = (module.__doc__ or "").strip().splitlines()[0] if module.__doc__ else ""
    return out


def load_scenario(name: str) -> types.ModuleType:
    """The scenario module called ``name``, or loaded from the file at path ``name``."""
    if name.endswith(".py") or "/" in name:
        return _load_file(Path(name))
    known = scenario_names()  # one scenario is imported, not all of them (and all their layers)
    if name not in known:
        raise ScenarioError(f"unknown scenario {name!r}; valid scenarios: {', '.join(known)} (or a path to a .py file)")
    return importlib.import_module(f"scenarios.{name}")


def _load_file(path: Path) -> types.ModuleType:
    if not path.is_file():
        raise ScenarioError(f"scenario file {str(path)!r} does not exist")
    spec = importlib.util.spec_from_file_location(f"podsim_user_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise ScenarioError(f"scenario file {str(path)!r} is not a Python file (expected a .py scenario)")
    module = importlib.util.module_from_spec(spec)
    module.podsim_user_file = str(path)  # type: ignore[attr-defined]  # see run_scenario
    try:
        spec.loader.exec_module(module)
    except Exception as err:  # any import failure of user code becomes one clear line
        raise ScenarioError(f"scenario file {str(path)!r} failed to import: {type(err).__name__}: {err}") from None
    if not callable(getattr(module, "run", None)):
        raise ScenarioError(f"scenario file {str(path)!r} defines no run(**params) function")
    sys.modules.setdefault(module.__name__, module)
    return module


def run_scenario(module: types.ModuleType, kwargs: dict[str, Any]) -> Result:
    """``module.run(**kwargs)``, checked: it must return a `Result`. An exception that a user's scenario
    file raises itself (not a podsim error) becomes `UserScenarioError` carrying the traceback of the
    user's code; a built-in scenario's exceptions pass through unchanged (they are podsim's bugs)."""
    user_file = getattr(module, "podsim_user_file", None)
    try:
        result = module.run(**kwargs)
    except PodsimError:
        raise
    except Exception as err:
        if user_file is None:
            raise
        details = "".join(traceback.format_exception(type(err), err,
                                                    err.__traceback__.tb_next if err.__traceback__ else None))
        raise UserScenarioError(f"scenario file {Path(user_file).name!r} raised {type(err).__name__} in run() "
                                "(its traceback is above)", details) from None
    if not isinstance(result, Result):
        what = f"scenario file {Path(user_file).name!r}" if user_file else f"scenario {_short(module)!r}"
        raise ScenarioError(f"{what}: run() returned {type(result).__name__} {show(result)}; run(**params) must "
                            "return a simulator.Result, e.g. Result(scenario='mine', params=params, "
                            "metrics=system.metrics())")
    if user_file is not None:  # a user's inf is the user's to fix (in podsim's own scenarios it is a bug)
        try:
            jsonable(result.extra, strict=True, where="extra")
        except NonFiniteError as err:
            raise ScenarioError(f"scenario file {Path(user_file).name!r}: run() returned a Result whose {err}; give "
                                "None (with a note) where a number has no finite value") from None
    return result


def scenario_params(module: types.ModuleType) -> dict[str, inspect.Parameter]:
    """The keyword parameters of the scenario's ``run``."""
    sig = inspect.signature(module.run)
    return {n: p for n, p in sig.parameters.items() if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)}


def _base_type(module: types.ModuleType, name: str, default: Any) -> Any:
    if default is not None and not isinstance(default, ChipSpec):
        return type(default)
    hint = typing.get_type_hints(module.run).get(name, str)
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    return args[0] if args else hint


def _kind_for(name: str) -> str:
    return next((kind for suffix, kind in _SUFFIX_KIND if name.endswith(suffix)), "number")


def coerce_value(module: types.ModuleType, name: str, text: str, default: Any) -> Any:
    """Convert ``text`` to the type of parameter ``name`` (quantities by name suffix)."""
    base = _base_type(module, name, default)
    if base is bool:
        if text.lower() in ("1", "true", "yes", "on", "0", "false", "no", "off"):
            return text.lower() in ("1", "true", "yes", "on")
        raise ScenarioError(f"{name}={text!r} is not a boolean; use true or false")
    if base in (int, float):
        return _coerce_scalar(name, text, base)
    if base in (tuple, list):
        element = default[0] if default else 0
        return tuple(_coerce_scalar(name, part.strip(), type(element)) for part in text.split(",") if part.strip())
    return text


def _coerce_scalar(name: str, text: str, base: type) -> Any:
    """A number typed for a scenario parameter: finite, in range for its kind; whole for ints."""
    if base not in (int, float):
        return text
    if base is int and name in TOKEN_PARAMS:
        return parse_tokens(text, name=name, minimum=-MAX_COUNT)  # the scenario checks its own range
    kind = _kind_for(name)
    value = parse_quantity(text, kind, name=name)
    if not math.isfinite(value):
        raise ScenarioError(f"{name}={text!r} must be a finite number")
    if kind == "bytes":
        check_bytes(abs(value), name=name)
    if base is int:
        if value != int(value):
            raise ScenarioError(f"{name}={text!r} must be a whole number")
        if abs(value) > MAX_COUNT:
            raise ScenarioError(f"{name}={text!r} is more than 1e18; no podsim count is that large")
        return int(value)
    return value


def parse_sets(module: types.ModuleType, pairs: list[str]) -> dict[str, Any]:
    """``["blocks=4", "load_s=0.4ms"]`` -> ``{"blocks": 4, "load_s": 0.0004}`` for this scenario."""
    params = scenario_params(module)
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ScenarioError(f"--set {pair!r} must look like KEY=VALUE")
        if key not in params:
            raise ScenarioError(f"unknown parameter {key!r} for scenario {_short(module)}; valid: {', '.join(params)}")
        try:
            out[key] = coerce_value(module, key, text.strip(), params[key].default)
        except PodsimError as err:
            raise ScenarioError(f"--set {pair!r}: {err}") from None
    return out


def _short(module: types.ModuleType) -> str:
    return module.__name__.rsplit(".", 1)[-1]
