"""The documentation in the repository holds together: every docstring citation of docs/ names
a page and a heading that exist, none of the former spec files (outside the repository) is
cited, every relative link in the Markdown points to a file (and heading) that exists, the
README stays under 16,000 bytes, every ```python block of the README and the guides runs as
written (offline, on a CPU: the snippets name the shipped models), the README's TRL example
shows the methods working (AMIR pairs, a gradient, all-wrong groups moved by LENS) and every
```yaml block loads as a training config."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from groupwise.train.preflight import load_run_config

ROOT = Path(__file__).resolve().parents[1]
SOURCE_DIRS = ("src", "tests", "bench", "testbed", "scripts", "configs")
SOURCE_SUFFIXES = {".py", ".sh", ".yaml", ".yml", ".toml"}
# They are about citations: their examples are not citations.
NOT_SCANNED = {"tests/test_docs.py"}
MARKDOWN = [
    ROOT / "README.md",
    ROOT / "CONTRIBUTING.md",
    ROOT / "CHANGELOG.md",
    ROOT / "bench" / "results" / "README.md",
    ROOT / "testbed" / "README.md",
    *sorted((ROOT / "docs").rglob("*.md")),
]
GUIDES_LINKED_FROM_README = ("verl.md", "distributed.md", "calibration.md")
README_LIMIT = 16_000

# A line break inside a comment or docstring: the next line's indentation and comment marker.
_BREAK = re.compile(r"[ \t]*\n[ \t]*(?:#[ \t]*)?")
CITATION = re.compile(
    r"(?<![\w/.-])docs/(?P<page>[\w./-]*?\.md)"
    r"(?P<sections>(?:\s*§\d+(?:-\d+)?(?:\s*\([^()]*\))?(?:\s*,?\s*(?:and\s*)?(?=§))?)*)"
    r'(?P<quotes>(?:,?\s*(?:and\s+)?"[^"\n]+")*)'
)
README_CITATION = re.compile(r'(?<![\w/.-])README,?\s+"(?P<heading>[^"\n]+)"')
OLD_CITATION = re.compile(r"(?<![\w/.-])(?:REFERENCE|DESIGN)\.md\b")
LINK = re.compile(r"\[[^\]]*\]\((?P<target>[^)\s]+)\)")
FENCE = re.compile(r"^```(?P<lang>\w*)\n(?P<body>.*?)^```", re.M | re.S)


def _flat(text: str) -> str:
    return _BREAK.sub(" ", text)


def source_files() -> list[Path]:
    files = [ROOT / "pyproject.toml"]
    for name in SOURCE_DIRS:
        for path in sorted((ROOT / name).rglob("*")):
            relative = path.relative_to(ROOT).as_posix()
            if path.is_file() and path.suffix in SOURCE_SUFFIXES and relative not in NOT_SCANNED:
                files.append(path)
    return files


def headings(page: Path) -> list[str]:
    """The heading texts of a Markdown page, outside code blocks."""
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    return [m.group(1).strip() for m in re.finditer(r"^#{1,6}[ \t]+(.+)$", text, re.M)]


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    kept = re.sub(r"[^\w\- ]", "", heading.lower())
    return kept.replace(" ", "-")


def citation_problems(text: str, where: str, readme: bool = True) -> list[str]:
    """What does not resolve among the docs/ citations of `text` (and its README citations,
    unless `readme` is False: the changelog quotes former ones)."""
    problems = []
    flat = _flat(text)
    for match in CITATION.finditer(flat):
        page = ROOT / "docs" / match.group("page")
        cited = f"{where}: docs/{match.group('page')}"
        if not page.is_file():
            problems.append(f"{cited}: no such page")
            continue
        titles = headings(page)
        for low, high in re.findall(r"§(\d+)(?:-(\d+))?", match.group("sections")):
            for number in range(int(low), int(high or low) + 1):
                if not any(t.startswith(f"{number}.") for t in titles):
                    problems.append(f"{cited} §{number}: no heading starting '{number}.'")
        for quoted in re.findall(r'"([^"\n]+)"', match.group("quotes")):
            if " ".join(quoted.split()) not in titles:
                problems.append(f'{cited}, "{quoted}": no such heading')
    titles = headings(ROOT / "README.md")
    for match in README_CITATION.finditer(flat) if readme else ():
        if " ".join(match.group("heading").split()) not in titles:
            problems.append(f'{where}: README, "{match.group("heading")}": no such heading')
    return problems


# ---------------------------------------------------------------------------------------------
# Citations


def test_every_citation_names_an_existing_page_and_heading() -> None:
    problems = []
    for path in source_files() + MARKDOWN:
        text, where = path.read_text(encoding="utf-8"), str(path.relative_to(ROOT))
        problems += citation_problems(text, where, readme=path.suffix != ".md")
    assert not problems, "citations that do not resolve:\n" + "\n".join(problems)


def test_no_citation_of_the_former_spec_files_remains() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{text[: m.start()].count(chr(10)) + 1}"
        for path in source_files()
        for text in [path.read_text(encoding="utf-8")]
        for m in OLD_CITATION.finditer(text)
    ]
    assert not found, (
        "REFERENCE.md / DESIGN.md are not in the repository; cite the repository's docs in the "
        'canonical form: docs/algorithms.md §2 (a heading starting "2."), or docs/algorithms.md, '
        '"Rewards of AMIR-GRPO" (a heading with that text):\n' + "\n".join(found)
    )


def test_the_citation_checker_catches_what_does_not_resolve() -> None:
    good = '"""See docs/algorithms.md §1-3, docs/algorithms.md, "Analyses of AMIR-GRPO".'
    assert citation_problems(good, "x") == []
    wrapped = '# docs/algorithms.md §3, "AMIR-GRPO + LENS\n    # together": the sum'
    assert citation_problems(wrapped, "x") == []
    assert citation_problems("docs/algorithms.md §1 (loss) and §9", "x") == [
        "x: docs/algorithms.md §9: no heading starting '9.'"
    ]
    assert citation_problems('docs/design.md, "No such section"', "x") == [
        'x: docs/design.md, "No such section": no such heading'
    ]
    assert citation_problems("docs/nowhere.md §1", "x") == ["x: docs/nowhere.md: no such page"]
    assert citation_problems('(README, "No such part")', "x") == [
        'x: README, "No such part": no such heading'
    ]


