"""The contract read: a model's graph and metadata turned into its description
(:class:`~streamer.backend.base.ModelInfo`), or a ModelError naming the graph, tensor and rule it
breaks; and the measured figures its card records."""

from __future__ import annotations

import itertools
import json
import logging
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, TypeVar, cast, overload

import numpy.typing as npt

from streamer.backend.base import STRENGTH, ChannelOrder, Declared, FeatureSpec, Layout, ModelInfo, StateSpec
from streamer.contract.keys import CARD_BYTES_KEY, CARD_REACH_KEY, FRAME_INPUT, TARGET_INPUT, Key
from streamer.core.blend import FULL, Blend
from streamer.core.windower import OutputPosition
from streamer.errors import ConfigError, ModelError

__all__ = [
    "Session",
    "card_bytes_per_pixel",
    "card_reach",
    "encoder_path",
    "read_contract",
    "read_streaming_contract",
    "strength_curve",
]

logger = logging.getLogger(__name__)

_EXPORT_HINT = "export.onnx_export.export_onnx writes it"
_STREAM_HINT = "export.streaming_export.export_streaming writes streaming models"


class Session(Protocol):
    """What the backend uses of an ``onnxruntime.InferenceSession``; a Triton server's model answers
    the same (``streamer.backend.triton.TritonSession``)."""

    def run(self, output_names: list[str], input_feed: Mapping[str, npt.NDArray[Any]]) -> list[Any]: ...

    def get_inputs(self) -> list[Any]: ...

    def get_outputs(self) -> list[Any]: ...

    def get_modelmeta(self) -> Any: ...

    def get_providers(self) -> list[str]: ...


_E = TypeVar("_E", Layout, OutputPosition, ChannelOrder)


def card_bytes_per_pixel(model: Path) -> int | None:
    """The measured activation bytes per pixel in the card beside ``model``, if it has a valid one; a card
    that cannot be read is ignored with a warning (admission then assumes its default)."""
    return _card_count(model, CARD_BYTES_KEY, 1, 1_000_000, "memory admission assumes its default")


def card_reach(model: Path) -> int | None:
    """The measured reach in pixels in the card beside ``model`` (``export.reach``), if it has a valid
    one; the tile gate's halo covers it."""
    return _card_count(model, CARD_REACH_KEY, 0, 512, "the tile gate's halo takes its default")


def _card_count(model: Path, key: str, low: int, high: int, fallback: str) -> int | None:
    """A whole number in ``low..high`` from the card beside ``model``; a card that cannot be read, or a
    value out of range, is ignored with a warning saying what happens instead (``fallback``)."""
    card = model.with_suffix(".json")
    if not card.is_file():
        return None
    try:
        value = json.loads(card.read_text()).get(key)
    except (OSError, ValueError, AttributeError) as err:
        logger.warning("model card %s cannot be read (%s); %s", card, err, fallback)
        return None
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        logger.warning(
            "model card %s: %s must be a whole number in %d..%d, got %r; ignored", card, key, low, high, value
        )
        return None
    return value


def encoder_path(model: Path, name: str) -> Path:
    """The encoder beside the fusion graph; metadata may name a file, never a path elsewhere."""
    if not name or Path(name).name != name or name in {".", ".."}:
        raise ModelError(
            f"model {str(model)!r} has metadata {Key.ENCODER}={name!r}; it must be a bare file name of the "
            f"encoder graph in the same folder"
        )
    path = model.parent / name
    if not path.is_file():
        raise ModelError(
            f"model {str(model)!r} is a streaming model whose encoder {name!r} is missing; keep "
            f"{str(path)!r} beside it (export writes both)"
        )
    return path


