"""What a run measures while it runs: the one Stage enum and timer, progress for the hang watchdog,
profiler traces, host CPU seconds."""
