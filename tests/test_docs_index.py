"""The README's documentation index names every document under docs/."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_readme_indexes_every_doc():
    readme = (ROOT / "README.md").read_text()
    index = readme[readme.index("## Documentation") :]
    missing = [
        str(doc.relative_to(ROOT))
        for doc in sorted((ROOT / "docs").glob("*.md"))
        if f"({doc.relative_to(ROOT)})" not in index
    ]
    assert missing == []