def read_streaming_contract(fusion: Session, encoder: Session, path: Path, encoder_path: Path) -> ModelInfo:
    """A streaming model's ModelInfo, or a ModelError naming the graph, tensor and rule it breaks."""
    meta: Mapping[str, str] = fusion.get_modelmeta().custom_metadata_map
    where = f"model {str(path)!r}"
    if Key.T not in meta:
        raise ModelError(f"{where} is a streaming model without metadata streamer.t; {_STREAM_HINT}")
    t = _int(meta, Key.T, where)
    features = _features(meta, where)

    def check(tensor: Any, kind: str, rank: int, graph: str) -> None:
        if tensor.type != kind or len(tensor.shape) != rank:
            raise ModelError(
                f"{graph} tensor {tensor.name!r} is {tensor.type} of rank {len(tensor.shape)}; the "
                f"streaming contract needs {kind} of rank {rank} ({_STREAM_HINT})"
            )

    enc_where = f"encoder {str(encoder_path)!r}"
    enc_inputs = encoder.get_inputs()
    if [i.name for i in enc_inputs] != [FRAME_INPUT]:
        raise ModelError(
            f"{enc_where} has inputs {[i.name for i in enc_inputs]}; it must take {FRAME_INPUT!r} alone"
        )
    check(enc_inputs[0], "tensor(uint8)", 4, enc_where)
    enc_outputs = {o.name: o for o in encoder.get_outputs()}
    for spec in features:
        if spec.name not in enc_outputs:
            raise ModelError(f"{enc_where} has no output {spec.name!r}, a feature streamer.features lists")
        check(enc_outputs[spec.name], "tensor(float)", 4, enc_where)

    wanted = {TARGET_INPUT} | {f"{s.name}_{slot}" for s in features for slot in range(t)}
    strength = _strength_input(fusion.get_inputs(), where)
    inputs = {i.name: i for i in fusion.get_inputs() if i.name != STRENGTH}
    if set(inputs) != wanted:
        raise ModelError(
            f"{where} takes inputs {sorted(inputs)}; a streaming model of T={t} with features "
            f"{[s.name for s in features]} takes exactly {sorted(wanted)}"
        )
    check(inputs[TARGET_INPUT], "tensor(uint8)", 4, where)
    for name in wanted - {TARGET_INPUT}:
        check(inputs[name], "tensor(float)", 4, where)
    outputs = fusion.get_outputs()
    if len(outputs) != 1:
        raise ModelError(
            f"{where} has {len(outputs)} outputs; a fusion graph returns the enhanced frame alone"
        )
    check(outputs[0], "tensor(uint8)", 4, where)
    return ModelInfo(
        name=meta.get(Key.NAME, path.stem),
        t=t,
        layout=Layout.NTCHW,
        output_position=_enum(meta, Key.OUTPUT_POSITION, OutputPosition, OutputPosition.CENTER, where),
        pad_multiple=_int(meta, Key.PAD_MULTIPLE, where) if Key.PAD_MULTIPLE in meta else 1,
        provider=fusion.get_providers()[0],
        features=features,
        strength=strength,
        strength_default=_strength_default(meta, where),
        strength_curve=strength_curve(meta.get(Key.STRENGTH_CURVE), where),
        blend=_blend(meta, where),
    )


def _features(meta: Mapping[str, str], where: str) -> tuple[FeatureSpec, ...]:
    raw = meta.get(Key.FEATURES, "")
    try:
        specs = tuple(
            FeatureSpec(str(d["name"]), int(d["channels"]), int(d["scale"])) for d in json.loads(raw)
        )
    except (ValueError, TypeError, KeyError) as err:
        raise ModelError(
            f"{where} has metadata {Key.FEATURES}={raw!r} ({err}); it must be a JSON list of "
            '{"name": name, "channels": int, "scale": int}'
        ) from None
    if not specs or any(s.channels < 1 or s.scale < 1 for s in specs):
        raise ModelError(
            f"{where} has metadata {Key.FEATURES}={raw!r}; list at least one feature, channels and scale >= 1"
        )
    return specs


_TENSOR_TYPES = {"tensor(float)": False, "tensor(uint8)": True}
"""The image tensor types the runtime feeds and reads, and whether each is uint8."""


