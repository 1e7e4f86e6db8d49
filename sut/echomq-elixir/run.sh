#!/bin/sh
# Runs sut.exs on the EchoMQ build at $ECHOMQ_BUILD (default /opt/echomq-build/echo/_build/prod/lib,
# holding echo_data, echo_wire and echo_mq): run.sh worker|producer [options] (sut.exs's).
build="${ECHOMQ_BUILD:-/opt/echomq-build/echo/_build/prod/lib}"
exec elixir -pa "$build/echo_data/ebin" -pa "$build/echo_wire/ebin" -pa "$build/echo_mq/ebin" \
  "$(dirname "$0")/sut.exs" "$@"
