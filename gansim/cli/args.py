"""Parsing the flags users type: argparse with one-line errors, and lists of counts."""

from __future__ import annotations

import argparse
import sys
from typing import Callable, NoReturn

from gansim.core.errors import UserInputError

EXIT_OK, EXIT_FAILURE, EXIT_BAD_INPUT = 0, 1, 2


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage mistake is one line and exit code 2 like every other one."""

    def error(self, message: str) -> NoReturn:
        print(f"gansim: error: {self.prog}: {message}", file=sys.stderr)
        raise SystemExit(EXIT_BAD_INPUT)


def positive_int(flag: str) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise UserInputError(f"expected a whole number >= 1, got {text!r}", field=flag) from None
        if value < 1:
            raise UserInputError(f"expected a whole number >= 1, got {value}", field=flag)
        return value

    return parse


def positive_float(flag: str) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise UserInputError(f"expected a number > 0, got {text!r}", field=flag) from None
        if not (0 < value < float("inf")):
            raise UserInputError(f"expected a finite number > 0, got {text!r}", field=flag)
        return value

    return parse


def positive_int_list(text: str, flag: str) -> list[int]:
    """A CLI list of counts such as `--world-sizes 1,2,4`: sorted, distinct, each >= 1."""
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise UserInputError(f"expected comma-separated whole numbers, got {text!r}", field=flag) from None
    if not values or min(values) < 1:
        raise UserInputError(f"expected whole numbers >= 1, got {text!r}", field=flag)
    return sorted(set(values))
