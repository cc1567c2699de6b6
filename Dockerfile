# The sloscope image: `sloscope serve`, as the Helm chart (charts/sloscope) runs it.
#
#   docker build -t sloscope:0.1.0 .
#
# Two stages on the same pinned base: the first builds the wheel (the Python code and the compiled native core)
# and installs it, with the exact dependency versions of constraints.txt, into a virtualenv; the second copies
# only that virtualenv. No compiler, pip cache or source tree reaches the runtime image.
#
# The base is pinned by tag and digest. The digest was not checked against the registry where this file was
# written (no registry access); verify or refresh it before the first build with
#   docker buildx imagetools inspect python:3.11-slim-bookworm
# and keep BASE in step with requires-python in pyproject.toml.
ARG BASE=python:3.11-slim-bookworm@sha256:a36c24f9cbdf4fd0f52d67f0823eeac19c2028c637cecc392d97f980d4fec56b
# The Rust toolchain that compiles the native core (native/, built by maturin into the wheel); only the
# build stage sees it. Pinned by tag; add its digest (docker buildx imagetools inspect) as for BASE.
ARG RUST=rust:1.95.0-slim-bookworm

FROM ${RUST} AS rust

FROM ${BASE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    CARGO_HOME=/usr/local/cargo \
    RUSTUP_HOME=/usr/local/rustup \
    PATH=/usr/local/cargo/bin:$PATH
# A C linker for rustc; the toolchain itself comes from the rust stage.
RUN apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev && rm -rf /var/lib/apt/lists/*
COPY --from=rust /usr/local/cargo /usr/local/cargo
COPY --from=rust /usr/local/rustup /usr/local/rustup
WORKDIR /src
RUN python -m venv /opt/sloscope
# Dependencies first, in their own layer: it is reused as long as pyproject.toml and constraints.txt do not change.
COPY pyproject.toml constraints.txt README.md ./
RUN python -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]))' \
        > /tmp/requirements.txt
RUN /opt/sloscope/bin/pip install --constraint constraints.txt --requirement /tmp/requirements.txt
COPY exporter ./exporter
COPY native ./native
RUN /opt/sloscope/bin/pip wheel --no-deps --wheel-dir /wheels . \
    && /opt/sloscope/bin/pip install --no-deps /wheels/sloscope-*.whl \
    && /opt/sloscope/bin/sloscope check-config --help > /dev/null

FROM ${BASE} AS runtime
LABEL org.opencontainers.image.title="sloscope" \
      org.opencontainers.image.description="SLO observability for prediction-based routing of LLM inference" \
      org.opencontainers.image.licenses="Apache-2.0"
# A fixed numeric user, so that Kubernetes can check runAsNonRoot without looking the name up.
RUN groupadd --system --gid 65532 sloscope \
    && useradd --system --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin sloscope \
    && mkdir -p /var/lib/sloscope \
    && chown 65532:65532 /var/lib/sloscope
COPY --from=build /opt/sloscope /opt/sloscope
ENV PATH=/opt/sloscope/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
WORKDIR /var/lib/sloscope
USER 65532:65532
# OTLP/gRPC, OTLP/HTTP, and /metrics with /healthz and /readyz.
EXPOSE 4317 4318 9464
ENTRYPOINT ["sloscope", "serve"]
