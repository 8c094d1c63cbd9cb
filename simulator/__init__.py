"""podsim's engine and public API: chips, links, pipelines, collectives, sharding, Transformer steps.

Start with `simulator.system.System`, `simulator.pipeline.run_steps`,
`simulator.collectives.run_collective`, `simulator.sharding.sharded_matmul` and
`simulator.workload.simulate_decode`; `simulator.analytic` holds the closed forms every result is
checked against.
"""

__version__ = "0.1.0"
