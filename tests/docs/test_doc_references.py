"""Every document the repository points to is inside it: each `docs/<page>.md` (optionally
`#anchor`) named in code, tests, benches, configs, examples, the Makefile, the README and the
docs themselves, and each relative markdown link in the README and docs/, resolves to a file and
a heading (GitHub's anchor rule). Nothing points outside the repository to the notes it grew
from, and the README stays one screen or three. The checker runs on the real tree and on a tiny
tree with one broken file, one broken anchor and one outside reference, so a checker that finds
nothing cannot pass.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Dict, List, Set

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("mindrl", "tests", "cli", "bench", "configs", "examples", "docs", ".ci", "Makefile",
           "README.md", "setup.py", "requirements.txt", "constraints.txt")
TEXT_SUFFIXES = {".py", ".md", ".yaml", ".yml", ".sh", ".txt", ".cfg", ".toml", ".json", ""}
SKIP_DIRS = {"__pycache__", ".venv", "work", "results"}
# Spelt in pieces so that this file does not name them itself.
OUTSIDE = ("../" + "shared", "PLATFORM" + "_NOTES", "DESIGN" + ".md")
README_MAX_LINES = 200

DOC_REF = re.compile(r"(?<![\w./-])(docs/[\w./-]+?\.md)(#[\w-]+)?")
MD_LINK = re.compile(r"\]\(([^)\s]+)\)")
FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def github_anchor(heading: str) -> str:
    """GitHub's id for a heading: markup dropped, lowercased, punctuation removed (hyphens and
    underscores kept), spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)      # [text](url) -> text
    text = text.replace("`", "").replace("*", "")
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


def anchors(markdown: str) -> Set[str]:
    """The ids of a page's headings (outside code fences); repeats get -1, -2, ... as on GitHub."""
    seen: Dict[str, int] = {}
    out: Set[str] = set()
    in_fence = False
    for line in markdown.splitlines():
        if FENCE.match(line):
            in_fence = not in_fence
            continue
        match = None if in_fence else HEADING.match(line)
        if match:
            base = github_anchor(match.group(2))
            count = seen.get(base, 0)
            seen[base] = count + 1
            out.add(base if count == 0 else f"{base}-{count}")
    return out


def scanned_files(root: Path) -> List[Path]:
    files = []
    for name in SCANNED:
        path = root / name
        if path.is_file():
            files.append(path)
        elif path.is_dir():
            files += [p for p in sorted(path.rglob("*")) if p.is_file()
                      and p.suffix in TEXT_SUFFIXES
                      and not SKIP_DIRS.intersection(p.relative_to(root).parts)]
    return files


def _target_problem(root: Path, page: Path, anchor: str, where: str, cache: Dict) -> List[str]:
    if not page.is_file():
        return [f"{where}: {page.relative_to(root) if page.is_relative_to(root) else page} "
                f"does not exist"]
    if anchor and page.suffix == ".md":
        if page not in cache:
            cache[page] = anchors(page.read_text())
        if anchor not in cache[page]:
            return [f"{where}: no heading #{anchor} in {page.relative_to(root)}"]
    return []


def check_tree(root: Path) -> List[str]:
    """Every broken document reference and outside reference under root, one line each."""
    problems: List[str] = []
    cache: Dict[Path, Set[str]] = {}
    for path in scanned_files(root):
        if path == Path(__file__).resolve():      # its own examples are the tiny tree's
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        rel = path.relative_to(root)
        for lineno, line in enumerate(text.splitlines(), start=1):
            where = f"{rel}:{lineno}"
            for word in OUTSIDE:
                if word in line:
                    problems.append(f"{where}: refers to {word}, which is not in the repository")
            for match in DOC_REF.finditer(line):
                anchor = (match.group(2) or "#")[1:]
                problems += _target_problem(root, root / match.group(1), anchor, where, cache)
            if path.suffix != ".md":
                continue
            for match in MD_LINK.finditer(line):
                target = match.group(1)
                if re.match(r"^[a-z]+:", target):          # http:, https:, mailto:
                    continue
                file_part, _, anchor = target.partition("#")
                page = (path.parent / file_part).resolve() if file_part else path
                problems += _target_problem(root, page, anchor, where, cache)
    return sorted(set(problems))


def test_every_document_reference_resolves():
    problems = check_tree(ROOT)
    assert not problems, "broken document references:\n" + "\n".join(problems)


def test_readme_fits_200_lines():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines"


def test_anchor_rule():
    assert github_anchor("Qwen2.5-VL on CPU") == "qwen25-vl-on-cpu"
    assert github_anchor("`megatron_training`") == "megatron_training"
    assert github_anchor("When a run fails") == "when-a-run-fails"
    assert github_anchor("CPUs differ: AVX-512 and AVX2") == "cpus-differ-avx-512-and-avx2"
    assert anchors("# A\n```\n# not a heading\n```\n## A\n") == {"a", "a-1"}


def test_checker_finds_each_kind_of_break(tmp_path):
    (tmp_path / "docs" / "guides").mkdir(parents=True)
    (tmp_path / "docs" / "page.md").write_text("# Page\n\n## Some heading\n\n```\n# fenced\n```\n")
    (tmp_path / "docs" / "guides" / "g.md").write_text(
        "# G\n[ok](../page.md#some-heading) [bad](../page.md#fenced) [gone](missing.md)\n"
        "[self](#g) [web](https://example.com)\n")
    (tmp_path / "mindrl").mkdir()
    (tmp_path / "mindrl" / "m.py").write_text(
        '"""See docs/page.md#some-heading and docs/page.md."""\n'
        "# docs/nowhere.md\n"
        "# docs/page.md#no-such-heading\n"
        f"# {OUTSIDE[1]}\n")
    (tmp_path / "README.md").write_text("[docs](docs/page.md)\n")
    problems = check_tree(tmp_path)
    assert problems == sorted([
        "docs/guides/g.md:2: no heading #fenced in docs/page.md",
        "docs/guides/g.md:2: docs/guides/missing.md does not exist",
        "mindrl/m.py:2: docs/nowhere.md does not exist",
        "mindrl/m.py:3: no heading #no-such-heading in docs/page.md",
        f"mindrl/m.py:4: refers to {OUTSIDE[1]}, which is not in the repository",
    ]), problems
