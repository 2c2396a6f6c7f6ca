"""In-process trace cache: bounded by bytes (least recently used go first) and by age."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict


class MemoryCache:
    """The default cache, and the first tier in front of a shared one."""

    kind = "memory"

    def __init__(self, max_bytes: int, ttl: float):
        self.max_bytes, self.ttl = max_bytes, ttl
        self._items: OrderedDict[str, tuple[float, bytes]] = OrderedDict()
        self._size = 0
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def get_now(self, key: str) -> bytes | None:
        with self._lock:
            item = self._items.get(key)
            if item is None or time.monotonic() - item[0] > self.ttl:
                if item is not None:
                    self._remove(key)
                self.misses += 1
                return None
            self._items.move_to_end(key)
            self.hits += 1
            return item[1]

    def put_now(self, key: str, body: bytes) -> None:
        if len(body) > self.max_bytes // 4:  # one huge trace must not evict everything
            return
        with self._lock:
            if key in self._items:
                self._remove(key)
            self._items[key] = (time.monotonic(), body)
            self._size += len(body)
            while self._size > self.max_bytes:
                self._remove(next(iter(self._items)))

    def refresh(self, key: str, body: bytes) -> None:
        """Replace an entry still held (keeping its age): one that was evicted stays out."""
        if len(body) > self.max_bytes // 4:
            return
        with self._lock:
            item = self._items.get(key)
            if item is not None:
                self._size += len(body) - len(item[1])
                self._items[key] = (item[0], body)
                while self._size > self.max_bytes:
                    self._remove(next(iter(self._items)))

    async def get(self, key: str, expect: dict | None = None) -> bytes | None:
        return self.get_now(key)  # this process's own entries (``expect`` is for the shared cache's)

    async def put(self, key: str, body: bytes) -> None:
        self.put_now(key, body)

    async def close(self) -> None:
        pass

    def _remove(self, key: str) -> None:
        _, body = self._items.pop(key)
        self._size -= len(body)

    def stats(self) -> dict:
        return {
            "kind": self.kind,
            "entries": len(self._items),
            "bytes": self._size,
            "hits": self.hits,
            "misses": self.misses,
        }
