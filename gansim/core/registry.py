"""Name -> implementation registries for pluggable parts (algorithms, generators, workloads,
cost models): adding one is writing one decorated function."""

from __future__ import annotations

from typing import Callable, Generic, Iterator, TypeVar

from gansim.core.errors import UserInputError

T = TypeVar("T")


class Registry(Generic[T]):
    def __init__(self, kind: str):
        self.kind = kind
        self._items: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        def decorate(item: T) -> T:
            if name in self._items:
                raise ValueError(f"{self.kind} {name!r} is registered twice")
            self._items[name] = item
            return item

        return decorate

    def get(self, name: str, *, source: str | None = None, field: str | None = None) -> T:
        try:
            return self._items[name]
        except KeyError:
            raise UserInputError(
                f"unknown {self.kind} {name!r}; allowed: {', '.join(self.names())}",
                source=source,
                field=field,
            ) from None

    def names(self) -> list[str]:
        return sorted(self._items)

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())
