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


def number(text: object, flag: str, unit: str = "", allow_zero: bool = False) -> float:
    """A flag's finite number > 0 (>= 0 with `allow_zero`), or one line naming the flag."""
    allowed = f"a finite number{' of ' + unit if unit else ''} {'>=' if allow_zero else '>'} 0"
    try:
        value = float(str(text).strip())
    except ValueError:
        raise UserInputError(f"{text!r} is not a number; allowed: {allowed}", field=flag) from None
    if not (value >= 0 if allow_zero else value > 0) or value == float("inf"):
        raise UserInputError(f"{text!r}: allowed: {allowed}", field=flag)
    return value


def positive_float(flag: str, unit: str = "") -> Callable[[str], float]:
    """An argparse `type` for a finite number > 0."""
    return lambda text: number(text, flag, unit)


def positive_int_list(text: str, flag: str) -> list[int]:
    """A CLI list of counts such as `--world-sizes 1,2,4`: sorted, distinct, each >= 1."""
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise UserInputError(f"expected comma-separated whole numbers, got {text!r}", field=flag) from None
    if not values or min(values) < 1:
        raise UserInputError(f"expected whole numbers >= 1, got {text!r}", field=flag)
    return sorted(set(values))
