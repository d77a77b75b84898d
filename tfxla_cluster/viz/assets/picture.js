// The clustering picture's behaviour: hover panel, zoom, search, expand/collapse clusters, focus on a
// node's neighbourhood, colour by cluster or by reason. The SVG arrives laid out (tfxla_cluster/viz/
// scene.py); expanding a cluster needs no new layout: boxes right of / below its centre move by how much
// it grew, and edges are redrawn with edgePath (the same geometry as scene.edge_path in Python).
// A page calls tfxlaPicture.install(root, data, attr) once per picture.
var tfxlaPicture = (function () {
  "use strict";
  var tip = document.getElementById("tooltip");
  var ARROW = 7;
  function esc(s) {
    return String(s).replace(/[&<>"]/g, function (c) {
      return {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"}[c];
    });
  }
  function row(k, v) { return "<tr><th>" + esc(k) + "</th><td>" + v + "</td></tr>"; }
  function nodeHtml(d) {
    var h = '<div class="t-name">' + esc(d.name) + '</div><div class="t-op">op: ' + esc(d.op) + "</div><table>";
    h += row("device", esc(d.device || "?"));
    h += row("outputs", d.outputs.length ? d.outputs.map(function (o) { return "<code>" + esc(o) + "</code>"; })
                                                     .join("<br>") : "none");
    d.attrs.forEach(function (kv) { h += row(kv[0], "<code>" + esc(kv[1]) + "</code>"); });
    h += "</table>";
    if (d.cluster) {
      h += '<div class="t-reason">cluster: <b>' + esc(d.cluster) + "</b></div>";
    } else {
      h += '<div class="t-reason">not clustered <code>[' + esc(d.code) + "]</code>: " + esc(d.reason) + "</div>";
      if (d.hint) h += '<div class="t-hint">' + esc(d.hint) + "</div>";
    }
    return h + '<div class="t-hint">click: show its neighbourhood</div>';
  }
  function clusterHtml(c) {
    return '<div class="t-name">' + esc(c.name) + "</div><table>" + row("size", c.size + " nodes") +
           row("ops", esc(c.ops)) + row("inputs", c.inputs + " tensors") + row("outputs", c.outputs + " tensors") +
           (c.timing ? row("cost", esc(c.timing)) : "") + "</table>" +
           '<div class="t-hint">click: expand / collapse</div>';
  }
  function place(ev) {
    var pad = 14, r = tip.getBoundingClientRect();
    var x = ev.clientX + pad, y = ev.clientY + pad;
    if (x + r.width > window.innerWidth) x = Math.max(0, ev.clientX - r.width - pad);
    if (y + r.height > window.innerHeight) y = Math.max(0, ev.clientY - r.height - pad);
    tip.style.left = x + "px"; tip.style.top = y + "px";
  }
  var current = null;   // one panel for all pictures of the page
  function show(g, ev, data) {
    var name = g.getAttribute("data-node"), cl = g.getAttribute("data-cluster");
    var html = name && data.nodes[name] ? nodeHtml(data.nodes[name])
             : cl && data.clusters[cl] ? clusterHtml(data.clusters[cl]) : null;
    if (!html) return;
    if (current) current.classList.remove("hover");
    current = g; g.classList.add("hover");
    tip.innerHTML = html; tip.hidden = false;
    tip.setAttribute("data-node", name || ""); tip.setAttribute("data-cluster", cl || "");
    place(ev);
  }
  function hide() {
    if (current) current.classList.remove("hover");
    current = null; tip.hidden = true;
  }
  function f(x) { return x.toFixed(1); }
  function curve(pts) {
    var out = "M" + f(pts[0][0]) + "," + f(pts[0][1]);
    for (var i = 1; i < pts.length; i++) {
      var a = pts[i - 1], b = pts[i], my = (a[1] + b[1]) / 2;
      out += " C" + f(a[0]) + "," + f(my) + " " + f(b[0]) + "," + f(my) + " " + f(b[0]) + "," + f(b[1]);
    }
    return out;
  }
  function arrow(x, base, tip) {
    var h = ARROW / 2;
    return "M" + f(x - h) + "," + f(base) + " L" + f(x + h) + "," + f(base) + " L" + f(x) + "," + f(tip) + " Z";
  }
  function meanX(ports) {
    return ports.reduce(function (t, p) { return t + p[0] + p[2] / 2; }, 0) / ports.length;
  }
  // From box s to box d (each [left, top, width, height]) through pts: vertical S-curves between layers;
  // sp/dp: member boxes of an expanded cluster at that end (the line fans out to them). Returns
  // [line path, arrowheads path].
  function edgePath(s, d, pts, sp, dp) {
    sp = sp || []; dp = dp || [];
    var down = s[1] + s[3] / 2 <= d[1] + d[3] / 2;
    var nxt = pts.length ? pts[0] : [d[0] + d[2] / 2, d[1]];
    var prv = pts.length ? pts[pts.length - 1] : [s[0] + s[2] / 2, s[1]];
    if (sp.length) nxt = [meanX(sp), nxt[1]];
    if (dp.length) prv = [meanX(dp), prv[1]];
    var x0 = Math.min(Math.max(nxt[0], s[0] + 0.2 * s[2]), s[0] + 0.8 * s[2]);
    var x1 = Math.min(Math.max(prv[0], d[0] + 0.2 * d[2]), d[0] + 0.8 * d[2]);
    var y0 = down ? s[1] + s[3] : s[1], border = down ? d[1] : d[1] + d[3];
    var y1 = dp.length ? border : (down ? border - ARROW : border + ARROW);
    var lines = [curve([[x0, y0]].concat(pts, [[x1, y1]]))], arrows = [];
    sp.forEach(function (p) { lines.push(curve([[p[0] + p[2] / 2, down ? p[1] + p[3] : p[1]], [x0, y0]])); });
    if (dp.length) {
      dp.forEach(function (p) {
        var px = p[0] + p[2] / 2, tip = down ? p[1] : p[1] + p[3], base = down ? tip - ARROW : tip + ARROW;
        lines.push(curve([[x1, y1], [px, base]]));
        arrows.push(arrow(px, base, tip));
      });
    } else {
      arrows.push(arrow(x1, y1, border));
    }
    return [lines.join(" "), arrows.join(" ")];
  }
  // root: what holds the picture's toolbar, canvas and node links; attr: "id" or "class", as the
  // toolbar was written (picture_toolbar); data: the picture's facts and layout (viz/html.py picture).
  function install(root, data, attr) {
    function part(name) { return root.querySelector((attr === "id" ? "#" : ".") + name); }
    var canvas = part("canvas"), svg = canvas.querySelector("svg");
    if (!svg) return;
    var L = data.layout, scene = svg.querySelector("g.scene");
    var itemEls = [], edgeEls = [], clusterOfItem = {}, open = {}, stash = {};
    scene.querySelectorAll(":scope > g[data-item]").forEach(function (g) { itemEls[+g.getAttribute("data-item")] = g; });
    scene.querySelectorAll(":scope > g.edges > g.edge").forEach(function (g) { edgeEls[+g.getAttribute("data-e")] = g; });
    Object.keys(L.clusters).forEach(function (c) { open[c] = L.clusters[c].open; clusterOfItem[L.clusters[c].item] = c; });

    svg.addEventListener("mouseover", function (ev) {
      var g = ev.target.closest("g.node");
      if (g && g !== current) show(g, ev, data);
    });
    svg.addEventListener("mousemove", function (ev) { if (current) place(ev); });
    svg.addEventListener("mouseout", function (ev) {
      var g = ev.target.closest("g.node");
      if (g && !(ev.relatedTarget && g.contains(ev.relatedTarget))) hide();
    });
    // Zoom: scale the SVG's own size; the canvas scrolls.
    var baseW = svg.width.baseVal.value, baseH = svg.height.baseVal.value, scale = 1;
    function setScale(s) {
      scale = Math.min(8, Math.max(0.02, s));
      svg.setAttribute("width", (baseW * scale) + "px"); svg.setAttribute("height", (baseH * scale) + "px");
    }
    function fitScale() { return baseW ? (canvas.clientWidth - 4) / baseW : 1; }
    part("zoom-in").onclick = function () { setScale(scale * 1.25); };
    part("zoom-out").onclick = function () { setScale(scale / 1.25); };
    part("zoom-fit").onclick = function () { setScale(fitScale()); };
    part("zoom-1").onclick = function () { setScale(1); };
    setScale(Math.max(0.2, Math.min(1, fitScale())));

    // ----- expand / collapse: swap the cluster's markup, then move boxes and redraw edges
    function applyOpen(name, want) {
      var c = L.clusters[name];
      if (!c || open[name] === want) return;
      var g = itemEls[c.item];
      stash[name] = stash[name] || {};
      stash[name][open[name]] = g.innerHTML;
      if (current && g.contains(current)) hide();
      g.innerHTML = stash[name][want] !== undefined ? stash[name][want] : c.frag;   // built lazily, once
      g.setAttribute("class", want ? "cluster xla-cluster expanded" : "node xla-cluster collapsed");
      open[name] = want;
    }
    function relayout() {
      var grow = [], gw = 0, gh = 0;
      Object.keys(L.clusters).forEach(function (name) {
        var c = L.clusters[name], it = L.items[c.item];
        var now = c.sizes[open[name] ? 1 : 0], was = c.sizes[c.open ? 1 : 0];
        var gx = Math.max(0, now[0] - was[0]), gy = Math.max(0, now[1] - was[1]);
        if (gx || gy) { grow.push([it[0] + was[0] / 2, it[1] + was[1] / 2, gx, gy]); gw += gx; gh += gy; }
      });
      function shift(x, y) {
        var dx = 0, dy = 0;
        for (var i = 0; i < grow.length; i++) {
          if (x > grow[i][0]) dx += grow[i][2];
          if (y > grow[i][1]) dy += grow[i][3];
        }
        return [dx, dy];
      }
      var boxes = L.items.map(function (it, i) {
        var s = shift(it[0] + it[2] / 2, it[1] + it[3] / 2), w = it[2], h = it[3], cl = clusterOfItem[i];
        if (cl !== undefined) { var sz = L.clusters[cl].sizes[open[cl] ? 1 : 0]; w = sz[0]; h = sz[1]; }
        var box = [it[0] + s[0], it[1] + s[1], w, h];
        itemEls[i].setAttribute("transform", "translate(" + f(box[0]) + "," + f(box[1]) + ")");
        return box;
      });
      // Member boxes (cluster-local) of an expanded cluster's end, placed where the cluster now is.
      function ports(item, local) {
        var cl = clusterOfItem[item];
        if (!local || cl === undefined || !open[cl]) return [];
        return local.map(function (m) { return [boxes[item][0] + m[0], boxes[item][1] + m[1], m[2], m[3]]; });
      }
      L.edges.forEach(function (e, k) {
        var pts = [], p = e[2];
        for (var i = 0; i < p.length; i += 2) { var s = shift(p[i], p[i + 1]); pts.push([p[i] + s[0], p[i + 1] + s[1]]); }
        var d = edgePath(boxes[e[0]], boxes[e[1]], pts, ports(e[0], e[3]), ports(e[1], e[4])), el = edgeEls[k];
        el.querySelector("path").setAttribute("d", d[0]);
        el.querySelector("path.arrow").setAttribute("d", d[1]);
      });
      baseW = L.width + gw; baseH = L.height + gh;
      svg.setAttribute("viewBox", "0 0 " + f(baseW) + " " + f(baseH));
      setScale(scale);
      applySearch(false);
      setFocus(focusName);
    }
    function setOpen(names, want) {
      names.forEach(function (n) { applyOpen(n, want); });
      relayout();
    }
    svg.addEventListener("click", function (ev) {
      var g = ev.target.closest("g.xla-cluster.collapsed");
      if (g) { setOpen([g.getAttribute("data-cluster")], true); return; }
      g = ev.target.closest("g.node[data-node]");
      if (g) { var n = g.getAttribute("data-node"); setFocus(focusName === n ? null : n); return; }
      g = ev.target.closest("g.xla-cluster.expanded");
      if (g) setOpen([g.getAttribute("data-cluster")], false);
    });
    part("expand-all").onclick = function () { setOpen(Object.keys(L.clusters), true); };
    part("collapse-all").onclick = function () { setOpen(Object.keys(L.clusters), false); };

    // ----- focus: a node's undirected neighbourhood up to the chosen depth; the rest is dimmed
    var names = data.graph.names, index = null, adj = null, focusName = null;
    function graphIndex() {
      if (adj) return;
      index = {}; adj = names.map(function () { return []; });
      names.forEach(function (n, i) { index[n] = i; });
      data.graph.edges.forEach(function (e) { adj[e[0]].push(e[1]); adj[e[1]].push(e[0]); });
    }
    function clusterLit(name, lit) {
      return (data.members[name] || []).some(function (m) { return lit.has(m); });
    }
    function setFocus(name) {
      focusName = name;
      var lit = null, info = part("focus-info");
      if (name !== null && name !== undefined) {
        graphIndex();
        var depth = +(part("focus-depth").value || 2), start = index[name], seen = new Set([start]), frontier = [start];
        for (var hop = 0; hop < depth; hop++) {
          var next = [];
          frontier.forEach(function (v) { adj[v].forEach(function (w) { if (!seen.has(w)) { seen.add(w); next.push(w); } }); });
          frontier = next;
        }
        lit = new Set(); seen.forEach(function (i) { lit.add(names[i]); });
        info.textContent = "neighbourhood of " + name + " (depth " + depth + "): " + lit.size + " nodes";
      } else {
        info.textContent = "";
      }
      part("focus-clear").hidden = !lit;
      svg.querySelectorAll("g.node[data-node]").forEach(function (g) {
        var n = g.getAttribute("data-node");
        g.classList.toggle("dim", !!lit && !lit.has(n));
        g.classList.toggle("focused", !!lit && n === name);
      });
      var litItem = L.keys.map(function (key) {
        if (!lit) return true;
        return key.slice(0, 2) === "n:" ? lit.has(key.slice(2)) : key.slice(0, 2) === "c:" ? clusterLit(key.slice(2), lit) : true;
      });
      Object.keys(L.clusters).forEach(function (c) {
        var g = itemEls[L.clusters[c].item], on = litItem[L.clusters[c].item];
        g.classList.toggle("dim", !on && !open[c]);
        g.classList.toggle("dim-box", !on && open[c]);
      });
      L.edges.forEach(function (e, k) { edgeEls[k].classList.toggle("dim", !(litItem[e[0]] && litItem[e[1]])); });
      scene.querySelectorAll("g.inner-edges > g.edge").forEach(function (g) {
        g.classList.toggle("dim", !!lit && !(lit.has(g.getAttribute("data-src")) && lit.has(g.getAttribute("data-dst"))));
      });
    }
    part("focus-clear").onclick = function () { setFocus(null); };
    part("focus-depth").onchange = function () { if (focusName !== null) setFocus(focusName); };
    document.addEventListener("keydown", function (ev) { if (ev.key === "Escape" && focusName !== null) setFocus(null); });

    // ----- colour by cluster and reason (default), by cluster only, or by reason only
    part("color-by").onchange = function () {
      var v = part("color-by").value;
      canvas.classList.toggle("color-cluster", v === "cluster");
      canvas.classList.toggle("color-reason", v === "reason");
    };

    // ----- search: highlight nodes whose name contains the text, and collapsed clusters holding one;
    // Enter expands the first match's cluster and shows its neighbourhood.
    var search = part("search"), count = part("search-count");
    function matches(q) {
      return q === "" ? [] : names.filter(function (n) { return n.toLowerCase().indexOf(q) >= 0; });
    }
    function applySearch(scroll) {
      var q = search.value.trim().toLowerCase(), first = null, hits = matches(q), inClusters = {};
      hits.forEach(function (n) { var c = data.nodes[n] && data.nodes[n].cluster; if (c && !open[c]) inClusters[c] = true; });
      svg.querySelectorAll("g.node[data-node]").forEach(function (g) {
        var hit = q !== "" && g.getAttribute("data-node").toLowerCase().indexOf(q) >= 0;
        g.classList.toggle("match", hit);
        if (hit && !first) first = g;
      });
      Object.keys(L.clusters).forEach(function (c) {
        var g = itemEls[L.clusters[c].item];
        g.classList.toggle("has-match", !!inClusters[c]);
        if (!first && inClusters[c]) first = g;
      });
      count.textContent = q ? hits.length + " found" : "";
      if (scroll && first) first.scrollIntoView({block: "center", inline: "center"});
      return hits;
    }
    search.addEventListener("input", function () { applySearch(true); });
    search.addEventListener("keydown", function (ev) {
      if (ev.key !== "Enter") return;
      var hits = applySearch(false);
      if (!hits.length) return;
      var c = data.nodes[hits[0]] && data.nodes[hits[0]].cluster;
      if (c && L.clusters[c] && !open[c]) setOpen([c], true);
      setFocus(hits[0]);
      var g = svg.querySelector('g.node[data-node="' + CSS.escape(hits[0]) + '"]');
      if (g) g.scrollIntoView({block: "center", inline: "center"});
    });
    root.querySelectorAll("code.node-link").forEach(function (c) {
      c.addEventListener("click", function () {
        search.value = c.getAttribute("data-node"); search.dispatchEvent(new Event("input"));
      });
    });
    // For scripts and tests: the same actions as the clicks.
    svg.tfxla = {expand: function (n) { setOpen([n], true); }, collapse: function (n) { setOpen([n], false); },
                 focus: setFocus, isOpen: function (n) { return !!open[n]; }};
  }
  // A click on a link (matching selector) to an element of this page calls act(element, event).
  function onLinks(selector, act) {
    document.querySelectorAll(selector).forEach(function (a) {
      a.addEventListener("click", function (ev) {
        var el = document.getElementById(a.getAttribute("href").slice(1));
        if (el) act(el, ev);
      });
    });
  }
  return {install: install, onLinks: onLinks, edgePath: edgePath};
})();
