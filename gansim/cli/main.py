"""The `gansim` command. Human tables and progress go to stderr whenever --json puts the
machine-readable result on stdout. Exit codes: 0 success, 2 bad input (one line naming the
file, the field and what is allowed), 1 anything else.

Each subcommand is a module with `register(subparsers)`; a new command is a new module and
one line in COMMANDS. Only the module of the command asked for is imported (the others pull
in what their commands need: torch, the platform catalog...), so that start-up stays short."""

from __future__ import annotations

import argparse
import importlib
import sys

from gansim.cli.args import EXIT_BAD_INPUT, EXIT_FAILURE, OneLineParser
from gansim.core.errors import OutputError, UserInputError
from gansim.core.version import __version__
from gansim.runner.allocator import tune_allocator, tune_collector

# module of gansim.cli -> the commands it registers
COMMANDS = {
    "simulate": ("simulate",),
    "profiles": ("predict", "validate"),
    "topology": ("topology",),
    "calibrate": ("calibrate",),
    "plan": ("plan",),
    "nccl_tests": ("nccl-tests",),
}


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The parser; with `argv` naming a command first, only that command's module is
    imported and registered (any other first word gets them all, for help and errors)."""
    parser = OneLineParser(prog="gansim", description="Simulate data-parallel GAN training on GPU clusters.")
    parser.add_argument("--version", action="version", version=f"gansim {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    first = argv[0] if argv else None
    if first == "--version":
        return parser  # it prints the version before it looks for a command
    modules = [m for m, commands in COMMANDS.items() if first in commands] or list(COMMANDS)
    for module in modules:
        importlib.import_module(f"gansim.cli.{module}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    tune_allocator()  # a command's large arrays reuse freed memory (gansim/runner/allocator.py)
    tune_collector()  # and its long-lived objects are not scanned again every 700 allocations
    parser = build_parser(argv)
    try:
        args = parser.parse_args(argv)
        return int(args.func(args))
    except UserInputError as err:
        print(f"gansim: error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except OutputError as err:
        print(f"gansim: error: {err}", file=sys.stderr)
        return EXIT_FAILURE
    except KeyboardInterrupt:
        print("gansim: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return EXIT_FAILURE


if __name__ == "__main__":
    sys.exit(main())
