"""The ``streamer export`` subcommand: its flags, and the handler that builds or loads the model, exports it
(``export.card``, ``export.streaming_export``, ``export.quantize`` for ``--int8``) and writes the Triton
model repository where ``--triton-repo`` asks for one.

torch is imported inside the handlers only: the runtime CLI loads this module to list the subcommand.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from export.cli_args import ARCH_NAMES, add_model_flags, model_kwargs, parse_model_args, require_export_extra
from export.triton_repo import InstanceKind, Precision, TritonOptions, check_target, write_repo
from streamer.backend.base import ChannelOrder, Layout, StateSpec
from streamer.core.windower import OutputPosition
from streamer.errors import ConfigError, ModelError

if TYPE_CHECKING:
    from torch import nn

    from export.onnx_export import ExportReport

__all__ = ["add_export"]


def add_export(subparsers: Any) -> None:
    """Adds ``export`` to ``subparsers`` (from ``ArgumentParser.add_subparsers``)."""
    p = subparsers.add_parser(
        "export",
        help="export a trained checkpoint, a registry architecture or your own model to ONNX",
        description=(
            "Export a PyTorch model to an ONNX file the runtime loads, check it against PyTorch "
            "(max abs error <= 1e-4 on random and real frames) and write a JSON model card next to it."
        ),
    )
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--checkpoint", type=Path, help="a checkpoint.pt written by streamer train")
    what.add_argument("--arch", choices=ARCH_NAMES, help="a registry architecture, untrained (or --weights)")
    what.add_argument(
        "--factory",
        metavar="MODULE:CALLABLE",
        help="your model: a callable returning an nn.Module, importable from the current directory",
    )
    p.add_argument("--weights", type=Path, help="a state_dict .pt to load into --arch or --factory models")
    add_model_flags(p)
    _add_declare_flags(p)
    _add_output_flags(p)
    _add_streaming_flags(p)
    p.add_argument("--card", type=Path, help="model card path (default: next to --out, .json)")
    p.add_argument("--no-bench", action="store_true", help="skip the CPU speed measurement in the card")
    _add_triton_flags(p)
    p.set_defaults(func=_run_export)


def _add_declare_flags(parser: argparse.ArgumentParser) -> None:
    """What the model takes and returns, for a module that does not declare it in its attributes."""
    declare = parser.add_argument_group(
        "what the model takes and returns",
        "for models that do not declare it in attributes of the same name (t, layout, output_position, "
        "pad_multiple, channel_order, value_range, uint8_input, scale); a flag must agree with an attribute",
    )
    declare.add_argument(
        "--layout",
        choices=[layout.value for layout in Layout],
        help="input layout: NTCHW (B,T,C,H,W), NCTHW (B,C,T,H,W), N(T*C)HW (B,T*3,H,W: the T frames' RGB "
        "stacked frame by frame, for a 2D multi-frame net) or NCHW (B,3,H,W: a per-frame net, T=1)",
    )
    declare.add_argument("--pad-multiple", type=int, help="H/W multiple the model needs")
    declare.add_argument(
        "--channel-order",
        choices=[order.value for order in ChannelOrder],
        help="colour order of the input and output channels (default: RGB)",
    )
    declare.add_argument(
        "--value-range",
        metavar="LO,HI",
        help="the float range pixels 0..255 map to in a float input or output, e.g. --value-range=-1,1 "
        "or 0,255 (default: 0,1)",
    )
    declare.add_argument(
        "--uint8-input",
        action="store_true",
        default=None,
        help="the model takes uint8 pixels 0..255 (and returns uint8 pixels, or float in --value-range)",
    )
    declare.add_argument(
        "--scale", type=int, help="output size / input size: 2 or 4 for super-resolution (default: 1)"
    )
    declare.add_argument(
        "--state",
        action="append",
        metavar="NAME:CHANNELS:SCALE",
        help="a recurrent model's state, repeatable, in the order forward takes them after the frames: "
        "input NAME, output NAME_next, (B, CHANNELS, H/SCALE, W/SCALE) float32, zeros at a stream's start "
        "(the module's state_specs, for a module without them)",
    )
    declare.add_argument(
        "--strength",
        action="store_true",
        default=None,
        help="forward takes a strength after the frames and states: (B, 1) float32, the noise sigma in "
        "0..255 the runtime's model.strength sets (the module's takes_strength, for a module without it)",
    )
    declare.add_argument(
        "--strength-default",
        type=float,
        metavar="SIGMA",
        help="with --strength: what a window without a strength gets (25; the module's strength_default)",
    )


def _add_output_flags(parser: argparse.ArgumentParser) -> None:
    """The file written, its name and description, its opset and its variants (fp16, uint8 in and out)."""
    parser.add_argument("--out", type=Path, required=True, help="the .onnx file to write")
    parser.add_argument("--name", help="model name in the metadata and card (default: the file's stem)")
    parser.add_argument("--description", default="", help="one paragraph for the model card")
    parser.add_argument("--opset", type=int, default=17, help="ONNX opset, 17 or newer (default: 17)")
    parser.add_argument(
        "--fp16", action="store_true", help="also write <stem>.fp16.onnx (needs onnxconverter-common)"
    )
    parser.add_argument(
        "--uint8-io",
        action="store_true",
        help="fold a float model's normalisation into the file: it takes the uint8 window and returns the "
        "uint8 frame (cast, scale, clip and round inside the graph, so on the GPU with a GPU provider), "
        "checked within one level of the float graph",
    )


def _add_streaming_flags(parser: argparse.ArgumentParser) -> None:
    """``--int8`` and its calibration, and ``--streaming``: a conv3d model exported in the streaming form."""
    parser.add_argument(
        "--int8",
        action="store_true",
        help=(
            "streaming models: also write <stem>.int8.onnx and <stem>.int8.encoder.onnx (static QDQ, "
            "calibrated on --calibrate), with their quality and fps against fp32 in the card"
        ),
    )
    parser.add_argument(
        "--calibrate",
        default="sample:bigbuckbunny",
        metavar="VIDEO",
        help=(
            "footage INT8 calibrates on: a video file or sample:NAME, never the held-out sample:bikes; "
            "Gaussian noise (sigma 0..40) is added to its frames (default: sample:bigbuckbunny)"
        ),
    )
    parser.add_argument("--calibrate-frames", type=int, default=32, help="frames --int8 calibrates on (32)")
    parser.add_argument(
        "--int8-min-psnr",
        type=float,
        default=50.0,
        metavar="DB",
        help=(
            "--int8 keeps a convolution in fp32 unless the INT8 graph's output stays within DB of fp32's on "
            "the calibration windows (PSNR; default 50, about 0.3 dB off a 40 dB denoiser; lower is "
            "faster and less faithful) and its flicker index on 12 consecutive --calibrate frames at sigma "
            "15 and 25 stays within 10%% of fp32's"
        ),
    )
    parser.add_argument(
        "--streaming",
        action="store_true",
        help=(
            "export a conv3d model in its streaming form (same function: each frame embedded once, the "
            "Conv3d over the T cached maps), which --int8 can quantize"
        ),
    )


def _add_triton_flags(parser: argparse.ArgumentParser) -> None:
    """The ``--triton-*`` flags; each defaults to None so one given without --triton-repo is caught, the
    defaults shown being TritonOptions'."""
    default = TritonOptions()
    triton = parser.add_argument_group(
        "Triton model repository",
        "also write the exported file as a Triton Inference Server model: DIR/NAME/config.pbtxt and "
        "DIR/NAME/1/model.onnx (a streaming model adds DIR/NAME_encoder), NAME being --name",
    )
    triton.add_argument("--triton-repo", type=Path, metavar="DIR", help="the model repository to write into")
    triton.add_argument(
        "--triton-max-batch",
        type=int,
        metavar="N",
        help=f"max_batch_size, the largest batch Triton forms ({default.max_batch_size})",
    )
    triton.add_argument(
        "--triton-preferred-batch",
        type=int,
        action="append",
        metavar="N",
        help="a preferred batch size of the dynamic batcher, repeatable (default: --triton-max-batch)",
    )
    triton.add_argument(
        "--triton-queue-delay-us",
        type=int,
        metavar="US",
        help=f"how long a request may wait to be batched, in microseconds ({default.max_queue_delay_us})",
    )
    triton.add_argument(
        "--triton-instances", type=int, metavar="N", help=f"model instances ({default.instances})"
    )
    triton.add_argument(
        "--triton-kind",
        choices=[kind.value for kind in InstanceKind],
        help=f"where the instances run: gpu (KIND_GPU) or cpu (KIND_CPU) (default: {default.kind.value})",
    )
    triton.add_argument(
        "--triton-tensorrt",
        choices=[precision.value for precision in Precision],
        help="run through ONNX Runtime's TensorRT provider at this precision_mode (GPU only; fp16 is "
        "faster and slightly off the fp32 graph); default: no TensorRT (CUDA, or CPU)",
    )
    triton.add_argument(
        "--triton-overwrite",
        action="store_true",
        default=None,
        help="replace DIR/NAME where an earlier export wrote it (anything else there is still refused)",
    )


