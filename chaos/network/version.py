"""Which Toxiproxy the built-in server follows, and how it names itself (Toxiproxy's version.go)."""

from __future__ import annotations

from chaos import __version__

TOXIPROXY_VERSION = "2.12.0"  # the Toxiproxy release whose API and behaviour the server follows
# Toxiproxy sends no Server header; ours names this implementation, so a caller can tell the two
# apart without any client that parses the bodies noticing.
SERVER_HEADER = f"echomq-chaos/{__version__} (Toxiproxy {TOXIPROXY_VERSION} compatible)"
