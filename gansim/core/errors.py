"""User-facing errors: one line naming the file, the field and what is allowed."""

from __future__ import annotations


class UserInputError(Exception):
    """Bad input from a user: the CLI prints `str(err)` on one line and exits with code 2."""

    def __init__(self, message: str, *, source: str | None = None, field: str | None = None):
        self.source = source
        self.field = field
        self.message = message
        parts = [p for p in (source, field) if p]
        super().__init__(": ".join(parts + [message]))


class SimulationError(RuntimeError):
    """An internal inconsistency of the simulator (exit code 1, never a user's mistake)."""
