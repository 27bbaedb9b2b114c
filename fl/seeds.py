"""Seeds derived from (root seed, round, client id), so results do not depend on workers or scheduling."""
import numpy as np


def client_seed(root: int, round: int, client_id: int) -> int:
    return int(np.random.SeedSequence([int(root), int(round), int(client_id), 7]).generate_state(1, np.uint32)[0])


def cohort(root: int, round: int, num_clients: int, clients_per_round: int) -> list[int]:
    """The clients sampled for a round, sorted; all clients when clients_per_round == num_clients."""
    if clients_per_round == num_clients:  # what the draw below gives, without drawing
        return list(range(num_clients))
    rng = np.random.default_rng(np.random.SeedSequence([int(root), int(round), 3]))
    return sorted(int(c) for c in rng.choice(num_clients, size=clients_per_round, replace=False))
