"""A value measured on an exported model, stored in it: in the ONNX file's ``streamer.*`` metadata,
which the runtime reads, and in the model's card beside it (``NAME.json``), which people read, with the
file's new size. The calibrations (``export.calibrate_strength``, ``export.calibrate_blend``) write
through here; the graph itself is left as it is."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

__all__ = ["store_measured"]


def store_measured(model: Path, key: str, value: str, card: Mapping[str, object]) -> None:
    """Sets metadata ``key`` of ``model`` to ``value`` (replacing it), and each field of ``card`` in the
    model's card where there is one."""
    import onnx

    graph = onnx.load(str(model))
    kept = [p for p in graph.metadata_props if p.key != key]
    del graph.metadata_props[:]
    graph.metadata_props.extend(kept)
    graph.metadata_props.add(key=key, value=value)
    onnx.save(graph, str(model))
    path = model.with_suffix(".json")
    if path.is_file():
        data = json.loads(path.read_text())
        data.update(card)
        if "size_bytes" in data:
            data["size_bytes"] = model.stat().st_size
        path.write_text(json.dumps(data, indent=2) + "\n")
