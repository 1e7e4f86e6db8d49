"""Locustfile: producer and consumer users for an EchoMQ-style lease queue on Valkey.

    ECHOMQ_VALKEY_PASSWORD=... locust -f loadtests/queue.py --host valkey://127.0.0.1:6379/0

The password comes from ``ECHOMQ_VALKEY_PASSWORD`` (never the command line, which ``ps`` shows).
Queue options (``--producer-rate``, ``--batch``, ``--lease-ms`` ...): ``python -m
loadtests.queue --help`` (``locust -f loadtests/queue.py --help`` cannot list them: Locust
answers ``--help`` before it imports the locustfile). For a step ramp add the shape: ``-f
loadtests/queue.py,loadtests/step_ramp.py``.
"""

import logging.handlers
import sys

# Locust imports a locustfile under its file name, so this module is registered as "queue" and
# shadows the standard library's queue module for every later import. Put the real one back
# (logging.handlers imported it long before Locust read this file).
sys.modules["queue"] = logging.handlers.queue  # type: ignore[attr-defined]

from loadtests.queue_users import ConsumerUser, ProducerUser  # noqa: E402

__all__ = ["ConsumerUser", "ProducerUser"]

if __name__ == "__main__":
    # Locust's help with this file's options (and the step ramp's) added, as Locust would print
    # it had it read the locustfile first.
    from locust.argument_parser import get_parser

    import loadtests.step_ramp  # noqa: F401  (registers its options; its shape is not used here)

    get_parser().print_help()
