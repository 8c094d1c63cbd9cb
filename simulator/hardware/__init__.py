"""Hardware facts: chip specifications, presets, and the calibrated-mode constants (layer 1).

Imports only the ground floor (`simulator.units`, `simulator.errors`, `simulator.analytic`).
"""
