"""The ``streamer`` command line: ``run``, ``demo``, ``model inspect``, ``bench``, and ``export`` and
``train`` registered lazily from the export package."""
