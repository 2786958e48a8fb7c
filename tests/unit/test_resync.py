"""Which packets of a shared encode an output writes after it lost some or (re)connected."""

from __future__ import annotations

from streamer.sinks.encoder import EncodedFrame, EncodedPacket, Resync


def frame(seq: int, *keys: bool) -> EncodedFrame:
    """Encoder output ``seq`` with one packet per flag (True: a keyframe), each named by its seq."""
    packets = tuple(EncodedPacket(bytes([seq, i]), seq, seq, key) for i, key in enumerate(keys))
    return EncodedFrame(seq, seq, None, seq * 3000, packets)


def test_in_order_every_packet_goes_out() -> None:
    resync = Resync()
    out = [resync.admit(frame(s, s == 0)) for s in range(4)]
    assert [len(a.packets) for a in out] == [1, 1, 1, 1]
    assert not any(a.skipped or a.ask_keyframe for a in out)


def test_a_gap_waits_for_a_keyframe_and_asks_for_one_once() -> None:
    resync = Resync()
    resync.admit(frame(0, True))
    lost = [resync.admit(frame(s, False)) for s in (3, 4, 5)]  # 1 and 2 let go by a full queue
    assert [a.packets for a in lost] == [[], [], []]
    assert [a.skipped for a in lost] == [1, 1, 1]
    assert [a.ask_keyframe for a in lost] == [True, False, False]
    back = resync.admit(frame(6, True))
    assert back.packets == list(frame(6, True).packets)
    assert not back.ask_keyframe
    assert resync.admit(frame(7, False)).packets == list(frame(7, False).packets)


def test_a_new_connection_starts_at_the_keyframe_inside_a_frame() -> None:
    resync = Resync()
    resync.admit(frame(0, True))
    resync.restart()
    # an encoder with lookahead can hand out a delta and then the keyframe asked for in one call
    admitted = resync.admit(frame(1, False, True))
    assert admitted.skipped == 1
    assert admitted.packets == [frame(1, False, True).packets[1]]


def test_an_encoder_still_filling_its_lookahead_is_no_gap() -> None:
    resync = Resync()
    out = [resync.admit(frame(s)) for s in range(3)]  # no packets yet
    assert not any(a.skipped or a.ask_keyframe for a in out)
    assert resync.admit(frame(3, True)).packets
