"""The issues' targets ``streamer bench quality`` checks on each section: issue 1's on Gaussian noise
sigma 25, issue 14's on the camera track, and issue 43's on what a user receives."""

from __future__ import annotations

import dataclasses

from streamer.bench.quality_report import CAMERA_PROFILE, IDENTITY, Check, Row, Section
from streamer.bench.quality_tracks import CAMERA_DEGRADATIONS

__all__ = ["check_targets"]


def _camera_checks(section: Section, ours: Row, rows: dict[str, Row]) -> list[Check]:
    """Issue 14's targets on the camera track, for the model of row ``ours``."""
    gain = ours.psnr - rows["degraded"].psnr
    detail = f"{gain:+.2f} dB ({ours.psnr:.2f} vs {rows['degraded'].psnr:.2f} dB)"
    key = section.degradation
    if key == "crf35":
        return [Check(section.clip, "CRF 35: >= +0.4 dB over the decoded input", gain >= 0.4, detail, key)]
    if key in ("crf30", "crf40"):
        return [
            Check(section.clip, f"{key.upper()}: never below the decoded input", gain >= 0.0, detail, key)
        ]
    if key == "clean":
        return [
            Check(section.clip, "clean input kept >= 40 dB", ours.psnr >= 40.0, f"{ours.psnr:.2f} dB", key)
        ]
    filters = [r for name, r in rows.items() if name.startswith("ffmpeg_")]
    if key != "camera" or not filters:
        return []
    best = max(filters, key=lambda r: r.psnr)
    lead = ours.psnr - best.psnr
    return [
        Check(
            section.clip,
            "noise then compression: >= +1.5 dB over the best FFmpeg filter",
            lead >= 1.5,
            f"{lead:+.2f} dB ({ours.psnr:.2f} vs {best.label} {best.psnr:.2f} dB)",
            key,
        )
    ]


PATH_COST_DB = 0.02
"""What the frames path may add to the output encoder's own cost (an identity model's delivered figure
against the stream re-encoded alone)."""
DEFAULT_OUTPUT_COST_DB, NEAR_LOSSLESS_COST_DB = 0.12, 0.05
"""How far below the decoded input an identity model's delivered figure may be, with the file output at
its default quality and at near-lossless."""
OUTPUT_COST_SECTIONS = ("crf35", "noise15crf30")
"""The sections the output's cost is held to those bounds on: a camera's stream at CRF 35, and noise
then CRF 30."""
PROFILE_DELIVERED_GAIN_DB = {"crf35": 0.3, "camera": 1.0}
"""The camera profile's gain over the decoded input, delivered, on these camera-track sections."""


def _delivered_checks(section: Section, rows: dict[str, Row]) -> list[Check]:
    """Issue 43's targets, all on what a user receives: on a section whose degraded frames are its
    stream as decoded (compressed), the path's own cost beside the encoder's and the identity against
    the decoded input at the default and the near-lossless output; on the camera track, every model at
    or above the identity and the camera profile's gain."""
    degraded, identity = rows["degraded"], rows[IDENTITY]
    near = rows[f"{IDENTITY}_near_lossless"]
    if degraded.delivered is None or identity.delivered is None or near.delivered is None:
        return []
    key, clip = section.degradation, section.clip

    def check(target: str, margin: float, detail: str, model: str = IDENTITY) -> Check:
        return Check(clip, target, margin >= 0.0, detail, key, model)

    path = identity.delivered - degraded.delivered
    default = identity.delivered - degraded.psnr
    lossless = near.delivered - degraded.psnr
    checks = []
    if section.compressed:
        checks.append(
            check(
                f"{key}: the path adds <= {PATH_COST_DB} dB to the encoder's own cost",
                path + PATH_COST_DB,
                f"{path:+.3f} dB ({identity.delivered:.2f} vs {degraded.delivered:.2f} re-encoded alone)",
            )
        )
    if key in OUTPUT_COST_SECTIONS:
        checks += [
            check(
                f"{key}: default output within {DEFAULT_OUTPUT_COST_DB} dB of the decoded input",
                default + DEFAULT_OUTPUT_COST_DB,
                f"{default:+.3f} dB ({identity.delivered:.2f} vs {degraded.psnr:.2f})",
            ),
            check(
                f"{key}: near-lossless output within {NEAR_LOSSLESS_COST_DB} dB of the decoded input",
                lossless + NEAR_LOSSLESS_COST_DB,
                f"{lossless:+.3f} dB ({near.delivered:.2f} vs {degraded.psnr:.2f})",
            ),
        ]
    if key not in {d.key for d in CAMERA_DEGRADATIONS}:
        return checks
    for name, row in rows.items():
        if row.delivered is None or name in ("degraded", IDENTITY, f"{IDENTITY}_near_lossless"):
            continue
        lead = row.delivered - identity.delivered
        checks.append(
            check(
                f"{key}: delivered at or above the identity's",
                lead,
                f"{lead:+.2f} dB ({row.delivered:.2f} vs {identity.delivered:.2f})",
                name,
            )
        )
        wanted = PROFILE_DELIVERED_GAIN_DB.get(key)
        if name == CAMERA_PROFILE and wanted is not None:
            gain = row.delivered - degraded.psnr
            checks.append(
                check(
                    f"{key}: delivered >= +{wanted} dB over the decoded input",
                    gain - wanted,
                    f"{gain:+.2f} dB ({row.delivered:.2f} vs {degraded.psnr:.2f})",
                    name,
                )
            )
    return checks


def check_targets(section: Section) -> list[Check]:
    """The issues' targets for ``conv3d_t5``: on the sigma 25 section (issue 1's), and on the camera
    track (issue 14's), where the camera profile's model (:data:`CAMERA_PROFILE`) is held to them too;
    none for a model that did not run. On a compressed section, issue 43's targets on what a user
    receives as well."""
    rows = {r.method: r for r in section.rows}
    delivered = _delivered_checks(section, rows) if IDENTITY in rows else []
    if section.degradation != "noise25":
        return [
            dataclasses.replace(check, model=name)
            for name in ("conv3d_t5", CAMERA_PROFILE)
            if name in rows
            for check in _camera_checks(section, rows[name], rows)
        ] + delivered
    ours = rows.get("conv3d_t5")
    if ours is None:
        return []
    degraded, multi, single = rows["degraded"], rows["nlmeans_multi"], rows.get("conv3d_t1")
    gain = ours.psnr - degraded.psnr
    speedup = ours.fps / multi.fps if ours.fps and multi.fps else 0.0
    checks = [
        Check(
            section.clip,
            "gain over degraded input >= +4 dB",
            gain >= 4.0,
            f"{gain:+.2f} dB ({ours.psnr:.2f} vs {degraded.psnr:.2f} dB)",
        ),
        Check(
            section.clip,
            "PSNR >= NLMeans multi",
            ours.psnr >= multi.psnr,
            f"{ours.psnr:.2f} vs {multi.psnr:.2f} dB",
        ),
        Check(
            section.clip,
            "speed >= 20x NLMeans multi",
            speedup >= 20.0,
            f"{speedup:.1f}x ({ours.fps or 0.0:.1f} vs {multi.fps or 0.0:.2f} fps)",
        ),
    ]
    if single is None:
        checks.append(Check(section.clip, "flicker below the T=1 ablation", None, "conv3d_t1 did not run"))
    else:
        checks.append(
            Check(
                section.clip,
                "flicker below the T=1 ablation",
                ours.flicker < single.flicker,
                f"{ours.flicker:+.3f} vs {single.flicker:+.3f}",
            )
        )
    return checks
