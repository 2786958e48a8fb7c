"""The pure core: no asyncio, no sockets, no codecs; time and frames are passed in, decisions come out."""

from streamer.core.batching import BatchStats, FairBatcher
from streamer.core.features import FeatureCache, FeatureCacheStats
from streamer.core.gate import (
    GateDecision,
    GateReason,
    GateStats,
    MotionGate,
    SceneCutDetector,
    luma_thumbnail,
)
from streamer.core.health import HealthLimits, StreamHealth, StreamSignals, StreamState
from streamer.core.latency import Admission, LatencyBudget, LatencyStats, MissAction
from streamer.core.pacing import LoopTimeline, Pacer
from streamer.core.ring import RingBuffer, RingStats
from streamer.core.stats import DurationRecorder
from streamer.core.windower import EdgePolicy, OutputPosition, Windower, WindowTask

__all__ = [
    "Admission",
    "BatchStats",
    "DurationRecorder",
    "EdgePolicy",
    "FairBatcher",
    "FeatureCache",
    "FeatureCacheStats",
    "GateDecision",
    "GateReason",
    "GateStats",
    "HealthLimits",
    "LatencyBudget",
    "LatencyStats",
    "LoopTimeline",
    "MissAction",
    "MotionGate",
    "OutputPosition",
    "Pacer",
    "RingBuffer",
    "RingStats",
    "SceneCutDetector",
    "StreamHealth",
    "StreamSignals",
    "StreamState",
    "WindowTask",
    "Windower",
    "luma_thumbnail",
]
