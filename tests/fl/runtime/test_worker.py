"""A worker runs a client step for its clients: whole, or streamed in chunks of messages then its timings."""
import numpy as np
from fixtures_workers import attached_workers

from fl.rounds import plain


def test_a_worker_streams_its_messages_in_chunks_then_its_timings_and_a_whole_run_is_the_same():
    from fl.server import Broadcaster

    config, plan, workers = attached_workers(["model=mlp_small", "secagg=none", "fl.num_clients=6",
                                              "fl.clients_per_round=6"], 2)
    broadcast = Broadcaster(plan).encode(0, np.zeros(plan.length, np.float32))
    first = workers[0].run(plain.client_round, broadcast, 0, [0], None)[0][0][1]
    message_size = len(first)
    items = list(workers[1].stream(plain.client_round, broadcast, 0, [0, 2, 4], None, chunk_bytes=2 * message_size))
    assert [len(chunk) for chunk in items[:-1]] == [2, 1] and isinstance(items[-1], dict)
    assert items[-1]["t_train"] > 0
    streamed = [m for chunk in items[:-1] for m in chunk]
    assert [cid for cid, _ in streamed] == [0, 2, 4]
    assert streamed[0][1] == first  # the same bytes either way
