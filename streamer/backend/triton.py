"""The ``triton`` backend: windows run on a model served by a Triton Inference Server, over gRPC.

A site with many cameras shares a pool of GPU servers; each streamer is then a sidecar that decodes,
windows, gates and encodes, and sends the model calls to Triton (KServe v2 protocol). The model's
contract (T, layout, value range, state, a streaming model's features) is read from the server's model
configuration, whose ``parameters`` carry the file's ``streamer.*`` metadata (``streamer export
--triton-repo`` writes them), and every check ``OnnxBackend`` makes of a local file is made of it: the
same ``OnnxBackend`` code prepares the tensors and reads the results, only ``run`` goes over the wire.

- **Stateless server.** A recurrent model's state travels with each request and comes back with the
  response, as with a local file: Triton's sequence batcher would pin a stream to one instance and
  lose the state with it on a restart, where here a restart costs a reset the runtime already does.
  A streaming model's encoder is the Triton model named by ``streamer.encoder_model``.
- **Transfers.** Tensors travel as gRPC binary data, or (``transport: shm``, a server on the same
  host) through a system shared-memory region registered with the server, one per calling thread,
  grown as frames grow and freed on ``close``: the inputs always, the outputs once a call of the same
  shapes has shown their sizes. Uint8 tensors where the model takes them.
- **Failures fail open.** A call refused, timed out (``deadline_ms``) or failing raises
  ``ModelUnavailableError``: the pipeline passes the frame through, counted. After ``failures`` in a row
  a circuit breaker refuses calls at once for ``cooldown_s``, then lets one through to find whether the
  server is back; the gRPC channel reconnects within ``cooldown_s`` too, so streams recover within a
  few seconds of the server's return. Nothing is retried, so frames are never reordered.
- At start the server must answer: the contract is needed to build a stream (a clear error names the
  URL and model).
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
import time
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from streamer.backend.base import Declared
from streamer.backend.onnx import OnnxBackend
from streamer.contract import NAMESPACE, Key, Session
from streamer.core.breaker import CircuitBreaker
from streamer.errors import BackendError, ConfigError, ModelError, ModelUnavailableError

__all__ = ["TritonBackend", "TritonConnection", "TritonSession"]

log = logging.getLogger(__name__)

ENCODER_MODEL = Key.ENCODER_MODEL
"""The fusion model's parameter naming its encoder's Triton model (``export.triton_repo``)."""

_TYPES = {"FP32": "tensor(float)", "UINT8": "tensor(uint8)", "FP16": "tensor(float16)"}
_CHANNEL = {
    # A server that went away: try again within ~0.1-1 s, not gRPC's default backoff of up to 120 s.
    "grpc.initial_reconnect_backoff_ms": 100,
    "grpc.min_reconnect_backoff_ms": 100,
    "grpc.max_reconnect_backoff_ms": 1000,
    "grpc.max_send_message_length": 256 * 1024 * 1024,
    "grpc.max_receive_message_length": 256 * 1024 * 1024,
}
_NUMPY = {"FP32": np.float32, "UINT8": np.uint8, "FP16": np.float16}
_DATATYPES = {np.dtype(kind): name for name, kind in _NUMPY.items()}
_SHAPES_KEPT = 64
"""Output sizes learned per model and input shapes (shared-memory outputs); a stream's shapes change
only with its frame size, so this many is plenty, and more start the learning again."""
_regions = itertools.count()


@dataclass(frozen=True, slots=True)
class _Arg:
    """What the backend reads of onnxruntime's NodeArg."""

    name: str
    type: str
    shape: list[int | None]


@dataclass(frozen=True, slots=True)
class _Meta:
    custom_metadata_map: dict[str, str]


class _Region:
    """One thread's shared-memory region for its call inputs."""

    def __init__(self, size: int) -> None:
        serial = next(_regions)
        self.name = f"streamer-{os.getpid()}-{serial}"
        self.key = f"/streamer-{os.getpid()}-{serial}"
        self.size = size
        self.handle = _shm().create_shared_memory_region(self.name, self.key, size)
        self.generation = -1
        """The connection's generation it was registered in; -1: not registered."""


