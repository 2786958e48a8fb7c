"""Turns PyTorch modules into ONNX files the streamer runtime accepts; the only code that imports torch."""

from export.onnx_export import ExportReport, export_onnx

__all__ = ["ExportReport", "export_onnx"]
