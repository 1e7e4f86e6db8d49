# Offline stand-in for ghcr.io/shopify/toxiproxy: the built-in Toxiproxy-compatible server
# (python -m chaos.network.server), which takes the official image's -host/-port flags too.
ARG WORKER=echomq-chaos/worker:0.1.0
FROM ${WORKER}
EXPOSE 8474
ENTRYPOINT ["python3", "-m", "chaos.network.server"]
CMD ["-host=0.0.0.0"]
