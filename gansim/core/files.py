"""Files users give and files gansim writes: strict YAML reading with one-line errors, the
shipped YAML folders, and atomic writes (a crash leaves the old file or the new one)."""

from __future__ import annotations

import codecs
import ctypes
import os
import re
import shutil
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Collection, Iterator, Literal

import yaml
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.parser import Parser
from yaml.reader import Reader
from yaml.resolver import Resolver
from yaml.scanner import Scanner

from gansim.core import limits
from gansim.core.errors import OutputError, UserInputError

ShippedKind = Literal["topologies", "scenarios", "platforms", "validation"]


def read_yaml(path: Path) -> dict[str, Any]:
    """A YAML file as a mapping, read strictly: UTF-8 text of bounded size, nesting depth and
    size once its aliases are expanded (limits.YAML_*), no duplicate keys, one document.
    Every problem is one UserInputError naming the file."""
    source = str(path)
    text = _read_text(path, source)
    loader = None
    try:
        loader = _StrictLoader(text, source)
        node = loader.get_single_node()
        if node is None:
            raise UserInputError("the file is empty; expected a mapping of fields", source=source)
        _check_expanded(node, source)
        data = loader.construct_document(node)
    except yaml.YAMLError as exc:
        raise UserInputError(_yaml_problem(exc), source=source) from None
    finally:
        if loader is not None:
            loader.dispose()
    if not isinstance(data, dict):
        raise UserInputError("expected a mapping of fields at the top level", source=source)
    return data


def _read_text(path: Path, source: str) -> str:
    try:
        if path.is_dir():
            raise UserInputError("is a directory, expected a YAML file", source=source)
        with path.open("rb") as fh:
            raw = fh.read(limits.YAML_BYTES.value + 1)
    except FileNotFoundError:
        raise UserInputError("file not found", source=source) from None
    except OSError as exc:
        raise UserInputError(f"cannot read: {exc.strerror or exc}", source=source) from None
    limits.YAML_BYTES.check(len(raw), source=source)
    if raw.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)) or raw[1:2] == b"\0":
        raise UserInputError("the file is UTF-16 (or binary), not UTF-8 text; save it as UTF-8", source=source)
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise UserInputError(f"not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start}); "
                             "save the file as UTF-8", source=source) from None


def _yaml_problem(exc: yaml.YAMLError) -> str:
    if isinstance(exc, yaml.reader.ReaderError):
        code = ord(exc.character) if isinstance(exc.character, str) else int.from_bytes(bytes([exc.character])
                                                                                        if isinstance(exc.character, int)
                                                                                        else exc.character, "big")
        return f"malformed YAML: character #x{code:04x} at offset {exc.position} is not allowed in YAML text"
    mark = getattr(exc, "problem_mark", None)
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
    problem = str(getattr(exc, "problem", None) or "not valid YAML")
    if problem.startswith("but ") and getattr(exc, "context", None):
        problem = f"{exc.context} {problem}"  # "expected a single document ... but found another"
    problem = " ".join(problem.split())
    return f"malformed YAML: {where}{problem}"


# libyaml's parser when PyYAML has it (several times faster), else PyYAML's own; the
# composer is always PyYAML's Python one, whose recursion _StrictLoader bounds (libyaml's
# composer recurses in C and crashes on deep nesting).
try:
    from yaml.cyaml import CParser as _Parser
except ImportError:  # PyYAML built without libyaml
    _Parser = None


class _Resolver(Resolver):
    """YAML 1.1's resolver, plus the floats of YAML 1.2 and JSON that 1.1 reads as strings:
    an exponent without a dot or without a sign (`1e-9`, `2.5e9`)."""


_Resolver.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."),
)


class _StrictLoader(Composer, SafeConstructor, _Resolver, *((_Parser,) if _Parser else (Reader, Scanner, Parser))):
    def __init__(self, text: str, source: str):
        if _Parser is not None:
            _Parser.__init__(self, text)
        else:
            Reader.__init__(self, text)
            Scanner.__init__(self)
            Parser.__init__(self)
        Composer.__init__(self)
        SafeConstructor.__init__(self)
        _Resolver.__init__(self)
        self.source = source
        self.depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        self.depth += 1
        try:
            limits.YAML_DEPTH.check(self.depth, source=self.source)
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        seen: dict[Any, Any] = {}
        for key_node, _value in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # a merge's keys may be overridden; that is what it is for
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.get(key)
            except TypeError:
                continue  # unhashable: the base class reports it
            if first is not None:
                raise UserInputError(f"duplicate key {key!r} at line {key_node.start_mark.line + 1} (first at line "
                                     f"{first.line + 1}); give each field once", source=self.source)
            seen[key] = key_node.start_mark
        return super().construct_mapping(node, deep=deep)


