"""The loop the label and masks stages share: map items to results through a content-addressed
cache, computing what it lacks in batches.

Each item has a key that names its result (a hash of everything the result depends on). An item
whose key the cache holds is served from it. The others wait in a batch of distinct keys, and
an item whose key is already waiting shares that computation. A full batch is computed in one
call, stored as one cache segment (a kill loses at most that batch), and then handed to each of
its items. Where the items are computed (this process, or a Ray job that fills the cache first,
`missing` gives its keys) does not change a result: the cache holds what was computed, and the
table is built from it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

Item = TypeVar("Item")  # what is computed: a prompt, a mask request
Result = TypeVar("Result")  # what the compute function returns for one item
Cached = TypeVar("Cached")  # what the cache returns for a key
Waiter = TypeVar("Waiter")  # who receives a result: a pending row


@dataclass
class CachedMap(Generic[Item, Result, Cached, Waiter]):
    """`submit` items (made on demand: a cached key never builds its item) with their key and
    a waiter; `flush` once at the end.

    `lookup(key)`: the cached result, or None. `compute(items)`: one result per item, in order.
    `store(keys, items, results)`: cache a computed batch (one segment). `deliver(waiter, result,
    source)`: hand a result over; `source` is "cache" (served by the cache), "computed" (the
    batch's first item of its key) or "shared" (a repeat of a key in the same batch)."""

    lookup: Callable[[str], Cached | None]
    compute: Callable[[list[Item]], list[Result]]
    store: Callable[[list[str], list[Item], list[Result]], None]
    deliver: Callable[[Waiter, Result | Cached, str], None]
    batch_size: int
    after_flush: Callable[[], None] = lambda: None
    _pending: dict[str, tuple[Item, list[Waiter]]] = field(default_factory=dict)

    def submit(self, key: str, make: Callable[[], Item], waiter: Waiter) -> None:
        hit = self.lookup(key)
        if hit is not None:
            self.deliver(waiter, hit, "cache")
        elif key in self._pending:
            self._pending[key][1].append(waiter)
        else:
            self._pending[key] = (make(), [waiter])
            if len(self._pending) >= self.batch_size:
                self.flush()

    def flush(self) -> None:
        """Compute the waiting batch, store it, hand each result over."""
        if not self._pending:
            return
        keys = list(self._pending)
        items = [self._pending[key][0] for key in keys]
        results = self.compute(items)
        if len(results) != len(items):
            raise RuntimeError(f"{len(results)} results were computed for {len(items)} items")
        self.store(keys, items, results)
        for key, result in zip(keys, results, strict=True):
            first, *repeats = self._pending[key][1]
            self.deliver(first, result, "computed")
            for waiter in repeats:
                self.deliver(waiter, result, "shared")
        self._pending.clear()
        self.after_flush()


def missing(
    keyed: Iterable[tuple[str, Callable[[], Item]]], lookup: Callable[[str], object | None]
) -> dict[str, Item]:
    """The items whose key the cache lacks, one per key, in order (each made on demand): what a
    Ray job computes before the loop, which then finds every result in the cache."""
    out: dict[str, Item] = {}
    for key, make in keyed:
        if key not in out and lookup(key) is None:
            out[key] = make()
    return out
