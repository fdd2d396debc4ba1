"""An executable a test tool runs, as an environment variable may name it."""

from __future__ import annotations

import os
from pathlib import Path


def overridden(variable: str, error: type[Exception]) -> Path | None:
    """The executable ``$variable`` names (None when it is unset); ``error`` when it names
    something that is not an executable file."""
    override = os.environ.get(variable)
    if not override:
        return None
    path = Path(override)
    if not os.access(path, os.X_OK):
        raise error(f"{variable}={override!r}: not an executable file")
    return path
