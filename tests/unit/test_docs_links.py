"""The repository explains itself: its links resolve and it points nowhere outside.

Checked over every git-tracked file:

- every relative link of every Markdown file names a tracked file or folder
  inside the repository, and a ``#anchor`` names a heading of the target
  (GitHub's slug of it) or of the same file;
- every ``docs/...`` path named anywhere (code, tests, config, Markdown)
  exists, and so does its ``#anchor`` if it has one;
- no file mentions the design contract or a folder outside the repository.

The checks are plain functions of (path, text) pairs, so the last tests feed
them a small made-up repository with one defect of each kind and make sure
each is reported.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Spelled in pieces so that this file does not mention them itself.
OUTSIDE = (
    ".." + "/shared",
    "DESIGN" + ".md",
    "DESIGN" + " §",
    "KAFKA" + "-NOTES",
)
"""What no tracked file may mention: the contract and the folder outside the
repository that held it. Cite ``docs/design.md`` instead."""

FENCE = re.compile(r"^ {0,3}(```|~~~)")
HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$")
INLINE_LINK = re.compile(
    r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]"  # [text], which may hold one level of [brackets]
    r"\(\s*<?([^)\s>]+)>?(?:\s+[\"'][^)]*[\"'])?\s*\)"  # (target "optional title")
)
REFERENCE_LINK = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")
DOCS_PATH = re.compile(r"(?<![\w./-])docs/[\w./-]*[\w](?:#[\w-]+)?")
SELF = Path(__file__).resolve().relative_to(ROOT).as_posix()
"""This module: its ``docs/`` paths are made-up examples, exempt from the scan."""


def tracked_files() -> list[str]:
    """The repository's tracked files, as paths relative to its root."""
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, check=True,
                             capture_output=True).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.fail(f"the link check reads the tracked files with git: {exc}")
    return [name for name in out.decode().split("\0") if name]


def read_texts(paths: Iterable[str]) -> dict[str, str]:
    """The tracked files that are UTF-8 text, by path (images and the like are left out)."""
    texts = {}
    for name in paths:
        path = ROOT / name
        if not path.is_file():
            continue  # deleted in the work tree but not yet in the index
        try:
            texts[name] = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
    return texts


def prose_lines(markdown: str) -> list[tuple[int, str]]:
    """(line number, line) of a Markdown text outside fenced code blocks."""
    lines = []
    fence: str | None = None
    for number, line in enumerate(markdown.splitlines(), 1):
        opened = FENCE.match(line)
        if fence is not None:
            if opened and opened.group(1) == fence:
                fence = None
            continue
        if opened:
            fence = opened.group(1)
            continue
        if line.startswith("    ") or line.startswith("\t"):
            continue  # an indented code block (or a continuation; no link there here)
        lines.append((number, line))
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its text, lower case, punctuation dropped,
    spaces as hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link shows its text
    text = re.sub(r"<[^>]+>", "", text)
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


def anchors(markdown: str) -> set[str]:
    """The anchors of a Markdown text's headings, numbered as GitHub numbers repeats."""
    seen: dict[str, int] = {}
    result = set()
    for _, line in prose_lines(markdown):
        match = HEADING.match(line)
        if not match:
            continue
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        result.add(base if count == 0 else f"{base}-{count}")
    return result


def links(markdown: str) -> list[tuple[int, str]]:
    """(line number, target) of every link and image of a Markdown text."""
    found = []
    for number, line in prose_lines(markdown):
        text = CODE_SPAN.sub(lambda m: " " * len(m.group(0)), line)
        found += [(number, m.group(1)) for m in INLINE_LINK.finditer(text)]
        ref = REFERENCE_LINK.match(text)
        if ref:
            found.append((number, ref.group(1)))
    return found


def _folders(files: Iterable[str]) -> set[str]:
    folders = set()
    for name in files:
        parts = name.split("/")[:-1]
        folders.update("/".join(parts[:i]) for i in range(1, len(parts) + 1))
    return folders


def _target_problem(path: str, anchor: str | None, texts: Mapping[str, str],
                    files: set[str], folders: set[str]) -> str | None:
    if path not in files and path not in folders:
        return f"{path} is not a tracked file or folder"
    if anchor:
        if not path.endswith(".md"):
            return f"#{anchor}: {path} is not Markdown"
        if anchor not in anchors(texts.get(path, "")):
            return f"{path} has no heading with the anchor #{anchor}"
    return None


def broken_links(texts: Mapping[str, str], files: Iterable[str]) -> list[str]:
    """Every relative link of the Markdown files in `texts` that does not resolve."""
    files = set(files)
    folders = _folders(files)
    problems = []
    for name, text in sorted(texts.items()):
        if not name.endswith(".md"):
            continue
        for number, target in links(text):
            if SCHEME.match(target) or target.startswith("//"):
                continue  # a URL
            path_part, _, anchor = target.partition("#")
            if path_part:
                if path_part.startswith("/"):
                    problems.append(f"{name}:{number}: {target}: an absolute path")
                    continue
                resolved = Path(name).parent.joinpath(path_part)
                parts: list[str] = []
                for part in resolved.parts:
                    if part == "..":
                        if not parts:
                            parts = ["..", ""]
                            break
                        parts.pop()
                    elif part != ".":
                        parts.append(part)
                if parts[:1] == [".."]:
                    problems.append(f"{name}:{number}: {target}: outside the repository")
                    continue
                path = "/".join(parts).rstrip("/")
            else:
                path = name
            problem = _target_problem(path, anchor or None, texts, files, folders)
            if problem:
                problems.append(f"{name}:{number}: {target}: {problem}")
    return problems


