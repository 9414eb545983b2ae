// groupwise view: the page's script (docs/guides/view.md). No network, no library: it reads
// the JSON blocks inside the page (script elements of type application/json), parsing a step's groups
// (or a chunk of problems) only when they are shown, and renders one step, or one page of
// problems, at a time. The URL hash holds the state (#step=2&only=pairs&q=text), so a link or
// a test can open the page on a step and filter.
"use strict";
(function () {
  const errors = [];
  function fail(message) {
    errors.push(message);
    let box = document.getElementById("gw-errors");
    if (!box) {
      box = document.createElement("div");
      box.id = "gw-errors";
      document.body.appendChild(box);
    }
    box.textContent = "script error: " + errors.join("\n");
  }
  window.addEventListener("error", (e) => fail(e.message + " (" + e.lineno + ")"));
  window.addEventListener("unhandledrejection", (e) => fail(String(e.reason)));

  const blocks = {};
  function block(id) {
    if (!(id in blocks)) {
      const node = document.getElementById(id);
      blocks[id] = node ? JSON.parse(node.textContent) : null;
    }
    return blocks[id];
  }
  const META = block("gw-meta");
  const PER_PAGE = META.kind === "run" ? 8 : 12;

  // ---- small helpers ----------------------------------------------------------------------
  function h(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "class") node.className = v;
      else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
      else node.setAttribute(k, v === true ? "" : v);
    }
    for (const child of children.flat(Infinity)) {
      if (child === null || child === undefined || child === false) continue;
      node.appendChild(typeof child === "object" ? child : document.createTextNode(String(child)));
    }
    return node;
  }
  function num(v, digits) {
    if (v === null || v === undefined) return "–";
    if (typeof v !== "number") return String(v);
    const d = digits === undefined ? 3 : digits;
    return Math.abs(v) >= 1000 ? v.toFixed(0) : Number(v.toFixed(d)).toString();
  }
  function pct(v) { return v === null || v === undefined ? "–" : Math.round(v * 100) + "%"; }
  function signed(v) {
    return h("span", { class: v > 0 ? "pos" : v < 0 ? "neg" : "" }, (v > 0 ? "+" : "") + num(v));
  }
  function readHash() {
    const out = {};
    for (const part of location.hash.replace(/^#/, "").split("&")) {
      if (!part) continue;
      const [k, v] = part.split("=");
      out[decodeURIComponent(k)] = decodeURIComponent(v || "");
    }
    return out;
  }
  let state = readHash();
  function setState(changes) {
    state = Object.assign({}, state, changes);
    for (const k of Object.keys(state)) if (state[k] === "" || state[k] === null) delete state[k];
    const hash = Object.entries(state).map(([k, v]) => k + "=" + encodeURIComponent(v)).join("&");
    history.replaceState(null, "", hash ? "#" + hash : location.pathname);
    render();
  }
  window.addEventListener("hashchange", () => { state = readHash(); render(); });
  function textHit(needle, ...texts) {
    if (!needle) return true;
    const n = needle.toLowerCase();
    return texts.some((t) => t !== null && t !== undefined && String(t).toLowerCase().includes(n));
  }
  function completionText(raw) {
    const text = raw.replace(/^\s*\n/, "");
    const pre = h("pre", { class: text.split("\n").length > 7 || text.length > 700 ? "long" : "" },
      text);
    pre.addEventListener("click", () => pre.classList.toggle("open"));
    return pre;
  }
  function pager(total, page, onPage) {
    const pages = Math.max(1, Math.ceil(total / PER_PAGE));
    return h("div", { class: "pager" },
      h("button", { disabled: page <= 0, onclick: () => onPage(page - 1) }, "‹ previous"),
      h("span", {}, "page " + (page + 1) + " of " + pages),
      h("button", { disabled: page >= pages - 1, onclick: () => onPage(page + 1) }, "next ›"));
  }

  // ---- a virtual list: only the rows in view are in the page ------------------------------
  function virtualList(container, count, rowHeight, drawRow, scrollTo) {
    const inner = h("div", { style: "height:" + count * rowHeight + "px;position:relative" });
    container.replaceChildren(inner);
    function paint() {
      const top = container.scrollTop;
      const first = Math.max(0, Math.floor(top / rowHeight) - 5);
      const last = Math.min(count, Math.ceil((top + container.clientHeight) / rowHeight) + 5);
      const rows = [];
      for (let i = first; i < last; i++) {
        const row = drawRow(i);
        row.style.top = i * rowHeight + "px";
        rows.push(row);
      }
      inner.replaceChildren(...rows);
    }
    container.onscroll = paint;
    if (scrollTo !== undefined && scrollTo >= 0) {
      const want = scrollTo * rowHeight;
      if (want < container.scrollTop || want > container.scrollTop + container.clientHeight - rowHeight)
        container.scrollTop = Math.max(0, want - container.clientHeight / 3);
    }
    paint();
  }

  // ---- a training run --------------------------------------------------------------------
  const groupSteps = META.kind === "run" ? META.group_steps : [];
  const stepRow = {};
  if (META.kind === "run") META.steps.forEach((s) => { stepRow[s.step] = s; });
  function groupsOf(step) { return block("gw-step-" + step) || []; }
  function groupKind(g) {
    const right = g.ok.reduce((a, b) => a + b, 0);
    return right === 0 ? "wrong" : right === g.ok.length ? "right" : "mixed";
  }
  function groupShown(g, only, query) {
    if (only === "wrong" && groupKind(g) !== "wrong") return false;
    if (only === "pairs" && !g.pairs.length) return false;
    if (only === "cut" && !(g.cut || []).some((c) => c)) return false;
    if (only === "dropped" && groupKind(g) === "mixed") return false;
    return textHit(query, g.q, g.gold, g.id, ...g.t);
  }
  function stepSummary(step) {
    const s = stepRow[step] || {};
    const parts = [h("b", {}, "step " + step), " · accuracy " + pct(s.acc),
      " · groups mixed / all-correct / all-wrong " + pct(s.mixed) + " / " + pct(s.right) + " / " +
      pct(s.wrong), s.pairs !== undefined ? " · pairs " + num(s.pairs, 0) : "",
      s.cut !== undefined ? " · cut " + pct(s.cut) : ""];
    if (s.kept !== undefined) {
      parts.push(" · dynamic sampling: kept " + s.kept + ", dropped all-correct " + s.drop_right +
        " / all-wrong " + s.drop_wrong + " / mixed " + s.drop_mixed + ", filled " + s.filled);
    }
    return h("p", { class: "stepinfo", id: "stepinfo" }, parts);
  }
  function sharesBar(s) {
    return h("span", { class: "shares", title: "mixed / all-correct / all-wrong groups" },
      h("i", { class: "s-right", style: "width:" + pct(s.right || 0) }),
      h("i", { class: "s-mixed", style: "width:" + pct(s.mixed || 0) }),
      h("i", { class: "s-wrong", style: "width:" + pct(s.wrong || 0) }));
  }
  function stepHits(query, only) {
    const hits = new Set();
    if (!query && !only) return hits;
    for (const step of groupSteps) {
      if (groupsOf(step).some((g) => groupShown(g, only, query))) hits.add(step);
    }
    return hits;
  }
  function renderSteps(side, current) {
    const rows = META.steps.length ? META.steps : groupSteps.map((step) => ({ step }));
    const has = new Set(groupSteps);
    const hits = stepHits(state.q, state.only);
    const slider = h("input", { type: "range", min: 0, max: Math.max(0, groupSteps.length - 1),
      value: Math.max(0, groupSteps.indexOf(current)), id: "step-slider",
      oninput: (e) => setState({ step: groupSteps[Number(e.target.value)], page: "" }) });
    const list = h("div", { class: "vlist", id: "steps" });
    side.replaceChildren(
      h("div", { class: "head" }, rows.length + " steps; " + groupSteps.length +
        " with their groups in this page (bold). Step " + current + ":", slider),
      list);
    virtualList(list, rows.length, 30, (i) => {
      const s = rows[i];
      const cls = ["vrow", has.has(s.step) ? "has" : "", s.step === current ? "sel" : "",
        hits.has(s.step) ? "hit" : ""].join(" ");
      return h("div", { class: cls, "data-step": s.step,
        title: has.has(s.step) ? null : "its groups are not in this page: groupwise view --steps " + s.step,
        onclick: has.has(s.step) ? () => setState({ step: s.step, page: "" }) : null },
        h("span", { class: "n" }, s.step), h("span", {}, "acc " + pct(s.acc)), sharesBar(s),
        h("span", {}, s.pairs !== undefined ? num(s.pairs, 0) + " pairs" : ""));
    }, rows.findIndex((s) => s.step === current));
  }
  function filterBar(count, total, options) {
    const only = h("select", { id: "only", onchange: (e) => setState({ only: e.target.value, page: "" }) },
      options.map(([value, label]) => h("option", { value, selected: (state.only || "") === value }, label)));
    const search = h("input", { type: "search", id: "search", placeholder: "search questions and completions",
      value: state.q || "", onchange: (e) => setState({ q: e.target.value, page: "" }) });
    return h("div", { class: "bar" }, h("label", {}, "show ", only), search,
      h("span", { class: "count", id: "count" }, count + " of " + total + " shown"));
  }
  const RUN_FILTERS = [["", "all groups"], ["wrong", "all-wrong groups"], ["pairs", "groups with pairs"],
    ["cut", "groups with cut completions"], ["dropped", "dropped-type groups (no mixed answers)"]];

  function runColumns(g, settings) {
    const lens = settings.advantage === "lens";
    const cols = [["reward", (i) => num(g.rw[i]), lens ? "the reward the estimator used (LENS: calibrated)" : "the reward total"]];
    if (g.un && g.un.some((v, i) => v !== g.rw[i]))
      cols.push([lens ? "before LENS" : "unshaped", (i) => num(g.un[i]), "the weighted reward total before shaping"]);
    for (const key of Object.keys(g)) {
      if (key.startsWith("col:")) cols.push([key.slice(4), (i) => num(g[key][i]), "reward column " + key.slice(4)]);
    }
    if (g.adv) cols.push(["advantage", (i) => signed(g.adv[i]), "the completion's advantage"]);
    if (g.rt) cols.push(["LENS rt", (i) => (g.rt[i] === null ? "" : num(g.rt[i], 4)), "LENS's calibrated correctness of a wrong answer"]);
    if (g.pd) cols.push(["p / D(q)", (i) => (g.pd[i] === null ? "" : num(g.pd[i])), "the confidence p̄ of a wrong answer relative to the group's D(q) (at most 1/2)"]);
    if (g.conf) cols.push(["sampler p̄", (i) => num(g.conf[i]), "exp of the sampler's mean token log-prob"]);
    cols.push(["chars", (i) => g.t[i].length, "completion length in characters"]);
    return cols;
  }
  function headRow(cols, label) {
    return h("div", { class: "c head" }, h("div", { class: "i" }, "#"),
      h("div", { class: "cells" }, cols.map(([name, , title]) => h("span", { title }, name))),
      h("div", { class: "label" }, label));
  }
  function cellsOf(cols, i) {
    return h("div", { class: "cells" }, cols.map(([, value]) => h("span", {}, value(i))));
  }
  function pairLinks(g, i, anchor) {
    const over = g.pairs.filter((p) => p[0] === i).map((p) => p[1]);
    const under = g.pairs.filter((p) => p[1] === i).map((p) => p[0]);
    if (!over.length && !under.length) return null;
    const link = (j) => h("a", { class: "pair-link", href: "#" + anchor + "-" + j,
      onclick: (e) => { e.preventDefault(); highlight(anchor, i, j); } }, "#" + j);
    return h("div", { class: "links" },
      over.length ? ["chosen over ", over.map(link), " "] : null,
      under.length ? ["rejected under ", under.map(link)] : null);
  }
  function highlight(anchor, i, j) {
    document.querySelectorAll(".hot").forEach((n) => n.classList.remove("hot"));
    for (const k of [i, j]) {
      const row = document.getElementById(anchor + "-" + k);
      if (row) row.classList.add("hot");
    }
    const arc = document.getElementById(anchor + "-arc-" + Math.min(i, j) + "-" + Math.max(i, j));
    if (arc) arc.classList.add("hot");
    document.getElementById(anchor + "-" + j).scrollIntoView({ block: "nearest" });
  }
  function drawArcs(rows, g, anchor) {
    if (!g.pairs.length) return;
    const centre = (k) => {
      const row = document.getElementById(anchor + "-" + k);
      return row.offsetTop + Math.min(row.offsetHeight / 2, 14);
    };
    const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
    svg.setAttribute("class", "arcs");
    svg.setAttribute("height", rows.offsetHeight);
    const span = Math.max(...g.pairs.map((p) => Math.abs(p[0] - p[1])), 1);
    for (const [c, r] of g.pairs) {
      const y1 = centre(c), y2 = centre(r);
      const x = 42 - 36 * Math.abs(c - r) / span;
      const path = document.createElementNS(svg.namespaceURI, "path");
      path.setAttribute("d", "M42," + y1 + " C" + x + "," + y1 + " " + x + "," + y2 + " 42," + y2);
      path.setAttribute("id", anchor + "-arc-" + Math.min(c, r) + "-" + Math.max(c, r));
      path.setAttribute("class", "arc");
      const title = document.createElementNS(svg.namespaceURI, "title");
      title.textContent = "#" + c + " chosen over #" + r;
      path.appendChild(title);
      svg.appendChild(path);
      const dot = document.createElementNS(svg.namespaceURI, "circle");
      dot.setAttribute("cx", 42); dot.setAttribute("cy", y1); dot.setAttribute("r", 3);
      svg.appendChild(dot);
    }
    rows.prepend(svg);
  }
  function groupCard(g, step, index, settings) {
    const anchor = "s" + step + "-g" + index;
    const right = g.ok.reduce((a, b) => a + b, 0);
    const cut = (g.cut || []).reduce((a, b) => a + b, 0);
    const kind = groupKind(g);
    const cols = runColumns(g, settings);
    const rows = h("div", { class: "rows" + (g.pairs.length ? " paired" : "") },
      headRow(cols, "completion" + (g.pairs.length ? " (arcs: AMIR pairs, dot at the chosen one)" : "")),
      g.t.map((text, i) => h("div", { class: "c " + (g.ok[i] ? "ok" : "bad"), id: anchor + "-" + i,
        "data-correct": g.ok[i] },
        h("div", { class: "i" }, "#" + i, " ", g.ok[i] ? "✓" : "✗",
          g.cut && g.cut[i] ? h("span", { class: "tag cut", title: "cut at max_new_tokens" }, "cut") : null),
        cellsOf(cols, i),
        h("div", { class: "text" }, completionText(text), pairLinks(g, i, anchor)))));
    const card = h("section", { class: "card group", id: anchor, "data-kind": kind },
      h("div", { class: "top" },
        h("div", { class: "sub" }, h("span", {}, g.id),
          h("span", { class: "tag " + (kind === "wrong" ? "bad" : kind === "right" ? "ok" : "") },
            kind === "wrong" ? "all wrong" : kind === "right" ? "all correct" : "mixed"),
          h("span", {}, right + " / " + g.t.length + " correct"),
          g.pairs.length ? h("span", { class: "tag pair" }, g.pairs.length + " AMIR pairs") : null,
          cut ? h("span", { class: "tag cut" }, cut + " cut") : null),
        h("div", { class: "q" }, g.q === null ? "(question not logged by this run)" : g.q),
        h("div", { class: "sub" }, "gold: ", g.gold === null || g.gold === undefined ?
          "(not logged by this run)" : h("b", {}, g.gold))),
      rows);
    return [card, () => drawArcs(rows, g, anchor)];
  }
  function renderRun(root) {
    const s = META.settings || {};
    const method = s.advantage ? (s.amir ? "AMIR-GRPO + " : "") + s.advantage.toUpperCase() +
      (s.source ? " · " + s.source : "") : s.source || "run";
    document.querySelector("header").replaceChildren(h("h1", { title: META.path }, META.name),
      h("span", { class: "meta" }, method + (s.model ? " · " + s.model : "") +
        (s.group_size ? " · G = " + s.group_size : "")));
    let step = Number(state.step);
    if (!groupSteps.includes(step)) step = groupSteps[0];
    const side = h("nav", { class: "side" });
    const main = h("main", { class: "main" });
    root.replaceChildren(h("div", { class: "layout" }, side, main));
    renderSteps(side, step);
    if (step === undefined) {
      main.append(h("div", { class: "empty" }, "This run logged no rollouts (train.log_rollouts=true logs them)."));
      return;
    }
    const groups = groupsOf(step);
    const shown = groups.map((g, i) => [g, i]).filter(([g]) => groupShown(g, state.only, state.q));
    const page = Math.min(Number(state.page || 0), Math.max(0, Math.ceil(shown.length / PER_PAGE) - 1));
    main.append(stepSummary(step), filterBar(shown.length, groups.length, RUN_FILTERS));
    if (!shown.length) main.append(h("div", { class: "empty" }, "No group of step " + step + " matches."));
    const later = [];
    for (const [g, i] of shown.slice(page * PER_PAGE, (page + 1) * PER_PAGE)) {
      const [card, draw] = groupCard(g, step, i, s);
      main.append(card);
      later.push(draw);
    }
    if (shown.length > PER_PAGE) main.append(pager(shown.length, page, (p) => setState({ page: p })));
    later.forEach((draw) => draw());
  }

  // ---- an evaluation folder, and two side by side -----------------------------------------
  function samplesOf(index) {
    const chunk = Math.floor(index / META.chunk);
    return block("gw-chunk-" + chunk)[index - chunk * META.chunk];
  }
  function sampleColumns(s, compact) {
    const cols = [["verdict", (i) => (s.v ? s.v[i] : s.ok[i] ? "correct" : "wrong"), "the answer check's verdict"]];
    if (s.e) cols.push(["answer", (i) => (s.e[i] === null ? "–" : s.e[i]), "the extracted answer"]);
    if (s.lp && s.lp.some((v) => v !== null) && !compact)
      cols.push(["p̄", (i) => (s.lp[i] === null ? "–" : num(Math.exp(s.lp[i]))), "exp of the mean token log-prob"]);
    if (s.conf && s.conf.some((v) => v !== null)) cols.push(["confidence", (i) => num(s.conf[i]), "the stated confidence"]);
    if (s.tok) cols.push(["tokens", (i) => s.tok[i], "completion tokens"]);
    return cols;
  }
  function sampleRows(s, anchor, compact) {
    const cols = sampleColumns(s, compact);
    return [headRow(cols, "completion")].concat(s.t.map((text, i) =>
      h("div", { class: "c " + (s.ok[i] ? "ok" : "bad"), id: anchor + "-" + i },
        h("div", { class: "i" }, "#" + i, " ", s.ok[i] ? "✓" : "✗",
          s.cut && s.cut[i] ? h("span", { class: "tag cut" }, "cut") : null),
        cellsOf(cols, i),
        h("div", { class: "text" }, completionText(text)))));
  }
  function passk(p) {
    return Object.entries(p.pk).map(([k, v]) => "pass@" + k + " " + num(v)).join(" · ");
  }
  function problemTop(p, extra) {
    return h("div", { class: "top" },
      h("div", { class: "sub" }, h("span", {}, p.b), h("span", {}, p.id),
        extra === undefined ? h("span", { class: "tag " + (p.c ? "ok" : "bad") }, p.c ? "solved" : "unsolved") : extra),
      h("div", { class: "q" }, p.q === null ? "(question not saved)" : p.q),
      h("div", { class: "sub" }, "gold: ", h("b", {}, p.gold)));
  }
  function evalFilters(total, shown) {
    const bench = h("select", { id: "bench", onchange: (e) => setState({ bench: e.target.value, page: "" }) },
      h("option", { value: "" }, "every benchmark"),
      META.benchmarks.map((b) => h("option", { value: b, selected: state.bench === b }, b)));
    const bar = filterBar(shown, total, META.kind === "compare"
      ? [["", "all problems"], ["differ", "one solves, the other not"], ["first", META.names[0] + " only solves"],
        ["second", META.names[1] + " only solves"], ["solved", "both solve"], ["unsolved", "neither solves"]]
      : [["", "all problems"], ["solved", "solved"], ["unsolved", "unsolved"]]);
    if (META.benchmarks.length > 1) bar.prepend(h("label", {}, "benchmark ", bench));
    return bar;
  }
  function evalShown(entry, index) {
    const [a, b] = META.kind === "compare" ? entry : [entry, null];
    if (state.bench && a.b !== state.bench) return false;
    const only = state.only || "";
    if (b === null) {
      if (only === "solved" && !a.c) return false;
      if (only === "unsolved" && a.c) return false;
    } else {
      const flip = (a.c > 0) !== (b.c > 0);
      if (only === "differ" && !flip) return false;
      if (only === "first" && !(a.c && !b.c)) return false;
      if (only === "second" && !(b.c && !a.c)) return false;
      if (only === "solved" && !(a.c && b.c)) return false;
      if (only === "unsolved" && (a.c || b.c)) return false;
    }
    if (!state.q) return true;
    const s = samplesOf(index);
    const texts = b === null ? s.t : s[0].t.concat(s[1].t);
    return textHit(state.q, a.q, a.gold, a.id, ...texts);
  }
  function renderEval(root) {
    const compare = META.kind === "compare";
    const title = compare ? META.names[0] + " vs " + META.names[1] : META.name;
    const solved = META.index.filter((e) => (compare ? e[0].c : e.c) > 0).length;
    const meta = compare
      ? META.index.filter((e) => e[0].c > 0 && !e[1].c).length + " problems only " + META.names[0] +
        " solves, " + META.index.filter((e) => e[1].c > 0 && !e[0].c).length + " only " + META.names[1] +
        " solves (listed first), of " + META.index.length
      : solved + " of " + META.index.length + " problems solved · " + META.benchmarks.join(", ");
    document.querySelector("header").replaceChildren(h("h1", {}, title), h("span", { class: "meta" }, meta));
    const main = h("main", { class: "main" });
    root.replaceChildren(main);
    const shown = META.index.map((e, i) => [e, i]).filter(([e, i]) => evalShown(e, i));
    const page = Math.min(Number(state.page || 0), Math.max(0, Math.ceil(shown.length / PER_PAGE) - 1));
    main.append(evalFilters(META.index.length, shown.length));
    if (!shown.length) main.append(h("div", { class: "empty" }, "No problem matches."));
    for (const [entry, i] of shown.slice(page * PER_PAGE, (page + 1) * PER_PAGE)) {
      main.append(compare ? pairCard(entry, i) : problemCard(entry, i));
    }
    if (shown.length > PER_PAGE) main.append(pager(shown.length, page, (p) => setState({ page: p })));
  }
  function problemCard(p, i) {
    const anchor = "p" + i;
    return h("section", { class: "card problem", id: anchor, "data-solved": p.c > 0 ? 1 : 0 },
      problemTop(p),
      h("h3", { class: "passk" }, p.c + " / " + p.n + " correct · " + passk(p)),
      h("div", { class: "rows" }, sampleRows(samplesOf(i), anchor)));
  }
  function pairCard(entry, i) {
    const [a, b] = entry;
    const [sa, sb] = samplesOf(i);
    const side = (p, s, name, k) => h("div", {},
      h("h3", {}, name + ": " + p.c + " / " + p.n + " correct · " + passk(p)),
      h("div", { class: "rows" }, sampleRows(s, "p" + i + "-" + k, true)));
    const flip = (a.c > 0) !== (b.c > 0);
    return h("section", { class: "card problem", id: "p" + i, "data-flip": flip ? 1 : 0 },
      problemTop(a, flip ? h("span", { class: "tag pair" }, "solved by " + (a.c ? META.names[0] : META.names[1]) + " only")
        : h("span", { class: "tag" }, a.c ? "solved by both" : "solved by neither")),
      h("div", { class: "side-by-side" }, side(a, sa, META.names[0], "a"), side(b, sb, META.names[1], "b")));
  }

  // ---- start ------------------------------------------------------------------------------
  function render() {
    const root = document.getElementById("gw-root");
    try {
      if (META.kind === "run") renderRun(root);
      else renderEval(root);
    } catch (err) {
      fail(err && err.stack ? err.stack : String(err));
    }
    document.body.dataset.ready = "1";
    document.body.dataset.renderMs = Math.round(performance.now());
  }
  render();
})();
