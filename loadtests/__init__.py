"""Locust load for EchoMQ-style lease queues on Valkey.

``loadtests/queue.py`` is the locustfile (``locust -f loadtests/queue.py --host valkey://...``);
``loadtests/step_ramp.py`` adds a step-ramp load shape; ``loadtests/queue_users.py`` holds the
users and the Valkey client that reports each script call to Locust. These modules run inside
Locust (gevent); the echomq-chaos runner never imports them, it starts Locust as a subprocess.
"""
