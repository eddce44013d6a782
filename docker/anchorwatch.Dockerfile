# syntax=docker/dockerfile:1
# The anchorwatch services: `ingest serve`, `alerting serve`, the local Slack and Jira, and
# the one-shot topic initialiser. Build from the repository root:
#   docker build -f docker/anchorwatch.Dockerfile -t anchorwatch:0.1.0 .
#
# pyflink (and beam, pyarrow, pandas) is left out: these services never import it, and it
# would make the image about 700 MB larger. The Flink image (docker/flink.Dockerfile)
# carries it for the job. Versions: docker/requirements-services.txt (tools/docker_lock.py).
ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm
ARG RUST_IMAGE=rust:1.95.0-slim-bookworm

# The Rust toolchain, for the package's compiled part (connectors/native).
FROM ${RUST_IMAGE} AS rust

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
RUN python -m venv /opt/anchorwatch
COPY docker/requirements-services.txt docker/
# Binary wheels only: of the dependencies, nothing is compiled.
RUN /opt/anchorwatch/bin/pip install --no-cache-dir --only-binary=:all: \
        -r docker/requirements-services.txt
# The package's own extension (the ingest fast path, Rust) is: with the toolchain of the
# Rust image and Debian's C linker, in this stage only.
COPY --from=rust /usr/local/cargo /usr/local/cargo
COPY --from=rust /usr/local/rustup /usr/local/rustup
ENV CARGO_HOME=/usr/local/cargo \
    RUSTUP_HOME=/usr/local/rustup \
    PATH=/usr/local/cargo/bin:$PATH
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*
# The package itself; the symlinked subpackages (anchorwatch/jobs -> ../jobs ...) need their
# targets in the context too.
COPY pyproject.toml README.md ./
COPY anchorwatch anchorwatch
COPY jobs jobs
COPY connectors connectors
COPY alerting alerting
RUN /opt/anchorwatch/bin/pip install --no-cache-dir --no-deps . \
    && /opt/anchorwatch/bin/python -m compileall -q /opt/anchorwatch/lib

FROM ${PYTHON_IMAGE}
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="anchorwatch" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.description="anchorwatch ingest and alerting services"
ENV PATH=/opt/anchorwatch/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    MPLCONFIGDIR=/tmp/matplotlib
# A fixed uid/gid so volume ownership is predictable across rebuilds.
RUN groupadd --system --gid 10001 anchorwatch \
    && useradd --system --uid 10001 --gid anchorwatch --home-dir /var/lib/anchorwatch \
        --shell /usr/sbin/nologin anchorwatch \
    && install -d -o anchorwatch -g anchorwatch -m 0750 /var/lib/anchorwatch
COPY --from=build /opt/anchorwatch /opt/anchorwatch
COPY --chmod=0755 docker/init_topics.py /opt/anchorwatch/bin/anchorwatch-init-topics
USER 10001:10001
WORKDIR /var/lib/anchorwatch
# Named volumes mounted here start out owned by the service user.
VOLUME ["/var/lib/anchorwatch"]
ENTRYPOINT ["anchorwatch"]
CMD ["--help"]
