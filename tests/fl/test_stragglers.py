"""fl.stragglers: a fraction of each round's cohort does partial local work (FedProx's system heterogeneity)."""
import numpy as np
import pandas as pd
import pytest
import torch
from fixtures_workers import attached_workers

import fl
from fl import seeds
from fl.config import ConfigError, as_dict, validate
from fl.plan import Plan
from fl.results import config_hash
from fl.training import SGD, train_local


@pytest.mark.parametrize("fraction,size,count", [(0.0, 10, 0), (0.04, 10, 0), (0.05, 10, 1), (0.5, 10, 5),
                                                 (0.9, 10, 9), (1.0, 10, 10), (0.5, 7, 4), (0.3, 20, 6),
                                                 (0.29, 50, 15), (0.7, 45, 32)])  # x.5 in decimal, below in binary
def test_a_round_has_its_fraction_of_the_cohort_as_stragglers_the_same_on_every_call(fraction, size, count):
    cohort = seeds.cohort(0, 4, 100, size)
    chosen = seeds.stragglers(0, 4, cohort, fraction)
    assert len(chosen) == count and chosen <= set(cohort)
    assert seeds.stragglers(0, 4, list(cohort), fraction) == chosen


def test_stragglers_change_with_the_round_and_seed_and_their_steps_cover_one_to_all():
    cohort = list(range(100))
    picks = {seeds.stragglers(s, r, cohort, 0.5) for s in (0, 1) for r in range(5)}
    assert len(picks) == 10
    steps = [seeds.straggler_steps(0, r, c, 6) for r in range(20) for c in range(20)]
    assert set(steps) == {1, 2, 3, 4, 5, 6}
    assert seeds.straggler_steps(0, 3, 7, 6) == seeds.straggler_steps(0, 3, 7, 6)
    assert all(seeds.straggler_steps(2, r, 1, 1) == 1 for r in range(10))


def test_max_steps_trains_the_first_steps_of_the_full_local_work():
    torch.manual_seed(0)
    x, y = torch.randn(40, 8), torch.randint(0, 3, (40,))
    models = []
    for epochs, steps in ((1, None), (2, 5), (2, 6), (2, None), (2, 10), (2, 99)):
        torch.manual_seed(1)
        model = torch.nn.Linear(8, 3)
        taken = train_local(model, SGD(model.parameters(), 0.1), x, y, epochs, 8, seed=2, max_steps=steps)
        models.append((taken, torch.cat([p.detach().flatten() for p in model.parameters()])))
    # 5 steps of 8 make one epoch: 5 steps of two epochs are the one-epoch run; 10 and 99 the whole two
    assert [s for s, _ in models] == [5, 5, 6, 10, 10, 10]
    assert torch.equal(models[0][1], models[1][1]) and not torch.equal(models[1][1], models[2][1])
    assert torch.equal(models[3][1], models[4][1]) and torch.equal(models[3][1], models[5][1])


