"""``python -m export.recard_speed``: every auto tier's speed written where ``model: auto`` reads it."""

from __future__ import annotations

import json
from pathlib import Path

from export.recard_speed import SIZES, write_speeds
from streamer.engine.tiers import _recorded, card_fps


def test_each_tier_s_figures_go_where_its_card_keeps_them(tmp_path: Path) -> None:
    fp32, int8, lite = tmp_path / "t.onnx", tmp_path / "t.int8.onnx", tmp_path / "lite.onnx"
    (tmp_path / "t.json").write_text(json.dumps({"name": "t", "int8": {"file": "t.int8.onnx"}}))
    (tmp_path / "lite.json").write_text(
        json.dumps({"name": "lite", "cpu_benchmark": {"640x360": {"fps": 9.0}}})
    )
    speeds = {
        fp32: {(640, 360): 20.0, (1280, 720): 5.0},
        int8: {(640, 360): 24.0, (1280, 720): 6.0},
        lite: {(640, 360): 40.0, (1280, 720): 10.0},
    }
    written = write_speeds(speeds, SIZES)
    assert sorted({p.name for p in written}) == ["lite.json", "t.json"]
    _recorded.cache_clear()
    assert card_fps(fp32, 1280, 720) == 5.0
    assert card_fps(int8, 640, 360) == 24.0  # read from its fp32 source's card, beside the fp32 figure
    assert card_fps(lite, 640, 360) == 40.0  # the old figure replaced
    card = json.loads((tmp_path / "t.json").read_text())
    assert card["int8"]["measured"]["fps_640x360"] == {"fp32": 20.0, "int8": 24.0}
    assert card["int8"]["file"] == "t.int8.onnx"  # the rest of the card kept
    assert "the same run" in card["cpu_benchmark"]["measured"]
    assert card["cpu_benchmark"]["machine"]["cpu_count"] >= 1
