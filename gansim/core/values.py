"""Values users type (command-line flags, API arguments): whole numbers, bounded numbers and
lists of counts, each refused in one line naming its flag. The command line and the Python
API check their arguments with the same functions."""

from __future__ import annotations

from collections.abc import Sequence

from gansim.core import limits
from gansim.core.errors import UserInputError


def whole_number(text: str, flag: str, *, minimum: int = 1, maximum: int = 10**9) -> int:
    """A flag's whole number in [minimum, maximum] (digits only: no 1e3, no 2.0, no true)."""
    stripped = str(text).strip()
    digits = stripped.removeprefix("-")
    if not (digits.isascii() and digits.isdigit()):
        raise UserInputError(f"expected a whole number >= {minimum}, got {text!r}", field=flag)
    value = int(stripped)
    if value < minimum:
        raise UserInputError(f"expected a whole number >= {minimum}, got {value}", field=flag)
    if value > maximum:
        raise UserInputError(f"expected a whole number <= {maximum:,}, got {value:,}", field=flag)
    return value


def number(text: object, flag: str, unit: str = "", allow_zero: bool = False, maximum: float = 1e6,
           floor: float = 1e-6) -> float:
    """A flag's finite number, from `floor` (0 with `allow_zero`) to `maximum`, or one line
    naming the flag: bounded like the config's range types (gansim.core.config), so that no
    product or quotient downstream overflows or divides by zero."""
    low = 0.0 if allow_zero else floor
    allowed = f"a number{' of ' + unit if unit else ''} from {low:g} to {maximum:g}"
    try:
        value = float(str(text).strip())
    except ValueError:
        raise UserInputError(f"{text!r} is not a number; allowed: {allowed}", field=flag) from None
    if not low <= value <= maximum:  # also NaN and infinity
        raise UserInputError(f"{text!r}: allowed: {allowed}", field=flag)
    return value


def positive_int_list(value: str | Sequence[int], flag: str) -> list[int]:
    """A list of counts such as `--world-sizes 1,2,4`, typed (comma-separated whole numbers)
    or given from Python (a sequence of ints): each >= 1, each once, each within the rank
    limit; sorted."""
    if isinstance(value, str):
        parts = [part.strip() for part in value.split(",")]
        if any(not part for part in parts):
            raise UserInputError(f"expected comma-separated whole numbers such as 1,2,4, got {value!r}", field=flag)
        values = [whole_number(part, flag, maximum=2**63) for part in parts]
    else:
        if isinstance(value, bytes) or not isinstance(value, Sequence) or not value:
            raise UserInputError(f"expected a list of whole numbers such as [1, 2, 4], got {value!r}", field=flag)
        for item in value:
            if isinstance(item, bool) or not isinstance(item, int) or item < 1:
                raise UserInputError(f"expected whole numbers >= 1, got {item!r}", field=flag)
        values = list(value)
    if len(set(values)) != len(values):
        raise UserInputError(f"{value!r} repeats a value", field=flag)
    limits.RANKS.check(max(values), field=flag)
    return sorted(values)
