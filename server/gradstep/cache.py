"""In-process trace cache: identical code and options give the identical trace.

Keyed by a hash of code, options, trace version and torch version. Bounded by
bytes (least recently used go first) and by age. Only complete results are
kept: a timeout or a memory limit can depend on the load of the moment.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import OrderedDict

import orjson
import torch

from gradstep.schema import VERSION


def cache_key(code: str, options: dict) -> str:
    blob = orjson.dumps(
        {"code": code, "options": options, "v": VERSION, "torch": torch.__version__},
        option=orjson.OPT_SORT_KEYS,
    )
    return hashlib.sha256(blob).hexdigest()


class TraceCache:
    def __init__(self, max_bytes: int, ttl: float):
        self.max_bytes, self.ttl = max_bytes, ttl
        self._items: OrderedDict[str, tuple[float, bytes]] = OrderedDict()
        self._size = 0
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def get(self, key: str) -> bytes | None:
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

    def put(self, key: str, body: bytes) -> None:
        if len(body) > self.max_bytes // 4:  # one huge trace must not evict everything
            return
        with self._lock:
            if key in self._items:
                self._remove(key)
            self._items[key] = (time.monotonic(), body)
            self._size += len(body)
            while self._size > self.max_bytes:
                self._remove(next(iter(self._items)))

    def _remove(self, key: str) -> None:
        _, body = self._items.pop(key)
        self._size -= len(body)

    def stats(self) -> dict:
        return {"entries": len(self._items), "bytes": self._size, "hits": self.hits, "misses": self.misses}
