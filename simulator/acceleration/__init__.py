"""The acceleration layer: every way podsim runs a collective or a step fast, by symmetry, with the exact figures.

Its one public module is `simulator.acceleration.executor` (docs/acceleration.md is the contract); the others are
its internals. This package imports nothing on its own, so importing it costs nothing.
"""

# Until the executor hook: `simulator.collectives.api` imports this layer's quotients, so the collectives package must
# finish loading before any module here does (else importing `simulator.acceleration.quotient` first is a cycle).
import simulator.collectives  # noqa: E402,F401
