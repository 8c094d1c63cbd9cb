"""straggler_tail: the tail of a synchronous step against the quantiles of the max of n lognormal draws."""
import math

import numpy as np
import pytest

from scenarios import straggler_tail
from simulator.errors import PodsimError


@pytest.mark.parametrize("n", [1, 4, 64])
@pytest.mark.parametrize("q", [0.5, 0.99])
def test_the_closed_form_quantile_is_the_quantile_of_the_max_of_n_draws(n, q):
    cv = 0.1
    s = math.sqrt(math.log(1 + cv**2))
    draws = np.random.default_rng(0).lognormal(-s * s / 2, s, (200_000, n)).max(axis=1)
    assert straggler_tail.closed_quantile(q, n, cv, 1.0) == pytest.approx(np.quantile(draws, q), rel=2e-3)


def test_without_jitter_every_draw_is_the_nominal_step():
    r = straggler_tail.run(chips=(1, 4), cv=0.0, samples=3)
    for p in r.extra["points"]:
        assert p["p50_s"] == p["p99_s"] == p["max_s"] == pytest.approx(p["nominal_s"], rel=1e-12)


def test_the_simulated_tail_follows_the_closed_form_and_grows_with_chips():
    r = straggler_tail.run(chips=(1, 4), cv=0.1, samples=300, seed=1)
    one, four = r.extra["points"]
    for p in (one, four):  # 300 seeded draws: the median within sampling error of the closed form
        assert p["p50_s"] == pytest.approx(p["closed_p50_s"], rel=0.02)
    assert four["p50_over_nominal"] > one["p50_over_nominal"] + 0.05  # a straggler among four is likelier
    assert four["p99_over_nominal"] > one["p99_over_nominal"]
    assert r.extra["straggler"].startswith("chip ") and r.trace.spans
    assert r.metrics["end_to_end_s"] == four["max_s"]  # the trace is the worst draw of the largest count


def test_chip_counts_are_powers_of_two():
    with pytest.raises(PodsimError, match="powers of two"):
        straggler_tail.run(chips=(3,), samples=2)
