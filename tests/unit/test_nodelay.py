"""TCP_NODELAY switched on a connection this process already holds, found by its peer."""

from __future__ import annotations

import socket
import sys

import pytest

from streamer.sinks.nodelay import disable_nagle, rtsp_peer

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="reads /proc/self/fd")


def _nodelay(sock: socket.socket) -> int:
    return sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)


def test_the_connection_to_the_peer_is_switched_and_others_are_not() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server, socket.create_server(("127.0.0.1", 0)) as other:
        port = server.getsockname()[1]
        with (
            socket.create_connection(("127.0.0.1", port)) as client,
            socket.create_connection(("127.0.0.1", other.getsockname()[1])) as bystander,
        ):
            accepted, _ = server.accept()
            with accepted:
                assert _nodelay(client) == 0
                assert disable_nagle("127.0.0.1", port) == 1
                assert _nodelay(client) != 0
                assert _nodelay(bystander) == 0
                assert _nodelay(accepted) == 0  # the server's end: its peer is the client's port
                client.sendall(b"still open")  # the duplicate closed, the connection did not
                assert accepted.recv(64) == b"still open"


def test_no_connection_to_the_peer_switches_nothing() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
    assert disable_nagle("127.0.0.1", port) == 0


@pytest.mark.parametrize(
    ("url", "peer"),
    [
        ("rtsp://127.0.0.1:8554/out", ("127.0.0.1", 8554)),
        ("rtsp://user:pw@relay/out/publish", ("relay", 554)),
        ("rtsps://[::1]/x", ("::1", 322)),
        ("http://127.0.0.1:8554/out", None),
        ("rtsp://127.0.0.1:99999/out", None),
        ("rtsp:///nohost", None),
    ],
)
def test_rtsp_peer(url: str, peer: tuple[str, int] | None) -> None:
    assert rtsp_peer(url) == peer
