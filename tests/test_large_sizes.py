"""The largest accepted sizes run within the memory budget or are refused up front, with bounded memory
(issue 34 items 1, 7). Benchmark-marked: minutes of CPU (``pytest -m benchmark tests/test_large_sizes.py``).

Each command runs in its own process under an 8 GB address-space limit (``ulimit -v``, as the issue's
reproducers did: superpod:100 died in std::bad_alloc at 7.7 GB) and a timeout; its peak resident memory is
the child's ``ru_maxrss``.
"""
from __future__ import annotations

import resource
import shlex
import subprocess
import sys

import pytest

LIMIT_BYTES = 8_000_000 * 1024  #: ``ulimit -v 8000000``
TIMEOUT_S = 300

VALUES = ",".join(str(i) for i in range(1, 1001))
CASES = {  # name -> (argv, exit status, what the last stderr line says, peak resident bytes at most)
    "superpod:100": (shlex.split("collective all_reduce --chip h100 --topology superpod:100 --bytes 1MB"), 2,
                     "would need about", 2 * 2**30),
    "ring:65536": (shlex.split("collective all_reduce --chip h100 --topology ring:65536 --bytes 1MB"), 2,
                   "would need about", 3 * 2**30),
    "switch:4096": (shlex.split("collective all_reduce --chip h100 --topology switch:4096 --bytes 1MB"), 2,
                    "would need about", 3 * 2**30),
    "multislice:64:16x16": (shlex.split("collective all_reduce --chip tpu-v5p --topology multislice:64:16x16 "
                                        "--bytes 1MB"), 0, "", 5 * 2**30),  # its quotient: 32 s, 3.3 GB
    "1e9-point sweep": (["sweep", "collective_matmul", "--grid", f"B={VALUES}", "--grid", f"D={VALUES}", "--grid",
                         f"F={VALUES}"], 2, "1,000,000,000 points", 2**30),
    "70B state on one chip": (shlex.split("model llama-3-70b --mode train --chip tpu-v5e --mesh data=1"), 2,
                              "does not fit", 2**30),
}


def _limit() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (LIMIT_BYTES, LIMIT_BYTES))


@pytest.mark.benchmark
@pytest.mark.parametrize("name", sorted(CASES))
def test_largest_sizes_refuse_cleanly_in_bounded_memory(name):
    argv, status, says, peak_bytes = CASES[name]
    code = f"import sys; from simulator.frontend.cli import main; sys.exit(main({argv!r}))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=TIMEOUT_S,
                          preexec_fn=_limit)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == status, (name, done.stderr[-2000:])
    assert "Traceback" not in done.stderr
    if status:  # refused: one line naming the estimate (or the fit)
        assert lines[-1].startswith("podsim: error: ") and says in lines[-1]
    else:  # ran: its result, simulated
        assert "simulated" in done.stdout
    assert resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024 <= peak_bytes  # (kB on Linux)
