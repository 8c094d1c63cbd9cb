"""The one exception this package raises for bad input.

Every message names the offending value and says what would have been valid, so the CLI can print it
as a single line on stderr.
"""

from __future__ import annotations


class TopologyError(ValueError):
    """A topology request that cannot be built: a bad shape, size, number, rule or spec string.

    Examples
    --------
    >>> from topologies import TopologyError, ring
    >>> try:
    ...     ring(0)
    ... except TopologyError as err:
    ...     print(err)
    ring size 0 is too small; it must be an integer >= 1
    """