def test_algorithms_and_design_keep_the_sections_the_citations_use() -> None:
    algorithms = headings(ROOT / "docs" / "algorithms.md")
    for title in (
        "1. GRPO",
        "2. AMIR-GRPO",
        "Rewards of AMIR-GRPO",
        "Evaluation of AMIR-GRPO",
        "Analyses of AMIR-GRPO",
        "3. LENS",
        "AMIR-GRPO + LENS together",
        "4. Pass@k",
        "5. Results to compare against",
        "6. Calibration",
    ):
        assert title in algorithms, f"docs/algorithms.md lost the heading {title!r}"
    design = headings(ROOT / "docs" / "design.md")
    for title in (
        "The data's way through the system",
        "One algorithm core, several engines",
        "Layout (the rooms)",
        "Choices already made",
        "Add an advantage estimator",
        "Add a reward component",
        "Add a benchmark",
        "Add an engine",
    ):
        assert title in design, f"docs/design.md lost the heading {title!r}"


# ---------------------------------------------------------------------------------------------
# Links and the README


def test_every_relative_link_points_to_an_existing_file_and_heading() -> None:
    problems = []
    for page in MARKDOWN:
        text = FENCE.sub("", page.read_text(encoding="utf-8"))
        for match in LINK.finditer(text):
            target = match.group("target")
            if re.match(r"[a-z]+:", target):  # https:, mailto:
                continue
            path_part, _, anchor = target.partition("#")
            resolved = (page.parent / path_part).resolve() if path_part else page
            where = f"{page.relative_to(ROOT)}: {target}"
            if not resolved.exists():
                problems.append(f"{where}: no such file")
            elif (
                anchor
                and resolved.suffix == ".md"
                and anchor not in {slug(h) for h in headings(resolved)}
            ):
                problems.append(f"{where}: no heading with anchor #{anchor}")
    assert not problems, "broken links:\n" + "\n".join(problems)


def test_the_readme_links_the_guides_of_the_engines_being_added() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for name in GUIDES_LINKED_FROM_README:
        assert f"(docs/guides/{name})" in readme
        assert (ROOT / "docs" / "guides" / name).is_file()


def test_readme_is_under_16000_bytes() -> None:
    size = len((ROOT / "README.md").read_bytes())
    assert size < README_LIMIT, f"README.md is {size} bytes; move details into docs/"


@pytest.mark.parametrize(
    ("results", "index_file", "prefix"),
    [
        ("bench/results", "bench/results/README.md", ""),
        ("testbed/results", "testbed/README.md", "results/"),
    ],
)
def test_every_result_file_is_listed_in_the_results_index(
    results: str, index_file: str, prefix: str
) -> None:
    folder_path = ROOT / results
    index = (ROOT / index_file).read_text(encoding="utf-8")
    listed = set(re.findall(r"`([^`\s]+)`", index))
    missing = []
    for path in sorted(folder_path.rglob("*")):
        if not path.is_file() or path == ROOT / index_file:
            continue
        relative = prefix + path.relative_to(folder_path).as_posix()
        folder = prefix + path.parent.relative_to(folder_path).as_posix() + "/"
        if relative not in listed and folder not in listed:
            missing.append(relative)
    assert not missing, f"{index_file} does not list: " + ", ".join(missing)


