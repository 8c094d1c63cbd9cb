"""The acceleration layer: every way podsim runs a collective or a step fast, by symmetry, with the exact figures.

Its one public module is `simulator.acceleration.executor` (docs/acceleration.md is the contract); the others are
its internals. This package imports nothing on its own, so importing it costs nothing.
"""
