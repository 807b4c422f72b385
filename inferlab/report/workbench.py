"""The offline sampling workbench: one HTML page, logits embedded, recomputed in the browser.

The JavaScript below mirrors `inferlab.core.sampler.truncated_distribution` / `distribution_stats`
operation by operation in IEEE doubles (JS numbers are float64): division by T, max, exp,
left-to-right sum in token-id order, a stable descending sort, the top-p walk, the min-p
threshold, renormalisation and the entropy loop. On load the page recomputes every cell of the
distribution table it was given and shows whether each one matches (kept exactly, entropy to
1e-9), so a reader can see the agreement without running Python.
"""

from __future__ import annotations

import html
import json
from collections.abc import Sequence

import pandas as pd

from inferlab.sampling.spec import GRID_COLUMNS


def _json_for_script(obj) -> str:
    """JSON safe inside <script>: no '</' can end the element early."""
    return json.dumps(obj, ensure_ascii=False).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def grid_records(distribution: pd.DataFrame | None) -> list[dict]:
    if distribution is None:
        return []
    cols = [c for c in GRID_COLUMNS if c in distribution.columns]
    records = distribution[cols].to_dict(orient="records")
    return [{k: (v.item() if hasattr(v, "item") else v) for k, v in r.items()} for r in records]


def workbench_html(
    prompt: str,
    vocab: Sequence[str],
    logits: Sequence[float],
    grid: list[dict],
    stamp_lines: Sequence[str] = (),
) -> str:
    """The page. `grid` are rows of results/sampling/distribution.parquet (or a test's own table)."""
    if len(vocab) != len(logits):
        raise ValueError(f"{len(logits)} logits for a vocabulary of {len(vocab)}")
    data = {"prompt": prompt, "vocab": list(vocab), "logits": [float(v) for v in logits], "grid": grid}
    first = grid[0] if grid else {"temperature": 1.0, "top_p": 0.9, "min_p": 0.0}
    stamps = "".join(f"<li>{html.escape(line)}</li>" for line in stamp_lines)
    return (
        _TEMPLATE.replace("%PROMPT%", html.escape(prompt))
        .replace("%STAMPS%", stamps)
        .replace("%T0%", repr(float(first["temperature"])))
        .replace("%P0%", repr(float(first["top_p"])))
        .replace("%M0%", repr(float(first["min_p"])))
        .replace("%DATA%", _json_for_script(data))
    )


