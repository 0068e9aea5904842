"""Files users give and files gansim writes: strict YAML reading with one-line errors, the
shipped YAML folders, and atomic writes (a crash leaves the old file or the new one)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any, Literal

import yaml

from gansim.core.errors import UserInputError

ShippedKind = Literal["topologies", "scenarios", "platforms", "validation"]


def read_yaml(path: Path) -> dict[str, Any]:
    source = str(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise UserInputError("file not found", source=source) from None
    except IsADirectoryError:
        raise UserInputError("is a directory, expected a YAML file", source=source) from None
    except OSError as exc:
        raise UserInputError(f"cannot read: {exc.strerror}", source=source) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or "not valid YAML"
        raise UserInputError(f"malformed YAML: {where}{problem}", source=source) from None
    if not isinstance(data, dict):
        raise UserInputError("expected a mapping of fields at the top level", source=source)
    return data


_SINGULAR = {"topologies": "topology", "scenarios": "scenario", "platforms": "platform catalog",
             "validation": "published measurement"}


def shipped_dir(kind: ShippedKind) -> Path:
    """Where the shipped YAML files are: the copy that `pip install .` put inside the
    package, else (an editable install, a checkout) the checkout's top-level folder."""
    installed = Path(__file__).resolve().parents[1] / f"shipped_{kind}"
    if installed.is_dir():
        return installed
    return Path(__file__).resolve().parents[2] / kind


def shipped_names(kind: Literal["topologies", "scenarios", "validation"]) -> list[str]:
    return sorted(p.stem for p in shipped_dir(kind).glob("*.yaml"))


def resolve_file(name_or_path: str, kind: Literal["topologies", "scenarios"], *, source: str | None = None,
                 field: str | None = None) -> Path:
    """A shipped name (`paper-table3`) or a path to a YAML file."""
    candidate = Path(name_or_path)
    if candidate.suffix in (".yaml", ".yml") or "/" in name_or_path or candidate.exists():
        if not candidate.is_file():
            raise UserInputError(f"file not found: {name_or_path}", source=source, field=field)
        return candidate
    shipped = shipped_dir(kind) / f"{name_or_path}.yaml"
    if shipped.is_file():
        return shipped
    raise UserInputError(
        f"unknown {_SINGULAR[kind]} {name_or_path!r}: not a file and not a shipped name; "
        f"shipped: {', '.join(shipped_names(kind))}",
        source=source,
        field=field,
    )


def atomic_write(path: str | os.PathLike[str], text: str) -> None:
    """Write to a temporary file beside `path`, flush it to disk, rename it over `path`,
    then flush the directory: a crash at any point leaves either the old file or the new
    one, never half of either."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; results are ordinary files
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_directory(path.parent)


def _fsync_directory(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some file systems cannot sync a directory; the rename itself is still atomic
    finally:
        os.close(fd)


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current
