"""results/README.md is the index of the committed results: every table is listed, every link resolves."""
import re
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[1] / "results"


def test_every_committed_table_is_in_the_index_and_every_link_resolves():
    index = (RESULTS / "README.md").read_text()
    links = set(re.findall(r"\]\(([^)]+\.md)\)", index))
    tables = {str(p.relative_to(RESULTS)) for p in RESULTS.rglob("*.md") if p.name != "README.md"}
    assert tables - links == set(), "tables the index does not list"
    assert links - tables == set(), "links to no table"


def test_the_index_leads_with_federated_scale_real_data():
    first = (RESULTS / "README.md").read_text().split("\n## ")[1]
    assert first.startswith("Fashion-MNIST") and "100 clients" in first.splitlines()[0]


def test_every_relative_link_in_the_readme_and_docs_resolves():
    root = RESULTS.parent
    broken = [(str(f.relative_to(root)), link) for f in [root / "README.md", *sorted((root / "docs").glob("*.md"))]
              for link in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", f.read_text())
              if not link.startswith(("http://", "https://")) and not (f.parent / link).exists()]
    assert broken == []
