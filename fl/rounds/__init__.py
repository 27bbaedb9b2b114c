"""The kinds of round: `plain` (each client's own codec) and `masked` (secure aggregation over a shared
index set or a linear codec's table). Each module owns its client half, which a worker runs for its
clients, and its server half, which the driver runs; `exchange` carries messages between the two."""
