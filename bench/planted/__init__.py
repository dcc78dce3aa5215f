"""Test hooks, off unless their environment variable is set: planted faults (a worker dies or hangs) and
planted slowdowns (a stage made slower, to measure `rlbench check`)."""
