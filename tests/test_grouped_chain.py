"""`timing.grouped_chain_time`: a tandem whose hops forward pieces m at a time, against hand-worked chains."""
import pytest

from simulator.collectives.timing import grouped_chain_time, split_chain_time


def test_one_piece_at_a_time_is_the_split_chain():
    hops = [(1.0, 2.0), (0.5, 3.0), (0.25, 1.0)]
    for c in (1, 2, 7):
        assert grouped_chain_time([(a, s, 1) for a, s in hops], c) == split_chain_time(hops, c)
    assert split_chain_time(hops, 7) == pytest.approx(1.75 + 6.0 + 6 * 3.0)  # sum a + sum s + (c - 1) max s


def test_a_whole_store_and_forward_hop():
    """c pieces all sent at once on the first hop (m = c): they leave together after c s1 and a1; the second hop then
    sends them one by one: c s2 more, then a2."""
    c, (a1, s1), (a2, s2) = 8, (1.0, 0.5), (2.0, 0.25)
    assert grouped_chain_time([(a1, s1, c), (a2, s2, 1)], c) == pytest.approx(a1 + c * s1 + a2 + c * s2)


def test_groups_behind_a_slow_hop():
    """A fast hop (s = 1) feeds a hop that sends pairs (m = 2, 3 a piece): pair k is in at 1 + (2k + 1) and the
    second hop is busy 6 a pair, so it sends from t = 2 back to back: 2 + 4 x 6 = 26 for 8 pieces; no latency."""
    assert grouped_chain_time([(0.0, 1.0, 1), (0.0, 3.0, 2)], 8) == pytest.approx(26.0)
    # the fast hop behind a slow one waits for each pair: the last pair is in at 26 and crosses in 2 more
    assert grouped_chain_time([(0.0, 1.0, 1), (0.0, 3.0, 2), (0.0, 1.0, 1)], 8) == pytest.approx(28.0)


def test_a_short_last_group():
    """Seven pieces in groups of three: 3 + 3 + 1, one hop of 1 s a piece: still 7 s of bytes in all."""
    assert grouped_chain_time([(0.5, 1.0, 3)], 7) == pytest.approx(7.5)
    # behind a hop of 1 s a piece: piece j is in at j + 1; the first three at 3, sent 3..6; the next three (in at 6)
    # 6..9; the last piece (in at 7) waits for the link, 9..10
    assert grouped_chain_time([(0.0, 1.0, 1), (0.0, 1.0, 3)], 7) == pytest.approx(10.0)
