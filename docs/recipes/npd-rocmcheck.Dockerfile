# node-problem-detector with rocmcheck as its custom plugin: NPD runs `rocmcheck gate --npd` inside
# its own container, so that container needs NPD's binary, the training stack's torch build and the
# GPUs. Build it from the image your jobs use, so the gate checks the torch they run:
#   docker build -f docs/recipes/npd-rocmcheck.Dockerfile --build-arg BASE=your-training-image -t rocmcheck-npd .
# (run from a rocmcheck checkout; torch is not installed: the base image's is used).
ARG NPD=registry.k8s.io/node-problem-detector/node-problem-detector:v0.8.19
ARG BASE=rocm/pytorch:latest
FROM ${NPD} AS npd

FROM ${BASE}
# NPD's binary needs libsystemd (its journald monitor); Debian and Ubuntu bases ship it
COPY --from=npd /node-problem-detector /node-problem-detector
# a venv that sees the base image's torch, at the absolute path the plugin config names
COPY . /src/rocmcheck
RUN python3 -m venv --system-site-packages /opt/rocmcheck && /opt/rocmcheck/bin/pip install /src/rocmcheck \
    && /opt/rocmcheck/bin/rocmcheck list > /dev/null
ENTRYPOINT ["/node-problem-detector"]