class TritonConnection:
    """One gRPC client to a Triton server, its circuit breaker and its shared-memory regions;
    thread-safe (onnxruntime's ``run`` is, and the backend's workers call from their threads)."""

    def __init__(
        self,
        url: str,
        *,
        transport: Literal["grpc", "shm"] = "grpc",
        deadline_ms: float = 1000.0,
        access_token: str | None = None,
        breaker: CircuitBreaker | None = None,
    ) -> None:
        import tritonclient.grpc as grpcclient

        self.url = url
        self.transport = transport
        self.deadline_s = deadline_ms / 1000.0
        self.breaker = breaker or CircuitBreaker()
        # Triton's restricted gRPC protocols (shared memory, model repository) expect this header.
        self._headers = {"triton-grpc-protocol-triton-access-token": access_token} if access_token else None
        self._client = grpcclient.InferenceServerClient(url, channel_args=list(_CHANNEL.items()))
        self._grpc = grpcclient
        self._local = threading.local()
        self._lock = threading.Lock()
        self._regions: list[_Region] = []
        self._generation = 0
        """Bumped on every failure: a restarted server has forgotten the regions registered with it."""
        self._output_sizes: dict[tuple[object, ...], tuple[int, ...]] = {}
        self._closed = False
        # Regions are freed with the connection even where no one calls close (a pipeline's backend left
        # to the collector, the interpreter's exit): the server would otherwise keep them registered.
        self._release = weakref.finalize(
            self, _release, self._client, self._regions, self._lock, self._headers
        )
        self.failed = 0
        """Calls that raised ModelUnavailableError (refused by the breaker included)."""

    @property
    def shared_regions(self) -> list[str]:
        """Names of the shared-memory regions this connection holds (one per thread that has called)."""
        with self._lock:
            return [region.name for region in self._regions]

    def describe(self, model: str) -> tuple[dict[str, Any], dict[str, Any]]:
        """The model's metadata and configuration as JSON dicts; BackendError naming the URL and model
        where the server does not answer or does not serve it."""
        try:
            metadata = self._client.get_model_metadata(
                model, headers=self._headers, as_json=True, client_timeout=10.0
            )
            config = self._client.get_model_config(
                model, headers=self._headers, as_json=True, client_timeout=10.0
            )
        except Exception as err:
            raise BackendError(
                f"Triton server {self.url} cannot describe model {model!r}: {err}; check model.triton.url "
                "and that the server serves that model (streamer export --triton-repo writes one)"
            ) from err
        return metadata, config.get("config", config)

    def infer(self, model: str, outputs: list[str], feeds: Mapping[str, npt.NDArray[Any]]) -> list[Any]:
        """One call; ModelUnavailableError where the server is down, slow or failing."""
        if self._closed:
            raise BackendError(f"the Triton backend for {self.url} is closed; create a new one")
        if not self.breaker.allow(time.monotonic()):
            self.failed += 1
            raise ModelUnavailableError(
                f"Triton server {self.url} is not answering (circuit open after {self.breaker.failures} "
                f"failures; trying again every {self.breaker.cooldown_s:g} s): the frame passes through"
            )
        try:
            values = self._call(model, outputs, feeds)
        except Exception as err:
            self.failed += 1
            with self._lock:
                self._generation += 1
            self.breaker.failure(time.monotonic())
            raise ModelUnavailableError(
                f"Triton server {self.url} failed model {model!r} (deadline {1000 * self.deadline_s:g} ms): "
                f"{err}"
            ) from err
        self.breaker.success()
        return values

    def _call(self, model: str, outputs: list[str], feeds: Mapping[str, npt.NDArray[Any]]) -> list[Any]:
        arrays = [np.ascontiguousarray(a) for a in feeds.values()]
        inputs = [
            self._grpc.InferInput(name, list(a.shape), _DATATYPES[a.dtype])
            for name, a in zip(feeds, arrays, strict=True)
        ]
        requested = [self._grpc.InferRequestedOutput(name) for name in outputs]
        region, key, starts = None, None, []
        if self.transport == "grpc":
            for tensor, array in zip(inputs, arrays, strict=True):
                tensor.set_data_from_numpy(array)
        else:
            # The outputs go through the region too once a call of these shapes has shown their sizes.
            key = (
                model,
                tuple(outputs),
                tuple((n, a.shape, a.dtype.str) for n, a in zip(feeds, arrays, strict=True)),
            )
            sizes = self._output_sizes.get(key, ())
            region = self._region(sum(a.nbytes for a in arrays) + sum(sizes))
            _shm().set_shared_memory_region(region.handle, arrays)
            offset = 0
            for tensor, array in zip(inputs, arrays, strict=True):
                tensor.set_shared_memory(region.name, array.nbytes, offset)
                offset += array.nbytes
            for tensor, size in zip(requested, sizes, strict=False):
                tensor.set_shared_memory(region.name, size, offset)
                starts.append(offset)
                offset += size
        result = self._client.infer(
            model, inputs, outputs=requested, client_timeout=self.deadline_s, headers=self._headers
        )
        if region is not None and starts:
            values = []
            for name, start in zip(outputs, starts, strict=True):
                made = result.get_output(name)
                shape = [int(d) for d in made.shape]
                # The region is this thread's next call's too: the values are copied out.
                values.append(
                    np.array(_shm().get_contents_as_numpy(region.handle, _NUMPY[made.datatype], shape, start))
                )
            return values
        # Views of the response's bytes are read-only; the backend scales float outputs in place.
        values = [np.array(result.as_numpy(name)) for name in outputs]
        if key is not None:
            if len(self._output_sizes) >= _SHAPES_KEPT:
                self._output_sizes.clear()
            self._output_sizes[key] = tuple(v.nbytes for v in values)
        return values

    def _region(self, size: int) -> _Region:
        """This thread's region, at least ``size`` bytes and registered with the server as it is now."""
        region: _Region | None = getattr(self._local, "region", None)
        if region is None or region.size < size:
            if region is not None:
                self._drop(region)
            region = _Region(max(size, 1 << 20))
            with self._lock:
                self._regions.append(region)
            self._local.region = region
        if region.generation != self._generation:
            generation = self._generation
            # Unregistering a name the server never saw (or forgot in a restart) is harmless.
            self._client.unregister_system_shared_memory(region.name, headers=self._headers)
            self._client.register_system_shared_memory(
                region.name, region.key, region.size, headers=self._headers
            )
            region.generation = generation
        return region

    def _drop(self, region: _Region) -> None:
        with self._lock:
            if region in self._regions:
                self._regions.remove(region)
        _free(self._client, region, self._headers)

    def close(self) -> None:
        """Unregisters and frees every region, closes the channel; idempotent."""
        self._closed = True
        self._release()


