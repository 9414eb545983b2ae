"""Rewrite citations of the shared specification into citations of the repository's docs/.

The docstrings and comments of groupwise first cited the specification outside the repository
(`REFERENCE.md 2`, `REFERENCE.md section 3`, `REFERENCE.md s. 1`, `REFERENCE.md 1-3`,
`REFERENCE.md sections 1 and 3`, `REFERENCE.md, "Analyses of AMIR-GRPO"`, `DESIGN.md, "One
algorithm core, several engines"`, a bare `REFERENCE.md`, ...) and two README sections that
moved into the guides. This script rewrites each to its canonical form:

    REFERENCE.md 2 / section 2 / s. 2           -> docs/algorithms.md §2
    REFERENCE.md 1-3 / sections 1-3             -> docs/algorithms.md §1-3
    REFERENCE.md 1 and 3 / sections 1 and 3     -> docs/algorithms.md §1 and §3
    REFERENCE.md, "Analyses of AMIR-GRPO"       -> docs/algorithms.md, "Analyses of AMIR-GRPO"
    REFERENCE.md 2, "correctness"               -> docs/algorithms.md §2, "Rewards of AMIR-GRPO",
                                                   correctness
    REFERENCE.md                                -> docs/algorithms.md
    DESIGN.md, "One algorithm core, ..."        -> docs/design.md, "One algorithm core, ..."
    README "Evaluate a large model"             -> docs/guides/evaluate.md, "Evaluate a large
                                                   model" (likewise README, "A run folder")

A citation may wrap across lines of a comment or docstring. It is idempotent: a second run
changes nothing. Where a rewritten line of a comment or a
docstring grows past the line length, the words that no longer fit move to the start of the
next line of its paragraph, or to a new line after the paragraph's last; lines it cannot
reflow (code, one-line string literals, inline comments) are listed at the end, to be shortened
by hand. tests/test_docs.py checks the result: every
citation resolves to a heading of docs/, and none of the old files is cited.

    python scripts/convert_citations.py                 # src tests bench scripts configs examples
    python scripts/convert_citations.py --check src     # list what would change, change nothing
"""

from __future__ import annotations

import argparse
import io
import re
import sys
import tokenize
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DIRECTORIES = ("src", "tests", "bench", "scripts", "configs", "examples")
SUFFIXES = {".py", ".sh", ".yaml", ".yml", ".toml"}
SKIP = {"scripts/convert_citations.py", "tests/test_docs.py"}
LINE_LENGTH = 100

# One run of white space inside a citation: spaces, or a line break with the next line's
# indentation and comment marker.
WS = r"(?:[ \t]*\n[ \t]*(?:#[ \t]*)?|[ \t]+)"
NUM = r"\d+(?:-\d+)?(?![\d]|\.\d)"
SECTION = rf"(?:(?:sections?|s\.){WS})"
PAREN = r"\([^()\n]*\)"
NUMBERS = (
    rf"(?P<numbers>{WS}{SECTION}?{NUM}"
    rf"(?:(?:{WS}{PAREN})?(?:,{WS}and{WS}|,{WS}|{WS}and{WS}){SECTION}?{NUM})*)"
)
QUOTED = r'"[^"\n]{0,80}(?:\n[ \t]*(?:#[ \t]*)?[^"\n]{0,80})?"'
QUOTES = rf"(?P<quotes>(?:,?{WS}(?:and{WS})?{QUOTED})+)"
OLD = re.compile(
    rf"(?<![\w/.-])(?P<file>REFERENCE|DESIGN)\.md(?!\w){NUMBERS}?{QUOTES}?"
    rf"|(?<![\w/.-])README,?{WS}(?P<readme>{QUOTED})"
)

