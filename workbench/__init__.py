"""Inference Acceleration Workbench: measure quantization, speculative decoding and P/D disaggregation."""

__version__ = "0.1.0"
