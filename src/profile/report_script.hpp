// The report page's inline style sheet and script (kept apart from the C++ that fills the page,
// so each reads as what it is). The script reads the JSON in <script id="tz-data"> and draws SVG.
#pragma once

namespace tierzero::profile {

inline constexpr const char* kReportStyle = R"CSS(
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:20px 28px;color:#222;background:#fff}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:26px 0 8px;border-bottom:1px solid #ddd;padding-bottom:3px}
.sub{color:#666;font-size:13px}
table{border-collapse:collapse;font-size:13px;margin:4px 0}
th,td{border:1px solid #ddd;padding:3px 8px;text-align:right}th{background:#f3f5f8}
td.l,th.l{text-align:left}
.scroll{max-height:360px;overflow:auto;display:inline-block}
ul.rec li{margin:4px 0}
.pos{color:#b03030}.neg{color:#2060b0}
#tz-error{display:none;background:#fee;border:1px solid #c33;color:#900;padding:8px;margin:8px 0;font-family:monospace}
svg.chart{display:block;margin:6px 0 14px;background:#fff}
.note{color:#666;font-size:12px}
)CSS";

inline constexpr const char* kReportErrorHook = R"JS(
window.onerror = function (msg, src, line, col) {
  var el = document.getElementById('tz-error');
  var text = 'report script error: ' + msg + ' (line ' + line + ':' + col + ')';
  if (el) { el.textContent = text; el.style.display = 'block'; }
  document.body.setAttribute('data-error', String(msg));
  return false;
};
)JS";

inline constexpr const char* kReportScript = R"JS(
(function () {
  var D = JSON.parse(document.getElementById('tz-data').textContent);
  var NS = 'http://www.w3.org/2000/svg';
  var COLORS = {param: '#4e79a7', grad: '#f28e2b', optimizer: '#e15759', activation: '#76b7b2',
                comm: '#59a14f', io: '#edc948', workspace: '#b07aa1'};
  var PHASE_COLORS = {forward: '#e8f0fb', backward: '#fdeede', optimizer: '#fbe3e3',
                      eval: '#e9f5e9', other: '#f5f5f5'};
  var NC = D.categories.length;

  function fmtBytes(b) {
    var u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'], i = 0;
    while (b >= 1024 && i < 4) { b /= 1024; i++; }
    return (i === 0 ? b.toFixed(0) : b.toFixed(1)) + ' ' + u[i];
  }
  function svgEl(name, attrs, parent) {
    var e = document.createElementNS(NS, name);
    for (var k in attrs) e.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(e);
    return e;
  }
  function text(parent, x, y, s, attrs) {
    var a = {x: x, y: y, 'font-size': 11, fill: '#444'};
    for (var k in attrs) a[k] = attrs[k];
    svgEl('text', a, parent).textContent = s;
  }

  // One tier of one step: categories stacked, levels held until the next event, phase bands.
  function drawTier(container, cs, ti) {
    var n = cs.t.length, max = 0, i, c;
    for (i = 0; i < n; i++) {
      var sum = 0;
      for (c = 0; c < NC; c++) sum += cs.v[i][ti * NC + c];
      if (sum > max) max = sum;
    }
    if (max === 0) return false;
    var W = 1100, H = 230, L = 78, R = 150, T = 22, B = 26, pw = W - L - R, ph = H - T - B;
    var dur = cs.dur > 0 ? cs.dur : 1;
    var X = function (t) { return L + pw * Math.max(0, Math.min(t, dur)) / dur; };
    var Y = function (b) { return T + ph * (1 - b / max); };
    var svg = svgEl('svg', {width: W, height: H, viewBox: '0 0 ' + W + ' ' + H, 'class': 'chart',
                            'data-tier': D.tiers[ti]});
    cs.phases.forEach(function (p) {
      var x0 = X(p[1]), x1 = X(p[2]);
      svgEl('rect', {x: x0, y: T, width: Math.max(0, x1 - x0), height: ph,
                     fill: PHASE_COLORS[p[0]] || '#f5f5f5'}, svg);
      if (x1 - x0 > 46) text(svg, x0 + 3, T + 11, p[0], {'font-size': 10, fill: '#777'});
    });
    var base = [], legend = [];
    for (i = 0; i < n; i++) base.push(0);
    for (c = 0; c < NC; c++) {
      var top = [], any = false;
      for (i = 0; i < n; i++) {
        var v = cs.v[i][ti * NC + c];
        if (v > 0) any = true;
        top.push(base[i] + v);
      }
      if (!any) continue;
      var d = 'M' + X(cs.t[0]) + ',' + Y(top[0]);
      for (i = 1; i < n; i++) d += 'L' + X(cs.t[i]) + ',' + Y(top[i - 1]) + 'L' + X(cs.t[i]) + ',' + Y(top[i]);
      d += 'L' + X(dur) + ',' + Y(top[n - 1]) + 'L' + X(dur) + ',' + Y(base[n - 1]);
      for (i = n - 1; i >= 0; i--) {
        d += 'L' + X(cs.t[i]) + ',' + Y(base[i]);
        if (i > 0) d += 'L' + X(cs.t[i]) + ',' + Y(base[i - 1]);
      }
      svgEl('path', {d: d + 'Z', fill: COLORS[D.categories[c]] || '#999', 'fill-opacity': 0.9,
                     'data-category': D.categories[c]}, svg);
      legend.push(D.categories[c]);
      base = top;
    }
    svgEl('line', {x1: L, y1: T + ph, x2: L + pw, y2: T + ph, stroke: '#888'}, svg);
    svgEl('line', {x1: L, y1: T, x2: L, y2: T + ph, stroke: '#888'}, svg);
    [0, 0.5, 1].forEach(function (f) {
      text(svg, L - 6, Y(max * f) + 4, fmtBytes(max * f), {'text-anchor': 'end'});
    });
    text(svg, L, H - 8, '0 s');
    text(svg, L + pw, H - 8, dur.toFixed(3) + ' s', {'text-anchor': 'end'});
    text(svg, L, 14, D.tiers[ti] + ' — peak ' + fmtBytes(max),
         {'font-size': 13, 'font-weight': 'bold', fill: '#222'});
    legend.forEach(function (name, k) {
      svgEl('rect', {x: L + pw + 14, y: T + 4 + 16 * k, width: 11, height: 11,
                     fill: COLORS[name] || '#999'}, svg);
      text(svg, L + pw + 30, T + 14 + 16 * k, name);
    });
    container.appendChild(svg);
    return true;
  }

  function drawStep(index) {
    var box = document.getElementById('tz-chart');
    while (box.firstChild) box.removeChild(box.firstChild);
    var cs = D.chart_steps[index], drawn = 0;
    for (var ti = 0; ti < D.tiers.length; ti++) if (drawTier(box, cs, ti)) drawn++;
    if (!drawn) box.textContent = 'no tracked memory in this step';
    document.getElementById('tz-chart-note').textContent = cs.exact
        ? 'every memory event of step ' + cs.step + ' (fine-grained timeline)'
        : 'step ' + cs.step + ': levels at each phase boundary and each phase\'s per-category ' +
          'peaks (run with the fine-grained timeline for the exact curve)';
  }

  // Lines over the steps (step time and stall, peaks).
  function lineChart(container, title, xs, series, fmt) {
    if (xs.length === 0) return;
    var W = 1100, H = 200, L = 78, R = 150, T = 22, B = 26, pw = W - L - R, ph = H - T - B;
    var max = 0, i;
    series.forEach(function (s) { s.values.forEach(function (v) { if (v > max) max = v; }); });
    if (max <= 0) max = 1;
    var x0 = xs[0], x1 = xs[xs.length - 1] > x0 ? xs[xs.length - 1] : x0 + 1;
    var X = function (x) { return L + pw * (x - x0) / (x1 - x0); };
    var Y = function (v) { return T + ph * (1 - v / max); };
    var svg = svgEl('svg', {width: W, height: H, viewBox: '0 0 ' + W + ' ' + H, 'class': 'chart'});
    svgEl('line', {x1: L, y1: T + ph, x2: L + pw, y2: T + ph, stroke: '#888'}, svg);
    svgEl('line', {x1: L, y1: T, x2: L, y2: T + ph, stroke: '#888'}, svg);
    series.forEach(function (s, k) {
      var pts = [];
      for (i = 0; i < xs.length; i++) pts.push(X(xs[i]).toFixed(1) + ',' + Y(s.values[i]).toFixed(1));
      svgEl('polyline', {points: pts.join(' '), fill: 'none', stroke: s.color, 'stroke-width': 1.5}, svg);
      svgEl('rect', {x: L + pw + 14, y: T + 4 + 16 * k, width: 11, height: 11, fill: s.color}, svg);
      text(svg, L + pw + 30, T + 14 + 16 * k, s.name);
    });
    [0, 0.5, 1].forEach(function (f) {
      text(svg, L - 6, Y(max * f) + 4, fmt(max * f), {'text-anchor': 'end'});
    });
    text(svg, L, H - 8, 'step ' + x0);
    text(svg, L + pw, H - 8, 'step ' + xs[xs.length - 1], {'text-anchor': 'end'});
    text(svg, L, 14, title, {'font-size': 13, 'font-weight': 'bold', fill: '#222'});
    container.appendChild(svg);
  }

  var select = document.getElementById('tz-step');
  D.chart_steps.forEach(function (cs, k) {
    var o = document.createElement('option');
    o.value = k;
    o.textContent = 'step ' + cs.step + (k === D.default_step ? ' (highest device peak)' : '');
    select.appendChild(o);
  });
  if (D.chart_steps.length > 0) {
    select.value = D.default_step;
    select.onchange = function () { drawStep(+select.value); };
    drawStep(D.default_step);
  } else {
    document.getElementById('tz-chart').textContent = 'the profile holds no steps';
  }
  var S = D.per_step, steps = document.getElementById('tz-steps-chart');
  var secs = function (v) { return v.toFixed(3) + ' s'; };
  lineChart(steps, 'time per step', S.step, [
    {name: 'step', color: '#4e79a7', values: S.step_s},
    {name: 'stall', color: '#e15759', values: S.stall_s}], secs);
  lineChart(steps, 'peak per step', S.step, [
    {name: 'device', color: '#4e79a7', values: S.device_peak},
    {name: 'host', color: '#f28e2b', values: S.host_peak},
    {name: 'nvme', color: '#59a14f', values: S.nvme_peak}], fmtBytes);
  document.body.setAttribute('data-rendered', 'ok');
})();
)JS";

}  // namespace tierzero::profile
