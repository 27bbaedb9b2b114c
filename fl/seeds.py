"""Seeds derived from (root seed, round, client id), so results do not depend on workers or scheduling."""
import math

import numpy as np


def client_seed(root: int, round: int, client_id: int) -> int:
    return int(np.random.SeedSequence([int(root), int(round), int(client_id), 7]).generate_state(1, np.uint32)[0])


def cohort(root: int, round: int, num_clients: int, clients_per_round: int) -> list[int]:
    """The clients sampled for a round, sorted; all clients when clients_per_round == num_clients."""
    if clients_per_round == num_clients:  # what the draw below gives, without drawing
        return list(range(num_clients))
    rng = np.random.default_rng(np.random.SeedSequence([int(root), int(round), 3]))
    return sorted(int(c) for c in rng.choice(num_clients, size=clients_per_round, replace=False))


def stragglers(root: int, round: int, cohort: list[int], fraction: float) -> frozenset[int]:
    """The round's stragglers: `fraction` of its cohort (to the nearest client, half up), drawn from (root,
    round) alone, so every worker names the same ones for the clients it trains."""
    count = math.floor(fraction * len(cohort) + 0.5)
    if count == 0:
        return frozenset()
    rng = np.random.default_rng(np.random.SeedSequence([int(root), int(round), 11]))
    return frozenset(int(c) for c in rng.choice(np.asarray(cohort, np.int64), size=count, replace=False))


def straggler_steps(root: int, round: int, client_id: int, full: int) -> int:
    """A straggler's local steps this round: uniform in 1..full (its full local work), from (root, round, client)."""
    rng = np.random.default_rng(np.random.SeedSequence([int(root), int(round), int(client_id), 13]))
    return int(rng.integers(1, full + 1))
