"""The experiment scripts refuse a value that cannot make a measurement when the command is read, naming the
option, instead of a traceback inside a cell or a table whose Regenerate line says something else."""
import pandas as pd
import pytest

import secagg

from experiments import (args, bench_eval, bench_packing, bench_secagg, bench_sim, bench_sweep, block_sizes,
                         codec_accuracy, codec_bench, field_bits,
                         gpu_round, grid, index_policies, index_sets, report)


@pytest.mark.parametrize("main,argv,message", [
    (codec_bench.main, ["--reps", "0"], "argument --reps: '0': expected an integer >= 1"),
    (codec_bench.main, ["--quick", "--large-reps", "2"], "--large-reps: --quick runs no 1e7 workload"),
    (bench_secagg.main, ["--dropouts", "1.5"], "argument --dropouts: '1.5': expected a number in [0, 1)"),
    (bench_secagg.main, ["--repeats", "0"], "argument --repeats: '0': expected an integer >= 1"),
    (bench_secagg.main, ["--sizes", "1"], "--sizes: secure aggregation needs at least 2 clients, got 1"),
    (bench_secagg.main, ["--protocols", "dh", "--sizes", "10", "--dropouts", "0.5"],  # numpy's error, or an abort
     "--dropouts 0.5: dh with 10 clients needs 6 survivors, so at most 4 of them (0.4) can drop"),
    (bench_secagg.main, ["--budget", "-1"], "argument --budget: '-1': expected a finite number > 0"),
    (bench_secagg.main, ["--sizes", "10", "10"], "--sizes: 10 given more than once"),  # a traceback after every cell
    (bench_packing.main, ["--lengths", "100", "100"], "--lengths: 100 given more than once"),  # averaged twice
    (bench_eval.main, ["--models", "lenet", "lenet"], "--models: lenet given more than once"),
    (bench_secagg.main, ["--protocols", "dhx"], "--protocols dhx: unknown mask protocol 'dhx'"),
    (bench_secagg.main, ["--protocols", "dh", "DHProtocol"], "--protocols: dh given more than once"),  # an alias
    (bench_secagg.main, ["--seed", "-1"], "argument --seed: '-1': expected a seed in [0, 2**32)"),  # blamed --protocols
    (field_bits.main, ["--ratios", "0.1", "0"], "argument --ratios: '0': expected a ratio in (0, 1)"),  # after the
    (block_sizes.main, ["--ratio", "1.5"], "argument --ratio: '1.5': expected a ratio in (0, 1)"),  # dense runs
    # top-k at 1 is the dense baseline itself: the grid read one run as two settings, after every cell had run
    (field_bits.main, ["--ratios", "1.0"], "argument --ratios: '1.0': expected a ratio in (0, 1) (at 1 a sparsifier"),
    (index_policies.main, ["--ratios", "1"], "argument --ratios: '1': expected a ratio in (0, 1)"),
    (codec_accuracy.main, ["--ratio", "1"], "argument --ratio: '1': expected a ratio in (0, 1)"),
    (index_sets.main, ["--ratio", "nan"], "argument --ratio: 'nan': expected a ratio in (0, 1]"),
    (bench_sim.main, ["--rounds", "0"], "argument --rounds: '0': expected an integer >= 1"),  # every cell skipped
    (bench_sim.main, ["--timeout", "0"], "argument --timeout: '0': expected an integer >= 1"),
    (report.main, ["results", "--label", "foo"], "--label 'foo': expected DIR=NAME"),
    (report.main, ["results", "--out", "README.md"], "--out README.md is a file"),  # after loading every run
])
def test_a_value_that_cannot_make_a_measurement_is_refused_naming_its_option(main, argv, message, capsys, tmp_path):
    with pytest.raises(SystemExit) as ended:
        main(argv + ([] if main is report.main else ["--out", str(tmp_path / "t")]))
    assert ended.value.code == 2 and message in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []  # nothing written


