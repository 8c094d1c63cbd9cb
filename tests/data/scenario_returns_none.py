"""A user scenario whose run() forgets to return its Result."""


def run(*, blocks: int = 2) -> None:
    """Does the work but returns nothing."""
    blocks * 2