def _shm() -> Any:
    """tritonclient's system shared-memory helpers, imported where shared memory is used."""
    import tritonclient.utils.shared_memory as shm

    return shm


def _free(client: Any, region: _Region, headers: dict[str, str] | None) -> None:
    try:
        client.unregister_system_shared_memory(region.name, headers=headers)
    except Exception as err:  # the server may be gone; the region is ours to free regardless
        log.debug("unregistering %s: %s", region.name, err)
    _shm().destroy_shared_memory_region(region.handle)


def _release(
    client: Any, regions: list[_Region], lock: threading.Lock, headers: dict[str, str] | None
) -> None:
    """A connection's end: its regions unregistered and freed, its channel closed."""
    with lock:
        taken = list(regions)
        regions.clear()
    for region in taken:
        _free(client, region, headers)
    client.close()


class TritonSession:
    """A Triton model answering what ``OnnxBackend`` asks of an onnxruntime session."""

    def __init__(self, connection: TritonConnection, model: str) -> None:
        self.connection = connection
        self.model = model
        metadata, config = connection.describe(model)
        self.max_batch = int(config.get("max_batch_size", 0))
        batched = self.max_batch > 0
        self._inputs = [_arg(t, batched, model) for t in metadata.get("inputs", [])]
        self._outputs = [_arg(t, batched, model) for t in metadata.get("outputs", [])]
        parameters = config.get("parameters", {})
        self._meta = _Meta(
            {
                key: str(value.get("string_value", ""))
                for key, value in parameters.items()
                if key.startswith(NAMESPACE)
            }
        )

    def run(self, output_names: list[str], input_feed: Mapping[str, npt.NDArray[Any]]) -> list[Any]:
        """One call, or one per ``max_batch_size`` rows where the batch is larger (a streaming model
        encodes a whole window's frames at a run's start)."""
        rows = len(next(iter(input_feed.values())))
        if rows <= self.max_batch:
            return self.connection.infer(self.model, output_names, input_feed)
        parts = [
            self.connection.infer(
                self.model, output_names, {k: v[i : i + self.max_batch] for k, v in input_feed.items()}
            )
            for i in range(0, rows, self.max_batch)
        ]
        return [np.concatenate(outputs) for outputs in zip(*parts, strict=True)]

    def get_inputs(self) -> list[_Arg]:
        return self._inputs

    def get_outputs(self) -> list[_Arg]:
        return self._outputs

    def get_modelmeta(self) -> _Meta:
        return self._meta

    def get_providers(self) -> list[str]:
        return [f"Triton({self.connection.url})"]


