"""What benchmarks, export and tests measure with: picture metrics, codec round trips, clips and their
damage, a model's frames and what a user receives of them, the machine's description, and real peers:
an RTSP relay and a Triton server.

:mod:`~streamer.measure.metrics` (PSNR, SSIM, flicker), :mod:`~streamer.measure.roundtrip` (a clip
through libx264 and back), :mod:`~streamer.measure.clips` (clips loaded and damaged as a camera damages
them), :mod:`~streamer.measure.enhanced` (a model's output per frame, as the live pipeline makes it),
:mod:`~streamer.measure.delivered` (a stream through streamer's pipeline and file output, decoded),
:mod:`~streamer.measure.machine` (the CPU, its ISA and the runtime every figure is read beside),
:mod:`~streamer.measure.records` (figures written as JSON), :mod:`~streamer.measure.rtsp_relay` and
:mod:`~streamer.measure.tritonserver`.

Nothing is re-exported here: each module loads its own libraries (scikit-image, OpenCV, the pipeline)
only when imported, and the RTSP relay, run by Debian's system interpreter, imports the standard
library alone. The benchmarks (:mod:`streamer.bench`) import this package, never the reverse.
"""
