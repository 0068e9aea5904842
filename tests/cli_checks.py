"""Shared assertions for the CLI tests."""

from __future__ import annotations

from gansim.cli.main import main


def run_bad(capsys, argv) -> str:
    """Run the CLI on bad input: it must exit 2 with exactly one line on stderr, no traceback."""
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]
