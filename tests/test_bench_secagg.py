"""experiments.bench_secagg's figures on a tiny grid with a clock that ticks one second a call: what the server sends
and receives against what one client does, the table's columns against the rows, and the budget's estimate."""
import itertools
from pathlib import Path

import pandas as pd
import pytest

from experiments import bench_secagg


@pytest.fixture
def ticking(monkeypatch):
    """Every timed call takes one second: each timed step reads 1, a sum over k calls reads k."""
    monkeypatch.setattr(bench_secagg, "_clock", itertools.count().__next__)


def test_the_server_moves_what_its_clients_do_and_the_table_shows_the_rows(tmp_path, ticking):
    bench_secagg.main(["--protocols", "dh", "--sizes", "4", "--lengths", "100000", "--dropouts", "0", "0.25",
                       "--repeats", "1", "--budget", "100", "--out", str(tmp_path / "t")])
    rows = pd.read_csv(tmp_path / "t.csv", keep_default_na=False)
    lines = (tmp_path / "t.md").read_text().splitlines()
    for dropout, survivors in ((0.0, 4), (0.25, 3)):
        cell = rows[rows.dropout == dropout].set_index(["side", "step"])
        client, server = cell.loc["client"], cell.loc["server"]
        assert client.loc["share_keys", "bytes_down"] > 0 and client.loc["unmask", "bytes_down"] > 0
        # the server sends each client the roster and each survivor the unmask request that client 0 receives
        assert server.loc["advertise", "bytes_down"] == 4 * client.loc["share_keys", "bytes_down"]
        assert server.loc["unmask", "bytes_down"] == survivors * client.loc["unmask", "bytes_down"]
        # and receives from each (survivor) about what client 0 sends (ids and keys vary a message by a few bytes)
        assert server.loc["masked_input", "bytes_up"] == pytest.approx(
            survivors * client.loc["masked_input", "bytes_up"], rel=1e-4)
        assert server.loc["advertise", "bytes_up"] == pytest.approx(4 * client.loc["advertise", "bytes_up"], rel=0.05)
        for side in ("client", "server"):
            steps = cell.loc[side].drop(index="total")
            assert cell.loc[(side, "total"), ["seconds", "bytes_up", "bytes_down"]].tolist() == \
                steps[["seconds", "bytes_up", "bytes_down"]].sum().tolist()
        c, s, p = cell.loc[("client", "total")], cell.loc[("server", "total")], cell.loc[("plain", "total")]
        assert c.seconds == 4 and p.seconds == survivors  # one second a step; one a survivor's vector summed
        protocol_up = c.bytes_up - client.loc["masked_input", "bytes_up"]
        assert (f"| dh | 4 | 1e5 | {dropout:g} | 4.000 | 1.0000 | 1.0000 | 1.0000 | 1.0000 | {c.bytes_up / 1e3:.1f} | "
                f"{c.bytes_down / 1e3:.1f} | {protocol_up} | {s.seconds:.3f} | {s.bytes_up / 1e6:.2f} | "
                f"{survivors}.000 | {p.bytes_up / 1e3:.1f} |") in lines
    up = rows[(rows.dropout == 0) & (rows.side == "client")].set_index("step").bytes_up
    protocol_up = up["total"] - up["masked_input"]
    assert f"- n = 4: {protocol_up} bytes, target 514 ({protocol_up / 514:.2f}x)" in lines


def test_a_server_cell_is_skipped_when_n_clients_at_the_measured_clients_seconds_exceed_the_budget(tmp_path, ticking):
    bench_secagg.main(["--protocols", "dh", "--sizes", "4", "--lengths", "16", "--dropouts", "0", "--repeats", "1",
                       "--budget", "10", "--out", str(tmp_path / "t")])
    server = pd.read_csv(tmp_path / "t.csv", keep_default_na=False).query("side == 'server'")
    assert server.method.tolist() == ["skipped"]
    assert server.note.iloc[0] == ("skipped: simulating all 4 clients would take about 16 s (4 x 4.00 s per client) > "
                                   "budget 10 s")
    assert "| dh | 4 | 2e1 | 0 | 4.000 |" in (tmp_path / "t.md").read_text()


def test_the_protocol_bytes_lines_give_each_added_peers_cost_from_the_committed_rows():
    """A line per n: the client's protocol upload, the target and, from the second n on, the bytes each peer added
    since the previous n costs (it read 112 + x (n - 1), as if all but AdvertiseKeys grew with n: 172.9 a peer at
    n = 10, where each costs about 158)."""
    rows = pd.read_csv(Path(__file__).resolve().parents[1] / "results" / "bench_secagg.csv")
    lines = bench_secagg.markdown(rows, "cmd", 240.0).splitlines()
    assert "- n = 10: 1668 bytes, target 1414 (1.18x)" in lines
    assert "- n = 100: 15888 bytes, target 14914 (1.07x); 158.0 bytes per peer added since n = 10" in lines
    assert "- n = 1000: 159836 bytes, target 149914 (1.07x); 159.9 bytes per peer added since n = 100" in lines
