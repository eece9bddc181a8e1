"""The threat model names a test for each claim; a renamed or deleted test must not leave a
claim pointing at nothing."""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CITATION = re.compile(r"`(tests/[\w/]+\.py)::(\w+)`")


def _test_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    }


def test_every_cited_test_exists():
    text = (REPO / "docs" / "threat-model.md").read_text(encoding="utf-8")
    citations = CITATION.findall(text)
    assert len(citations) > 40, "the threat model should back its claims with tests"
    missing = [
        f"{file}::{name}"
        for file, name in citations
        if not (REPO / file).is_file() or name not in _test_names(REPO / file)
    ]
    assert not missing, f"the threat model cites tests that do not exist: {missing}"