def read_contract(session: Session, path: Path, declared: Declared) -> tuple[ModelInfo, str, str]:
    """The model's ModelInfo and its input and output names, or a ModelError saying what breaks."""
    meta: Mapping[str, str] = session.get_modelmeta().custom_metadata_map
    where = f"model {str(path)!r}"
    position = _enum(meta, Key.OUTPUT_POSITION, OutputPosition, OutputPosition.CENTER, where)
    state = _state(meta, where)
    inputs = session.get_inputs()
    strength = _strength_input(inputs, where)
    images = [i for i in inputs if i.name not in {s.input for s in state} | {STRENGTH}]
    if len(images) != 1:
        raise ModelError(
            f"{where} has inputs {[i.name for i in images]} besides those metadata streamer.state declares; "
            f"the runtime feeds exactly one frames input, and a recurrent model lists its state there "
            f"({_EXPORT_HINT})"
        )
    image = images[0]
    if image.type not in _TENSOR_TYPES:
        raise ModelError(
            f"{where} input {image.name!r} is {image.type}; export it with a float32 or uint8 input"
        )
    shape = list(image.shape)
    layout = (
        declared.layout
        or _enum(meta, Key.LAYOUT, Layout, None, where)
        or _infer_layout(shape, image.name, where)
    )
    t = _window_length(meta, layout, shape, image.name, where)

    missing = {s.input for s in state} - {i.name for i in inputs}
    missing |= {s.output for s in state} - {o.name for o in session.get_outputs()}
    if missing:
        raise ModelError(f"{where} declares state {sorted(missing)} in streamer.state but has no such tensor")
    outputs = [o for o in session.get_outputs() if o.name not in {s.output for s in state}]
    if len(outputs) != 1 or len(outputs[0].shape) != 4:
        seen = [(o.name, o.shape) for o in outputs]
        raise ModelError(
            f"{where} has outputs {seen} besides its state; the runtime needs exactly one, "
            "shaped (B, 3, H, W)"
        )
    out = outputs[0]
    channels = out.shape[1]
    if out.type not in _TENSOR_TYPES or (isinstance(channels, int) and channels != 3):
        raise ModelError(
            f"{where} output {out.name!r} is {out.type} {out.shape}; it must be float32 or uint8 (B, 3, H, W)"
        )

    info = ModelInfo(
        name=meta.get(Key.NAME, path.stem),
        t=t,
        layout=layout,
        output_position=position,
        value_range=declared.value_range or _range(meta, where),
        channel_order=declared.channel_order
        or _enum(meta, Key.CHANNEL_ORDER, ChannelOrder, ChannelOrder.RGB, where),
        uint8_input=_TENSOR_TYPES[image.type],
        uint8_output=_TENSOR_TYPES[out.type],
        scale=declared.scale or _scale(meta, shape, list(out.shape), where) or 0,
        pad_multiple=_int(meta, Key.PAD_MULTIPLE, where) if Key.PAD_MULTIPLE in meta else 1,
        provider=session.get_providers()[0],
        state=state,
        strength=strength,
        strength_default=_strength_default(meta, where),
        strength_curve=strength_curve(meta.get(Key.STRENGTH_CURVE), where),
        blend=_blend(meta, where),
    )
    return info, image.name, out.name


def _strength_input(inputs: Sequence[Any], where: str) -> bool:
    """Whether the model takes ``strength``; a ModelError where it is not a (B, 1) float32 tensor."""
    given = [i for i in inputs if i.name == STRENGTH]
    if not given:
        return False
    shape = list(given[0].shape)
    if given[0].type != "tensor(float)" or len(shape) != 2 or shape[1] != 1:
        raise ModelError(
            f"{where} input {STRENGTH!r} is {given[0].type} {shape}; a strength is float32 (B, 1): per "
            "window, the noise sigma in 0..255 levels"
        )
    return True


def _blend(meta: Mapping[str, str], where: str) -> Blend:
    """``streamer.blend`` (``Blend.parse``'s form), or the whole change for a model that states none."""
    raw = meta.get(Key.BLEND)
    if raw is None:
        return FULL
    try:
        return Blend.parse(raw, f"{where} ({Key.BLEND})")
    except ConfigError as err:
        raise ModelError(str(err)) from None


