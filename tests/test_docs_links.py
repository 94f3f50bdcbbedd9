"""The manual's links resolve in a clone: every relative markdown link of the README and the
pages under docs/ and benchmarks/, and every repository path of a page or table file they name in
backticks (`docs/...`, `benchmarks/tables/...`, `benchmarks/results/...`), exists inside the
repository. A results page renamed, a table moved or a link to a folder beside the clone fails
here instead of in a reader's browser."""

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PAGES = [
    REPO / "README.md",
    *sorted((REPO / "docs").rglob("*.md")),
    *sorted((REPO / "benchmarks").rglob("*.md")),
]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
NAMED = re.compile(r"`((?:docs|benchmarks/tables|benchmarks/results)/[\w./-]+)`")


def broken(page: Path, text: str | None = None) -> list[str]:
    """`page`'s links and named paths (in `text`, else the page's own) that do not resolve to a
    file inside the repository."""
    text = page.read_text() if text is None else text
    out = []
    for target in LINK.findall(text):
        if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue  # a URL or an anchor of the page itself
        path = (page.parent / target.split("#")[0]).resolve()
        if not path.is_relative_to(REPO) or not path.exists():
            out.append(f"link ({target})")
    out += [f"`{name}`" for name in NAMED.findall(text) if not (REPO / name).exists()]
    return out


def test_the_link_check_finds_a_missing_page_and_a_link_out_of_the_clone():
    page = REPO / "docs" / "guide.md"
    assert broken(page) == []
    text = "[a](results/nope.md) [b](../../shared/DESIGN.md) `docs/nope.md` [c](https://x.org)"
    assert broken(page, text + " [d](methods/erpv.md#params) `docs/params.md`") == [
        "link (results/nope.md)",
        "link (../../shared/DESIGN.md)",
        "`docs/nope.md`",
    ]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_link_and_named_page_of_the_manual_resolves_in_the_repository(page):
    assert broken(page) == [], f"{page.relative_to(REPO)}: fix or remove these"
