"""Workloads built on the engine and the collectives: pipelines, meshes, sharded matmuls, attention,
Transformer configurations, closed-form budgets and whole-step simulation (layer 5).
"""
