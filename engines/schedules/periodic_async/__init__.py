"""periodic_async's engine (engine.py); its record is core/schedules/periodic_async.py."""
