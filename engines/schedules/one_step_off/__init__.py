"""one_step_off: bounded_async's engine with k pinned to 1 (engines/schedules/__init__.py); its
record is core/schedules/one_step_off.py."""
