// loopwatch report: renders the runs table and the per-run timeline from the JSON
// data blocks of this page. Trace text only ever goes into textContent, never into
// innerHTML, so nothing from a trace is parsed as markup.
(function () {
  "use strict";
  const started = performance.now();
  const byId = (id) => document.getElementById(id);
  const runs = JSON.parse(byId("lw-runs").textContent);
  let detailLines = null; // the per-run detail records, split lazily on first use
  const parsedAt = performance.now();

  const KIND_NAMES = { m: "model", c: "tool_call", r: "tool_result", u: "user", s: "span" };
  const RANK = { ok: 0, warn: 1, stop: 2 };
  const TIMELINE_PAGE = Number(byId("run").dataset.timelinePage) || 10000;
  const FINDINGS_BATCH = 200;
  const numberFormat = new Intl.NumberFormat("en-US", { maximumFractionDigits: 0 });
  const table = {
    verdict: "", detector: "", text: "", size: 50, page: 0, key: "s", dir: 1, view: [],
  };
  const current = {
    index: -1, detail: null, page: 0, band: null, evidence: null, at: null,
    finding: -1, pinned: -1,
  };

  // -- helpers ---------------------------------------------------------------------
  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }
  function fmt(value) {
    return value === null || value === undefined ? "—" : numberFormat.format(value);
  }
  function amount(value) {
    if (value === null || value === undefined) return "—";
    if (value === 0) return "0";
    const digits = Math.abs(value) >= 100 ? 2 : 4;
    return value.toLocaleString("en-US", {
      minimumFractionDigits: digits, maximumFractionDigits: digits,
    });
  }
  function step(value) {
    return value === null || value === undefined ? "—" : String(value);
  }
  function spendText(tokens, cost) {
    const parts = [];
    if (tokens !== undefined && tokens !== null) parts.push(fmt(tokens) + " tok");
    if (cost !== undefined && cost !== null && cost !== 0) parts.push(amount(cost));
    return parts.join(" · ");
  }
  function detail(index) {
    if (detailLines === null) detailLines = byId("lw-details").textContent.split("\n");
    return JSON.parse(detailLines[index]);
  }

  // -- table -----------------------------------------------------------------------
  function matches(run) {
    if (table.verdict === "flagged") {
      if (run.v === "ok") return false;
    } else if (table.verdict && run.v !== table.verdict) {
      return false;
    }
    if (table.detector && run.d.indexOf(table.detector) < 0) return false;
    if (table.text) {
      if (run.q === undefined) run.q = (run.id + "\n" + (run.td || "") + "\n" + (run.tm || "")).toLowerCase();
      if (run.q.indexOf(table.text) < 0) return false;
    }
    return true;
  }

  function sortValue(run, key) {
    if (key === "v") return RANK[run.v];
    const value = run[key];
    return value === undefined ? null : value;
  }

  function compare(a, b) {
    const x = sortValue(a, table.key);
    const y = sortValue(b, table.key);
    if (x === null || y === null) {
      if (x === y) return a.i - b.i;
      return x === null ? 1 : -1; // missing values last, whichever the direction
    }
    if (x < y) return -table.dir;
    if (x > y) return table.dir;
    return a.i - b.i;
  }

  function refreshTable() {
    table.view = runs.filter(matches);
    table.view.sort(compare);
    const pages = Math.max(1, Math.ceil(table.view.length / table.size));
    table.page = Math.min(table.page, pages - 1);
    renderTable();
  }

  function renderTable() {
    const start = table.page * table.size;
    const rows = table.view.slice(start, start + table.size);
    const fragment = document.createDocumentFragment();
    for (const run of rows) {
      const tr = el("tr");
      tr.dataset.i = String(run.i);
      if (run.i === current.index) tr.className = "current";
      tr.appendChild(el("td", "id", run.id));
      const verdict = el("td");
      verdict.appendChild(el("span", "badge " + run.v, run.v));
      tr.appendChild(verdict);
      tr.appendChild(el("td", "num", run.s.toFixed(2)));
      tr.appendChild(el("td", "num", step(run.w)));
      tr.appendChild(el("td", "num", step(run.x)));
      const top = el("td", "top");
      if (run.td) {
        top.appendChild(el("span", "det", run.td));
        top.appendChild(document.createTextNode(run.tm || ""));
        if (run.nf > 1) top.appendChild(el("span", "muted", " (+" + (run.nf - 1) + " more)"));
      }
      tr.appendChild(top);
      tr.appendChild(el("td", "num", fmt(run.n)));
      const spend = el("td", "num", spendText(run.tk, run.c));
      if (run.tka !== undefined || run.ca !== undefined) {
        spend.appendChild(el("br"));
        spend.appendChild(el("span", "muted", "after warn " + spendText(run.tka, run.ca)));
      }
      tr.appendChild(spend);
      fragment.appendChild(tr);
    }
    byId("run-rows").replaceChildren(fragment);
    const total = table.view.length;
    const shown = total ? start + 1 + "–" + (start + rows.length) : "0";
    let status = "showing " + shown + " of " + fmt(total) + " runs";
    if (total !== runs.length) status += " (filtered from " + fmt(runs.length) + ")";
    byId("table-status").textContent = status;
    const pages = Math.max(1, Math.ceil(total / table.size));
    byId("page-info").textContent = "page " + (table.page + 1) + " of " + fmt(pages);
    byId("page-prev").disabled = table.page === 0;
    byId("page-next").disabled = table.page >= pages - 1;
    for (const th of document.querySelectorAll("#run-table th[data-key]")) {
      if (th.dataset.key === table.key) {
        th.setAttribute("aria-sort", table.dir > 0 ? "ascending" : "descending");
      } else {
        th.removeAttribute("aria-sort");
      }
    }
  }

  // -- one run's timeline ------------------------------------------------------------
  function findingRange(finding) {
    let lo = finding[2];
    let hi = finding[2];
    for (const s of finding[3]) {
      if (s < lo) lo = s;
      if (s > hi) hi = s;
    }
    return [lo, hi];
  }

  function openRun(index) {
    const run = runs[index];
    if (!run) return;
    const data = detail(index);
    const n = data.e.length;
    // Per event: which finding spans cover it (a band), whether it is evidence, and
    // which findings cite it. Difference arrays keep this linear in events + steps.
    const warnCover = new Int32Array(n + 1);
    const stopCover = new Int32Array(n + 1);
    const evidence = new Uint8Array(n);
    const at = new Map();
    data.f.forEach((finding, fi) => {
      const range = findingRange(finding);
      const lo = Math.max(0, range[0]);
      const hi = Math.min(n - 1, range[1]);
      const stop = finding[1] === "stop";
      if (lo <= hi) {
        const cover = stop ? stopCover : warnCover;
        cover[lo] += 1;
        cover[hi + 1] -= 1;
      }
      const cited = new Set(finding[3]);
      cited.add(finding[2]);
      for (const s of cited) {
        if (s < 0 || s >= n) continue;
        evidence[s] = Math.max(evidence[s], stop ? 2 : 1);
        if (!at.has(s)) at.set(s, []);
        at.get(s).push(fi);
      }
    });
    const band = new Uint8Array(n);
    let warnRunning = 0;
    let stopRunning = 0;
    for (let i = 0; i < n; i += 1) {
      warnRunning += warnCover[i];
      stopRunning += stopCover[i];
      band[i] = stopRunning > 0 ? 2 : warnRunning > 0 ? 1 : 0;
    }
    Object.assign(current, {
      index: index, detail: data, band: band, evidence: evidence, at: at,
      finding: -1, pinned: -1, page: 0,
    });
    if (run.w !== null && run.w !== undefined) current.page = Math.floor(run.w / TIMELINE_PAGE);

    byId("run-empty").hidden = true;
    byId("run-view").hidden = false;
    byId("run-title").textContent = run.id;
    const facts = [
      ["verdict", run.v], ["score", run.s.toFixed(2)], ["first warn", step(run.w)],
      ["first stop", step(run.x)], ["events", fmt(n)], ["findings", fmt(data.f.length)],
    ];
    if (run.tk !== undefined || run.c !== undefined) facts.push(["spend", spendText(run.tk, run.c)]);
    if (run.tka !== undefined || run.ca !== undefined) {
      facts.push(["after first warn", spendText(run.tka, run.ca)]);
    }
    if (data.src) facts.push(["source", data.src]);
    const dl = byId("run-facts");
    dl.replaceChildren();
    for (const fact of facts) {
      const pair = el("div");
      pair.appendChild(el("dt", "", fact[0]));
      pair.appendChild(el("dd", "", fact[1]));
      dl.appendChild(pair);
    }
    const meta = byId("run-meta");
    meta.hidden = !data.m;
    meta.textContent = data.m ? "meta " + data.m : "";
    byId("findings").replaceChildren();
    renderFindings(0);
    renderTimeline();
    showEvent(run.w !== null && run.w !== undefined ? run.w : -1);
    for (const tr of byId("run-rows").children) {
      tr.classList.toggle("current", Number(tr.dataset.i) === index);
    }
    try {
      history.replaceState(null, "", "#run=" + index);
    } catch (ignored) {
      // some browsers refuse history changes on file:// pages; the view still works
    }
  }

  function markClass(index) {
    const event = current.detail.e[index];
    const run = runs[current.index];
    let name = "mk k-" + (KIND_NAMES[event.k] ? event.k : "x");
    if (event.er) name += " er";
    const band = current.band[index];
    if (band) name += band === 2 ? " sp-s" : " sp-w";
    const evidence = current.evidence[index];
    if (evidence) name += evidence === 2 ? " ev-s" : " ev-w";
    if (index === run.x) name += " pt-s";
    else if (index === run.w) name += " pt-w";
    return name;
  }

  function renderTimeline() {
    const n = current.detail.e.length;
    const pages = Math.max(1, Math.ceil(n / TIMELINE_PAGE));
    current.page = Math.min(Math.max(0, current.page), pages - 1);
    const lo = current.page * TIMELINE_PAGE;
    const hi = Math.min(n, lo + TIMELINE_PAGE);
    const fragment = document.createDocumentFragment();
    for (let i = lo; i < hi; i += 1) {
      const mark = document.createElement("span");
      mark.className = markClass(i);
      mark.dataset.i = String(i);
      fragment.appendChild(mark);
    }
    const timeline = byId("timeline");
    timeline.classList.remove("focus");
    timeline.replaceChildren(fragment);
    timeline.setAttribute("aria-label", "events " + lo + "–" + Math.max(lo, hi - 1) + " of run " + runs[current.index].id);
    byId("timeline-pager").hidden = pages === 1;
    byId("tl-info").textContent = "events " + fmt(lo) + "–" + fmt(Math.max(lo, hi - 1)) + " of " + fmt(n);
    byId("tl-prev").disabled = current.page === 0;
    byId("tl-next").disabled = current.page >= pages - 1;
    if (current.finding >= 0) highlight(current.finding, false);
  }

  function findingItem(finding, fi) {
    const li = el("li", finding[1] === "stop" ? "stop" : "warn");
    li.dataset.f = String(fi);
    const button = el("button");
    button.type = "button";
    button.appendChild(el("span", "det", finding[0]));
    button.appendChild(el("span", "badge " + finding[1], finding[1]));
    const range = findingRange(finding);
    const cited = new Set(finding[3]).size;
    button.appendChild(el("span", "where",
      " at step " + finding[2] + " · evidence " + range[0] + "–" + range[1] +
      " (" + cited + " event" + (cited === 1 ? "" : "s") + ")"));
    button.appendChild(el("span", "msg", finding[4]));
    li.appendChild(button);
    if (fi === current.finding) li.classList.add("active");
    return li;
  }

  // Findings are listed FINDINGS_BATCH at a time: a long loop can have thousands.
  function renderFindings(upTo) {
    const list = byId("findings");
    const findings = current.detail.f;
    const shown = list.querySelectorAll("li[data-f]").length;
    const more = list.querySelector("li.more");
    if (more) more.remove();
    const fragment = document.createDocumentFragment();
    const limit = Math.min(findings.length, Math.max(upTo, shown + FINDINGS_BATCH));
    for (let fi = shown; fi < limit; fi += 1) fragment.appendChild(findingItem(findings[fi], fi));
    if (findings.length > limit) {
      const li = el("li", "more");
      const button = el("button", "", "show " + fmt(Math.min(FINDINGS_BATCH, findings.length - limit)) +
        " more of " + fmt(findings.length - limit) + " findings not listed yet");
      button.type = "button";
      button.id = "findings-more";
      li.appendChild(button);
      fragment.appendChild(li);
    }
    list.appendChild(fragment);
    byId("findings-empty").hidden = findings.length > 0;
  }

  function clearHighlight() {
    const timeline = byId("timeline");
    for (const mark of timeline.querySelectorAll(".mk.sel")) mark.classList.remove("sel");
    timeline.classList.remove("focus");
    for (const li of byId("findings").querySelectorAll("li.active")) li.classList.remove("active");
  }

  function highlight(fi, scroll) {
    const finding = current.detail.f[fi];
    const timeline = byId("timeline");
    const lo = current.page * TIMELINE_PAGE;
    const marks = timeline.children;
    for (const s of finding[3]) {
      const mark = marks[s - lo];
      if (mark) mark.classList.add("sel");
    }
    timeline.classList.add("focus");
    const li = byId("findings").querySelector('li[data-f="' + fi + '"]');
    if (li) li.classList.add("active");
    const first = timeline.querySelector(".mk.sel"); // document order: the earliest step
    if (scroll && first) first.scrollIntoView({ block: "nearest", inline: "nearest" });
  }

  function selectFinding(fi) {
    clearHighlight();
    if (current.finding === fi) {
      current.finding = -1;
      return;
    }
    current.finding = fi;
    const finding = current.detail.f[fi];
    const page = Math.floor(findingRange(finding)[0] / TIMELINE_PAGE);
    if (page !== current.page) {
      current.page = page;
      renderTimeline(); // re-applies the highlight
    }
    highlight(fi, true);
    showEvent(finding[2]);
  }

  function showEvent(index) {
    const box = byId("event-detail");
    for (const li of byId("findings").querySelectorAll("li.hit")) li.classList.remove("hit");
    const event = index >= 0 ? current.detail.e[index] : undefined;
    if (!event) {
      box.replaceChildren(el("p", "muted", "Hover over or click a mark."));
      return;
    }
    const dl = el("dl");
    const add = (term, value, pre) => {
      if (value === undefined || value === null || value === "") return;
      dl.appendChild(el("dt", "", term));
      const dd = el("dd");
      dd.appendChild(pre ? el("pre", "", value) : document.createTextNode(String(value)));
      dl.appendChild(dd);
    };
    const run = runs[current.index];
    let where = "step " + index;
    if (index === run.x) where += " · first stop";
    else if (index === run.w) where += " · first warn";
    add("event", where);
    add("kind", KIND_NAMES[event.k] || event.ko || "(none)");
    add("name", event.n);
    add("agent", event.ag);
    add("type", event.ty);
    add("arguments", event.a, true);
    if (event.t !== undefined) {
      add(event.tl ? "text (first " + fmt(event.t.length) + " of " + fmt(event.tl) + " characters)" : "text", event.t, true);
    }
    if (event.er) add("error", "the tool call failed");
    add("tokens", event.tk === undefined ? undefined : fmt(event.tk));
    add("cost", event.c === undefined ? undefined : amount(event.c));
    const cited = current.at.get(index) || [];
    if (cited.length) {
      dl.appendChild(el("dt", "", "findings citing this event"));
      const dd = el("dd");
      const ul = el("ul", "ev-findings");
      for (const fi of cited.slice(0, 20)) {
        const finding = current.detail.f[fi];
        const fired = finding[2] === index ? " (fired here)" : "";
        ul.appendChild(el("li", "", finding[0] + " · " + finding[1] + fired + ": " + finding[4]));
        const li = byId("findings").querySelector('li[data-f="' + fi + '"]');
        if (li) li.classList.add("hit");
      }
      if (cited.length > 20) ul.appendChild(el("li", "muted", "… " + (cited.length - 20) + " more"));
      dd.appendChild(ul);
      dl.appendChild(dd);
    }
    box.replaceChildren(dl);
  }

  // -- wiring ----------------------------------------------------------------------
  function markIndex(target) {
    if (!(target instanceof Element) || !target.classList.contains("mk")) return -1;
    return Number(target.dataset.i);
  }

  function bind() {
    byId("filters").addEventListener("submit", (event) => event.preventDefault());
    byId("f-verdict").addEventListener("change", (event) => {
      table.verdict = event.target.value;
      table.page = 0;
      refreshTable();
    });
    byId("f-detector").addEventListener("change", (event) => {
      table.detector = event.target.value;
      table.page = 0;
      refreshTable();
    });
    let typing = 0;
    byId("f-text").addEventListener("input", (event) => {
      clearTimeout(typing);
      const value = event.target.value.trim().toLowerCase();
      typing = setTimeout(() => {
        table.text = value;
        table.page = 0;
        refreshTable();
      }, 120);
    });
    byId("f-size").addEventListener("change", (event) => {
      table.size = Number(event.target.value) || 50;
      table.page = 0;
      renderTable();
    });
    byId("page-prev").addEventListener("click", () => {
      table.page = Math.max(0, table.page - 1);
      renderTable();
    });
    byId("page-next").addEventListener("click", () => {
      table.page += 1;
      renderTable();
    });
    for (const th of document.querySelectorAll("#run-table th[data-key]")) {
      th.querySelector("button").addEventListener("click", () => {
        const key = th.dataset.key;
        if (table.key === key) {
          table.dir = -table.dir;
        } else {
          table.key = key;
          table.dir = key === "v" || key === "n" || key === "tk" ? -1 : 1;
        }
        refreshTable();
      });
    }
    byId("run-rows").addEventListener("click", (event) => {
      const tr = event.target.closest("tr");
      if (tr) openRun(Number(tr.dataset.i));
    });
    const timeline = byId("timeline");
    timeline.addEventListener("mouseover", (event) => {
      const index = markIndex(event.target);
      if (index >= 0 && current.pinned < 0) showEvent(index);
    });
    timeline.addEventListener("click", (event) => {
      const index = markIndex(event.target);
      if (index < 0) return;
      const old = timeline.querySelector(".mk.pin");
      if (old) old.classList.remove("pin");
      if (current.pinned === index) {
        current.pinned = -1;
      } else {
        current.pinned = index;
        event.target.classList.add("pin");
      }
      showEvent(index);
    });
    byId("findings").addEventListener("click", (event) => {
      if (event.target.closest("li.more")) {
        renderFindings(0);
        return;
      }
      const li = event.target.closest("li[data-f]");
      if (li) selectFinding(Number(li.dataset.f));
    });
    byId("tl-prev").addEventListener("click", () => {
      current.page -= 1;
      renderTimeline();
    });
    byId("tl-next").addEventListener("click", () => {
      current.page += 1;
      renderTimeline();
    });
    window.addEventListener("hashchange", openFromHash);
  }

  function openFromHash() {
    const match = /^#run=(\d+)$/.exec(location.hash);
    if (match && runs[Number(match[1])]) {
      if (Number(match[1]) !== current.index) openRun(Number(match[1]));
      return true;
    }
    return false;
  }

  bind();
  refreshTable();
  const tableAt = performance.now();
  if (!openFromHash() && table.view.length) openRun(table.view[0].i);
  const readyAt = performance.now();
  window.loopwatchReport = {
    runs: runs.length,
    timings: {
      parse: parsedAt - started, table: tableAt - parsedAt, run: readyAt - tableAt,
      ready: readyAt,
    },
    openRun: openRun,
  };
  document.documentElement.dataset.ready = "1";
})();
