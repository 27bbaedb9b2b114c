"""The machinery that carries bytes: Ray's start, the worker pool, the workers' resident state and the
shared-memory replies. No FL logic: a worker runs the client steps that fl.rounds hands it."""
