"""sync's engine (engine.py); its record is core/schedules/sync.py."""