def _triton_options(args: argparse.Namespace) -> TritonOptions | None:
    """The --triton-* flags as TritonOptions, None without --triton-repo; a knob given without it is an
    error rather than silently ignored."""
    knobs = {
        "max_batch_size": args.triton_max_batch,
        "preferred_batch_sizes": None
        if args.triton_preferred_batch is None
        else tuple(args.triton_preferred_batch),
        "max_queue_delay_us": args.triton_queue_delay_us,
        "instances": args.triton_instances,
        "kind": None if args.triton_kind is None else InstanceKind(args.triton_kind),
        "tensorrt": None if args.triton_tensorrt is None else Precision(args.triton_tensorrt),
        "overwrite": args.triton_overwrite,
    }
    given = {key: value for key, value in knobs.items() if value is not None}
    if args.triton_repo is None:
        if given:
            raise ConfigError(
                "the --triton-* flags shape the model --triton-repo DIR writes; add --triton-repo"
            )
        return None
    return TritonOptions(**given)


def _write_triton(
    args: argparse.Namespace, options: TritonOptions | None, model: Path, encoder: Path | None = None
) -> None:
    """Writes the Triton model(s) of an export just made, where --triton-repo asked for them."""
    if options is None:
        return
    for path in write_repo(args.triton_repo, _model_name(args), model, options, encoder=encoder):
        print(f"wrote {path}")


