"""A bounded map of parsed git objects kept per process, oldest use dropped first.

Objects never change, so :mod:`sandbox.store.objects` keeps the commits and trees it parsed;
a cache is bounded in objects and, for trees, in entries, so that a walk of a large tree cannot
keep it all in memory. Safe to share between threads. Standard library only.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Lru(Generic[K, V]):
    """At most ``max_items`` values, and at most ``max_weight`` in all as ``weight`` counts them."""

    def __init__(self, max_items: int, max_weight: int = 0, weight: Callable[[V], int] | None = None) -> None:
        self.max_items = max_items
        self.max_weight = max_weight
        self.weight = weight
        self.total = 0
        self._items: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        """The value kept for ``key`` (now the most recently used), or None."""
        with self._lock:
            found = self._items.get(key)
            if found is not None:
                self._items.move_to_end(key)
            return found

    def put(self, key: K, value: V) -> None:
        """Keep ``value`` (a key already kept keeps its value), then drop the oldest beyond the bounds."""
        with self._lock:
            if key in self._items:
                return
            self._items[key] = value
            if self.weight is not None:
                self.total += self.weight(value)
            over = self.weight is not None and self.total > self.max_weight
            while self._items and (len(self._items) > self.max_items or over):
                _old_key, old = self._items.popitem(last=False)
                if self.weight is not None:
                    self.total -= self.weight(old)
                    over = self.total > self.max_weight

    def clear(self) -> None:
        """Forget every value."""
        with self._lock:
            self._items.clear()
            self.total = 0
