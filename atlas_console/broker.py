"""The broker connection class the Celery app uses: kombu's, with one fault worked around.

Issue 19, finding 15: after a Redis restart a worker sometimes logged ``Unrecoverable
error: AttributeError: 'NoneType' object has no attribute 'hostname'`` and never consumed
again. On a connection error Celery's consumer calls ``connection.collect()`` and then
``connection.close()``. With the Redis transport (which has no ``_collect``), ``collect``
closes the default channel, which fails on the dead socket when a BRPOP is in flight (a
connection error, swallowed); closes the transport's channels newest first, where the
first that fails the same way ends the loop (the worker has several: tasks, remote
control); and drops the transport's client, but keeps the default channel. ``close`` then
closes that channel again; with a delivered, unacknowledged message (a task running, acks
late) its QoS restores it through a new Redis client built from the transport's client,
now ``None``. An ``AttributeError`` is not a connection error, so it escapes the
consumer's retry loop ("Unrecoverable error") and the worker stops consuming.

After ``collect`` the connection and its transport are gone; a channel of theirs has
nothing left to talk to, so it is forgotten with them. The message it held is not lost:
it stays in Redis's unacked set and the visibility timeout
(``ATLAS_BROKER_VISIBILITY_TIMEOUT``) redelivers it, as after any worker that dies holding
one; after a restart without persistence there is nothing to restore at all.

``tests/faults/test_broker_connection_loss.py`` runs the exact sequence against a Redis
stopped under it, with this class and with kombu's (which still fails; when it stops
failing, kombu is fixed and this module can go).
"""

from __future__ import annotations

import kombu
from celery.app.amqp import AMQP as CeleryAMQP


class Connection(kombu.Connection):
    def collect(self, socket_timeout=None):
        try:
            super().collect(socket_timeout)
        finally:
            # The transport is gone: close() must not close this channel a second time.
            self._default_channel = None


class AMQP(CeleryAMQP):
    """Celery's AMQP helpers, making connections of the class above."""

    Connection = Connection
