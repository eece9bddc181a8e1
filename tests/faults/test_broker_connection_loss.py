"""The worker's cleanup after a broker connection loss must not kill the consumer (issue 19,
finding 15).

In one of three runs of ``test_redis_restart`` the worker logged ``Unrecoverable error:
AttributeError: 'NoneType' object has no attribute 'hostname'`` and never consumed again.
The sequence, from that log: Celery's consumer, on a connection error, calls
``connection.collect()`` and then ``connection.close()``. ``collect`` tries to close the
default channel, which fails on the dead socket when a BRPOP was in flight (a connection
error, ignored), then closes the transport's channels newest first, where the first that
fails the same way (the worker has several: tasks, remote control) ends the loop, then
drops the transport's client; ``close`` closes the default channel again, and with a
delivered, unacknowledged message (a task running, acks late) the channel's QoS restores
it through a new Redis client built from the transport's client, which is now ``None``.
An ``AttributeError`` is not a connection error, so it escapes the consumer's retry loop.

Here that exact sequence runs against a private Redis that is stopped under it, with the
product's Celery app (``atlas_console.broker.Connection``) and with kombu's own class, the
second showing the fault is real on the installed kombu (and telling us when an upgrade
fixes it, so the shim can go).
"""

from __future__ import annotations

import contextlib
import socket

import kombu
import pytest
from kombu import Exchange, Queue

from atlas_console.broker import Connection as AtlasConnection
from atlas_console.celery import app


def _held_message_and_brpop_in_flight(connection: kombu.Connection) -> None:
    """A consumer holding one delivered, unacknowledged message while its channel and a
    second one (the worker's remote control has one) wait in BRPOP for more: the worker's
    state while a task runs with late acknowledgement and prefetch room for another."""
    queue = Queue("faults-held", Exchange("faults-held", type="direct"), "faults-held")
    other_queue = Queue("faults-other", Exchange("faults-other", type="direct"), "faults-other")
    channel, other = connection.default_channel, connection.channel()
    held = []
    consumer = kombu.Consumer(channel, [queue], callbacks=[lambda body, message: held.append(1)])
    consumer.qos(prefetch_count=2)
    consumer.consume()
    kombu.Consumer(other, [other_queue], callbacks=[lambda body, message: None]).consume()
    kombu.Producer(channel).publish(
        {"n": 1}, exchange=queue.exchange, routing_key="faults-held", declare=[queue]
    )
    connection.drain_events(timeout=5)
    assert held == [1] and channel.qos._delivered, "the message is delivered, not acked"
    with contextlib.suppress(socket.timeout):  # nothing more: both BRPOPs stay on the wire
        connection.drain_events(timeout=0.3)
    assert channel._in_poll and other._in_poll
    # kombu restores a channel's unacked messages at interpreter exit as well; the broker
    # is gone by then, and the attempt would print a traceback after the test run.
    channel.qos._on_collect.cancel()


def _lose_the_broker_and_clean_up(connection: kombu.Connection, redis) -> None:
    redis.stop()
    # What celery.worker.consumer.Consumer.on_connection_error_after_connected does.
    connection.collect(socket_timeout=1)
    kombu.common.ignore_errors(connection, connection.close)


def test_the_products_connection_survives_the_cleanup_after_a_broker_loss(private_redis):
    connection = app.connection_for_read(private_redis.url)
    assert isinstance(connection, AtlasConnection)
    _held_message_and_brpop_in_flight(connection)
    _lose_the_broker_and_clean_up(connection, private_redis)  # raises nothing
    assert connection._default_channel is None


def test_kombus_own_connection_still_fails_that_cleanup(private_redis):
    """The fault, on the installed kombu. When this fails, kombu is fixed: delete the shim
    in atlas_console/broker.py and this test."""
    connection = kombu.Connection(private_redis.url)
    _held_message_and_brpop_in_flight(connection)
    with pytest.raises(AttributeError, match="hostname"):
        _lose_the_broker_and_clean_up(connection, private_redis)