_TEMPLATE = r"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Sampling workbench</title>
<style>
body{font-family:system-ui,"Noto Sans CJK SC","Source Han Sans SC","PingFang SC","Microsoft YaHei",sans-serif;
margin:1.5em auto;max-width:60em;padding:0 1em;color:#222}
h1{font-size:1.4em}
.controls{display:grid;grid-template-columns:7em 1fr 7em;gap:.4em 1em;align-items:center;max-width:40em}
.stats{display:flex;gap:2em;margin:1em 0;font-size:1.1em} .stats b{font-variant-numeric:tabular-nums}
table{border-collapse:collapse;font-size:.9em} td,th{border:1px solid #ccc;padding:.2em .5em;text-align:right}
tr.ok td.m{color:#17692d} tr.bad td.m{color:#b00020;font-weight:bold} tr{cursor:pointer}
.note{color:#555;font-size:.9em} svg text{font-size:11px}
</style></head><body>
<h1>Sampling workbench</h1>
<p>Next-token distribution of the target model after the prompt <b>%PROMPT%</b>, recomputed in this page from the
exported logits. Temperature is applied first, then top-p (smallest prefix with mass &ge; p, top token always kept),
then min-p (p &ge; min-p &middot; p<sub>max</sub>); entropy and kept count are of the truncated, renormalised
distribution. Works offline; nothing is fetched.</p>
<ul class="note">%STAMPS%</ul>
<div class="controls">
<label for="temperature">temperature</label>
<input id="temperature-range" type="range" min="0.05" max="2" step="0.01" value="%T0%">
<input id="temperature" type="number" min="0.01" max="5" step="any" value="%T0%">
<label for="top_p">top-p</label>
<input id="top_p-range" type="range" min="0.01" max="1" step="0.01" value="%P0%">
<input id="top_p" type="number" min="0" max="1" step="any" value="%P0%">
<label for="min_p">min-p</label>
<input id="min_p-range" type="range" min="0" max="0.5" step="0.01" value="%M0%">
<input id="min_p" type="number" min="0" max="1" step="any" value="%M0%">
</div>
<div class="stats">
<span>entropy <b id="entropy-nats" data-value="">-</b> nats</span>
<span><b id="entropy-bits" data-value="">-</b> bits</span>
<span>kept <b id="kept">-</b> of <span id="vocab-size"></span> tokens</span>
<span id="error" style="color:#b00020"></span>
</div>
<svg id="bars" width="900" height="260" role="img" aria-label="top-30 tokens"></svg>
<p class="note">Grey: probability after temperature, before truncation. Blue: after truncation and renormalisation.
The 30 most likely tokens are shown.</p>
<h2>The distribution table, recomputed here</h2>
<p id="grid-check" class="note"></p>
<table id="grid"><thead><tr><th>cell</th><th>T</th><th>top-p</th><th>min-p</th><th>entropy (nats), table</th>
<th>kept, table</th><th>entropy (nats), here</th><th>kept, here</th><th>match</th></tr></thead><tbody></tbody></table>
<script id="workbench-data" type="application/json">%DATA%</script>
<script>
"use strict";
const DATA = JSON.parse(document.getElementById("workbench-data").textContent);
const V = DATA.logits.length;

// Mirror of inferlab.core.sampler.truncated_distribution + distribution_stats (float64 throughout).
function stats(logits, temperature, topP, minP) {
  if (!(temperature > 0)) throw new Error("temperature must be > 0");
  const n = logits.length;
  const x = new Array(n);
  for (let i = 0; i < n; i++) x[i] = logits[i] / temperature;          // 1
  let m = -Infinity;
  for (let i = 0; i < n; i++) if (x[i] > m) m = x[i];                  // 2
  const e = new Array(n);
  for (let i = 0; i < n; i++) e[i] = Math.exp(x[i] - m);               // 3
  let total = 0.0;
  for (let i = 0; i < n; i++) total += e[i];                           // 4 (token-id order)
  const p = new Array(n);
  for (let i = 0; i < n; i++) p[i] = e[i] / total;                     // 5
  let order = Array.from({length: n}, (_, i) => i);
  order.sort((a, b) => (p[b] > p[a]) - (p[b] < p[a]));               // 6 (Array.sort is stable)
  if (topP < 1.0) {                                                    // 7
    const kept = [];
    let mass = 0.0;
    for (let rank = 0; rank < order.length; rank++) {
      if (rank > 0 && !(mass < topP)) break;
      kept.push(order[rank]);
      mass += p[order[rank]];
    }
    order = kept;
  }
  if (minP > 0.0) {                                                    // 8
    const threshold = minP * p[order[0]];
    order = order.filter(t => p[t] >= threshold);
  }
  let z = 0.0;
  for (const t of order) z += p[t];                                    // 9
  const q = order.map(t => p[t] / z);
  let h = 0.0;
  for (const v of q) if (v > 0.0) h -= v * Math.log(v);                // 10
  return {p: p, order: order, q: q, nats: h, bits: h / Math.log(2.0), kept: order.length};  // 11
}

function drawBars(res) {
  const svg = document.getElementById("bars");
  const W = 900, H = 260, top = 10, bottom = 40, left = 40, n = 30;
  const byP = Array.from({length: V}, (_, i) => i)
    .sort((a, b) => (res.p[b] > res.p[a]) - (res.p[b] < res.p[a])).slice(0, n);
  const qOf = new Map(res.order.map((t, i) => [t, res.q[i]]));
  let ymax = 0;
  for (const t of byP) ymax = Math.max(ymax, res.p[t], qOf.get(t) || 0);
  const bw = (W - left) / n, scale = (H - top - bottom) / (ymax || 1);
  let s = `<line x1="${left}" y1="${H - bottom}" x2="${W}" y2="${H - bottom}" stroke="#888"/>`;
  s += `<text x="2" y="${top + 8}">${ymax.toFixed(3)}</text><text x="2" y="${H - bottom}">0</text>`;
  byP.forEach((t, i) => {
    const x = left + i * bw, hp = res.p[t] * scale, hq = (qOf.get(t) || 0) * scale;
    s += `<rect x="${x + 2}" y="${H - bottom - hp}" width="${bw / 2 - 2}" height="${hp}" fill="#bbb"/>`;
    s += `<rect x="${x + bw / 2}" y="${H - bottom - hq}" width="${bw / 2 - 2}" height="${hq}" fill="#2c6fbb"/>`;
    const label = String(DATA.vocab[t]).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
    s += `<text x="${x + bw / 2}" y="${H - bottom + 15}" text-anchor="middle">${label}</text>`;
  });
  svg.innerHTML = s;
}

function readNumber(id) { return parseFloat(document.getElementById(id).value); }

function update() {
  const t = readNumber("temperature"), tp = readNumber("top_p"), mp = readNumber("min_p");
  const err = document.getElementById("error");
  try {
    const res = stats(DATA.logits, t, tp, mp);
    err.textContent = "";
    const nats = document.getElementById("entropy-nats"), bits = document.getElementById("entropy-bits");
    nats.textContent = res.nats.toFixed(6); nats.dataset.value = String(res.nats);
    bits.textContent = res.bits.toFixed(6); bits.dataset.value = String(res.bits);
    document.getElementById("kept").textContent = String(res.kept);
    drawBars(res);
  } catch (e) { err.textContent = e.message; }
}

function bind(id) {
  const num = document.getElementById(id), range = document.getElementById(id + "-range");
  num.addEventListener("input", () => { range.value = num.value; update(); });
  range.addEventListener("input", () => { num.value = range.value; update(); });
}

function setCell(row) {
  for (const [id, key] of [["temperature", "temperature"], ["top_p", "top_p"], ["min_p", "min_p"]]) {
    document.getElementById(id).value = String(row[key]);
    document.getElementById(id + "-range").value = String(row[key]);
  }
  update();
}

function checkGrid() {
  const body = document.querySelector("#grid tbody");
  let ok = 0;
  for (const row of DATA.grid) {
    const res = stats(DATA.logits, row.temperature, row.top_p, row.min_p);
    const match = res.kept === row.kept && Math.abs(res.nats - row.entropy_nats) <= 1e-9;
    if (match) ok++;
    const tr = document.createElement("tr");
    tr.className = match ? "ok" : "bad";
    const cells = [row.cell === undefined ? "" : row.cell, row.temperature, row.top_p, row.min_p,
      row.entropy_nats.toFixed(6), row.kept, res.nats.toFixed(6), res.kept, match ? "yes" : "NO"];
    tr.innerHTML = cells.map((c, i) => `<td${i === 8 ? ' class="m"' : ""}></td>`).join("");
    cells.forEach((c, i) => { tr.children[i].textContent = String(c); });
    tr.addEventListener("click", () => setCell(row));
    body.appendChild(tr);
  }
  const check = document.getElementById("grid-check");
  check.textContent = DATA.grid.length ? `${ok} of ${DATA.grid.length} grid cells match the Parquet table ` +
    "(kept exactly, entropy within 1e-9 nats). Click a row to load it." : "No distribution table was available.";
  check.dataset.ok = String(ok); check.dataset.total = String(DATA.grid.length);
}

document.getElementById("vocab-size").textContent = String(V);
bind("temperature"); bind("top_p"); bind("min_p");
checkGrid();
update();
</script>
</body></html>
"""
