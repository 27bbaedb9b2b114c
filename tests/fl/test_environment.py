"""fl.environment.code_version: which code a run's rows came from, so a table can say it."""
import re
import subprocess

import pytest

from fl import environment


def _git(root, *args):
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture
def checkout(tmp_path):
    (tmp_path / "fl").mkdir()
    (tmp_path / "fl" / "core.py").write_text("x = 1\n")
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "table.md").write_text("| a |\n")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "first")
    return tmp_path


def test_a_clean_checkout_is_named_by_its_commit(checkout):
    assert environment.code_version(checkout) == _git(checkout, "rev-parse", "HEAD")[:12]


def test_changed_code_is_marked_modified_but_changed_results_and_new_result_files_are_not(checkout):
    (checkout / "results" / "table.md").write_text("| b |\n")
    (checkout / "results" / "run").mkdir()
    (checkout / "results" / "run" / "rounds.csv").write_text("round\n")
    commit = _git(checkout, "rev-parse", "HEAD")[:12]
    assert environment.code_version(checkout) == commit
    (checkout / "fl" / "core.py").write_text("x = 2\n")
    assert environment.code_version(checkout) == commit + "+modified"


def test_code_changed_after_an_earlier_run_of_the_same_process_is_seen(checkout):
    """A notebook runs, edits the code (or checks out another commit), runs again: the second run's rows must not
    name the first one's code (a Ray run's fresh workers import what is on disk)."""
    assert environment.code_version(checkout) == _git(checkout, "rev-parse", "HEAD")[:12]
    (checkout / "fl" / "core.py").write_text("x = 2\n")
    _git(checkout, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-am", "second")
    assert environment.code_version(checkout) == _git(checkout, "rev-parse", "HEAD")[:12]


def test_a_new_untracked_code_file_is_modified_code_but_an_ignored_one_is_not(checkout):
    """A codec added as a new, uncommitted file: rows made with it must not claim the commit's code."""
    (checkout / ".gitignore").write_text("__pycache__/\n")
    _git(checkout, "add", ".gitignore")
    _git(checkout, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "ignore")
    commit = _git(checkout, "rev-parse", "HEAD")[:12]
    (checkout / "fl" / "__pycache__").mkdir()
    (checkout / "fl" / "__pycache__" / "core.cpython-311.pyc").write_bytes(b"\0")
    assert environment.code_version(checkout) == commit
    for junk in (".simulation.py.swp", "notes.txt", ".DS_Store"):  # an editor's, a user's, an OS's: not code
        (checkout / "fl" / junk).write_text("x")
    assert environment.code_version(checkout) == commit
    (checkout / "fl" / "sign.py").write_text("y = 1\n")
    assert environment.code_version(checkout) == commit + "+modified"


@pytest.mark.parametrize("name", ["new codec.py", "codec_\u00e9.py"])
def test_a_new_code_file_whose_name_git_quotes_is_modified_code(checkout, name):
    """git status quotes a name with a space or an accent ("fl/new codec.py"): the line ended in a quote, not .py."""
    commit = _git(checkout, "rev-parse", "HEAD")[:12]
    (checkout / "fl" / name).write_text("y = 1\n")
    assert environment.code_version(checkout) == commit + "+modified"


def test_outside_a_checkout_it_is_the_package_version(tmp_path):
    assert re.fullmatch(r"fedsqueeze \S+|unknown", environment.code_version(tmp_path))


def test_every_row_of_a_run_names_its_code():
    described = environment.describe("cpu", "inline", 1, "2")
    assert described["code"] == environment.code_version()
    assert re.fullmatch(r"[0-9a-f]{12}(\+modified)?|fedsqueeze \S+|unknown", described["code"])


def test_the_cpu_is_named_with_its_generation_and_vector_unit(tmp_path):
    """Two EPYC generations both called "AMD EPYC" by a virtual machine round differently: the row must tell them
    apart."""
    block = ("processor\t: {n}\nmodel name\t: AMD EPYC\ncpu family\t: {fam}\n"
             "model\t\t: 1\nflags\t\t: fpu sse4_2 avx2{extra}\n\n")
    for fam, extra, expected in ((25, "", "AMD EPYC (family 25, model 1; AVX2)"),
                                 (23, " avx512f", "AMD EPYC (family 23, model 1; AVX-512)")):
        info = tmp_path / f"cpuinfo{fam}"
        info.write_text(block.format(n=0, fam=fam, extra=extra) + block.format(n=1, fam=99, extra=""))
        assert environment.cpu_model(info) == expected
    assert environment.cpu_model(tmp_path / "absent")  # no /proc/cpuinfo: the platform's name


def test_a_package_installed_inside_another_checkout_is_not_named_by_that_checkout(checkout):
    inner = checkout / "venv" / "site-packages"
    inner.mkdir(parents=True)
    assert re.fullmatch(r"fedsqueeze \S+|unknown", environment.code_version(inner))


def test_the_cores_are_those_the_run_may_use_not_the_machines(monkeypatch):
    """Under `taskset -c 0`, or in a SLURM job's or a container's share, the row said every core of the machine."""
    monkeypatch.setattr(environment.os, "sched_getaffinity", lambda pid: {0}, raising=False)
    described = environment.describe("cpu", "inline", 1, "2")
    assert described["env_cores"] == 1 and ", 1 cores, " in described["env"]


def test_a_blank_line_before_the_first_processor_block_is_skipped(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("\nprocessor\t: 0\nmodel name\t: Intel Xeon\nflags\t\t: sse4_2\n\nprocessor\t: 1\n")
    assert environment.cpu_model(info) == "Intel Xeon (SSE4.2)"


@pytest.mark.parametrize("files, cores", [
    ({"cpu.max": "150000 100000\n"}, 2),  # v2, `docker --cpus=1.5`: two cores' worth of threads
    ({"cpu.max": "max 100000\n"}, None),
    ({"cpu/cpu.cfs_quota_us": "300000\n", "cpu/cpu.cfs_period_us": "100000\n"}, 3),  # v1
    ({"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}, None),
    ({"cpu.max": "garbled\n"}, None),
    ({}, None),
])
def test_a_containers_cpu_quota_is_read_from_its_cgroup(tmp_path, files, cores):
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert environment.cgroup_cpu_quota(tmp_path) == cores


def test_a_cpu_quota_narrower_than_the_affinity_mask_sets_the_cores(monkeypatch):
    """`docker --cpus=2` on a 64-core host leaves all 64 in the affinity mask: 64 workers would share 2 cores."""
    monkeypatch.setattr(environment.os, "sched_getaffinity", lambda pid: set(range(64)), raising=False)
    monkeypatch.setattr(environment, "cgroup_cpu_quota", lambda: 2)
    assert environment.usable_cpus() == 2
    monkeypatch.setattr(environment, "cgroup_cpu_quota", lambda: None)
    assert environment.usable_cpus() == 64
