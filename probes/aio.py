"""Running the probes' asyncio code from synchronous callers, whatever server they run in.

The probes fetch with asyncio (one event loop per batch). Celery's prefork workers and
`manage.py` call them from plain threads, where ``asyncio.run`` is right. The web server
runs gunicorn's gevent worker (deploy/gunicorn.conf.py: slow clients must not hold a
worker), where every request is a greenlet of one OS thread. There an event loop started by
one request would be "running" for all of them while it waits on a socket: a second
request's ``asyncio.run`` raises "cannot be called from a running event loop", and Django's
ORM refuses every query ("you cannot call this from an async context"). So under gevent
the loop runs on one of the hub's native threads, and the calling greenlet waits for it
cooperatively.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def _gevent_threads_patched() -> bool:
    monkey = sys.modules.get("gevent.monkey")
    return monkey is not None and bool(monkey.is_module_patched("threading"))


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(coroutine)``, on a native thread when gevent has patched threads."""
    if not _gevent_threads_patched():
        return asyncio.run(coroutine)
    from gevent import get_hub

    return get_hub().threadpool.apply(asyncio.run, (coroutine,))