def _model_name(args: argparse.Namespace) -> str:
    """One name for the metadata, the card and the Triton model."""
    name: str = args.name or args.out.stem
    return name


def _load_factory(spec: str) -> Any:
    """``module:callable``, imported with the current directory on the path as a user's script sees it."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(f"--factory takes MODULE:CALLABLE (e.g. mymodels:make_model), got {spec!r}")
    if "" not in sys.path and str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as err:
        raise ConfigError(f"--factory {spec!r}: cannot import module {module_name!r}: {err}") from err
    for part in attr.split("."):
        if not hasattr(target, part):
            raise ConfigError(f"--factory {spec!r}: module {module_name!r} has no attribute {attr!r}")
        target = getattr(target, part)
    if not callable(target):
        raise ConfigError(f"--factory {spec!r} is not callable; point it at a function or class")
    return target


def _run_export(args: argparse.Namespace) -> int:
    require_export_extra("export")
    triton = _triton_options(args)
    # torch and everything importing it stay out of the runtime CLI.
    import torch

    from export.card import export_with_card
    from export.streaming_export import is_streaming

    overrides: dict[str, Any] = {}
    card: dict[str, Any] = {}
    if args.checkpoint is not None:
        module = _from_checkpoint(args, card)
    else:
        module = _from_arch_or_factory(args, overrides)
    overrides.update(_declared(args))
    torch.manual_seed(0)
    if args.streaming:
        module = _as_streaming(module, card)
    if triton is not None:
        check_target(args.triton_repo, _model_name(args), triton, streaming=is_streaming(module))
    if is_streaming(module):
        return _export_streaming(module, args, card, overrides, triton)
    if args.int8:
        raise ConfigError(
            f"--int8 quantizes streaming models in this version; {type(module).__name__} is a window model "
            "(export --arch streaming, or drop --int8)"
        )
    report, card_path = export_with_card(
        module,
        args.out,
        name=_model_name(args),
        description=args.description,
        card_path=args.card,
        card=card,
        bench=not args.no_bench,
        opset=args.opset,
        fp16=args.fp16,
        uint8_io=args.uint8_io,
        **overrides,
    )
    _print_written(report, card_path)
    _write_triton(args, triton, report.path)
    return 0


def _from_checkpoint(args: argparse.Namespace, card: dict[str, Any]) -> nn.Module:
    """The model a ``streamer train`` checkpoint holds, its weights loaded; what the card says of its
    training goes into ``card``."""
    from export.checkpoint import load_checkpoint
    from export.models.registry import build

    if args.weights is not None or args.model_arg:
        raise ConfigError("--checkpoint carries its architecture and weights; drop --weights/--model-arg")
    payload = load_checkpoint(args.checkpoint)
    config = dict(payload["model_config"])
    for key in ("t", "position"):
        given = getattr(args, key)
        if given is not None and key in config and given != config[key]:
            raise ConfigError(
                f"--{key} {given} disagrees with the checkpoint's {key}={config[key]}; "
                f"drop --{key} (the checkpoint decides)"
            )
    module: nn.Module = build(payload["architecture"], **config)
    module.load_state_dict(payload["model"])
    card["training"] = {
        "checkpoint": str(args.checkpoint),
        "step": payload["step"],
        "seconds": payload.get("seconds"),
        "threads": payload.get("threads"),
        "config": payload["train_config"],
        "final_validation": payload.get("validation"),
        "validation_data": payload.get("validation_data")
        or (
            f"pan over the held-out 'chelsea' photo, {payload['train_config'].get('val_frames')} frames "
            f"128x192, Gaussian noise sigma 15 and 25"
        ),
        "history": payload.get("history", []),
    }
    # export.gpu_train's checkpoints also say which trainer, on what, from which data, how degraded.
    keys = ("trainer", "device", "data", "degradation")
    card["training"] |= {k: payload[k] for k in keys if k in payload}
    return module


def _from_arch_or_factory(args: argparse.Namespace, overrides: dict[str, Any]) -> nn.Module:
    """The ``--arch`` model or what ``--factory`` returns, with ``--weights`` loaded where given; a
    factory's model gets ``--t`` and ``--position`` as export arguments, put in ``overrides``."""
    from torch import nn

    from export.models.registry import build

    if args.arch is not None:
        module = build(args.arch, **model_kwargs(args))
    else:
        factory, kwargs = _load_factory(args.factory), parse_model_args(args.model_arg)
        try:
            made = factory(**kwargs)
        except Exception as err:
            raise ModelError(f"--factory {args.factory!r} raised {type(err).__name__}: {err}") from err
        if not isinstance(made, nn.Module):
            raise ModelError(
                f"--factory {args.factory!r} returned {type(made).__name__}, not a torch nn.Module"
            )
        module = made
        if args.t is not None:
            overrides["t"] = args.t
        if args.position is not None:
            overrides["output_position"] = OutputPosition(args.position)
    if args.weights is not None:
        _load_weights(module, args.weights)
    return module


