"""The web server's settings: one file for `./atlas demo`, docker-compose and the image.

Why the gevent worker (issue 19.4): gunicorn's sync and gthread workers read a request's
headers in the process or thread that will run it, so a few clients that send their headers
a byte a second hold every slot: 8 such connections stalled /healthz ~95 s against the
demo's 2 workers x 4 threads, 3 against compose's 3 sync workers, without logging in.
gunicorn documents that sync workers need a buffering proxy (nginx) in front; on a single
host without one, its answer is an async worker. Under gevent each connection is a greenlet
costing a few KB while it dribbles; Django runs only once the request head is complete,
so slow clients queue on the event loop, not on the workers.

The bind address, log files and worker count are the caller's (command line or
``ATLAS_WEB_WORKERS``); everything that decides how slow clients are served is here, so the
test in tests/faults/test_slow_clients.py runs exactly what the demo and compose run.
"""

import os

worker_class = "gevent"
workers = int(os.environ.get("ATLAS_WEB_WORKERS", "2"))
# Concurrent connections per worker (greenlets), slow ones included: well above what a
# handful of slow clients can hold, well below the file-descriptor limit.
worker_connections = int(os.environ.get("ATLAS_WEB_CONNECTIONS", "1000"))
timeout = 30
keepalive = 5
# A "persistent" database connection would belong to the request's greenlet and be
# dropped (not reused, not closed) when it ends: connect per request instead (the Django
# docs say the same for async servers). psycopg waits cooperatively under gevent.
raw_env = ["ATLAS_DB_CONN_MAX_AGE=0"]