def _strength_default(meta: Mapping[str, str], where: str) -> float:
    raw = meta.get(Key.STRENGTH_DEFAULT)
    if raw is None:
        return 25.0
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not 0.0 <= value <= 255.0:
        raise ModelError(f"{where} has streamer.strength_default={raw!r}; it must be a number in 0..255")
    return value


def strength_curve(raw: str | None, where: str) -> tuple[tuple[float, float], ...]:
    """``streamer.strength_curve``, ``estimate:strength`` pairs, comma-separated, estimates rising, all in
    0..255; () where absent; a ModelError naming the text otherwise."""
    if raw is None:
        return ()
    points: list[tuple[float, float]] = []
    try:
        for pair in raw.split(","):
            x, y = pair.split(":")
            points.append((float(x), float(y)))
    except ValueError:
        points = []
    rising = all(a[0] < b[0] for a, b in itertools.pairwise(points))
    if not points or not rising or not all(0 <= v <= 255 for point in points for v in point):
        raise ModelError(
            f"{where} has {Key.STRENGTH_CURVE}={raw!r}; write estimate:strength pairs, comma-separated, the "
            "estimates rising, all in 0..255 (python -m export.calibrate_strength writes it)"
        )
    return tuple(points)


def _infer_layout(shape: list[int | str | None], name: str, where: str) -> Layout:
    """The layout a frames input's shape shows unambiguously, or a ModelError saying what to declare."""
    declare = "declare it: metadata streamer.layout, or model.layout in the config"
    if len(shape) == 5:
        t_first, c_first = shape[2] == 3, shape[1] == 3
        if t_first != c_first:
            return Layout.NTCHW if t_first else Layout.NCTHW
        why = "both axes 1 and 2 are 3" if t_first else "neither axis 1 nor axis 2 is a static 3"
        raise ModelError(
            f"{where} input {name!r} has shape {shape}: NTCHW or NCTHW? ({why}); {declare} (NTCHW or NCTHW)"
        )
    if len(shape) == 4:
        channels = shape[1]
        if isinstance(channels, int) and channels > 0 and channels % 3 == 0:
            return Layout.NCHW if channels == 3 else Layout.STACKED
        raise ModelError(
            f"{where} input {name!r} has shape {shape}: its channel axis is not a static multiple of 3, so "
            f"it is neither a per-frame (NCHW) nor a channel-stacked (N(T*C)HW) frames input; {declare}"
        )
    raise ModelError(
        f"{where} input {name!r} has shape {shape} (rank {len(shape)}); the runtime feeds frames as NTCHW or "
        "NCTHW (rank 5), N(T*C)HW or NCHW (rank 4)"
    )


def _window_length(
    meta: Mapping[str, str], layout: Layout, shape: list[int | str | None], name: str, where: str
) -> int:
    """T from metadata or the input's static shape; a ModelError where they disagree with the layout."""
    if len(shape) != layout.rank:
        raise ModelError(
            f"{where} input {name!r} has shape {shape} (rank {len(shape)}), but layout {layout.value} is "
            f"rank {layout.rank}; declare the layout it takes (metadata streamer.layout or model.layout)"
        )
    declared_t = _int(meta, Key.T, where) if Key.T in meta else None
    static_t: int | None
    if layout in (Layout.NTCHW, Layout.NCTHW):
        t_axis, c_axis = (1, 2) if layout is Layout.NTCHW else (2, 1)
        if shape[c_axis] != 3:
            other = Layout.NCTHW if layout is Layout.NTCHW else Layout.NTCHW
            raise ModelError(
                f"{where} input {name!r} has shape {shape}, so axis {c_axis} is not C=3 as layout "
                f"{layout.value} needs; if the model takes {other.value}, set metadata "
                f"{Key.LAYOUT}={other.value} (or model.layout: {other.value})"
            )
        axis = shape[t_axis]
        static_t = axis if isinstance(axis, int) else None
    else:
        channels = shape[1] if isinstance(shape[1], int) else None
        static_t = None if channels is None else channels // 3
        if channels is not None and channels % 3:
            raise ModelError(
                f"{where} input {name!r} has {channels} channels; layout {layout.value} needs 3 per frame"
            )
        if layout is Layout.NCHW and channels not in (None, 3):
            raise ModelError(
                f"{where} input {name!r} has {channels} channels; a per-frame (NCHW) model takes 3. For "
                f"{channels // 3} frames stacked, declare layout N(T*C)HW"
            )
        if layout is Layout.NCHW:
            static_t = 1
    t = declared_t if declared_t is not None else static_t
    if t is None:
        raise ModelError(
            f"{where} has a dynamic T axis and no metadata streamer.t; add metadata_props key streamer.t "
            f"(the window length); {_EXPORT_HINT}"
        )
    if static_t is not None and static_t != t:
        raise ModelError(f"{where} has metadata streamer.t={t} but its input {name!r} has T={static_t}")
    return t


