"""One stream's frames through the model: the pipeline's stages, the runner of each model kind, the
scheduler that batches streams onto one model, ``model: auto``'s tiers, and the counts and snapshots
the serving layer reads. Sources, sinks and the backend are handed in; nothing here opens a socket."""