def _arg(tensor: Mapping[str, Any], batched: bool, model: str) -> _Arg:
    """A tensor of Triton's model metadata; its shape already starts with the batch axis (-1) where
    the model batches; -1 elsewhere is a dynamic axis."""
    kind = _TYPES.get(str(tensor.get("datatype")))
    if kind is None:
        raise ModelError(
            f"Triton model {model!r} has tensor {tensor.get('name')!r} of type {tensor.get('datatype')}; "
            f"the runtime exchanges {sorted(_TYPES)}"
        )
    shape = [int(d) for d in tensor.get("shape", [])]
    if not batched:
        raise ModelError(
            f"Triton model {model!r} has max_batch_size 0; the runtime sends batches (B first): serve it "
            "with max_batch_size >= 1 (streamer export --triton-repo does)"
        )
    return _Arg(str(tensor["name"]), kind, [None if d < 0 else d for d in shape])


class TritonBackend(OnnxBackend):
    """``OnnxBackend`` whose graphs run on a Triton server: the same contract, tensors and results."""

    def __init__(
        self,
        url: str,
        model: str,
        *,
        transport: Literal["grpc", "shm"] = "grpc",
        deadline_ms: float = 1000.0,
        failures: int = 3,
        cooldown_s: float = 1.0,
        access_token: str | None = None,
        workers: int = 1,
        declared: Declared | None = None,
    ) -> None:
        if workers < 1:
            raise ConfigError(f"backend workers must be at least 1; got {workers}")
        if deadline_ms <= 0:
            raise ConfigError(f"model.triton.deadline_ms must be positive; got {deadline_ms}")
        self.path = Path(f"triton/{model}")
        self.workers = workers
        self.connection = TritonConnection(
            url,
            transport=transport,
            deadline_ms=deadline_ms,
            access_token=access_token,
            breaker=CircuitBreaker(failures, cooldown_s),
        )
        try:
            session = TritonSession(self.connection, model)

            def open_encoder(name: str) -> tuple[Session, Path]:
                encoder = session.get_modelmeta().custom_metadata_map.get(ENCODER_MODEL)
                if not encoder:
                    raise ModelError(
                        f"Triton model {model!r} is a streaming model (encoder file {name!r}) without "
                        f"parameter {ENCODER_MODEL}, the Triton model of its encoder; write the "
                        "repository with streamer export --triton-repo"
                    )
                return TritonSession(self.connection, encoder), Path(f"triton/{encoder}")

            self._adopt(session, open_encoder, declared)
        except BaseException:
            self.connection.close()
            raise
        log.info("model %s runs on Triton at %s (%s)", self._info.name, url, transport)

    def close(self) -> None:
        super().close()
        self.connection.close()