@pytest.mark.parametrize("argv,message", [
    (["--modes", "ray"], "argument --modes: 'ray': expected distinct modes of inline, ray, cluster, inline among them"),
    (["--modes", "inline,rays"], "argument --modes: 'inline,rays'"),
    (["--repeats", "0"], "argument --repeats: '0': expected an integer >= 1"),  # an AttributeError after sweeping
])
def test_bench_sweep_refuses_a_sweep_with_no_inline_reference_or_no_repeats(argv, message, capsys):
    """Without inline among --modes the first mode was compared with itself: 20 of 20 cells 'equal to inline'
    and 1.00x, no inline sweep run."""
    with pytest.raises(SystemExit) as ended:
        bench_sweep.main(argv)
    assert ended.value.code == 2 and message in capsys.readouterr().err


def test_bench_sweep_sweeps_inline_first_whatever_order_the_modes_are_given_in():
    assert bench_sweep.sweep_modes("cluster,ray,inline") == ["inline", "ray", "cluster"]


@pytest.mark.parametrize("main", [field_bits.main, block_sizes.main, index_policies.main, codec_accuracy.main])
def test_a_seed_given_twice_is_refused_not_counted_as_a_second_run(main, capsys, tmp_path, monkeypatch):
    """A grid reads a finished run again: `--seeds 0 0` made one run two seeds, with a spread of 0."""
    monkeypatch.setattr(grid, "run_when_free", lambda cfg: pytest.fail("a cell ran"))
    with pytest.raises(SystemExit) as ended:
        main(["--seeds", "0", "1", "0", "--runs-dir", str(tmp_path / "runs"), "--out", str(tmp_path / "t")])
    assert ended.value.code == 2 and "--seeds: 0 given more than once" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("main,argv,message", [
    (field_bits.main, ["--ratios", "0.1", "0.01", "0.1"], "--ratios: 0.1 given more than once"),
    (field_bits.main, ["--widths", "16", "16"], "--widths: 16 given more than once"),
    (field_bits.main, ["--summary-bits", "8", "8"], "--summary-bits: 8 given more than once"),
    (index_policies.main, ["--ratios", "0.01", "0.01"], "--ratios: 0.01 given more than once"),
    (block_sizes.main, ["--partitions", "iid", "shards", "iid"], "--partitions: iid given more than once"),
    (index_policies.main, ["--ratios", "0.1", "0"], "argument --ratios: '0': expected a ratio in (0, 1)"),
    (codec_accuracy.main, ["--ratio", "1.5"], "argument --ratio: '1.5': expected a ratio in (0, 1)"),
])
def test_a_setting_given_twice_or_a_ratio_out_of_range_is_refused_before_any_run(main, argv, message, capsys, tmp_path,
                                                                                 monkeypatch):
    """A ratio or width given twice made its setting's lines twice: one table line of twice the seeds, its spread
    and standard error those of the same runs counted twice; a ratio of 0 failed after the dense runs."""
    monkeypatch.setattr(grid, "run_when_free", lambda cfg: pytest.fail("a cell ran"))
    with pytest.raises(SystemExit) as ended:
        main(argv + ["--runs-dir", str(tmp_path / "runs"), "--out", str(tmp_path / "t")])
    assert ended.value.code == 2 and message in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_a_grid_cell_its_configuration_refuses_stops_the_grid_before_any_cell_runs(monkeypatch, tmp_path):
    """`field_bits --widths 30` trained the dense and per-client cells, then died in the first masked one: 10
    clients of 30-bit values need a 34-bit field."""
    monkeypatch.setattr(grid, "run_when_free", lambda cfg: pytest.fail("a cell ran"))
    with pytest.raises(SystemExit, match=r"quant_bits 30 .* \(seed 0\): configuration refused: .*34-bit field"):
        field_bits.main(["--ratios", "0.1", "--widths", "30", "--seeds", "0", "--runs-dir", str(tmp_path / "runs"),
                         "--out", str(tmp_path / "t")])
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("parse,good,bad", [(args.positive_int, ("1", "25"), ("0", "-3", "2.5", "x")),
                                            (args.share, ("0", "0.1"), ("1", "1.5", "-0.1", "nan")),
                                            (args.positive, ("0.5", "240"), ("0", "-1", "inf", "nan")),
                                            (args.ratio, ("0.001", "1"), ("0", "1.5", "-0.1", "nan")),
                                            (args.sparse_ratio, ("0.001", "0.5"), ("0", "1", "1.0", "nan")),
                                            (args.seed_number, ("0", "4294967295"), ("-1", "4294967296", "1.5", "x"))])
