"""The book's sharding notation and sharded matmul strategies.

``A[I_X, J] @ B[J, K_Y] -> C[I_X, K_Y]``: each dimension may carry mesh axes after ``_`` (one letter
per axis, ``I_XY`` = split over X then Y, X the outer index; or ``I_{data,model}`` for longer names);
an output may carry unreduced partial sums, ``C[I, K]{U_X}``.

For a sharded matmul podsim enumerates strategies -- AllGather an operand first (whole dimension
shardings at a time), multiply the local blocks (slicing a replicated operand for free to match the
other's contraction sharding), then reduce partial sums (AllReduce, or ReduceScatter onto an output
dimension) or gather the output -- prices each with the closed forms of its collectives plus the
local matmul time (padded FLOPs over the MXU peak; operands assumed resident), picks the cheapest,
and simulates every candidate on the topology. Numeric mode runs the chosen strategy on real arrays
through the simulated collectives and checks the result against the unsharded numpy matmul.

Modules: `notation` (parse and validate specs), `candidates` (the strategies: `Reshard` steps around
one local matmul), `execute` (simulate a strategy, optionally on arrays, and check the blocks),
`choose` (`sharded_matmul`: price, simulate and verify every candidate).
"""
from simulator.workloads.sharding.candidates import Reshard, Strategy, strategies
from simulator.workloads.sharding.choose import sharded_matmul
from simulator.workloads.sharding.execute import check_blocks, run_strategy, verification_sizes
from simulator.workloads.sharding.notation import (
    ArraySpec,
    Dim,
    MatmulSpec,
    axes_text,
    parse_array,
    parse_matmul,
    validate,
)

__all__ = ["ArraySpec", "Dim", "MatmulSpec", "Reshard", "Strategy", "axes_text", "check_blocks", "parse_array",
           "parse_matmul", "run_strategy", "sharded_matmul", "strategies", "validate", "verification_sizes"]