def _scale(
    meta: Mapping[str, str], image: list[int | str | None], out: list[int | str | None], where: str
) -> int | None:
    """``streamer.scale``, else 1 where the output's sizes are the input's named axes, else the ratio of
    static output and input sizes; None where the shapes cannot tell (a probe then does,
    :meth:`OnnxBackend._probed_scale`)."""
    if Key.SCALE in meta:
        return _int(meta, Key.SCALE, where)
    sizes = (image[-2], image[-1], out[2], out[3])
    if all(isinstance(v, str) and v for v in sizes) and sizes[:2] == sizes[2:]:
        return 1  # the output's height and width are the input's own named axes
    if all(isinstance(v, int) and v > 0 for v in sizes):
        h, w, oh, ow = cast(tuple[int, int, int, int], sizes)
        if oh % h == 0 and oh // h == ow // w and ow % w == 0:
            return oh // h
        raise ModelError(
            f"{where} maps {w}x{h} frames to {ow}x{oh}; the runtime takes the same whole-number scale on "
            "both sides"
        )
    return None


def _state(meta: Mapping[str, str], where: str) -> tuple[StateSpec, ...]:
    raw = meta.get(Key.STATE)
    if raw is None:
        return ()
    try:
        specs = tuple(
            StateSpec(str(d["input"]), str(d["output"]), int(d["channels"]), int(d["scale"]))
            for d in json.loads(raw)
        )
    except (ValueError, TypeError, KeyError) as err:
        raise ModelError(
            f"{where} has metadata streamer.state={raw!r} ({err}); it must be a JSON list of "
            '{"input": name, "output": name, "channels": int, "scale": int}'
        ) from None
    if any(s.channels < 1 or s.scale < 1 for s in specs):
        raise ModelError(f"{where} has metadata streamer.state={raw!r}; channels and scale must be >= 1")
    return specs


def _int(meta: Mapping[str, str], key: str, where: str) -> int:
    raw = meta[key]
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise ModelError(f"{where} has metadata {key}={raw!r}; it must be a positive integer")
    return value


def _range(meta: Mapping[str, str], where: str) -> tuple[float, float]:
    raw = meta.get(Key.VALUE_RANGE, "0,1")
    try:
        lo, hi = (float(v) for v in raw.split(","))
    except ValueError:
        lo = hi = 0.0
    if not hi > lo:
        raise ModelError(
            f"{where} has metadata streamer.value_range={raw!r}; it must be 'lo,hi' with lo < hi, e.g. '0,1'"
        )
    return lo, hi


@overload
def _enum(meta: Mapping[str, str], key: str, kind: type[_E], default: _E, where: str) -> _E: ...


@overload
def _enum(meta: Mapping[str, str], key: str, kind: type[_E], default: None, where: str) -> _E | None: ...


def _enum(meta: Mapping[str, str], key: str, kind: type[_E], default: _E | None, where: str) -> _E | None:
    raw = meta.get(key)
    if raw is None:
        return default
    try:
        return kind(raw)
    except ValueError:
        allowed = " | ".join(str(m.value) for m in kind)
        raise ModelError(f"{where} has metadata {key}={raw!r}; expected {allowed}") from None
