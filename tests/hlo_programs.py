"""JAX programs shared by the HLO fixture script (scripts/make_hlo_fixtures.py) and the JAX round-trip tests.

Plain jax.numpy, imported lazily: importing this module needs no JAX. Each program is (function,
abstract arguments as (shape, dtype, spec) triples, output specs) on the mesh it names.
"""
from __future__ import annotations

from typing import Any

MESH = "X=4,Y=2"
SIZES = {"I": 1024, "J": 2048, "K": 4096}  #: the sharded_matmul scenario's defaults
#: the book's four sharded-matmul cases (scenarios/sharded_matmul.py BOOK_CASES), by fixture name
MATMUL_CASES = {
    "matmul_case1": "A[I_X,J]@B[J,K_Y]->C[I_X,K_Y]",
    "matmul_case2": "A[I,J_X]@B[J,K]",
    "matmul_case3": "A[I,J_X]@B[J_X,K]->C[I,K]",
    "matmul_case4": "A[I_X,J]@B[J,K_X]",
}
#: the Transformer block: batch, sequence, model width, heads, head width, MLP width; mesh fsdp x model
BLOCK = {"B": 8, "S": 256, "D": 512, "H": 8, "K": 64, "F": 2048}
BLOCK_MESH = "fsdp=4,model=2"


def _axes(dim: Any) -> Any:
    axes = tuple(dim.axes)
    return None if not axes else axes[0] if len(axes) == 1 else axes


def matmul_program(text: str, output: str | None = None) -> tuple[Any, list, Any]:
    """``A @ B`` with the shardings of podsim's notation ``text``; the output sharding is ``text``'s own,
    else ``output`` (podsim notation of C, e.g. ``C[I_X,K]``), else replicated."""
    from simulator.workloads.sharding import parse_matmul

    spec = parse_matmul(text)
    args = [((SIZES[d.name] for d in arr.dims), "bf16", tuple(_axes(d) for d in arr.dims)) for arr in (spec.a, spec.b)]
    args = [(tuple(shape), dtype, axes) for shape, dtype, axes in args]
    c = spec.c or (parse_matmul(f"A[I,J]@B[J,K]->{output}").c if output else None)
    out = tuple(_axes(d) for d in c.dims) if c is not None else (None, None)
    return (lambda a, b: a @ b), args, out


def scan_program(layers: int = 4) -> tuple[Any, list, Any]:
    """A ``lax.scan`` over ``layers`` tanh layers whose weights are split over Y (an AllGather per layer)."""
    import jax
    import jax.numpy as jnp

    def layers_fn(w: Any, x: Any) -> Any:
        return jax.lax.scan(lambda h, wl: (jnp.tanh(h @ wl), None), x, w)[0]

    return layers_fn, [((layers, 512, 512), "bf16", (None, None, "Y")), ((256, 512), "bf16", ("X", None))], None


def all_to_all_program() -> tuple[Any, list, Any]:
    """Reshard rows over X into columns over X: one AllToAll."""
    return (lambda a: a * 2), [((1024, 2048), "fp32", ("X", None))], (None, "X")


def permute_program() -> tuple[Any, list, Any]:
    """Roll rows sharded over X by a quarter shard: a collective-permute between X neighbours."""
    import jax.numpy as jnp

    return (lambda a: jnp.roll(a, 128, axis=0)), [((1024, 2048), "fp32", ("X", None))], ("X", None)


def _rms(x: Any) -> Any:
    import jax.numpy as jnp

    return x * (1.0 / jnp.sqrt(jnp.mean(x * x, axis=-1, keepdims=True) + 1e-6))


def block_forward(params: Any, x: Any) -> Any:
    """One pre-norm Transformer block (attention, then a plain two-matrix GELU MLP), in plain jax.numpy."""
    import jax
    import jax.numpy as jnp

    wq, wk, wv, wo, w1, w2 = params
    h = _rms(x)
    q, k, v = (jnp.einsum("bsd,dhk->bshk", h, w) for w in (wq, wk, wv))
    scores = jnp.einsum("bshk,bthk->bhst", q, k) / jnp.sqrt(q.shape[-1]).astype(x.dtype)
    mask = jnp.tril(jnp.ones((x.shape[1], x.shape[1]), bool))
    attn = jax.nn.softmax(jnp.where(mask, scores, -1e9), axis=-1)
    x = x + jnp.einsum("bhst,bthk,hkd->bsd", attn, v, wo)
    return x + jax.nn.gelu(_rms(x) @ w1) @ w2


def block_specs() -> tuple[list, list]:
    """The block's weights as (shape, dtype, spec) and their specs: FSDP splits D over ``fsdp``, tensor
    parallelism heads and MLP columns over ``model``."""
    d, h, k, f = (BLOCK[n] for n in "DHKF")
    specs = [("fsdp", "model", None)] * 3 + [("model", None, "fsdp"), ("fsdp", "model"), ("model", "fsdp")]
    shapes = [(d, h, k)] * 3 + [(h, k, d), (d, f), (f, d)]
    return [(shape, "bf16", spec) for shape, spec in zip(shapes, specs, strict=True)], specs


def block_forward_program() -> tuple[Any, list, Any]:
    """`block_forward` alone (a prefill of the block), batch over ``fsdp``."""
    params, _ = block_specs()
    b, s, d = (BLOCK[n] for n in "BSD")

    def forward(*arrays: Any) -> Any:
        return block_forward(list(arrays[:6]), arrays[6])

    return forward, [*params, ((b, s, d), "bf16", ("fsdp", None, None))], ("fsdp", None, None)


def block_train_program() -> tuple[Any, list, Any]:
    """Gradients of a squared-output loss through `block_forward`, with FSDP (weights split over ``fsdp``
    on D, batch over ``fsdp``) and tensor parallelism (heads and MLP columns over ``model``); gradients
    come back sharded like the weights."""
    import jax
    import jax.numpy as jnp

    b, s, d = (BLOCK[n] for n in "BSD")

    def step(params: Any, x: Any) -> Any:
        return jax.grad(lambda p: jnp.mean(block_forward(p, x).astype(jnp.float32) ** 2))(params)

    params, specs = block_specs()
    def train(*arrays: Any) -> Any:
        return step(list(arrays[:6]), arrays[6])

    return train, [*params, ((b, s, d), "bf16", ("fsdp", None, None))], list(specs)
