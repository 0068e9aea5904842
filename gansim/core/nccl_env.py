"""NCCL_ALGO and NCCL_PROTO as NCCL reads them (src/graph/tuning.cc parseList, v2.30.7-1): a
comma-separated list of names, any case, enables those only; a list that starts with `^`
enables all but those. From 2.24 a list may be given per collective after the first,
`^nvls;allreduce:tree,ring` ("All entries except the first must have a prefix"), each prefixed
entry replacing that collective's list. NCCL's own names are taken (Tree, Ring, CollNetDirect,
CollNetChain, NVLS, NVLSTree, PAT; LL, LL128, Simple; Broadcast, Reduce, AllGather,
ReduceScatter, AllReduce) and gansim's (`nvls_tree`, `all_reduce`). A name NCCL does not know
is an error, as it is from 2.24 ("Unrecognized element token"; earlier releases skipped it).

A setting is kept as text written with gansim's names (`canonical`), so that scenario files,
the CLI and the results record hold one form of it; `enabled` reads it for one collective."""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache

ALGORITHM = "algorithm"
PROTOCOL = "protocol"

# NCCL's spelling, lower case, and gansim's, to gansim's name (src/init.cc ncclAlgoStr,
# ncclProtoStr, ncclFuncStr); gansim models no CollNet (its algorithms are never available)
_NAMES = {
    ALGORITHM: {"tree": "tree", "ring": "ring", "collnetdirect": "collnet_direct", "collnet_direct": "collnet_direct",
                "collnetchain": "collnet_chain", "collnet_chain": "collnet_chain", "nvls": "nvls",
                "nvlstree": "nvls_tree", "nvls_tree": "nvls_tree", "pat": "pat"},
    PROTOCOL: {"ll": "LL", "ll128": "LL128", "simple": "Simple"},
}
_COLLECTIVES = {"broadcast": "broadcast", "reduce": "reduce", "allgather": "all_gather", "all_gather": "all_gather",
                "reducescatter": "reduce_scatter", "reduce_scatter": "reduce_scatter", "allreduce": "all_reduce",
                "all_reduce": "all_reduce"}
VARIABLE = {ALGORITHM: "NCCL_ALGO", PROTOCOL: "NCCL_PROTO"}
# the training option (options.nccl_algo, --nccl-algo) that holds each
OPTION = {ALGORITHM: "nccl_algo", PROTOCOL: "nccl_proto"}
MAX_LENGTH = 200  # every name of every collective fits many times over


def names(kind: str) -> tuple[str, ...]:
    """gansim's names of NCCL's algorithms or protocols, in NCCL's order."""
    return tuple(dict.fromkeys(_NAMES[kind].values()))


def _allowed_text(kind: str) -> str:
    return (f"{' | '.join(names(kind))} (NCCL's spellings too), comma-separated, ^ first to exclude, "
            f"entries after the first prefixed by a collective (allreduce:tree,ring)")


@lru_cache(maxsize=256)
def _entries(kind: str, text: str) -> tuple[tuple[str | None, bool, tuple[str, ...]], ...]:
    """(collective or None for all, exclusion?, names) per `;` entry; ValueError naming what
    is allowed for anything NCCL would refuse."""
    what = VARIABLE[kind]
    if len(text) > MAX_LENGTH:
        raise ValueError(f"{what} of {len(text)} characters; allowed: at most {MAX_LENGTH}, {_allowed_text(kind)}")
    entries = []
    for i, entry in enumerate(text.strip().split(";")):
        prefix, colon, listed = entry.strip().rpartition(":")
        collective = None
        if colon:
            collective = _COLLECTIVES.get(prefix.strip().lower())
            if collective is None:
                raise ValueError(f"{what} {text!r}: unknown collective {prefix.strip()!r}; allowed: "
                                 f"{', '.join(sorted(set(_COLLECTIVES.values())))}")
        elif i > 0:
            raise ValueError(f"{what} {text!r}: every entry after the first needs a collective prefix; allowed: "
                             f"{_allowed_text(kind)}")
        listed = listed.strip()
        exclude = listed.startswith("^")
        tokens = [t.strip() for t in listed.removeprefix("^").split(",")]
        if not any(tokens) or not all(tokens):
            raise ValueError(f"{what} {text!r}: an empty name; allowed: {_allowed_text(kind)}")
        unknown = [t for t in tokens if t.lower() not in _NAMES[kind]]
        if unknown:
            raise ValueError(f"{what} {text!r}: unknown {kind} {unknown[0]!r}; allowed: {_allowed_text(kind)}")
        entries.append((collective, exclude, tuple(dict.fromkeys(_NAMES[kind][t.lower()] for t in tokens))))
    return tuple(entries)


def _text(entries: Iterable[tuple[str | None, bool, tuple[str, ...]]]) -> str:
    """Entries (collective or None, exclusion?, names) written as a setting."""
    return ";".join((f"{c}:" if c else "") + ("^" if exclude else "") + ",".join(listed)
                    for c, exclude, listed in entries)


def canonical(kind: str, text: str) -> str:
    """`text` checked and written with gansim's names ("Ring,Tree" -> "ring,tree",
    "^NVLSTree;AllReduce:Tree" -> "^nvls_tree;all_reduce:tree"); ValueError otherwise."""
    return _text(_entries(kind, text))


@lru_cache(maxsize=1024)
def enabled(kind: str, text: str | None, collective: str) -> frozenset[str]:
    """The names a setting enables for `collective` (every one where `text` is None): each
    entry that applies to it replaces the list, as parseList does."""
    every = frozenset(names(kind))
    if text is None:
        return every
    allowed = every
    for c, exclude, listed in _entries(kind, text):
        if c is None or c == collective:
            allowed = every - set(listed) if exclude else frozenset(listed)
    return allowed


def applies(kind: str, text: str | None, collective: str) -> bool:
    """Whether a setting has an entry for `collective` (one without a prefix covers all)."""
    return text is not None and any(c is None or c == collective for c, _, _ in _entries(kind, text))


def as_environment(algo: str | None, proto: str | None) -> list[str]:
    """The settings given, as an environment sets them: ["NCCL_ALGO=ring,tree", "NCCL_PROTO=Simple"]."""
    return [f"{VARIABLE[kind]}={text}" for kind, text in ((ALGORITHM, algo), (PROTOCOL, proto)) if text is not None]


def per_collective(kind: str, text: str | None) -> bool:
    """Whether a setting has an entry for one collective (`allreduce:tree`), which NCCL reads
    from 2.24 on only: before, parseList splits on commas alone and skips what it does not know."""
    return text is not None and any(c is not None for c, _, _ in _entries(kind, text))


def without(kind: str, text: str | None, removed: tuple[str, ...]) -> str:
    """A setting that enables what `text` does but none of `removed` (NCCL_NVLS_ENABLE=0
    takes NVLS and NVLS-Tree from whatever NCCL_ALGO allows)."""
    if text is None:
        return _text([(None, True, removed)])
    entries = []
    for c, exclude, listed in _entries(kind, text):
        kept = tuple(dict.fromkeys(listed + removed)) if exclude else tuple(n for n in listed if n not in removed)
        # nothing left of an inclusion list: exclude every name
        entries.append((c, exclude, kept) if kept else (c, True, names(kind)))
    return _text(entries)
