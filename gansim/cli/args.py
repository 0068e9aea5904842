"""argparse with one-line errors, exit codes, and argparse `type`s built on the value checks
of gansim.core.values (which the Python API uses too)."""

from __future__ import annotations

import argparse
import sys
from typing import Callable, NoReturn

from gansim.core.values import number, whole_number

EXIT_OK, EXIT_FAILURE, EXIT_BAD_INPUT = 0, 1, 2


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage mistake is one line and exit code 2 like every other one."""

    def error(self, message: str) -> NoReturn:
        print(f"gansim: error: {self.prog}: {message}", file=sys.stderr)
        raise SystemExit(EXIT_BAD_INPUT)


def positive_int(flag: str) -> Callable[[str], int]:
    def parse(text: str) -> int:
        return whole_number(text, flag)

    return parse


def whole_number_in(minimum: int, maximum: int, flag: str) -> Callable[[str], int]:
    """An argparse `type` for a whole number from `minimum` to `maximum`."""
    return lambda text: whole_number(text, flag, minimum=minimum, maximum=maximum)


def positive_float(flag: str, unit: str = "") -> Callable[[str], float]:
    """An argparse `type` for a finite number > 0 (see `number`)."""
    return lambda text: number(text, flag, unit)
