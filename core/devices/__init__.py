"""Devices and processes: the one CPU/CUDA/NPU module, placement of workers on devices, the measured
peak, the limits checked before a run, and process hygiene."""
