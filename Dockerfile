# tether's container image: `tether` is the entrypoint, the container's `args` are its command
# line (`hub run ...`, `agent run ...`, `mesh run ...`), which is what every manifest in deploy/
# relies on. Build: docker build -t ghcr.io/tether-dev/tether:$(tether version) .
#
# Runs as a numeric non-root user with a read-only root filesystem: the only writable paths are
# /tmp and the data directory (TETHER_HOME), both volumes in the manifests.

ARG PYTHON_VERSION=3.12.8

# --- build: a wheel of tether and of every dependency, compiled where needed -----------------
FROM python:${PYTHON_VERSION}-slim-bookworm AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY src ./src
RUN pip wheel --wheel-dir /wheels .

# --- runtime: the wheels installed into a virtualenv, no compiler, no sources ----------------
FROM python:${PYTHON_VERSION}-slim-bookworm AS runtime
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="tether" \
      org.opencontainers.image.description="A multi-cluster Kubernetes toolkit: federation, reach, connect and bridge." \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.source="https://github.com/tether-dev/tether" \
      org.opencontainers.image.licenses="Apache-2.0"
# The mesh manager drives WireGuard devices with `ip` and `wg`.
RUN apt-get update \
 && apt-get install -y --no-install-recommends iproute2 wireguard-tools \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /wheels /wheels
RUN python -m venv /opt/tether \
 && /opt/tether/bin/pip install --no-cache-dir --no-index --find-links /wheels tether \
 && rm -rf /wheels \
 && mkdir -p /var/lib/tether \
 && chown 65532:65532 /var/lib/tether
ENV PATH=/opt/tether/bin:$PATH \
    TETHER_HOME=/var/lib/tether \
    HOME=/var/lib/tether \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER 65532:65532
WORKDIR /var/lib/tether
VOLUME ["/var/lib/tether"]
ENTRYPOINT ["tether"]
CMD ["--help"]
