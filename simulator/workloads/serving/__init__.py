"""Serving a stream of requests on a pod: arrivals, the paged KV cache, an engine's iteration-level scheduler,
step costs (bound and forecast), the whole simulation and its metrics; `serve` is the one entry point."""
from simulator.workloads.serving.arrivals import Arrival, LengthDist, parse_length, poisson_arrivals, read_trace
from simulator.workloads.serving.simulate import ServeSetup, report, run_stream

__all__ = ["Arrival", "LengthDist", "ServeSetup", "parse_length", "poisson_arrivals", "read_trace", "report",
           "run_stream"]