def missing_docs_paths(texts: Mapping[str, str], files: Iterable[str]) -> list[str]:
    """Every ``docs/...`` path named in `texts` that is not in the repository."""
    files = set(files)
    folders = _folders(files)
    problems = []
    for name, text in sorted(texts.items()):
        for number, line in enumerate(text.splitlines(), 1):
            for match in DOCS_PATH.finditer(line):
                path, _, anchor = match.group(0).partition("#")
                path = path.rstrip(".")
                problem = _target_problem(path.rstrip("/"), anchor or None, texts, files,
                                          folders)
                if problem:
                    problems.append(f"{name}:{number}: {match.group(0)}: {problem}")
    return problems


def outside_mentions(texts: Mapping[str, str]) -> list[tuple[str, int, str]]:
    """(path, line number, line) of every mention of something outside the repository."""
    found = []
    for name, text in sorted(texts.items()):
        for number, line in enumerate(text.splitlines(), 1):
            if any(needle in line for needle in OUTSIDE):
                found.append((name, number, line.strip()))
    return found


@pytest.fixture(scope="module")
def repository() -> tuple[dict[str, str], list[str]]:
    files = tracked_files()
    return read_texts(files), files


def test_every_relative_markdown_link_resolves(repository):
    texts, files = repository
    problems = broken_links(texts, files)
    assert not problems, "\n".join(problems)


def test_every_docs_path_named_in_the_repository_exists(repository):
    texts, files = repository
    problems = missing_docs_paths({k: v for k, v in texts.items() if k != SELF}, files)
    assert not problems, "\n".join(problems)


def test_no_file_mentions_a_path_outside_the_repository(repository):
    texts, _ = repository
    mentions = outside_mentions(texts)
    assert not mentions, "\n".join(f"{name}:{number}: {line}" for name, number, line in mentions)


# The checks themselves, on a made-up repository.

FILES = {
    "README.md": "# Top\n\nSee [the design](docs/design.md#the-rules) and [code](src/).\n",
    "docs/design.md": (
        "# Design\n\n## The rules\n\n## The `resign()` order, step by step\n\n"
        "Back to [top](../README.md#top), [rules](#the-rules), "
        "[resign](#the-resign-order-step-by-step).\n\n"
        "```\n[not a link](missing.md)\n```\n\n`[not a link either](missing.md)`\n"
    ),
    "src/main.py": '"""See docs/design.md#the-rules."""\n',
}


def test_a_sound_repository_passes_every_check():
    assert broken_links(FILES, FILES) == []
    assert missing_docs_paths(FILES, FILES) == []
    assert outside_mentions(FILES) == []


def test_a_link_to_a_missing_file_is_reported():
    texts = {**FILES, "README.md": "# Top\n\nSee [gone](docs/gone.md).\n"}
    assert broken_links(texts, texts) == [
        "README.md:3: docs/gone.md: docs/gone.md is not a tracked file or folder"
    ]


def test_a_link_to_a_missing_anchor_is_reported():
    texts = {**FILES,
             "README.md": "# Top\n\nSee [x](docs/design.md#no-such-heading) [y](#nor-here).\n"}
    assert broken_links(texts, texts) == [
        "README.md:3: docs/design.md#no-such-heading: docs/design.md has no heading "
        "with the anchor #no-such-heading",
        "README.md:3: #nor-here: README.md has no heading with the anchor #nor-here",
    ]


def test_a_link_out_of_the_repository_is_reported():
    texts = {**FILES, "docs/design.md": FILES["docs/design.md"] + "[x](../../elsewhere/notes.md)\n"}
    assert broken_links(texts, texts) == [
        "docs/design.md:14: ../../elsewhere/notes.md: outside the repository"
    ]


def test_a_missing_docs_path_in_code_is_reported():
    texts = {**FILES, "src/main.py": "# see docs/deploy.md and docs/design.md#gone\n"}
    assert missing_docs_paths(texts, texts) == [
        "src/main.py:1: docs/deploy.md: docs/deploy.md is not a tracked file or folder",
        "src/main.py:1: docs/design.md#gone: docs/design.md has no heading with the "
        "anchor #gone",
    ]


def test_a_mention_of_the_outside_contract_is_reported():
    texts = {"src/main.py": f"# as {OUTSIDE[1]} says\n# {OUTSIDE[0]}/x\n"}
    assert [(name, number) for name, number, _ in outside_mentions(texts)] == [
        ("src/main.py", 1), ("src/main.py", 2)]


@pytest.mark.parametrize(("heading", "anchor"), [
    ("The safety argument", "the-safety-argument"),
    ("Renewals, the fence deadline and its margin", "renewals-the-fence-deadline-and-its-margin"),
    ("Role state (`krabka/rules/state.py`)", "role-state-krabkarulesstatepy"),
    ("Real processes on real Kafka (`tests/test_faults_*.py`)",
     "real-processes-on-real-kafka-teststest_faults_py"),
    ("1. A rebalance: `ValueError`", "1-a-rebalance-valueerror"),
    ("See [the notes](notes.md) first", "see-the-notes-first"),
])
def test_anchors_are_githubs_slugs_of_the_headings(heading, anchor):
    assert slug(heading) == anchor


def test_repeated_headings_are_numbered():
    assert anchors("# Kinds\n\n## Kinds\n\n### Kinds\n") == {"kinds", "kinds-1", "kinds-2"}
