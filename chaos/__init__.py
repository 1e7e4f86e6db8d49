"""echomq-chaos: chaos and load testing for EchoMQ-style lease queues on Valkey."""

__version__ = "0.1.0"