def _print_written(report: ExportReport, card_path: Path) -> None:
    """The files an export wrote, with its parity figures."""
    real = report.parity_real_max_abs_error
    parity = f"{report.parity_max_abs_error:.2g} random, {'n/a' if real is None else f'{real:.2g}'} real"
    if report.parity_sequence_max_abs_error is not None:
        parity += f", {report.parity_sequence_max_abs_error:.2g} over {report.parity_sequence_steps} steps"
    print(f"wrote {report.path} ({report.size_bytes} bytes; parity max abs error {parity})")
    if report.fp16_path is not None:
        print(f"wrote {report.fp16_path} (fp16, max abs error {report.fp16_max_abs_error:.2g})")
    if report.uint8_io_max_levels is not None:
        print(f"  uint8 in and out, within {report.uint8_io_max_levels} level(s) of the float graph")
    print(f"wrote {card_path}")


def _as_streaming(module: Any, card: dict[str, Any]) -> Any:
    from export.models.conv3d import Conv3dEnhancer
    from export.models.streaming import StreamingEnhancer

    if not isinstance(module, Conv3dEnhancer):
        raise ConfigError(
            f"--streaming converts conv3d models; {type(module).__name__} is not one (a streaming "
            "architecture exports as streaming without the flag)"
        )
    card["converted_from"] = {"architecture": "conv3d", "parameters": module.config()}
    return StreamingEnhancer.from_conv3d(module)


def _export_streaming(
    module: Any,
    args: argparse.Namespace,
    card: dict[str, Any],
    overrides: dict[str, Any],
    triton: TritonOptions | None,
) -> int:
    from export.streaming_export import export_streaming_with_card

    refused = [
        flag
        for flag, given in (("--fp16", args.fp16), ("--uint8-io", args.uint8_io), (_DECLARING, overrides))
        if given
    ]
    if refused or args.opset != 17:
        raise ConfigError(
            f"{type(module).__name__} exports as a streaming model (uint8 graphs, layout and padding of its "
            f"own, opset 17); drop {', '.join(refused) or '--opset'}"
        )
    graphs, card_path = export_streaming_with_card(
        module,
        args.out,
        name=_model_name(args),
        description=args.description,
        card_path=args.card,
        card=card,
        bench=not args.no_bench,
    )
    report = graphs.report
    real = report.parity_real_max_abs_error
    print(
        f"wrote {report.path} (fusion, {report.size_bytes} bytes) and {graphs.encoder_path} (encoder, "
        f"{graphs.encoder_size_bytes} bytes); streaming vs full-window max abs error "
        f"{report.parity_max_abs_error:.2g} random, {'n/a' if real is None else f'{real:.2g}'} real; uint8 "
        f"output within {graphs.uint8_max_levels} level(s)"
    )
    if args.int8:
        _quantize(args, report.path, card_path)
    print(f"wrote {card_path}")
    _write_triton(args, triton, report.path, graphs.encoder_path)
    return 0


