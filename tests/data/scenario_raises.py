"""A user scenario whose run() raises its own exception (a bug in the user's code)."""


def run(*, blocks: int = 2) -> None:
    """Fails inside a helper."""
    return _helper(blocks)


def _helper(blocks: int) -> None:
    raise RuntimeError(f"my helper cannot handle {blocks} blocks")