def _check_expanded(root: Any, source: str) -> None:
    """Bound what the document becomes once every alias is expanded: its number of values
    and its depth (an alias to a nested node nests it again). Aliases share one node, so
    each distinct node is measured once however often it is referred to."""
    measured: dict[int, tuple[int, int]] = {}  # id(node) -> (values, depth)
    open_nodes: set[int] = set()
    max_depth, max_values = limits.YAML_DEPTH, limits.YAML_NODES

    def measure(node: Any, depth: int) -> tuple[int, int]:
        key = id(node)
        if key in measured:
            values, height = measured[key]
        elif key in open_nodes:
            raise UserInputError(f"an alias refers to the collection it is in (line {node.start_mark.line + 1}): "
                                 "the value would be infinite", source=source)
        else:
            max_depth.check(depth, source=source)
            children: list[Any] = []
            if isinstance(node, yaml.SequenceNode):
                children = node.value
            elif isinstance(node, yaml.MappingNode):
                children = [n for pair in node.value for n in pair]
            open_nodes.add(key)
            values, height = 1, 1
            for child in children:
                child_values, child_height = measure(child, depth + 1)
                values += child_values
                height = max(height, child_height + 1)
                if values > max_values.value:
                    break
            open_nodes.discard(key)
            measured[key] = (values, height)
        max_depth.check(depth + height - 1, source=source)
        max_values.check(values, source=source)
        return values, height

    measure(root, 1)


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
        if candidate.is_dir():
            raise UserInputError(f"{name_or_path} is a directory, expected a YAML file", source=source, field=field)
        if candidate.exists() and not candidate.is_file():
            raise UserInputError(f"{name_or_path} is not a regular file", source=source, field=field)
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


# ----------------------------------------------------------------------------- output folders
def folder_name(name: str) -> str:
    """A folder name made from a scenario's name: letters, digits, '.', '_' and '-' only, no
    leading dot, so that no name (`../../x`, `/etc`) puts results outside their folder."""
    kept = "".join(c if (c.isascii() and c.isalnum()) or c in "._-" else "-" for c in name)
    kept = "-".join(part for part in kept.split("-") if part).lstrip(".-")[:100]
    return kept or "scenario"


def check_output_dir(path: Path, *, field: str = "--out", known: Collection[str] | None = None) -> None:
    """Before any work: `path` is a folder or does not exist yet, and the nearest existing
    folder above it is writable (results are written beside it, then moved into place).
    With `known` (the names gansim's commands write), the folder will be replaced as a whole
    (replaced_dir): it must not be the current folder, one above it or a mount point, and
    must hold no other folder: what else it holds is carried into the new one, files by a
    hard link each, but a tree of someone else's is not gansim's to copy."""
    where = str(path)
    if path.exists() and not path.is_dir():
        raise UserInputError("exists and is not a directory", source=where, field=field)
    target = path.resolve()
    if known is not None and (target == Path.cwd().resolve() or target in Path.cwd().resolve().parents):
        raise UserInputError("is the current folder or one above it, which cannot be replaced; give a folder "
                             "for the results", source=where, field=field)
    if known is not None and path.is_dir() and os.path.ismount(target):
        raise UserInputError("is a mount point, which cannot be replaced; give a folder inside it",
                             source=where, field=field)
    above = target.parent
    while not above.exists():
        above = above.parent
    if not above.is_dir():
        raise UserInputError(f"{above} is not a directory", source=where, field=field)
    if not os.access(above, os.W_OK | os.X_OK):
        raise UserInputError(f"{above} is not writable", source=where, field=field)
    if known is not None and path.is_dir():
        foreign = sorted(entry for entry in os.listdir(path)
                         if entry not in known and (path / entry).is_dir() and not (path / entry).is_symlink())
        if foreign:
            shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
            raise UserInputError(f"holds folders gansim did not write ({shown}); give a new folder, or one that "
                                 "holds gansim's results and your files", source=where, field=field)


@contextmanager
def replaced_dir(path: Path, owned: Collection[str]) -> Iterator[Path]:
    """Write a command's results as a whole: yields a new folder beside `path` to write into;
    when the block ends without an error, what `path` held that the command does not write
    itself (not in `owned`: another command's results, the user's files) is linked into it
    and it takes `path`'s place in one rename. An error, Ctrl-C or a full disk leaves `path`
    exactly as it was. A failure to write is an OutputError."""
    target = path.resolve()
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        stage = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".partial", dir=target.parent))
    except OSError as exc:
        raise OutputError(f"cannot create a folder beside {path}: {exc.strerror or exc}") from None
    try:
        os.chmod(stage, (target.stat().st_mode & 0o7777) if target.is_dir() else 0o777 & ~_umask())
        yield stage
        if target.is_dir():
            for entry in sorted(set(os.listdir(target)) - set(owned)):
                _link_tree(target / entry, stage / entry)
        _fsync_directory(stage)
        if not target.exists():
            os.rename(stage, target)
        elif not _exchange(stage, target):
            old = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".old", dir=target.parent))
            os.rename(target, old / target.name)
            os.rename(stage, target)
            stage = old
        _fsync_directory(target.parent)
    except OSError as exc:
        raise OutputError(f"cannot write the results into {path}: {exc.strerror or exc}; the earlier results "
                          "there are unchanged") from None
    finally:
        shutil.rmtree(stage, ignore_errors=True)  # the unfinished results, or the replaced ones


def _link_tree(source: Path, dest: Path) -> None:
    """Another command's file or folder, into the new folder: hard links where the file
    system has them (no copy of the bytes), else a copy."""

    def link(src: str, dst: str) -> None:
        try:
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)

    if source.is_dir() and not source.is_symlink():
        shutil.copytree(source, dest, copy_function=link, symlinks=True)
    elif source.is_symlink():
        os.symlink(os.readlink(source), dest)
    else:
        link(str(source), str(dest))


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths in one step (Linux renameat2 RENAME_EXCHANGE, through libc: Python has
    no binding). False where the system or the file system cannot: the caller then renames
    twice, and a crash between the two renames leaves the old results in a hidden folder
    beside `b` rather than in `b`."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    return renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0
