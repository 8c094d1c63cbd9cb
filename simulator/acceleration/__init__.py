"""The acceleration layer: every way podsim runs a collective or a step fast, by symmetry, with the exact figures
(layer 4, between the collectives and the workloads).

Its one public module is `simulator.acceleration.executor` (docs/acceleration.md is the contract); the others are
its internals. This package imports nothing on its own, so importing it costs nothing.
"""
