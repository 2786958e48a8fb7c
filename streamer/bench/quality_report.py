"""What ``streamer bench quality`` records, one row per method and section, the targets' verdicts, and
how it prints: the aligned table and the markdown for the README."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "CAMERA_PROFILE",
    "IDENTITY",
    "IDENTITY_LABEL",
    "Check",
    "ClipInfo",
    "QualityReport",
    "Row",
    "Section",
    "format_markdown",
    "format_table",
]

IDENTITY, IDENTITY_LABEL = "identity", "identity model (changes nothing)"
"""The model every section runs through the pipeline beside the others: what the path itself costs."""

CAMERA_PROFILE = "conv3d_t1_strength"
"""The model ``configs/camera.yaml`` runs: the camera track's targets are checked for it as well."""


@dataclass(frozen=True, slots=True)
class ClipInfo:
    name: str
    path: str
    width: int
    height: int
    fps: float
    frames: int


@dataclass(frozen=True, slots=True)
class Row:
    """One method's scores on one section; fps is None for the degraded input, which runs nothing."""

    method: str
    label: str
    psnr: float
    ssim: float
    flicker: float
    fps: float | None
    delivered: float | None = None
    """PSNR of what a user receives: the degraded stream through streamer's source, frames path, this
    method and the file output at its default quality, decoded (``streamer.measure.delivered``). On the
    degraded input's row: its frames re-encoded by that output alone, the encoder's own cost."""


@dataclass(frozen=True, slots=True)
class Section:
    clip: str
    degradation: str
    title: str
    rows: tuple[Row, ...]
    compressed: bool = False
    """The degraded frames are the section's stream as decoded (the damage ends in an encoder)."""


@dataclass(frozen=True, slots=True)
class Check:
    """One of the issues' targets for a model (the default Conv3d T=5, or on the camera track also the
    camera profile's); passed is None when not checkable."""

    clip: str
    target: str
    passed: bool | None
    detail: str
    degradation: str = "noise25"
    model: str = "conv3d_t5"


@dataclass(frozen=True, slots=True)
class QualityReport:
    machine: str
    runtimes: str
    clips: tuple[ClipInfo, ...]
    seed: int
    sections: tuple[Section, ...]
    checks: tuple[Check, ...]
    notes: tuple[str, ...]
    wall_s: float


def format_table(report: QualityReport) -> str:
    """The report as aligned text: a header, one section per clip and degradation, notes and checks."""
    clips = "; ".join(
        f"{c.name} ({c.width}x{c.height} @ {c.fps:g} fps, first {c.frames} frames)" for c in report.clips
    )
    lines = [
        f"streamer bench quality on {report.machine}; {report.runtimes}",
        f"clip {clips}; noise seed {report.seed}",
        "",
    ]
    width = max([len("method"), *(len(r.label) for s in report.sections for r in s.rows)])
    header = f"{'method':<{width}}  {'PSNR dB':>8}  {'SSIM':>6}  {'flicker':>8}  {'fps':>8}  {'delivered':>9}"
    lines += [header, "-" * len(header)]
    many = len(report.clips) > 1
    for section in report.sections:
        lines.append(f"{section.clip}: {section.title}" if many else section.title)
        for r in section.rows:
            lines.append(
                f"{r.label:<{width}}  {r.psnr:>8.2f}  {r.ssim:>6.4f}  {r.flicker:>+8.3f}  {_fps(r.fps):>8}  "
                f"{_db(r.delivered):>9}"
            )
    lines += ["", *(f"note: {n}" for n in report.notes)]
    for model in dict.fromkeys(c.model for c in report.checks):
        checks = [c for c in report.checks if c.model == model]
        gaussian = all(c.degradation == "noise25" for c in checks)
        who = {
            "conv3d_t5": "ours Conv3d T=5",
            CAMERA_PROFILE: f"the camera profile's {model}",
            IDENTITY: "the frames path and the file output (an identity model, delivered)",
        }.get(model, model)
        lines += ["", f"targets for {who}{' at Gaussian noise sigma 25' if gaussian else ''}:"]
        for c in checks:
            verdict = "SKIP" if c.passed is None else "PASS" if c.passed else "FAIL"
            lines.append(f"  {verdict}  {c.target}: {c.detail}" + (f" [{c.clip}]" if many else ""))
    lines.append(f"total {report.wall_s:.1f} s")
    return "\n".join(lines)


def format_markdown(report: QualityReport) -> str:
    """One markdown table, the degradation named on the first row of its section, for the README."""
    lines = [
        "| degradation | method | PSNR (dB) | SSIM | flicker | fps | delivered (dB) |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    many = len(report.clips) > 1
    for section in report.sections:
        title = f"{section.clip}: {section.title}" if many else section.title
        for i, r in enumerate(section.rows):
            lines.append(
                f"| {title if i == 0 else ''} | {r.label} | {r.psnr:.2f} | {r.ssim:.4f} | {r.flicker:+.3f} | "
                f"{_fps(r.fps)} | {_db(r.delivered)} |"
            )
    clips = ", ".join(f"{c.name} {c.width}x{c.height}, {c.frames} frames" for c in report.clips)
    lines += ["", f"Measured on {report.machine}; {report.runtimes}; {clips}."]
    return "\n".join(lines) + "\n"


def _db(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


def _fps(fps: float | None) -> str:
    return "—" if fps is None else f"{fps:.2f}" if fps < 10 else f"{fps:.1f}"