def test_a_worker_stops_exactly_its_rounds_stragglers_early():
    overrides = ["model=mlp_small", "secagg=none", "compression=none", "fl.num_clients=20", "fl.clients_per_round=10",
                 "fl.local_epochs=2", "fl.stragglers=0.4"]
    cfg, plan, [w] = attached_workers(overrides)
    assert plan.training.stragglers == 0.4
    for r in range(3):
        cohort = seeds.cohort(0, r, 20, 10)
        steps = {cid: w.local_steps(cid, r, len(w.parts[cid])) for cid in cohort}
        late = seeds.stragglers(0, r, cohort, 0.4)
        assert {cid for cid, s in steps.items() if s is not None} == late and len(late) == 4
        for cid in late:
            full = 2 * -(-len(w.parts[cid]) // 32)
            assert 1 <= steps[cid] <= full
    # a straggler's update is its first steps of local training; everyone else trains whole
    r = 0
    cohort = seeds.cohort(0, r, 20, 10)
    late = sorted(seeds.stragglers(0, r, cohort, 0.4))
    on_time = sorted(set(cohort) - set(late))
    _, _, [whole] = attached_workers(overrides[:-1])
    for cid in (late[0], on_time[0]):
        update, n = w.train(cid, r)
        full, m = whole.train(cid, r)
        assert n == m == len(w.parts[cid])
        assert np.array_equal(update, full) == (cid in on_time)


@pytest.mark.parametrize("policy", ["keep", "drop"])
def test_a_run_with_stragglers_is_the_same_on_any_number_of_workers(tmp_path, policy):
    """Each worker draws the round's stragglers for itself: one worker or three (clients spread differently) train
    the same stragglers the same steps, so the rows agree bit for bit."""
    rows = [fl.run(fl.compose([f"results.dir={tmp_path / str(n)}", "backend=inline", f"ray.num_workers={n}",
                               "model=mlp_small", "fl.rounds=3", "secagg=dh", "compression.ratio=0.1",
                               "fl.num_clients=20", "fl.clients_per_round=10", "fl.stragglers=0.5",
                               f"fl.straggler_policy={policy}"]))
            for n in (1, 3)]
    for column in ("accuracy", "loss", "bytes_up", "bytes_down", "dropped", "local_steps"):
        assert rows[0][column].tolist() == rows[1][column].tolist()


def test_stragglers_are_checked_and_leave_the_config_hash_alone_at_zero():
    base = as_dict(validate(fl.compose(["secagg=none"])))
    assert config_hash(as_dict(validate(fl.compose(["secagg=none", "fl.stragglers=0"])))) == config_hash(base)
    del base["fl"]["stragglers"]  # a run recorded before the key existed
    assert config_hash(base) == config_hash(as_dict(validate(fl.compose(["secagg=none"]))))
    late = validate(fl.compose(["secagg=none", "fl.stragglers=0.9"]))
    assert config_hash(as_dict(late)) != config_hash(base)
    assert Plan.build(late, [10]).training.stragglers == 0.9
    for bad in ("fl.stragglers=-0.1", "fl.stragglers=1.5", "fl.stragglers=nan", "fl.stragglers=inf"):
        with pytest.raises(ConfigError, match="fl.stragglers"):
            validate(fl.compose([bad]))


@pytest.mark.parametrize("setting", [["secagg=none", "compression=none"],
                                     ["secagg=dh", "compression.ratio=0.1", "fl.num_clients=20",
                                      "fl.clients_per_round=10"]])
def test_a_run_with_stragglers_trains_less_and_records_it_apart(tmp_path, setting):
    """End to end, plain and masked with 10 of 20 clients a round: every client a straggler trains fewer steps, so
    the round's largest update is shorter (on digits a client's update grows with its steps), and the run gets its
    own folder."""
    rows = {}
    for fraction in (0.0, 1.0):
        rows[fraction] = fl.run(fl.compose([f"results.dir={tmp_path}", "backend=inline", "model=mlp_small",
                                            "fl.rounds=2", *setting, f"fl.stragglers={fraction}"]))
    assert (rows[1.0]["update_norm_max"].to_numpy() < rows[0.0]["update_norm_max"].to_numpy()).all()
    assert not rows[1.0]["aborted"].any() and (rows[1.0]["dropped"] == 0).all()
    assert len([d for d in tmp_path.iterdir() if d.is_dir()]) == 2


def _run(tmp_path, *overrides):
    return fl.run(fl.compose([f"results.dir={tmp_path}", "backend=inline", "model=mlp_small", "fl.rounds=3",
                              *overrides]))


def test_dropped_stragglers_miss_the_round_plain(tmp_path):
    """fl.straggler_policy=drop (FedAvg in FedProx's experiments): the round's stragglers never send, and no worker
    trains them short; a fraction that makes every client of the cohort a straggler is refused (nothing would
    train), 9 of 10 is not."""
    rows = _run(tmp_path, "secagg=none", "compression.ratio=0.1", "fl.stragglers=0.5", "fl.straggler_policy=drop")
    assert (rows["dropped"] == 5).all() and rows["accuracy"].nunique() > 1
    _, _, [w] = attached_workers(["secagg=none", "fl.stragglers=0.5", "fl.straggler_policy=drop"])
    assert all(w.local_steps(cid, 0, len(w.parts[cid])) is None for cid in range(10))
    for fraction in (0.95, 1.0):
        with pytest.raises(ConfigError, match=rf"fl.stragglers={fraction} of a 10-client cohort is every client, "
                           r"and fl.straggler_policy=drop drops them all: .* Need fewer than 0.95, or straggler_"):
            validate(fl.compose(["secagg=none", f"fl.stragglers={fraction}", "fl.straggler_policy=drop"]))
    validate(fl.compose(["secagg=none", "fl.stragglers=0.94", "fl.straggler_policy=drop"]))  # 9 of 10
    validate(fl.compose(["secagg=none", "fl.stragglers=1.0"]))  # kept: every client trains part of its work


def test_dropped_stragglers_under_masking_leave_the_sum_of_the_others(tmp_path):
    """Under dh, 10 of 20 clients a round, the round's 3 stragglers drop after sharing their keys (at the masked
    upload): the server unmasks the 7 others' sum, so masked dense follows plain dense with the same clients
    dropped (to the fixed point's rounding); 9 of 10 dropped leave fewer than the threshold, and every round aborts."""
    common = ["compression=none", "fl.num_clients=20", "fl.clients_per_round=10", "fl.stragglers=0.3",
              "fl.straggler_policy=drop"]
    masked = _run(tmp_path, "secagg=dh", *common)
    plain = _run(tmp_path, "secagg=none", *common)
    assert (masked["dropped_masked_input"] == 3).all() and (masked["dropped"] == 3).all()
    assert not masked["aborted"].any() and (plain["dropped"] == 3).all()
    np.testing.assert_allclose(masked["loss"], plain["loss"], rtol=1e-3)
    assert not np.allclose(masked["loss"], _run(tmp_path, "secagg=none", *common[:3])["loss"], rtol=1e-3)
    most = _run(tmp_path, "secagg=dh", *common[:3], "fl.stragglers=0.9", "fl.straggler_policy=drop")
    assert most["aborted"].all() and (most["dropped_masked_input"] == 9).all()


@pytest.mark.parametrize("policy", ["keep", "drop"])
@pytest.mark.parametrize("setting", [["secagg=none", "compression=none"], ["secagg=dh", "compression.ratio=0.1"]])
def test_the_rows_count_the_minibatch_steps_each_round_trained(tmp_path, policy, setting):
    """local_steps: the steps the round's clients trained, summed (a measure of the work that does not depend on
    the CPU, as the seconds do): each client's full local work, a kept straggler's drawn steps, none for a dropped
    one (never trained), plain and masked, 10 of 20 clients a round."""
    rows = _run(tmp_path, *setting, "fl.num_clients=20", "fl.clients_per_round=10", "fl.local_epochs=2",
                "fl.stragglers=0.5", f"fl.straggler_policy={policy}")
    samples = pd.read_csv(tmp_path / rows["config_hash"].iloc[0] / "partitions.csv")["samples"].to_numpy()
    expected = []
    for r in range(3):
        cohort = seeds.cohort(0, r, 20, 10)
        late = seeds.stragglers(0, r, cohort, 0.5)
        full = {cid: 2 * -(-int(samples[cid]) // 32) for cid in cohort}
        expected.append(sum(full[cid] if cid not in late else 0 if policy == "drop" else
                            seeds.straggler_steps(0, r, cid, full[cid]) for cid in cohort))
    assert rows["local_steps"].tolist() == expected
    assert len(set(expected)) == (3 if policy == "keep" else 1)  # kept stragglers' steps are drawn each round


def test_the_straggler_policy_is_checked_and_has_one_spelling_without_stragglers():
    base = config_hash(as_dict(validate(fl.compose(["secagg=none"]))))
    assert config_hash(as_dict(validate(fl.compose(["secagg=none", "fl.straggler_policy=drop"])))) == base
    keep = validate(fl.compose(["secagg=none", "fl.stragglers=0.5"]))
    drop = validate(fl.compose(["secagg=none", "fl.stragglers=0.5", "fl.straggler_policy=drop"]))
    assert config_hash(as_dict(keep)) != config_hash(as_dict(drop))
    assert Plan.build(drop, [10]).drop_stragglers and not Plan.build(keep, [10]).drop_stragglers
    with pytest.raises(ConfigError, match="unknown fl.straggler_policy 'late'; available: keep, drop"):
        validate(fl.compose(["fl.stragglers=0.5", "fl.straggler_policy=late"]))


def _carried_loads(monkeypatch) -> list[dict]:
    """The loads by worker of each carried evaluation, in the order made: round r carries the one at r - 2 (round
    0 is evaluated alone, and its evaluation measures a batch's cost)."""
    import fl.simulation as sim
    loads = []

    class Recorded(sim.CarriedEvaluation):
        def __init__(self, evaluator, weights, by_worker):
            loads.append(dict(by_worker))
            super().__init__(evaluator, weights, by_worker)

    monkeypatch.setattr(sim, "CarriedEvaluation", Recorded)
    return loads


def _same_as_evaluating_after_each_round(overrides: list[str]):
    """The rows of a run with its evaluation carried, checked equal in accuracy to the rows evaluated after each
    round."""
    rows = fl.run(fl.compose(overrides))
    after = fl.run(fl.compose([*overrides, "fl.eval_overlap=false"]))
    np.testing.assert_array_equal(rows["accuracy"], after["accuracy"])
    return rows


@pytest.mark.parametrize("policy", ["keep", "drop"])
def test_a_carried_evaluation_is_shared_out_by_the_steps_each_worker_will_train(tmp_path, monkeypatch, policy):
    """The previous round's evaluation rides on this round's training, each worker's share sized to level their
    finishing times: by the steps each will train (a straggler's drawn share, none for a dropped one), where it
    was by their samples, as if every client trained its whole local work."""
    loads = _carried_loads(monkeypatch)
    rows = fl.run(fl.compose([f"results.dir={tmp_path}", "backend=inline", "model=mlp_small", "fl.rounds=5",
                              "secagg=none", "compression=none", "ray.num_workers=2", "fl.num_clients=20",
                              "fl.clients_per_round=10", "fl.stragglers=0.5", f"fl.straggler_policy={policy}"]))
    assert len(loads) == 3 and rows["t_evaluate_carried"].iloc[1:4].gt(0).all()  # rounds 2-4 carry
    samples = pd.read_csv(tmp_path / rows["config_hash"].iloc[0] / "partitions.csv")["samples"].to_numpy()
    plan = Plan.build(validate(fl.compose(["secagg=none", "fl.num_clients=20", "fl.clients_per_round=10",
                                           "fl.stragglers=0.5", f"fl.straggler_policy={policy}"])), [10])
    for r, load in enumerate(loads, start=2):
        steps = {w: sum(plan.client_steps(c, r, int(samples[c]), plan.stragglers(r))
                        for c in seeds.cohort(0, r, 20, 10) if c % 2 == w) for w in (0, 1)}
        assert steps[0] != steps[1] and load[0] / load[1] == pytest.approx(steps[0] / steps[1])


def test_a_worker_whose_clients_all_drop_takes_no_share_of_a_carried_evaluation(tmp_path, monkeypatch):
    """With 9 of each 10 dropped, one worker's clients are often all stragglers: it is not called that round, so
    a share of the evaluation handed to it came back only as the driver's work after the round. It gets none; the
    figures are those of evaluating after each round."""
    loads = _carried_loads(monkeypatch)
    common = [f"results.dir={tmp_path}", "backend=inline", "model=mlp_small", "fl.rounds=8", "secagg=none",
              "compression=none", "ray.num_workers=2", "fl.num_clients=20", "fl.clients_per_round=10",
              "fl.stragglers=0.9", "fl.straggler_policy=drop"]
    _same_as_evaluating_after_each_round(common)
    plan = Plan.build(validate(fl.compose(common)), [10])
    on_time = [{c % 2 for c in seeds.cohort(0, r, 20, 10) if c not in plan.stragglers(r)} for r in range(2, 8)]
    assert [set(load) for load in loads] == on_time and any(len(w) == 1 for w in on_time)


def test_a_worker_whose_clients_all_vanish_in_a_plain_round_takes_no_share_of_a_carried_evaluation(tmp_path,
                                                                                                     monkeypatch):
    """A plain round's injected dropouts (`secagg.dropout`) are drawn from the seed before the round: a worker left
    with no client is not called, and gets no share of the evaluation it carries; the figures are unchanged."""
    loads = _carried_loads(monkeypatch)
    common = [f"results.dir={tmp_path}", "backend=inline", "model=mlp_small", "fl.rounds=8", "secagg=none",
              "compression=none", "ray.num_workers=2", "fl.num_clients=20", "fl.clients_per_round=10",
              "secagg.dropout=0.8"]
    rows = _same_as_evaluating_after_each_round(common)
    plan = Plan.build(validate(fl.compose(common)), [10])
    cohorts = [seeds.cohort(0, r, 20, 10) for r in range(8)]
    gone = [plan.plain_dropouts(r, cohort) for r, cohort in enumerate(cohorts)]
    assert rows["dropped"].tolist() == [len(g) for g in gone]  # the round drops exactly those the plan names
    left = [{c % 2 for c in cohort if c not in g} for cohort, g in zip(cohorts, gone)]  # workers still called
    assert [set(load) for load in loads] == left[2:8]  # rounds 2-7 carry the evaluations of rounds 1-6
    assert any(len(workers) == 1 for workers in left[2:8])
