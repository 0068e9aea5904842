"""User-facing errors: one line naming the file, the field and what is allowed."""

from __future__ import annotations


class UserInputError(Exception):
    """Bad input from a user: the CLI prints `str(err)` on one line and exits with code 2."""

    def __init__(self, message: str, *, source: str | None = None, field: str | None = None):
        self.source = source
        self.field = field
        self.message = message
        parts = [p for p in (source, field) if p]
        super().__init__(one_line(": ".join(parts + [message])))


def one_line(text: str) -> str:
    """Text with every character that would break or hide part of a line (a newline in a
    YAML key, a terminal escape in a file name) written as its escape sequence."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


class SimulationError(RuntimeError):
    """An internal inconsistency of the simulator (exit code 1, never a user's mistake)."""


class OutputError(Exception):
    """Results could not be written (a full disk, a vanished folder): exit code 1, one line,
    and the earlier results where they were, unchanged."""
