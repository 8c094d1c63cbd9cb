"""`podsim plan --scheduler ADDRESS`: the finalists simulated as tasks on an existing Dask cluster.

The search itself (every layout priced by closed form) stays in this process; each finalist's simulation is
one task, sent through distributed's futures as `podsim sweep` sends its points, and counted as it finishes.
A task whose worker died, a cluster without workers or a result that cannot travel is one `PodsimError` line.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from simulator.engine.watch import count_steps
from simulator.errors import PodsimError, one_line


def simulate_on_dask(client: Any, simulate: Callable[..., dict[str, Any]], jobs: list[tuple]) -> list[dict[str, Any]]:
    """``simulate(*job)`` of every job on the cluster behind ``client`` (a `distributed.Client`), in the jobs'
    order; the watch counts them as they finish."""
    from distributed import as_completed

    if not sum(client.nthreads().values()):
        raise PodsimError(f"the Dask cluster at {client.scheduler.address!r} has no workers")
    futures = [client.submit(simulate, *job, pure=False) for job in jobs]
    index = {future.key: i for i, future in enumerate(futures)}
    rows: list[dict[str, Any] | None] = [None] * len(jobs)
    try:
        for done, future in enumerate(as_completed(futures, loop=client.loop), 1):
            rows[index[future.key]] = future.result()
            count_steps("finalists simulated", done, len(jobs))
    except PodsimError:
        raise
    except Exception as err:  # a worker died, the cluster went away, a task could not be pickled...
        raise PodsimError(f"the Dask cluster failed simulating the finalists: {one_line(err, typed=True)}") from None
    finally:
        client.cancel(futures)
    return [row for row in rows if row is not None]
