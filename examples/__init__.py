"""Worked examples: a model of your own, exported with ``streamer export --factory`` and run live."""
