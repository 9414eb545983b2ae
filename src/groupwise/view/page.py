"""The page of `groupwise view`: one self-contained HTML file (docs/guides/view.md).

The page model (groupwise.view.records) goes inside the page as JSON blocks, `<script
type="application/json">`, which the browser does not run: a small block of what the first
screen needs (`gw-meta`: the steps list, or the problems' index) and one block per step's groups
(`gw-step-N`) or per CHUNK problems' samples (`gw-chunk-K`), which the script parses only when
it shows them. The script and style (page.js, page.css, package data) are inlined too: the page
needs no server and no network.
"""

from __future__ import annotations

import html
import json
from importlib import resources
from typing import Any

CHUNK = 50
"""Problems per samples block of an evaluation's page."""


def _asset(name: str) -> str:
    return resources.files("groupwise.view").joinpath(name).read_text(encoding="utf-8")


def _json_block(block_id: str, value: Any) -> str:
    """A JSON block; '<' is escaped (\\u003c) so no text inside can close the script element."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    text = text.replace("<", "\\u003c").replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
    return f'<script type="application/json" id="{block_id}">{text}</script>\n'


def _run_blocks(model: dict[str, Any]) -> list[str]:
    meta = {key: value for key, value in model.items() if key != "groups"}
    meta["group_steps"] = sorted(model["groups"])
    blocks = [_json_block("gw-meta", meta)]
    for step in meta["group_steps"]:
        blocks.append(_json_block(f"gw-step-{step}", model["groups"][step]))
    return blocks


def _chunked(meta: dict[str, Any], samples: list[Any]) -> list[str]:
    blocks = [_json_block("gw-meta", {**meta, "chunk": CHUNK})]
    for start in range(0, len(samples), CHUNK):
        blocks.append(_json_block(f"gw-chunk-{start // CHUNK}", samples[start : start + CHUNK]))
    return blocks


def _summary(problem: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in problem.items() if key != "s"}


def _eval_blocks(model: dict[str, Any]) -> list[str]:
    meta = {key: value for key, value in model.items() if key != "problems"}
    meta["index"] = [_summary(p) for p in model["problems"]]
    return _chunked(meta, [p["s"] for p in model["problems"]])


def _compare_blocks(model: dict[str, Any]) -> list[str]:
    meta = {key: value for key, value in model.items() if key != "pairs"}
    meta["index"] = [[_summary(a), _summary(b)] for a, b in model["pairs"]]
    return _chunked(meta, [[a["s"], b["s"]] for a, b in model["pairs"]])


def render_page(model: dict[str, Any]) -> str:
    """The HTML page of a page model (records.read_run, read_eval or compare)."""
    kind = model["kind"]
    blocks = {"run": _run_blocks, "eval": _eval_blocks, "compare": _compare_blocks}[kind](model)
    names = model.get("names") or [model.get("name", "")]
    title = html.escape(" vs ".join(names) + " · groupwise view")
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{title}</title>\n<style>\n{_asset('page.css')}</style>\n</head>\n"
        f'<body data-kind="{kind}">\n<header><h1>{title}</h1></header>\n<div id="gw-root">'
        "<noscript>This page needs JavaScript (it runs offline, from this file).</noscript>"
        f"</div>\n{''.join(blocks)}<script>\n{_asset('page.js')}</script>\n</body>\n</html>\n"
    )
