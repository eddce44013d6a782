# syntax=docker/dockerfile:1
# The Flink image of the stack: the official Flink image with Python, apache-flink and
# anchorwatch installed as Flink's "Using Flink Python on Docker" describes, and the jobs'
# jar (Kafka SQL connector + the anchorwatch-json format) in /opt/flink/lib. The JobManager,
# the TaskManagers and the one-shot job submitter run it; it also serves an existing cluster (its TaskManagers need the same
# Python) and application mode. Build from the repository root:
#   docker build -f docker/flink.Dockerfile -t anchorwatch-flink:0.1.0 .
#
# Flink's version must be the one of apache-flink in pyproject.toml (a test checks it).
ARG FLINK_IMAGE=flink:2.2.1-scala_2.12-java17
ARG MAVEN_IMAGE=maven:3.9.11-eclipse-temurin-17
ARG RUST_IMAGE=rust:1.95.0-slim-bookworm

# The Rust toolchain, for the package's compiled part (connectors/native).
FROM ${RUST_IMAGE} AS rust

# The pinned jars, fetched from Maven Central with the project's own poms
# (anchorwatch/stack/pom.xml, and jobs/jvm for the jobs' jar: the Kafka connector plus the
# anchorwatch-json format), laid out as `anchorwatch jvm fetch` lays out its cache, with
# the same stamp, so `anchorwatch job submit` finds the cache current and never runs Maven.
FROM ${MAVEN_IMAGE} AS jars
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
WORKDIR /build
COPY anchorwatch/stack/pom.xml pom.xml
COPY jobs/jvm/pom.xml jobs/pom.xml
COPY jobs/jvm/src jobs/src
RUN mvn -B -q -f pom.xml package -Danchorwatch.cache=/jvm \
    && mvn -B -q -f jobs/pom.xml package -Danchorwatch.cache=/jvm \
    && { cat pom.xml; find jobs/pom.xml jobs/src -type f -print0 | LC_ALL=C sort -z | xargs -0 cat; } \
       | sha256sum | cut -d' ' -f1 > /jvm/sources.sha256

# Python and the locked dependencies in a virtualenv. Four of them (crcmod, dill, docopt,
# hdfs) exist only as source for Python 3.12; they are pure Python (crcmod falls back to
# its Python implementation), so no compiler is installed.
FROM ${FLINK_IMAGE} AS python
# A build stage: the image's own last USER is flink.
# hadolint ignore=DL3002
USER 0
# Ubuntu's Python 3.12 (the lock is checked against 3.12); patch releases float with the
# distribution's security updates.
# The package's own extension (the ingest fast path, Rust) is compiled here, with the
# toolchain of the Rust image and the distribution's C linker; neither reaches the image.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends "python3=3.12.*" "python3-venv=3.12.*" \
        gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*
COPY --from=rust /usr/local/cargo /usr/local/cargo
COPY --from=rust /usr/local/rustup /usr/local/rustup
ENV CARGO_HOME=/usr/local/cargo \
    RUSTUP_HOME=/usr/local/rustup \
    PATH=/usr/local/cargo/bin:$PATH
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
RUN python3 -m venv /opt/venv
COPY docker/requirements-flink.txt docker/
RUN /opt/venv/bin/pip install --no-cache-dir -r docker/requirements-flink.txt
COPY pyproject.toml README.md ./
COPY anchorwatch anchorwatch
COPY jobs jobs
COPY connectors connectors
COPY alerting alerting
RUN /opt/venv/bin/pip install --no-cache-dir --no-deps . \
    && /opt/venv/bin/python -m compileall -q /opt/venv/lib

FROM ${FLINK_IMAGE}
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="anchorwatch-flink" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.description="Flink 2.2 with PyFlink, anchorwatch and the Kafka connector"
USER 0
# The interpreter only: the virtualenv's python links to /usr/bin/python3.
RUN apt-get update \
    && apt-get install -y --no-install-recommends "python3=3.12.*" \
    && rm -rf /var/lib/apt/lists/* \
    && install -d -o flink -g flink /var/lib/flink/checkpoints /var/lib/flink/savepoints
COPY --from=python /opt/venv /opt/venv
COPY --from=jars /jvm /opt/anchorwatch/cache/jvm
COPY --from=jars --chown=flink:flink /jvm/flink/anchorwatch-flink-jobs.jar /opt/flink/lib/
COPY --chmod=0755 docker/submit-job.sh /opt/anchorwatch/bin/submit-job
# Flink's Python workers and the job's client run the virtualenv's interpreter. The
# client (pyflink's bin/flink, run by `anchorwatch job submit` as flink) logs into the
# package's log/ directory.
ENV PATH=/opt/venv/bin:$PATH \
    ANCHORWATCH_JVM__CACHE_DIR=/opt/anchorwatch/cache \
    MPLCONFIGDIR=/tmp/matplotlib
RUN printf '%s\n' \
        'python.executable: /opt/venv/bin/python' \
        'python.client.executable: /opt/venv/bin/python' \
        'execution.checkpointing.dir: file:///var/lib/flink/checkpoints' \
        'execution.checkpointing.savepoint-dir: file:///var/lib/flink/savepoints' \
        'metrics.reporter.prom.factory.class: org.apache.flink.metrics.prometheus.PrometheusReporterFactory' \
        'metrics.reporter.prom.port: 9249' \
        >> /opt/flink/conf/config.yaml \
    && chown flink:flink /opt/flink/conf/config.yaml \
    && chown -R flink:flink /opt/venv/lib/python3.*/site-packages/pyflink/log
# flink (uid 9999 in the official image).
USER 9999:9999
VOLUME ["/var/lib/flink"]