def _quantize(args: argparse.Namespace, model: Path, card_path: Path) -> None:
    """``--int8``: writes the INT8 pair of the streaming model ``model`` and adds its figures to the card."""
    from export.quantize import (
        FLICKER_TOLERANCE,
        calibration_frames,
        flicker_sequences,
        measure_int8,
        quantize_streaming,
    )
    from streamer.measure.records import finite

    frames = calibration_frames(args.calibrate, args.calibrate_frames)
    pair = quantize_streaming(
        model,
        frames,
        min_psnr_db=args.int8_min_psnr,
        progress=lambda line: print(line, file=sys.stderr),
        sequences=flicker_sequences(args.calibrate),
    )
    measured = measure_int8(model, pair.path)
    body = json.loads(card_path.read_text())
    body["int8"] = {
        "file": pair.path.name,
        "encoder_file": pair.encoder_path.name,
        "calibration": f"{args.calibrate}, {len(frames)} frames, Gaussian noise sigma 0/10/25/40 in turn",
        "reduce_range": pair.reduce_range,
        "kept_fp32": list(pair.kept_fp32),
        "min_psnr_db": pair.min_psnr_db,
        "calibration_psnr_db": pair.psnr_db,
        "sensitivity_db": pair.solo_db,
        "flicker_tolerance": FLICKER_TOLERANCE,
        "calibration_flicker": {
            f"sigma{sigma:g}": {"fp32": fp32, "int8": int8} for sigma, (fp32, int8) in pair.flicker.items()
        },
        "measured": measured,
    }
    card_path.write_text(json.dumps(finite(body), indent=2, allow_nan=False) + "\n")
    print(
        f"wrote {pair.path} and {pair.encoder_path} (INT8); sigma 25: "
        f"{measured['sigma25']['int8_psnr']} dB vs fp32 {measured['sigma25']['fp32_psnr']} dB"
    )


_DECLARING = (
    "--layout/--pad-multiple/--channel-order/--value-range/--uint8-input/--scale/--state/--strength"
    "/--strength-default"
)


def _declared(args: argparse.Namespace) -> dict[str, Any]:
    """The contract flags given (each checked against the module by the exporter), as export_onnx's
    keyword arguments."""
    declared: dict[str, Any] = {
        "layout": None if args.layout is None else Layout(args.layout),
        "pad_multiple": args.pad_multiple,
        "channel_order": None if args.channel_order is None else ChannelOrder(args.channel_order),
        "value_range": None if args.value_range is None else _value_range(args.value_range),
        "uint8_input": args.uint8_input,
        "scale": args.scale,
        "states": None if args.state is None else tuple(_state(text) for text in args.state),
        "strength": args.strength,
        "strength_default": args.strength_default,
    }
    return {key: value for key, value in declared.items() if value is not None}


def _state(text: str) -> StateSpec:
    """``NAME:CHANNELS:SCALE`` as the state fed through input NAME and returned as output NAME_next."""
    name, *sizes = text.split(":")
    if name and len(sizes) == 2 and all(v.isdigit() and int(v) >= 1 for v in sizes):
        return StateSpec(name, f"{name}_next", int(sizes[0]), int(sizes[1]))
    raise ConfigError(
        f"--state takes NAME:CHANNELS:SCALE with CHANNELS and SCALE >= 1 (e.g. hidden:32:4), got {text!r}"
    )


def _value_range(text: str) -> tuple[float, float]:
    """``LO,HI`` as two floats (their order is the exporter's to check)."""
    try:
        lo, hi = (float(v) for v in text.split(","))
    except ValueError:
        raise ConfigError(f"--value-range takes LO,HI (e.g. 0,1 or -1,1 or 0,255), got {text!r}") from None
    return (lo, hi)


def _load_weights(module: Any, path: Path) -> None:
    import torch

    if not path.is_file():
        raise ConfigError(f"--weights {str(path)!r} does not exist; pass a state_dict saved with torch.save")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
        module.load_state_dict(state)
    except Exception as err:
        raise ModelError(f"cannot load --weights {str(path)!r} into {type(module).__name__}: {err}") from err