HEADINGS = {
    "REFERENCE": {
        "Rewards of AMIR-GRPO": '"Rewards of AMIR-GRPO"',
        "Evaluation of AMIR-GRPO": '"Evaluation of AMIR-GRPO"',
        "Analyses of AMIR-GRPO": '"Analyses of AMIR-GRPO"',
        "AMIR-GRPO + LENS together": '"AMIR-GRPO + LENS together"',
        # names of a part of a section, as some citations gave them
        "correctness": '"Rewards of AMIR-GRPO", correctness',
        "Evaluation": '"Evaluation of AMIR-GRPO"',
        "evaluation": '"Evaluation of AMIR-GRPO"',
        "together": '"AMIR-GRPO + LENS together"',
    },
    "DESIGN": {
        "The data's way through the system": '"The data\'s way through the system"',
        "One algorithm core, several engines": '"One algorithm core, several engines"',
        "Layout (the rooms)": '"Layout (the rooms)"',
        "Choices already made": '"Choices already made"',
        "Output folder of a run": '"Output folder of a run"',
    },
}
PAGES = {"REFERENCE": "docs/algorithms.md", "DESIGN": "docs/design.md"}
README_SECTIONS = {
    "Evaluate a large model": "docs/guides/evaluate.md",
    "A run folder": "docs/guides/train.md",
}


def _flat(text: str) -> str:
    """A possibly wrapped span as one line: its white space runs (and comment markers) as one
    space."""
    return re.sub(WS + "+", " ", text).strip()


def _numbers(span: str) -> str:
    """` 2`, ` section 3`, ` 1, 3`, ` sections 1 and 3`, ` 1 (x) and 2` -> ` §2`, ` §3`,
    ` §1 and §3`, ` §1 and §3`, ` §1 (x) and §2`; line breaks inside are kept."""
    out, pos = [], 0
    pattern = re.compile(
        rf"(?P<paren>{PAREN})|(?P<ws>{WS})?(?:{SECTION})?(?P<num>{NUM})|(?P<sep>,{WS}(?!and))"
    )
    for match in pattern.finditer(span):
        out.append(span[pos : match.start()])
        if match.group("paren"):
            out.append(match.group("paren"))
        elif match.group("sep"):
            out.append(" and ")
        else:
            out.append((match.group("ws") or "") + "§" + match.group("num"))
        pos = match.end()
    out.append(span[pos:])
    return "".join(out)


def _quotes(file: str, span: str) -> str | None:
    """The quoted part rewritten to headings of the new page, or None when a quote is not a
    known heading (then the quotes are not part of the citation and stay as they are)."""
    out, pos = [], 0
    for match in re.finditer(QUOTED, span):
        heading = HEADINGS[file].get(_flat(match.group(0)[1:-1]))
        if heading is None:
            return None
        text = match.group(0)
        out.append(span[pos : match.start()])
        out.append(text if _flat(text[1:-1]) == heading.strip('"') else heading)
        pos = match.end()
    out.append(span[pos:])
    return "".join(out)


def _replace(match: re.Match[str]) -> str:
    if match.group("readme") is not None:
        section = _flat(match.group("readme")[1:-1])
        page = README_SECTIONS.get(section)
        return match.group(0) if page is None else f'{page}, "{section}"'
    file = match.group("file")
    numbers, quotes = match.group("numbers") or "", match.group("quotes") or ""
    new_quotes = _quotes(file, quotes) if quotes else ""
    if new_quotes is None:
        new_quotes = quotes
    elif new_quotes and not numbers and not new_quotes.startswith(","):
        new_quotes = "," + new_quotes  # REFERENCE.md "Heading" -> docs/algorithms.md, "Heading"
    return PAGES[file] + (_numbers(numbers) if numbers else "") + new_quotes


def convert(text: str) -> str:
    """Every old citation of `text` in its canonical form."""
    return OLD.sub(_replace, text)


def _prose_lines(text: str, suffix: str) -> set[int]:
    """0-based numbers of the lines that are prose: whole-line comments and, in Python, every
    line of a triple-quoted string (its first line only when the string opens the line)."""
    lines = text.split("\n")
    prose = {i for i, line in enumerate(lines) if line.lstrip().startswith("#")}
    if suffix != ".py":
        return prose
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, SyntaxError):
        return prose
    for token in tokens:
        if token.type == tokenize.STRING and token.string.lstrip("rbuRBU").startswith('"""'):
            first, last = token.start[0] - 1, token.end[0] - 1
            opens_line = lines[first][: token.start[1]].strip() == ""
            prose.update(range(first if opens_line else first + 1, last + 1))
    return prose


def _head(line: str) -> tuple[str, str]:
    """(indentation, marker) of a line: its comment marker or opening quotes, else ""."""
    match = re.match(r'([ \t]*)(#[ \t]*|[rbuRBU]*"""|)', line)
    return match.group(1), match.group(2)


