"""The docs a reader reads: no page over 500 lines, and every link between the pages lands.

A page over LIMIT lines is split by question (each page opens with what it answers), its dated lab
notes moved to docs/lab-notes/ (docs/README.md says so). A link's file must exist and its #anchor
must be a heading of that file, as GitHub makes it (lower case, punctuation dropped, spaces to
hyphens, a repeated heading numbered -1, -2 …), so a section moved to another page cannot leave a
link behind it. The notebooks link into docs/ too: the sections they name must still be there.
Each checker is first shown a planted fault it must find.
"""

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 500
PAGES = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").rglob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
"""A fenced code block: its lines are not headings and its brackets are not links."""
DOCS_LINK = re.compile(r"docs/([\w./-]+\.md)#([^)\s]+)")


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: `## 4. Reward hacking: flawed proxies` -> 4-reward-hacking-flawed-proxies."""
    text = re.sub(r"<[^>]+>", "", heading).replace("`", "").strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every heading's anchor in a markdown text (outside code blocks)."""
    found: set[str] = set()
    count: dict[str, int] = {}
    for line in FENCE.sub("", text).splitlines():
        if m := re.match(r"#{1,6} (.*)", line):
            s = slug(m.group(1))
            n = count[s] = count.get(s, -1) + 1
            found.add(s if n == 0 else f"{s}-{n}")
    return found


def broken_links(page: Path, text: str) -> list[str]:
    """Each relative link of `text` (the page at `page`) whose file or heading is not there."""
    bad = []
    for target in LINK.findall(FENCE.sub("", text)):
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if path and not dest.exists():
            bad.append(f"{page.relative_to(ROOT)}: ({target}): no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest.read_text(encoding="utf-8") if path else text):
            bad.append(f"{page.relative_to(ROOT)}: ({target}): no such heading in {dest.name}")
    return bad


def over_limit(pages: dict[str, str]) -> list[str]:
    return [f"{name}: {len(text.splitlines())} lines" for name, text in pages.items() if len(text.splitlines()) > LIMIT]


def test_the_checkers_find_a_planted_long_page_and_a_planted_dead_link():
    assert over_limit({"long.md": "line\n" * (LIMIT + 1), "short.md": "line\n" * LIMIT}) == [f"long.md: {LIMIT + 1} lines"]
    page = ROOT / "docs" / "planted.md"
    text = ("# A page\n\n## 4. Reward hacking: flawed proxies\n\n```\n## not a heading\n```\n"
            "[ok](#4-reward-hacking-flawed-proxies) [ok](README.md) [moved](#stopping-it) [code](#not-a-heading)"
            " [gone](no-such-page.md) [elsewhere](human-feedback.md#no-such-section) [web](https://example.org/x)\n")
    assert broken_links(page, text) == [
        "docs/planted.md: (#stopping-it): no such heading in planted.md",
        "docs/planted.md: (#not-a-heading): no such heading in planted.md",
        "docs/planted.md: (no-such-page.md): no such file",
        "docs/planted.md: (human-feedback.md#no-such-section): no such heading in human-feedback.md",
    ]
    assert slug("GRPO at lr 10³: scouts, then a pre-registered test (2026-11-28)") == \
        "grpo-at-lr-10³-scouts-then-a-pre-registered-test-2026-11-28"
    assert {"a", "a-1"} <= anchors("## A\n\n## A\n")


def test_no_docs_page_is_over_500_lines():
    pages = {str(p.relative_to(ROOT)): p.read_text(encoding="utf-8") for p in (ROOT / "docs").rglob("*.md")}
    assert len(pages) >= 20, sorted(pages)
    long = over_limit(pages)
    assert not long, ("split each by the question it answers, its dated lab notes to docs/lab-notes/ "
                      "(docs/README.md): " + ", ".join(long))


def test_every_link_between_the_pages_lands_on_a_file_and_a_heading():
    bad = [problem for page in PAGES for problem in broken_links(page, page.read_text(encoding="utf-8"))]
    assert not bad, "\n".join(bad)


def test_every_docs_section_a_notebook_links_to_is_there():
    """A notebook's link `…docs/PAGE.md#SECTION` names a heading of docs/PAGE.md (a notebook is not
    edited when a page is split: the page keeps the sections the notebooks name)."""
    cited, bad = 0, []
    for notebook in sorted((ROOT / "notebooks").rglob("*.ipynb")):
        cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
        text = "".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
        for page, anchor in DOCS_LINK.findall(text):
            cited += 1
            dest = ROOT / "docs" / page
            if not dest.is_file() or anchor not in anchors(dest.read_text(encoding="utf-8")):
                bad.append(f"{notebook.relative_to(ROOT)}: docs/{page}#{anchor}")
    assert cited >= 5, f"only {cited} links from the notebooks into docs/ found: is DOCS_LINK still right?"
    assert not bad, "sections the notebooks link to, gone from their page:\n" + "\n".join(bad)
