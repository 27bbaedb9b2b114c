"""Replies through shared memory (fl.runtime.transport): the same bytes as through Ray, and no files left behind."""
import os

import numpy as np
import pytest

import fl
from fl.runtime import transport
from fl.runtime.transport import ReplyBuffer, ReplyReader


def messages(sizes, seed=0):
    rng = np.random.default_rng(seed)
    return [(cid, None if size is None else rng.bytes(size)) for cid, size in enumerate(sizes)]


def test_messages_come_back_byte_for_byte_and_none_stays_none(tmp_path):
    buffer, reader = ReplyBuffer(str(tmp_path)), ReplyReader()
    probe = buffer.pack([(0, b"token")])
    assert reader.attach(7, probe, b"token")
    assert os.listdir(tmp_path) == []  # mapped by the driver, then its name removed
    for round in range(3):  # the buffer is reused from offset 0 at every call
        out = messages([19_260, None, 5, 0, 19_260], seed=round)
        assert reader.unpack(7, buffer.pack(out)) == out
    buffer.close()
    reader.close()


def test_a_reply_larger_than_the_buffer_grows_it_as_a_new_file(tmp_path):
    buffer, reader = ReplyBuffer(str(tmp_path)), ReplyReader()
    assert reader.attach(0, buffer.pack([(0, b"t")]), b"t")
    first = reader.maps[0][0]
    out = messages([transport.INITIAL_BYTES // 2 + 1] * 3)  # 1.5x the first buffer
    packed = buffer.pack(out)
    assert packed[0] != first and packed[1] >= 3 * (transport.INITIAL_BYTES // 2 + 1)
    assert reader.unpack(0, packed) == out
    assert os.listdir(tmp_path) == []
    assert reader.unpack(0, buffer.pack(out[:1])) == out[:1]  # and is kept
    buffer.close()
    reader.close()


def test_a_buffer_the_driver_cannot_map_or_that_holds_another_token_is_refused_and_kept(tmp_path):
    buffer, reader = ReplyBuffer(str(tmp_path)), ReplyReader()
    probe = buffer.pack([(0, b"theirs")])
    assert not reader.attach(0, probe, b"mine")  # another file of that name (another machine's worker)
    assert os.listdir(tmp_path) == [os.path.basename(probe[0])]  # not ours: not removed
    assert not reader.attach(0, (str(tmp_path / "absent"), 100, [(0, 0, 4)]), b"mine")
    assert reader.maps == {}
    buffer.close()  # the worker removes a buffer that was never mapped
    assert os.listdir(tmp_path) == []


def test_leftovers_of_a_worker_are_removed_and_no_other(tmp_path):
    for name in ("fedsqueeze-replies-41-0", "fedsqueeze-replies-41-3", "fedsqueeze-replies-411-0", "other"):
        (tmp_path / name).write_bytes(b"x")
    transport.remove_leftovers(41, str(tmp_path))
    assert sorted(os.listdir(tmp_path)) == ["fedsqueeze-replies-411-0", "other"]


def ray_run(tmp_path, name, *overrides):
    return fl.run(fl.compose(["model=mlp_small", "fl.rounds=3", "fl.num_clients=10", "fl.clients_per_round=10",
                              "backend=ray", f"results.dir={tmp_path / name}", *overrides]))


@pytest.mark.parametrize("secagg", ["none", "dh"])
def test_ray_replies_through_shared_memory_and_through_ray_are_the_same(tmp_path, monkeypatch, ray_session, secagg):
    import fl.runtime.pool

    used = []
    original_close = fl.runtime.pool.RayPool.close

    def close(self):
        used.append(dict(self._shared))
        original_close(self)

    monkeypatch.setattr(fl.runtime.pool.RayPool, "close", close)
    shared = ray_run(tmp_path, "shared", f"secagg={secagg}")
    assert len(used[0]) == 2  # both workers replied through shared memory
    for pid in used[0].values():
        assert not [n for n in os.listdir(transport.SHM_DIR) if n.startswith(f"fedsqueeze-replies-{pid}-")]

    monkeypatch.setattr(fl.runtime.pool.ReplyReader, "attach", lambda self, w, probe, token: False)  # another machine
    through_ray = ray_run(tmp_path, "ray", f"secagg={secagg}")
    assert used[1] == {}
    for column in ("accuracy", "loss", "bytes_up", "bytes_down", "rejected", "dropped"):
        np.testing.assert_array_equal(shared[column], through_ray[column])


def test_a_file_left_by_a_killed_process_with_this_pid_is_skipped_and_kept(tmp_path, monkeypatch):
    """PIDs are reused: a worker killed before the driver mapped its buffer leaves a file under a name a later
    process with its PID would take; that process takes the next name and leaves the stale file alone."""
    monkeypatch.setattr(transport, "_names", iter(range(100)))
    stale = [tmp_path / f"fedsqueeze-replies-{os.getpid()}-{i}" for i in (0, 1)]
    for path in stale:
        path.write_bytes(b"stale")
    buffer, reader = ReplyBuffer(str(tmp_path)), ReplyReader()
    probe = buffer.pack([(0, b"token")])
    assert probe[0] == str(tmp_path / f"fedsqueeze-replies-{os.getpid()}-2")
    assert reader.attach(0, probe, b"token")
    out = messages([100, None, 7])
    assert reader.unpack(0, buffer.pack(out)) == out
    assert [path.read_bytes() for path in stale] == [b"stale", b"stale"]
    buffer.close()
    reader.close()
