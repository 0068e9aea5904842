"""The `gansim` command. Human tables and progress go to stderr whenever --json puts the
machine-readable result on stdout. Exit codes: 0 success, 2 bad input (one line naming the
file, the field and what is allowed), 1 anything else.

Each subcommand is a module with `register(subparsers)`; a new command is a new module and
one line in COMMANDS."""

from __future__ import annotations

import argparse
import sys

from gansim.cli import calibrate, nccl_tests, plan, profiles, simulate, topology
from gansim.cli.args import EXIT_BAD_INPUT, EXIT_FAILURE, OneLineParser
from gansim.core.errors import UserInputError
from gansim.core.version import __version__

COMMANDS = (simulate, profiles, topology, calibrate, plan, nccl_tests)


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="gansim", description="Simulate data-parallel GAN training on GPU clusters.")
    parser.add_argument("--version", action="version", version=f"gansim {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    for command in COMMANDS:
        command.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        return int(args.func(args))
    except UserInputError as err:
        print(f"gansim: error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("gansim: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return EXIT_FAILURE


if __name__ == "__main__":
    sys.exit(main())
