"""A real Triton Inference Server for tests and benches: a model repository served through PyTriton.

``streamer export --triton-repo DIR`` writes a repository for Triton's onnxruntime backend. The
``tritonserver`` that nvidia-pytriton bundles has the Python backend only, so this script serves each
model of such a repository from a Python function that runs its ``1/model.onnx`` with onnxruntime,
with the tensors, batching and ``parameters`` (the model's ``streamer.*`` contract) of its
``config.pbtxt``. The client sees what a Triton with the onnxruntime backend shows it: the same model
configuration and metadata over gRPC, Triton's dynamic batcher, its shared-memory extensions.

Run with an interpreter that has nvidia-pytriton, tritonclient and onnxruntime (not this package;
deploy/triton/README.md says how to make one); tests and ``streamer bench triton`` start it so::

    STREAMER_TRITON_TOKEN=... .triton-venv/bin/python deploy/triton/pytriton_serve.py --repo DIR \
        --grpc-port 8001 --http-port 8000 --metrics-port 8002

It prints ``streamer-triton-ready`` once every model is loaded and serves until SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
from google.protobuf import text_format
from pytriton.decorators import batch
from pytriton.model_config import DynamicBatcher, ModelConfig, Tensor
from pytriton.models.model import Model
from pytriton.triton import Triton, TritonConfig, TritonSecurityConfig
from tritonclient.grpc import model_config_pb2

_DTYPES = {
    model_config_pb2.TYPE_FP32: np.float32,
    model_config_pb2.TYPE_FP16: np.float16,
    model_config_pb2.TYPE_UINT8: np.uint8,
    model_config_pb2.TYPE_INT32: np.int32,
    model_config_pb2.TYPE_INT64: np.int64,
}


READY = "streamer-triton-ready"
"""Printed once every model is loaded."""

_PARAMETERS: dict[str, dict[str, str]] = {}
"""Each model's config.pbtxt ``parameters``, by model name, filled before it is bound."""


def _with_parameters() -> None:
    """PyTriton writes its own ``parameters`` (its workspace); add each model's from its config.pbtxt,
    so a client reads the contract from the server as it would from Triton's onnxruntime backend."""
    original = Model._get_triton_model_config

    def patched(self: Model) -> Any:
        config = original(self)
        config.backend_parameters = {**config.backend_parameters, **_PARAMETERS.get(self.model_name, {})}
        return config

    Model._get_triton_model_config = patched


def _infer_function(session: ort.InferenceSession, outputs: list[str]) -> Any:
    @batch
    def infer(**inputs: np.ndarray) -> dict[str, np.ndarray]:
        results = session.run(outputs, inputs)
        return dict(zip(outputs, results, strict=True))

    return infer


def _tensor(spec: Any) -> Tensor:
    if spec.data_type not in _DTYPES:
        raise SystemExit(f"tensor {spec.name!r}: data type {spec.data_type} is not served here")
    return Tensor(name=spec.name, dtype=_DTYPES[spec.data_type], shape=tuple(spec.dims))


def _exit(signum: int, frame: object) -> None:
    """SIGTERM ends ``serve`` as SIGINT does, so the server and its model processes are stopped."""
    raise SystemExit(0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", type=Path, required=True, help="a repository streamer export wrote")
    parser.add_argument("--grpc-port", type=int, required=True)
    parser.add_argument("--http-port", type=int, required=True)
    parser.add_argument("--metrics-port", type=int, required=True)
    parser.add_argument("--threads", type=int, default=1, help="onnxruntime intra-op threads per model (1)")
    parser.add_argument(
        "--token-env",
        default="STREAMER_TRITON_TOKEN",
        help="the environment variable holding the access token that Triton's shared-memory and "
        "model-repository endpoints require (header triton-access-token); unset: PyTriton makes one up",
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    _with_parameters()
    options = ort.SessionOptions()
    options.intra_op_num_threads = args.threads
    triton = Triton(
        config=TritonConfig(
            grpc_port=args.grpc_port,
            http_port=args.http_port,
            metrics_port=args.metrics_port,
            grpc_address="127.0.0.1",
            http_address="127.0.0.1",
            metrics_address="127.0.0.1",
        ),
        security_config=TritonSecurityConfig(access_token=os.environ.get(args.token_env) or None),
    )
    triton.run()
    for folder in sorted(p for p in args.repo.iterdir() if (p / "config.pbtxt").is_file()):
        config = text_format.Parse(
            (folder / "config.pbtxt").read_text(encoding="utf-8"), model_config_pb2.ModelConfig()
        )
        session = ort.InferenceSession(
            str(folder / "1" / "model.onnx"), sess_options=options, providers=["CPUExecutionProvider"]
        )
        outputs = [o.name for o in config.output]
        _PARAMETERS[config.name] = {k: v.string_value for k, v in config.parameters.items()}
        triton.bind(
            model_name=config.name,
            infer_func=_infer_function(session, outputs),
            inputs=[_tensor(i) for i in config.input],
            outputs=[_tensor(o) for o in config.output],
            config=ModelConfig(
                max_batch_size=config.max_batch_size,
                batcher=DynamicBatcher(
                    max_queue_delay_microseconds=config.dynamic_batching.max_queue_delay_microseconds,
                    preferred_batch_size=list(config.dynamic_batching.preferred_batch_size),
                ),
            ),
            strict=True,
        )
    print(READY, flush=True)  # one write: whole, even amid the server's log lines
    signal.signal(signal.SIGTERM, _exit)
    try:
        triton.serve()
    finally:
        triton.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
