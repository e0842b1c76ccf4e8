"""Counts in words, as the library's messages say them: ``1 video``, ``3 videos``."""


def amount(count: int, one: str, many: str) -> str:
    """``1 video``, ``3 videos``, ``0 videos``."""
    return f"{count} {one if count == 1 else many}"


def counted(count: int, one: str, many: str) -> str:
    """As :func:`amount`, but nothing for none: a list of what a folder holds names only what
    is there."""
    return amount(count, one, many) if count else ""