def reflow(text: str, changed: set[int], suffix: str) -> tuple[str, list[int]]:
    """Move the words of each changed line that run past LINE_LENGTH to the start of the next
    line, when both are prose of the same paragraph (same indentation and comment marker, the
    next one neither blank, nor a list item, nor closing quotes alone); returns the text and
    the 0-based numbers of the lines still too long."""
    lines = text.split("\n")
    prose = _prose_lines(text, suffix)
    todo, too_long = sorted(changed), []
    while todo:
        i = todo.pop(0)
        if len(lines[i]) <= LINE_LENGTH:
            continue
        indent, marker = _head(lines[i])
        nxt = lines[i + 1] if i + 1 < len(lines) else ""
        next_indent, next_marker = _head(nxt)
        body = nxt[len(next_indent) + len(next_marker) :]
        same = next_indent == indent and next_marker.startswith("#") == marker.startswith("#")
        can = (
            i in prose
            and i + 1 in prose
            and same
            and not next_marker.endswith('"""')
            and body.strip() != ""
            and not re.match(r'(?:[-*] |\d+[.)] |"""|\|)', body)
        )
        if not can and i not in prose:
            too_long.append(i)
            continue
        prefix = indent + marker
        words = lines[i][len(prefix) :].split(" ")
        moved: list[str] = []
        while len(prefix + " ".join(words)) > LINE_LENGTH and len(words) > 1:
            moved.insert(0, words.pop())
        while len(words) > 1 and moved[0].startswith("§") and words[-1].endswith(".md"):
            moved.insert(0, words.pop())  # a page and its section stay on one line
        lines[i] = prefix + " ".join(words)
        if can:  # the words open the next line of the paragraph
            lines[i + 1] = indent + next_marker + " ".join([*moved, body])
        else:  # the paragraph's last line: the words make a new one
            continuation = indent + ("# " if marker.startswith("#") else "")
            lines.insert(i + 1, continuation + " ".join(moved))
            prose = {j + 1 if j > i else j for j in prose} | {i + 1}
            todo = [j + 1 if j > i else j for j in todo]
            too_long = [j + 1 if j > i else j for j in too_long]
        if i + 1 not in todo:
            todo.insert(0, i + 1)
    return "\n".join(lines), too_long


def convert_file(path: Path) -> tuple[str, list[int]]:
    """The file's new text and the 1-based numbers of lines that stay too long."""
    old = path.read_text(encoding="utf-8")
    new = convert(old)
    if new == old:
        return old, []
    old_lines, new_lines = old.split("\n"), new.split("\n")
    same_count = len(old_lines) == len(new_lines)
    changed = {
        i
        for i, line in enumerate(new_lines)
        if len(line) > LINE_LENGTH and (not same_count or line != old_lines[i])
    }
    new, too_long = reflow(new, changed, path.suffix)
    return new, [i + 1 for i in too_long]


def files(paths: list[str]) -> list[Path]:
    """The source files under `paths` (relative to the repository), SKIP left out."""
    found = []
    for name in paths:
        root = REPO / name
        candidates = [root] if root.is_file() else sorted(root.rglob("*"))
        for path in candidates:
            relative = path.relative_to(REPO).as_posix()
            if path.is_file() and path.suffix in SUFFIXES and relative not in SKIP:
                found.append(path)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="*", default=list(DIRECTORIES))
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if needed")
    args = parser.parse_args(argv)
    changed, long_lines = 0, []
    for path in files(args.paths):
        old = path.read_text(encoding="utf-8")
        new, too_long = convert_file(path)
        if new != old:
            changed += 1
            if not args.check:
                path.write_text(new, encoding="utf-8")
        relative = path.relative_to(REPO)
        long_lines += [f"{relative}:{n}" for n in too_long]
    verb = "would change" if args.check else "changed"
    print(f"convert_citations: {verb} {changed} files")
    if long_lines:
        print(f"lines over {LINE_LENGTH} characters to shorten by hand:")
        print("\n".join(f"  {where}" for where in long_lines))
    return 1 if args.check and changed else 0


if __name__ == "__main__":
    sys.exit(main())
