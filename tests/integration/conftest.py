"""Fixtures shared by the integration tests."""

from tests.integration.rtsp_fixtures import rtsp_server

__all__ = ["rtsp_server"]
