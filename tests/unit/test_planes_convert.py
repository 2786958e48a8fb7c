"""streamer.media.planes.convert: swscale conversions through each thread's kept reformatters."""

from __future__ import annotations

import threading

import numpy as np

from streamer.media import planes
from streamer.media.planes import KEPT_CONVERSIONS, SWSCALE, convert, frame_planes, rgb_frame


def pixels(seed: int, height: int = 24, width: int = 32) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)


def test_a_kept_conversion_gives_what_the_frames_own_reformatter_gives_turn_after_turn() -> None:
    for seed in range(3):
        for matrix, colour_range in ((1, 1), (6, 2)):
            rgb = pixels(seed)
            settings = {
                "format": "yuv420p",
                "dst_colorspace": SWSCALE[matrix],
                "dst_color_range": colour_range,
            }
            kept = frame_planes(convert(rgb_frame(rgb), **settings))
            own = frame_planes(rgb_frame(rgb).reformat(**settings))
            for mine, theirs in zip(kept, own, strict=True):
                np.testing.assert_array_equal(mine, theirs)


def test_each_thread_keeps_at_most_its_cap_of_conversions_and_its_own_reformatters() -> None:
    widths = range(2, 2 + 2 * (KEPT_CONVERSIONS + 3), 2)
    for width in widths:
        convert(rgb_frame(pixels(0, 8, width)), format="yuv420p")
    mine = dict(planes._REFORMATTERS.by_conversion)
    assert sorted(key[1] for key in mine) == list(widths)[-KEPT_CONVERSIONS:]

    seen: dict[str, int] = {}

    def other() -> None:
        seen["before"] = len(planes._REFORMATTERS.by_conversion)
        convert(rgb_frame(pixels(0, 8, 4)), format="yuv420p")
        seen["after"] = len(planes._REFORMATTERS.by_conversion)

    thread = threading.Thread(target=other)
    thread.start()
    thread.join()
    assert seen == {"before": 0, "after": 1}
    assert dict(planes._REFORMATTERS.by_conversion) == mine
