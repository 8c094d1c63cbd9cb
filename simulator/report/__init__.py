"""What a run reports: the scenario `Result`, plots and exports (Perfetto JSON, CSV) (layer 6)."""