# ---------------------------------------------------------------------------------------------
# The code blocks run as written


def blocks(lang: str) -> list[tuple[str, str]]:
    """(where, code) of every distinct ```lang block of the README and the guides."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs" / "guides").glob("*.md"))]
    seen: dict[str, str] = {}
    for page in pages:
        text = page.read_text(encoding="utf-8")
        for match in FENCE.finditer(text):
            if match.group("lang") == lang:
                line = text[: match.start()].count("\n") + 1
                seen.setdefault(match.group("body"), f"{page.relative_to(ROOT)}:{line}")
    return [(where, code) for code, where in seen.items()]


def _marks(code: str) -> list[pytest.MarkDecorator]:
    # a training run of SmolLM2: over 10 s, and up to 7 GiB
    return [pytest.mark.slow, pytest.mark.big_memory] if ".train()" in code else []


PYTHON_BLOCKS = [pytest.param(c, id=w, marks=_marks(c)) for w, c in blocks("python")]
# The README's "Use with TRL" block: its logs are checked, not only its exit status.
README_TRL_EXAMPLE = next(
    c for w, c in blocks("python") if w.startswith("README.md") and "GroupwiseGRPOTrainer(" in c
)


def test_the_readme_and_the_guides_have_python_blocks() -> None:
    assert len(PYTHON_BLOCKS) >= 3


@pytest.mark.parametrize("code", PYTHON_BLOCKS)
def test_python_block_runs_as_written(code: str, data_dir: Path, tmp_path: Path) -> None:
    """In a fresh folder beside ../shared/data, the benchmark data found through GROUPWISE_DATA
    (conftest), the hub offline: exactly the code a reader copies."""
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "data").symlink_to(data_dir)
    work = tmp_path / "work"
    work.mkdir()
    (work / "snippet.py").write_text(code, encoding="utf-8")
    (work / "run.py").write_text(KEEP_THE_LOGS, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "run.py"], cwd=work, capture_output=True, text=True, timeout=1800
    )
    assert done.returncode == 0, (
        f"exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    )
    if code == README_TRL_EXAMPLE:
        _the_method_works(json.loads((work / "log_history.json").read_text()))


# Runs snippet.py as the reader would (as __main__), then keeps a trainer's TRL log history.
KEEP_THE_LOGS = """
import json, runpy
names = runpy.run_path("snippet.py", run_name="__main__")
if "trainer" in names and hasattr(names["trainer"], "state"):
    with open("log_history.json", "w") as file:
        json.dump(names["trainer"].state.log_history, file)
"""


def _the_method_works(logs: list[dict]) -> None:
    """The README's TRL example on the embedded model: every step had a gradient, some step
    had AMIR pairs and lambda was logged, and some all-wrong group had a LENS gradient."""
    steps = [entry for entry in logs if "loss" in entry]
    assert len(steps) == 2, steps
    assert all(entry["grad_norm"] > 0 for entry in steps), steps
    assert any(entry["amir/pairs"] > 0 for entry in steps), steps
    assert all(0.005 <= entry["amir/lambda"] <= 0.05 for entry in steps), steps
    assert any(entry["groups/all_wrong_with_gradient"] > 0 for entry in steps), steps


@pytest.mark.parametrize("config", [pytest.param(c, id=w) for w, c in blocks("yaml")])
def test_yaml_block_loads_as_a_training_config(config: str, tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(config, encoding="utf-8")
    load_run_config(path)  # raises ConfigError naming the key


def groupwise_train_lines() -> list[tuple[str, str]]:
    """(where, line) of each `groupwise train` command written in the README and the guides."""
    found = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            if re.search(r"\bgroupwise train\b", line) and "`groupwise train`" not in line:
                found.append((f"{page.relative_to(ROOT)}:{number}", line.strip()))
    return found


def test_every_documented_train_command_passes_its_config_with_dash_dash_config() -> None:
    """`groupwise train X.yaml` is refused ("unrecognized" or a bad override); the config file
    goes after --config."""
    found = groupwise_train_lines()
    assert len(found) > 5, found
    bare = [(where, line) for where, line in found if re.search(r"train\s+\S+\.ya?ml", line)]
    assert bare == []
