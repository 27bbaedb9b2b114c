"""Seeds derived from (root seed, round, client id), so results do not depend on workers or scheduling."""
import numpy as np

from compression.base import decimal
from compression.index_policy import round_half


def client_seed(root: int, round: int, client_id: int) -> int:
    return int(np.random.SeedSequence([int(root), int(round), int(client_id), 7]).generate_state(1, np.uint32)[0])


def cohort(root: int, round: int, num_clients: int, clients_per_round: int) -> list[int]:
    """The clients sampled for a round, sorted; all clients when clients_per_round == num_clients."""
    if clients_per_round == num_clients:  # what the draw below gives, without drawing
        return list(range(num_clients))
    rng = np.random.default_rng(np.random.SeedSequence([int(root), int(round), 3]))
    return sorted(int(c) for c in rng.choice(num_clients, size=clients_per_round, replace=False))


def straggler_count(fraction: float, cohort_size: int) -> int:
    """`fraction` of a cohort to the nearest client, half up, the fraction read as the decimal it prints as (in
    binary 0.29 * 50 is 14.499999999999998, where 14.5 rounds to 15)."""
    return round_half(decimal(fraction) * cohort_size)


def stragglers(root: int, round: int, cohort: list[int], fraction: float) -> frozenset[int]:
    """The round's stragglers: `straggler_count` of its cohort, drawn from (root, round) alone, so every worker
    names the same ones for the clients it trains."""
    count = straggler_count(fraction, len(cohort))
    if count == 0:
        return frozenset()
    rng = np.random.default_rng(np.random.SeedSequence([int(root), int(round), 11]))
    return frozenset(int(c) for c in rng.choice(np.asarray(cohort, np.int64), size=count, replace=False))


def straggler_steps(root: int, round: int, client_id: int, full: int) -> int:
    """A straggler's local steps this round: uniform in 1..full (its full local work), from (root, round, client)."""
    rng = np.random.default_rng(np.random.SeedSequence([int(root), int(round), int(client_id), 13]))
    return int(rng.integers(1, full + 1))
