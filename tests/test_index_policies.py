"""experiments.index_policies' settings: every line of a partition runs on
that partition, its dense baseline included."""
from experiments import index_policies


def test_every_setting_of_a_partition_runs_on_it_dense_baseline_included():
    settings = list(index_policies.settings([0.01], ["+experiment=fmnist_table"], ["iid", "shards"]))
    for label, overrides in settings:
        partition = label.split(":")[0]
        assert f"dataset.partition={partition}" in overrides and overrides[0] == "+experiment=fmnist_table", label
    dense = [overrides for label, overrides in settings if label.endswith(index_policies.DENSE)]
    assert len(dense) == 2 and "compression=none" in dense[1] and "dataset.partition=shards" in dense[1]
