# The Node.js example SUT (sut/node-echomq, docs/sut.md) for runtime = "docker", built offline by
# `echomq-chaos images build`: the host's node binary (libc and libstdc++ only) on the debootstrap
# base, the example as `npm ci` installed it, and the protocol's scripts at the path its worker
# reads them from (../../chaos/protocol/lua). Everything a process needs comes from CHAOS_*.
ARG BASE=echomq-chaos/base:bookworm
FROM ${BASE}
COPY node /usr/local/bin/node
COPY app/ /app/
WORKDIR /app/sut/node-echomq
RUN node --version
CMD ["node", "worker.js"]
