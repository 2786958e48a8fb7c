"""Benchmarks: ``streamer bench quality`` compares enhancement methods on held-out real clips;
``streamer bench latency`` measures per-frame end-to-end latency through RTSP and WebRTC on loopback;
``overhead`` weighs the pipeline against a bare decode -> model -> encode loop; ``motion`` what the
motion gate saves; ``overload`` a model slower than the frame rate, budget on and off; ``soak`` memory
over minutes of live stream; ``batching`` streams sharing a model with cross-stream batching on and
off; ``live`` whether each model tier keeps up with a live RTSP camera at 360p and 720p; ``codecs``
what decoding and encoding a stream costs the host, on the CPU and on a GPU's NVDEC and NVENC.

``register`` builds the ``bench`` command, its ``--isa`` flag and ``machine``; the other commands'
flags come from their group's module: :mod:`streamer.bench.cli_models` (a model or codec on its own),
:mod:`streamer.bench.cli_pipeline` (the pipeline in this process) and :mod:`streamer.bench.cli_live`
(live streams against a service, the RTSP relay or WebRTC players). Each benchmark is imported only
when its command runs, so ``streamer run`` works without the quality benchmark's ``bench`` extra
(OpenCV, scikit-image) and starts without loading the latency benchmark's peers.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from streamer.bench import cli_live, cli_models, cli_pipeline
from streamer.bench.isa import ISA_CAPS, run_as

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Adds ``bench`` and every benchmark under it to a CLI's subcommands; the handler is
    ``args.func(args) -> int``."""
    bench = subparsers.add_parser(
        "bench", help="measure enhancement quality and speed", description="Benchmarks of streamer."
    )
    bench.add_argument(
        "--isa",
        choices=ISA_CAPS,
        default="native",
        help="native: the CPU as it is (default); avx2: hide AVX-512, VNNI and AMX from CPUID so every "
        "library runs its AVX2 kernels, as on an AVX2-only CPU (Linux x86 with CPUID faulting and a C "
        "compiler; this core's clocks and caches stay)",
    )
    kinds = bench.add_subparsers(dest="benchmark", required=True, metavar="BENCHMARK")
    machine = kinds.add_parser(
        "machine",
        help="the CPU, the ISA flags its kernels use, onnxruntime and its providers",
        description="Prints the machine line every benchmark prints, e.g. to check what --isa hides.",
    )
    machine.set_defaults(func=_machine)
    cli_models.add_quality(kinds)
    cli_pipeline.add_latency(kinds)
    cli_pipeline.add_overhead(kinds)
    cli_pipeline.add_motion(kinds)
    cli_pipeline.add_overload(kinds)
    cli_pipeline.add_soak(kinds)
    cli_pipeline.add_batching(kinds)
    cli_live.add_streams(kinds)
    cli_live.add_live(kinds)
    cli_live.add_keepalive(kinds)
    cli_live.add_whep(kinds)
    cli_live.add_admission(kinds)
    cli_models.add_memory(kinds)
    cli_models.add_profile(kinds)
    cli_models.add_speed(kinds)
    for kind in kinds.choices.values():
        kind.set_defaults(func=_under_isa(kind.get_default("func")))
    # gpu, codecs and triton are added after the wrapping above: they run without --isa's CPUID mask.
    cli_models.add_gpu(kinds)
    cli_models.add_codecs(kinds)
    cli_models.add_triton(kinds)


def _under_isa(func: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        run_as(args.isa)
        return func(args)

    return run


def _machine(args: argparse.Namespace) -> int:
    from streamer.measure.machine import LoadWatch

    print(LoadWatch().machine().line())
    return 0
