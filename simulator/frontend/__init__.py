"""Front ends: the `podsim` command line, sweeps, scenario loading and calibration validation (layer 7)."""
