"""bounded_async's engine (engine.py); its record is core/schedules/bounded_async.py."""
