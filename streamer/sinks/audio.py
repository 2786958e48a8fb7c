"""How a sink writes a source's audio: the source's packets as they are, or, where the output cannot
hold the codec (G.711 from a camera into mp4), decoded and encoded to AAC (Opus for webm), said in one
log line. File sinks keep the source's timestamps; the RTSP sink, whose video runs on a clock of its
own, moves each packet by the same :attr:`AudioWriter.offset` as the video frame it goes out with.
"""

from __future__ import annotations

import io
import logging
from fractions import Fraction

import av
import av.error
from av.audio.codeccontext import AudioCodecContext
from av.audio.stream import AudioStream
from av.container import OutputContainer
from av.packet import Packet
from av.stream import Stream

from streamer.errors import SinkError
from streamer.media.audio import AudioTrack

__all__ = ["RTP_AUDIO_CODECS", "TRANSCODE_CODECS", "AudioWriter"]

log = logging.getLogger(__name__)

TRANSCODE_CODECS = ("aac", "libopus")
"""What audio is encoded to where the container cannot hold it as it is, the first it takes: AAC (mp4,
mov, mkv), Opus (webm)."""
RTP_AUDIO_CODECS = ("aac", "opus", "pcm_mulaw", "pcm_alaw")
"""What an RTSP output carries as it is (each published by PyAV and read back by FFmpeg's RTSP
demuxer here): a camera's AAC or G.711 and WebRTC's Opus. FFmpeg's table for the ``rtsp`` format names
only its default, AAC, so it is not asked."""
_RTP_FORMATS = ("rtsp", "rtp")


class AudioWriter:
    """The output side of an :class:`AudioTrack` in one container; every call runs under the sink's lock."""

    def __init__(
        self, track: AudioTrack, stream: AudioStream, target: str, decoder: AudioCodecContext | None
    ) -> None:
        self.track = track
        self.offset: Fraction | None = None
        """None: packets keep the source's times (files). Else seconds taken off every packet's time (the
        RTSP sink's media time minus its output time), and a packet that would then start before zero,
        audio from before the first video frame, is dropped."""
        self._stream = stream
        self._target = target
        self._decoder = decoder
        """Set when transcoding: the source stream's own decoder (set up by the demuxer with every
        codec parameter, used by nothing else), and ``stream`` encodes."""
        self._last_dts: int | None = None
        self._went_back = False

    @property
    def configured_in_packets(self) -> bool:
        """Whether the source's packets are copied and their codec's configuration is known only from
        the packets themselves (AAC in ADTS, as in MPEG-TS), not from the stream's header."""
        return self._decoder is None and not self.track.stream.codec_context.extradata

    @classmethod
    def add(cls, container: OutputContainer, track: AudioTrack, target: str) -> AudioWriter:
        """A stream for ``track`` in ``container``, before its header: the source's codec where the
        container holds it, else an encoder (logged); raises SinkError when neither fits."""
        template = track.stream
        source_codec = template.codec_context.codec.canonical_name
        if _holds(container, template):
            log.info("'%s': writing the source's %s audio as it is", target, source_codec)
            return cls(track, container.add_stream_from_template(template), target, None)
        supported = container.supported_codecs
        codec = next((name for name in TRANSCODE_CODECS if name in supported), None)
        if codec is None:
            raise SinkError(
                f"cannot write '{target}': its format ({container.format.name}) holds neither the source's "
                f"{source_codec} audio nor AAC or Opus; write .mp4 or .mkv, or set sink.audio: drop"
            )
        try:
            rate = _rate(av.Codec(codec, "w"), template.sample_rate)
            stream = container.add_stream(codec, rate=rate)
            assert isinstance(stream, AudioStream)
            stream.layout = template.layout
            stream.time_base = Fraction(1, rate)
        except (av.error.FFmpegError, ValueError) as exc:
            raise SinkError(
                f"cannot write '{target}': transcoding the source's {source_codec} audio to {codec} failed: "
                f"{exc}; set sink.audio: drop to write the video alone"
            ) from exc
        log.warning(
            "'%s': %s cannot hold the source's %s audio; transcoding it to %s at %d Hz",
            target,
            container.format.name,
            source_codec,
            codec,
            rate,
        )
        return cls(track, stream, target, track.decoder)

    def mux_until(self, container: OutputContainer, time: Fraction) -> None:
        """The queued audio that starts by ``time`` (seconds): what goes before a video frame at it."""
        self._mux(container, self.track.pop_until(time))

    def spill(self, container: OutputContainer) -> None:
        """The audio past the track's bound, now (FFmpeg's interleaving queue orders it among the video)."""
        self._mux(container, self.track.pop_over())

    def finish(self, container: OutputContainer, before: Fraction | None) -> None:
        """The rest of the track (what starts before ``before``, when given), then the encoder flushed."""
        self._mux(container, self.track.release(before))
        if self._decoder is not None:
            for frame in self._decoder.decode(None):
                container.mux(self._stream.encode(frame))
            container.mux(self._stream.encode(None))

    def _mux(self, container: OutputContainer, packets: list[Packet[Stream]]) -> None:
        for packet in packets:
            if self.offset is not None and not _shift(packet, self.offset):
                continue
            dts = packet.dts
            if dts is not None and self._last_dts is not None and dts <= self._last_dts:
                # A muxer refuses a DTS that goes back (a file spliced from recordings).
                if not self._went_back:
                    self._went_back = True
                    log.warning(
                        "'%s': the source's audio goes back in time at %.3f s; its packets are dropped "
                        "until they pass the last one written",
                        self._target,
                        dts * packet.time_base,
                    )
                continue
            if dts is not None:
                self._last_dts = dts
            if self._decoder is None:
                packet.stream = self._stream
                container.mux(packet)
                continue
            for frame in self._decoder.decode(packet):
                container.mux(self._stream.encode(frame))


def _shift(packet: Packet[Stream], seconds: Fraction) -> bool:
    """Move ``packet`` ``seconds`` earlier; False (it is left as it was) when it would start before zero."""
    ticks = round(seconds / packet.time_base)
    start = packet.dts if packet.dts is not None else packet.pts
    if start is None or start - ticks < 0:
        return False
    if packet.pts is not None:
        packet.pts -= ticks
    if packet.dts is not None:
        packet.dts -= ticks
    return True


def _holds(container: OutputContainer, template: AudioStream) -> bool:
    """Whether ``container`` takes ``template``'s packets as they are: FFmpeg's table of what its format
    holds, and a header written to memory, where some pairs the table allows still fail (Opus in mov).
    A format that writes files of its own (segments) is asked the table only; RTSP, our own list."""
    if container.format.name in _RTP_FORMATS:
        return template.codec_context.codec.canonical_name in RTP_AUDIO_CODECS
    if container.format.no_file:
        return template.codec_context.codec.name in container.supported_codecs
    try:
        with av.open(io.BytesIO(), "w", format=container.format.name) as scratch:
            scratch.add_stream_from_template(template)
            scratch.start_encoding()
    except (av.error.FFmpegError, ValueError):
        return False
    return True


def _rate(codec: av.Codec, rate: int) -> int:
    """``rate`` where the encoder takes it, else 48 kHz (or its highest)."""
    rates = codec.audio_rates
    if not rates or rate in rates:
        return rate
    return 48000 if 48000 in rates else max(rates)
