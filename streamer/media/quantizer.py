"""How hard a camera's encoder quantized each frame, as its decoder says: the mean H.264 quantizer (QP).

A stream at a high quantizer has lost its detail to blocks and smoothing; one at a low quantizer is
nearly the picture the camera saw, and a model trained to repair the first can only harm the second.
FFmpeg's H.264 decoder exports each frame's quantizers when asked (``export_side_data=venc_params``,
:data:`DECODER_OPTIONS`) as ``AVVideoEncParams`` side data: the frame's base QP and a delta per
macroblock; :func:`quantizer` reads their mean. Other codecs' quantizers have other scales, so they
read as unknown.
"""

from __future__ import annotations

import numpy as np
from av.buffer import Buffer
from av.sidedata.encparams import VideoEncParams, VideoEncParamsType
from av.sidedata.sidedata import Type
from av.video.frame import VideoFrame

__all__ = ["DECODER_OPTIONS", "quantizer"]

DECODER_OPTIONS = {"export_side_data": "venc_params"}
"""Set on a decoder's context before its first packet: its frames then carry their quantizers."""

_BLOCK_FIELDS = 5
"""AVVideoBlockParams: src_x, src_y, w, h, delta_qp, each an int32 (libavutil/video_enc_params.h)."""


def quantizer(frame: VideoFrame) -> float | None:
    """The mean H.264 QP of ``frame``'s macroblocks (its base QP plus each block's delta, weighted by
    the block's area), from the side data of a decoder opened with :data:`DECODER_OPTIONS`; None where
    the frame carries none or another codec's. The blocks are read as one array in place, where PyAV's
    ``qp_map`` walks them one by one."""
    params = frame.side_data.get(Type.VIDEO_ENC_PARAMS.name)
    if not isinstance(params, VideoEncParams) or params.codec_type != VideoEncParamsType.H264:
        return None
    assert isinstance(params, Buffer)  # PyAV's side data are its buffers
    raw = bytes(params)
    count, offset, size = params.nb_blocks, params.blocks_offset, params.block_size
    if not count or size < 4 * _BLOCK_FIELDS or offset + count * size > len(raw):
        return float(params.qp)
    fields = np.ndarray((count, _BLOCK_FIELDS), np.int32, raw, offset, (size, 4))
    area = fields[:, 2].astype(np.float64) * fields[:, 3]
    if area.sum() <= 0:
        return float(params.qp)
    return float(params.qp + np.average(fields[:, 4], weights=area))
