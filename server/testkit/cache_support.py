"""What the cache tests share: a snippet, its plain gradients, and the final .grad a trace shows."""

from __future__ import annotations

from collections.abc import Iterator

from fastapi.testclient import TestClient
from gradstep.app import create_app
from gradstep.encoding import decompress
from gradstep.schema import Trace
from gradstep.settings import Settings

from testkit.sandbox_guard import uid_base

SECRET = b"a test secret shared by the replicas, 32+"  # GRADSTEP_CACHE_SECRET of the test replicas
CODE = "import torch\nx = torch.ones(3, requires_grad=True)\ny = (x * x * 3).sum()\ny.backward()\n"


def plain_grad(code: str, name: str) -> list[float]:
    """``name``'s .grad after ``code`` runs plainly."""
    scope: dict = {}
    exec(compile(code, "<plain>", "exec"), scope)
    return scope[name].grad.tolist()


def final_grad(body: bytes, name: str) -> list[float] | None:
    """The final .grad of ``name`` in a trace: JSON as a client reads it, or compressed as stored."""
    last = Trace.model_validate_json(body if body[:1] == b"{" else decompress(body)).steps[-1]
    return next((t.grad.values for t in last.tensors.rows() if t.name == name and t.grad), None)


def redis_backed_client(url: str, secret: bytes = SECRET, **settings) -> Iterator[TestClient]:
    """A one-worker app (rate limit off) whose shared cache is the Redis at ``url``, signed with ``secret``."""
    base = dict(workers=1, queue=4, rate=0, uid_base=uid_base(), cache_url=url, cache_secret=secret.decode())
    with TestClient(create_app(Settings(**base, **settings))) as client:
        yield client
