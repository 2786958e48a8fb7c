"""What a file says about itself beside its pictures: its tags and how it is to be displayed.

A camera recording's tags (title, creation time, a device's own fields) and its display matrix (a phone
held upright records landscape pictures with a 90-degree rotation) must survive a file-to-file run, or
the output plays sideways and loses its provenance. Frames are enhanced as coded, and the output carries
the source's rotation, so a player turns them as it turned the source.

A file is hostile input: at most :data:`MAX_TAGS` tags are kept, each key and value bounded.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

__all__ = ["MAX_TAGS", "MAX_TAG_KEY", "MAX_TAG_VALUE", "MUXER_TAGS", "kept_tags"]

log = logging.getLogger(__name__)

MAX_TAGS = 64
MAX_TAG_KEY = 64
MAX_TAG_VALUE = 1024
MUXER_TAGS = frozenset({"major_brand", "minor_version", "compatible_brands", "encoder"})
"""Tags a muxer writes about its own output: not the source's to pass on."""


def kept_tags(tags: Mapping[str, str], where: str) -> tuple[tuple[str, str], ...]:
    """The tags of ``where`` an output should carry: the muxer's own left out, oversized ones and any past
    the first :data:`MAX_TAGS` dropped (logged once)."""
    kept: list[tuple[str, str]] = []
    dropped = 0
    for key, value in tags.items():
        if key.lower() in MUXER_TAGS:
            continue
        if len(kept) >= MAX_TAGS or not 0 < len(key) <= MAX_TAG_KEY or len(value) > MAX_TAG_VALUE:
            dropped += 1
            continue
        kept.append((key, value))
    if dropped:
        log.warning(
            "%s: %d metadata tags not carried to the output (more than %d, or a key over %d or a value "
            "over %d characters)",
            where,
            dropped,
            MAX_TAGS,
            MAX_TAG_KEY,
            MAX_TAG_VALUE,
        )
    return tuple(kept)
