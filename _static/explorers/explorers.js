/* In-page explorers of the course (see _ext/tpp_explorers.py and tpp/site/explorers.py).
 * No arithmetic of the model lives here: every number is looked up in the tables the library
 * wrote at build time (data/NAME-KEY.js) or computed by a closed form SymPy printed
 * (data/closed-forms.js). This file only formats and draws. No third-party code, no network. */
(function () {
  "use strict";
  var here = document.currentScript && document.currentScript.src;
  var BASE = here ? here.replace(/[^/]*$/, "") + "data/" : "_static/explorers/data/";
  window.TPP_EXPLORER_DATA = window.TPP_EXPLORER_DATA || {};
  var pending = {};

  function load(name, key, done) {
    var id = name + "/" + key;
    if (window.TPP_EXPLORER_DATA[id]) { done(window.TPP_EXPLORER_DATA[id]); return; }
    if (pending[id]) { pending[id].push(done); return; }
    pending[id] = [done];
    var s = document.createElement("script");
    s.src = BASE + (key ? name + "-" + key : name) + ".js";
    s.onload = function () {
      var cbs = pending[id]; delete pending[id];
      cbs.forEach(function (cb) { cb(window.TPP_EXPLORER_DATA[id] || null); });
    };
    s.onerror = s.onload;
    document.head.appendChild(s);
  }

  function values(form) {
    var out = {};
    form.querySelectorAll("select").forEach(function (el) {
      out[el.name] = el.dataset.type === "int" ? parseInt(el.value, 10) : el.value;
    });
    return out;
  }

  function rowOf(tbl, vals, over) {
    var idx = 0;
    for (var i = 0; i < tbl.axes.length; i++) {
      var k = tbl.axes[i][0], opts = tbl.axes[i][1];
      var v = over && k in over ? over[k] : vals[k];
      var j = opts.indexOf(v);
      if (j < 0) return null;
      idx = idx * opts.length + j;
    }
    return tbl.rows[idx];
  }

  function fmtSeconds(x) {
    var a = Math.abs(x);
    if (a === 0) return "0 s";
    if (a < 1e-3) return (x * 1e6).toPrecision(3) + " µs";
    if (a < 1) return (x * 1e3).toPrecision(3) + " ms";
    return x.toPrecision(3) + " s";
  }
  function fmt(x, unit) {
    if (x === null || x === undefined) return "n/a";
    switch (unit) {
      case "bytes": return x >= 1e9 ? (x / 1e9).toFixed(2) + " GB" : (x / 1e6).toFixed(1) + " MB";
      case "seconds": return fmtSeconds(x);
      case "fraction": return (100 * x).toFixed(1) + " %";
      case "bool": return x ? "yes" : "no";
      case "rate": return Math.round(x).toLocaleString("en-US") + " tokens/s";
      case "time": return String(+x.toPrecision(6)) + " (units of the costs)";
      default: return String(x);
    }
  }

  var SVGNS = "http://www.w3.org/2000/svg";
  function el(tag, attrs, text) {
    var e = document.createElementNS(SVGNS, tag);
    for (var k in attrs) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function svg(w, h, label) {
    return el("svg", {viewBox: "0 0 " + w + " " + h, width: "100%", role: "img",
                      "aria-label": label, preserveAspectRatio: "xMinYMin meet"});
  }
  function figure(chart, title, s) {
    var f = document.createElement("figure");
    var c = document.createElement("figcaption");
    c.textContent = title;
    f.appendChild(c); f.appendChild(s); chart.appendChild(f);
  }
  function note(chart, text) {
    var p = document.createElement("p");
    p.className = "tpp-explorer-note";
    p.textContent = text;
    chart.appendChild(p);
  }
  var COLORS = {F: "#4c72b0", B: "#dd8452", I: "#dd8452", W: "#55a868", FB: "#8172b3",
                weights: "#4c72b0", allreduce: "#dd8452", bubble: "#c8c8c8",
                gradients: "#dd8452", optimizer_states: "#55a868", activations: "#c44e52",
                logits: "#8172b3", zero3_gathered: "#937860"};

  function bar(chart, title, parts, total, unit, cap) {
    var W = 600, H = 60 + 22 * parts.length, s = svg(W, H, title), x = 0;
    var scale = Math.max(total, cap || 0) || 1;
    parts.forEach(function (p, i) {
      var w = 560 * p[1] / scale;
      s.appendChild(el("rect", {x: 20 + x, y: 8, width: Math.max(w, 0), height: 26,
                                 fill: COLORS[p[0]] || "#999"}));
      x += w;
      s.appendChild(el("rect", {x: 20, y: 46 + 22 * i, width: 14, height: 14,
                                 fill: COLORS[p[0]] || "#999"}));
      s.appendChild(el("text", {x: 40, y: 58 + 22 * i, "font-size": 14},
                       p[2] + ": " + fmt(p[1], unit)));
    });
    if (cap) {
      var cx = 20 + 560 * cap / scale;
      s.appendChild(el("line", {x1: cx, x2: cx, y1: 2, y2: 40, stroke: "#000",
                                 "stroke-width": 2, "stroke-dasharray": "4 3"}));
    }
    figure(chart, title, s);
  }

  var draw = {
    decode: function (form, tbl, row, vals, out) {
      var chart = form.querySelector(".tpp-explorer-chart");
      var ex = tbl.extras, stage = row[tbl.outputs.length + ex.indexOf("stage_time")];
      var hop = row[tbl.outputs.length + ex.indexOf("p2p_time")];
      bar(chart, "Where one decode step goes (one GPU's view)",
          [["weights", out["breakdown.weights"], "reading weights + KV cache"],
           ["allreduce", out["breakdown.allreduce"], "all-reduce"],
           ["bubble", out["breakdown.bubble"], "pipeline bubble (idle)"]],
          out.step_time, "seconds");
      // scaling curve: the other TP rows of the same table
      var tps = tbl.axes.filter(function (a) { return a[0] === "tp"; })[0][1];
      var pts = tps.map(function (t) {
        var r = rowOf(tbl, vals, {tp: t});
        return [t, r && typeof r !== "string" ? r[tbl.outputs.indexOf("step_time")] : null];
      });
      var ymax = Math.max.apply(null, pts.map(function (p) { return p[1] || 0; })) || 1;
      var W = 600, H = 220, s = svg(W, H, "step time over TP degree");
      s.appendChild(el("line", {x1: 60, y1: 180, x2: 580, y2: 180, stroke: "#000"}));
      s.appendChild(el("line", {x1: 60, y1: 20, x2: 60, y2: 180, stroke: "#000"}));
      s.appendChild(el("text", {x: 320, y: 214, "font-size": 14, "text-anchor": "middle"},
                       "TP degree"));
      s.appendChild(el("text", {x: 4, y: 14, "font-size": 14},
                       "step time (max " + fmtSeconds(ymax) + ")"));
      var prev = null;
      pts.forEach(function (p, i) {
        var x = 60 + 500 * (i + 0.5) / pts.length;
        s.appendChild(el("text", {x: x, y: 196, "font-size": 14, "text-anchor": "middle"},
                         String(p[0])));
        if (p[1] === null) return;
        var y = 180 - 150 * p[1] / ymax, sel = p[0] === vals.tp;
        if (prev) s.appendChild(el("line", {x1: prev[0], y1: prev[1], x2: x, y2: y,
                                            stroke: "#4c72b0", "stroke-width": 2}));
        s.appendChild(el("circle", {cx: x, cy: y, r: sel ? 8 : 4,
                                     fill: sel ? "#c44e52" : "#4c72b0"}));
        s.appendChild(el("text", {x: x + 10, y: y - 8, "font-size": 12}, fmtSeconds(p[1])));
        prev = [x, y];
      });
      figure(chart, "Scaling curve: step time over TP (selected TP marked red)", s);
      var P = vals.pp, T = out.step_time || 1, Hs = 24 * P + 10;
      var st = svg(W, Hs, "pipeline stages busy and idle within one step");
      for (var k = 0; k < P; k++) {
        var x0 = 80 + 500 * k * (stage + hop) / T, w = 500 * stage / T;
        st.appendChild(el("rect", {x: 80, y: 6 + 24 * k, width: 500, height: 18,
                                    fill: COLORS.bubble}));
        st.appendChild(el("rect", {x: x0, y: 6 + 24 * k, width: w, height: 18,
                                    fill: COLORS.weights}));
        st.appendChild(el("text", {x: 4, y: 20 + 24 * k, "font-size": 14}, "stage " + k));
      }
      figure(chart, "Bubble strip: each stage's busy time (blue) in one step", st);
      note(chart, "One step = " + fmtSeconds(T) + "; grey: the stage waits (bubble).");
    },
    pipeline: function (form, tbl, row, vals, out) {
      var chart = form.querySelector(".tpp-explorer-chart");
      var n = tbl.outputs.length, peak = row[n + tbl.extras.indexOf("peak_inflight")];
      var tl = row[n + tbl.extras.indexOf("timeline")], ev = tl.events, P = vals.ranks;
      var T = out.makespan || 1, W = 600, H = 26 * P + 10, s = svg(W, H, "Gantt chart");
      for (var r = 0; r < P; r++) {
        s.appendChild(el("text", {x: 2, y: 20 + 26 * r, "font-size": 13}, "rank " + r));
        s.appendChild(el("text", {x: 592, y: 20 + 26 * r, "font-size": 12,
                                   "text-anchor": "end"}, "≤" + peak[r]));
      }
      for (var i = 0; i < ev.length; i += 4) {
        var lab = tl.labels[ev[i + 1]], kind = (lab.match(/[A-Z&]+/) || ["F"])[0];
        var x = 60 + 500 * ev[i + 2] / T, w = 500 * (ev[i + 3] - ev[i + 2]) / T;
        var g = el("rect", {x: x, y: 6 + 26 * ev[i], width: Math.max(w - 0.4, 0.3), height: 20,
                            fill: COLORS[kind] || COLORS.FB});
        g.appendChild(el("title", {}, lab + " " + ev[i + 2] + "–" + ev[i + 3]));
        s.appendChild(g);
      }
      figure(chart, "Gantt chart of the simulated schedule", s);
      note(chart, "Time 0 … " + (+T.toPrecision(6)) + " (units of the costs). Blue: F, " +
           "orange: B or I, green: W, purple: an overlapped F&B pair; ≤n at the right: the " +
           "rank's peak in-flight activation sets.");
    },
    memory: function (form, tbl, row, vals, out) {
      var chart = form.querySelector(".tpp-explorer-chart");
      var parts = tbl.outputs.filter(function (k) { return k.indexOf("memory.") === 0; })
        .map(function (k) {
          var o = form.querySelector('output[name="' + k + '"]');
          var lab = o ? document.getElementById(o.getAttribute("aria-labelledby")).textContent
                      : k;
          return [k.slice(7), out[k] || 0, lab];
        });
      bar(chart, "Memory per GPU on the heaviest pipeline rank (dashed: GPU capacity)",
          parts, out.memory_bytes, "bytes", out.capacity);
      var layers = row[tbl.outputs.length + tbl.extras.indexOf("layers")];
      var p = document.createElement("p");
      p.textContent = "Layers per pipeline rank (the library's placement): " + layers.join(", ");
      chart.appendChild(p);
    },
    collective: function (form, tbl, row, vals, out) {
      var chart = form.querySelector(".tpp-explorer-chart");
      bar(chart, "Time of one collective: latency and bandwidth terms",
          [["allreduce", out.latency_time, "latency (steps × α)"],
           ["weights", out.bandwidth_time, "bandwidth (bytes / β)"]], out.time, "seconds");
    },
    layout: function (form, tbl, row, vals, out) {
      var chart = form.querySelector(".tpp-explorer-chart");
      var ranks = row[tbl.outputs.length + tbl.extras.indexOf("ranks")];
      var per = 8, nodes = Math.ceil(ranks.length / per), cols = 4;
      var W = 600, cw = W / cols;
      var rowsPerNode = per / cols, Hn = rowsPerNode * 44 + 24;
      var s = svg(W, nodes * Hn + 4, "rank map on nodes of 8 GPUs");
      var pal = ["#4c72b0", "#dd8452", "#55a868", "#c44e52"];
      for (var r = 0; r < ranks.length; r++) {
        var node = Math.floor(r / per), k = r % per, c = ranks[r];
        var x = (k % cols) * cw, y = node * Hn + 18 + Math.floor(k / cols) * 44;
        if (k === 0) s.appendChild(el("text", {x: 2, y: node * Hn + 14, "font-size": 13,
                                                "font-weight": "bold"}, "node " + node));
        s.appendChild(el("rect", {x: x + 2, y: y, width: cw - 4, height: 40, rx: 4,
                                   fill: pal[c[3] % 4], "fill-opacity": 0.25 + 0.15 * c[2],
                                   stroke: "#333"}));
        s.appendChild(el("text", {x: x + 6, y: y + 17, "font-size": 16, "font-weight": "bold",
                                   "class": "tpp-fixed"}, "rank " + r));
        s.appendChild(el("text", {x: x + 6, y: y + 35, "font-size": 15, "class": "tpp-fixed"},
                         "t" + c[0] + " c" + c[1] + " d" + c[2] + " p" + c[3]));
      }
      figure(chart, "Rank map (TP fastest): which group crosses which link", s);
      note(chart, "t, c, d, p: the rank's TP, CP, DP and PP coordinates; colour: pipeline " +
           "stage p; shade: DP replica d.");
      var ul = document.createElement("ul");
      ["tp", "cp", "dp", "pp"].forEach(function (a) {
        var li = document.createElement("li"), n = out[a + ".nodes_spanned"];
        li.textContent = a.toUpperCase() + " groups: " + (n > 1 ? "cross " + n +
          " nodes (inter-node network)" : "inside one node (NVLink)");
        ul.appendChild(li);
      });
      chart.appendChild(ul);
    }
  };

  // explorers computed in the page from SymPy-printed closed forms (no table)
  function formula(name, tbl, vals) {
    var f = window.TPP_CLOSED_FORMS && window.TPP_CLOSED_FORMS[name];
    if (!f) return "closed forms missing";
    var ln = tbl.links[vals.link], op = f[vals.op];
    return tbl.outputs.map(function (k) {
      return op[k](vals.n, vals.payload_bytes, ln[1], ln[0]);
    });
  }

  function update(form) {
    var name = form.dataset.explorer, vals = values(form);
    var split = form.dataset.split ? form.dataset.split.split(",") : [];
    var key = split.map(function (k) { return vals[k]; }).join("-");
    form.dataset.ready = "0";
    var seq = (form._tppSeq || 0) + 1;
    form._tppSeq = seq;
    load(name, key, function (tbl) {
      if (form._tppSeq !== seq) return;   // a newer change is being shown
      var err = form.querySelector(".tpp-explorer-error");
      var chart = form.querySelector(".tpp-explorer-chart");
      var outs = form.querySelectorAll("output");
      if (!tbl) {
        err.hidden = false; err.textContent = "data file missing: " + name + "/" + key;
        form.dataset.ready = "error";
        return;
      }
      var row = tbl.formula ? formula(name, tbl, vals) : rowOf(tbl, vals);
      chart.textContent = "";
      if (typeof row === "string" || row === null) {
        err.hidden = false;
        err.textContent = "ValueError: " + (row || "value not in the table");
        form.classList.add("tpp-explorer-invalid");
        outs.forEach(function (o) { o.removeAttribute("data-value"); o.textContent = "—"; });
        form.dataset.ready = "1";
        return;
      }
      err.hidden = true; err.textContent = "";
      form.classList.remove("tpp-explorer-invalid");
      var out = {};
      tbl.outputs.forEach(function (k, i) { out[k] = row[i]; });
      if (name === "pipeline" && out.closed_form_bubble_fraction !== null) {
        var f = window.TPP_CLOSED_FORMS &&
                window.TPP_CLOSED_FORMS.bubble_fraction[vals.schedule];
        out.closed_form_bubble_fraction = f ? f(vals.ranks, vals.microbatches, vals.virtual,
                                                vals.t_f, vals.t_b, vals.t_w) : null;
      }
      outs.forEach(function (o) {
        var v = out[o.name];
        if (v === null || v === undefined) { o.removeAttribute("data-value"); }
        else { o.setAttribute("data-value", String(v)); }
        o.textContent = fmt(v, o.dataset.unit);
      });
      if (draw[name]) draw[name](form, tbl, row, vals, out);
      form.dataset.ready = "1";
    });
  }

  function init() {
    document.querySelectorAll("form.tpp-explorer").forEach(function (form) {
      form.addEventListener("submit", function (e) { e.preventDefault(); });
      form.addEventListener("change", function () { update(form); });
      form.addEventListener("input", function () { update(form); });
      update(form);
    });
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