def test_the_shared_types_take_what_they_say_and_refuse_the_rest(parse, good, bad):
    for text in good:
        assert parse(text) == float(text)
    for text in bad:
        with pytest.raises(Exception, match="expected"):
            parse(text)


def test_a_scripts_help_says_its_first_paragraph_whole():
    """index_policies' and field_bits' --help stopped mid-sentence: the first line of a wrapped paragraph."""
    described = args.summary(field_bits.__doc__)
    assert described.startswith(field_bits.__doc__.split()[0]) and described.endswith(".")
    assert "\n" not in described and len(described) > len(field_bits.__doc__.splitlines()[0])


def test_a_bench_cell_whose_round_aborts_is_recorded_and_the_grid_goes_on(tmp_path, monkeypatch):
    """Under SecAgg+ a neighbourhood can keep fewer than t survivors where the cohort keeps enough (at 40 clients and
    dropout 0.3, depending on the round's random keys): the abort ended the bench with a traceback, losing every
    cell measured before it. Here the full round aborts whenever someone drops."""
    def full_round(config, dropped, seed):
        if dropped:
            raise secagg.RoundAborted(f"fewer than t={config.threshold} unmask responses (test)")
        return real(config, dropped, seed)

    real = bench_secagg.full_round
    monkeypatch.setattr(bench_secagg, "full_round", full_round)
    bench_secagg.main(["--protocols", "secaggplus", "--sizes", "10", "--lengths", "16", "--dropouts", "0", "0.2",
                       "--repeats", "1", "--out", str(tmp_path / "t")])
    rows = pd.read_csv(tmp_path / "t.csv")
    assert set(rows[rows.dropout == 0].side) == {"client", "server", "plain"}
    aborted = rows[rows.dropout == 0.2]
    assert list(aborted.method) == ["aborted"] and "unmask responses (test)" in aborted.note.iloc[0]
    assert "- secaggplus, n=10, length=2e1, dropout=0.2: the round aborted" in (tmp_path / "t.md").read_text()


def test_dropouts_that_leave_exactly_the_threshold_of_survivors_are_measured(tmp_path):
    """dh with 10 clients needs 6 survivors: 4 of them (0.4) may drop, and the round still sums."""
    bench_secagg.main(["--protocols", "dh", "--sizes", "10", "--lengths", "16", "--dropouts", "0.4",
                       "--repeats", "1", "--out", str(tmp_path / "t")])
    rows = pd.read_csv(tmp_path / "t.csv")
    assert set(rows.side) == {"client", "server", "plain"} and not {"aborted", "skipped"} & set(rows.method)


def test_gpu_rounds_counts_are_refused_below_one(capsys):
    """--clients 0 ran a round of no clients; --epochs 0 and --batch-size 0 trained nothing or crashed; a negative
    --synthetic count was taken as asked for and failed building its samples."""
    for option, value in (("--clients", "0"), ("--epochs", "0"), ("--batch-size", "0"), ("--synthetic", "-5")):
        with pytest.raises(SystemExit) as ended:
            gpu_round.main([option, value])
        assert ended.value.code == 2
        assert f"argument {option}: '{value}': expected an integer >= 1" in capsys.readouterr().err
