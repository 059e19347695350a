/* The EventMQ admin dashboard: polls the data view and redraws numbers, tables and SVG charts.
   No libraries: every value goes in with textContent, so nothing from the server is parsed as HTML. */
(function () {
  "use strict";
  var COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf"];
  var SVG = "http://www.w3.org/2000/svg";

  function $(id) { return document.getElementById(id); }

  function text(id, value) { $(id).textContent = value; }

  function duration(ms) {
    if (ms === null || ms === undefined) { return "\u2013"; }
    if (ms < 1000) { return Math.round(ms) + "ms"; }
    var s = ms / 1000;
    if (s < 60) { return s.toFixed(1) + "s"; }
    var m = Math.floor(s / 60);
    return m + "m" + String(Math.floor(s % 60)).padStart(2, "0") + "s";
  }

  function cell(tr, value, className, href) {
    var td = document.createElement("td");
    if (className) { td.className = className; }
    if (href) {
      var a = document.createElement("a");
      a.href = href;
      a.textContent = value;
      td.appendChild(a);
    } else {
      td.textContent = value;
    }
    tr.appendChild(td);
  }

  function fill(id, rows, columns, empty) {
    var body = $(id);
    body.replaceChildren();
    if (!rows.length) {
      var tr = document.createElement("tr");
      var td = document.createElement("td");
      td.colSpan = columns;
      td.className = "emq-empty";
      td.textContent = empty;
      tr.appendChild(td);
      body.appendChild(tr);
      return;
    }
    rows.forEach(function (row) {
      var tr = document.createElement("tr");
      row.forEach(function (c) { cell(tr, c[0], c[1], c[2]); });
      body.appendChild(tr);
    });
  }

  function queueNames(samples) {
    var names = {};
    samples.forEach(function (s) { Object.keys(s.waiting).forEach(function (q) { names[q] = true; }); });
    return Object.keys(names).sort();
  }

  // The x axis is time: the last WINDOW seconds (more if the ring holds more), "now" at the right.
  var WINDOW = 120;

  function chart(id, samples, key, names, now) {
    var svg = $(id);
    svg.replaceChildren();
    var W = 600, H = 180, L = 40, R = 8, B = 20, T = 10;
    var span = samples.length ? Math.max(WINDOW, now - samples[0].t) : WINDOW;
    var start = now - span;
    var max = 1;
    samples.forEach(function (s) {
      names.forEach(function (q) { max = Math.max(max, s[key][q] || 0); });
    });
    var axis = document.createElementNS(SVG, "path");
    axis.setAttribute("class", "axis");
    axis.setAttribute("fill", "none");
    axis.setAttribute("d", "M" + L + " " + T + " V" + (H - B) + " H" + (W - R));
    svg.appendChild(axis);
    function label(x, y, anchor, value) {
      var node = document.createElementNS(SVG, "text");
      node.setAttribute("x", x);
      node.setAttribute("y", y);
      node.setAttribute("text-anchor", anchor);
      node.textContent = value;
      svg.appendChild(node);
    }
    label(L - 4, T + 4, "end", key === "rate" ? max.toFixed(1) : String(max));
    label(L - 4, H - B, "end", "0");
    label(L, H - 4, "start", "-" + Math.round(span / 60 * 10) / 10 + " min");
    label(W - R, H - 4, "end", "now");
    names.forEach(function (q, i) {
      var points = samples.map(function (s) {
        var x = L + (W - R - L) * (s.t - start) / span;
        var y = (H - B) - (H - B - T) * (s[key][q] || 0) / max;
        return x.toFixed(1) + "," + y.toFixed(1);
      });
      var line = document.createElementNS(SVG, "polyline");
      line.setAttribute("points", points.join(" "));
      line.setAttribute("fill", "none");
      line.setAttribute("stroke", COLORS[i % COLORS.length]);
      line.setAttribute("data-queue", q);
      svg.appendChild(line);
    });
  }

  function legend(names) {
    var box = $("emq-legend");
    box.replaceChildren();
    names.forEach(function (q, i) {
      var item = document.createElement("span");
      var swatch = document.createElement("i");
      swatch.style.background = COLORS[i % COLORS.length];
      item.appendChild(swatch);
      item.appendChild(document.createTextNode(q));
      box.appendChild(item);
    });
  }

  var DASH = "\u2013";

  function shown(value) { return value === null || value === undefined ? DASH : String(value); }

  function when(unix) { return unix === null || unix === undefined ? DASH : new Date(unix * 1000).toLocaleString(); }

  // Rows of cells, each row with its class (the role) and title (why a router is unreachable);
  // cells from numbersFrom on are numbers (right-aligned).
  function fillRows(id, rows) {
    var body = $(id);
    body.replaceChildren();
    rows.forEach(function (row) {
      var tr = document.createElement("tr");
      row.cells.forEach(function (value, i) { cell(tr, value, i >= row.numbersFrom ? "num" : null); });
      if (row.className) { tr.className = row.className; }
      if (row.title) { tr.title = row.title; }
      body.appendChild(tr);
    });
  }

  // Several routers: every router's role, and each shard's leader and queues. The data view
  // sends routers and shards (both empty with one router, whose page has no such tables).
  function renderRouters(data) {
    if (!$("emq-routers")) { return; }
    fillRows("emq-routers", data.routers.map(function (r) {
      var seconds = r.last_failover_seconds;
      return {
        cells: [r.shard, shown(r.group), r.address, r.role, shown(r.epoch), when(r.since),
                shown(r.failovers), when(r.last_failover),
                seconds === null || seconds === undefined ? DASH : seconds.toFixed(2) + "s"],
        numbersFrom: 4, className: "emq-role-" + r.role, title: r.error || ""
      };
    }));
    var rows = [];
    data.shards.forEach(function (s) {
      if (!s.leader) {
        rows.push({cells: [s.shard, DASH, s.error, DASH, DASH, DASH], numbersFrom: 3,
                   className: "emq-role-unreachable"});
      } else if (!s.queues.length) {
        rows.push({cells: [s.shard, s.leader, "no queues yet", DASH, DASH, DASH], numbersFrom: 3});
      }
      s.queues.forEach(function (q) {
        rows.push({cells: [s.shard, s.leader, q.queue, q.waiting, q.in_flight, q.processed],
                   numbersFrom: 3});
      });
    });
    fillRows("emq-shards", rows);
  }

  function render(data) {
    var router = data.router;
    var state = $("emq-state");
    if (router.reachable) {
      state.textContent = "live: router " + router.router;
      state.className = "emq-live";
    } else {
      state.textContent = "router unreachable (" + router.error.replace(/^router unreachable: /, "") + ")";
      state.className = "emq-down";
    }
    text("emq-updated", "updated " + new Date(data.now).toLocaleTimeString());
    var t = router.totals;
    text("emq-waiting", router.reachable ? t.waiting : "\u2013");
    text("emq-in-flight", router.reachable ? t.in_flight : "\u2013");
    text("emq-processed", router.reachable ? t.processed : "\u2013");
    text("emq-rate", router.reachable && t.jobs_per_s !== null ? t.jobs_per_s.toFixed(1) : "\u2013");
    text("emq-workers", router.reachable ? data.workers_alive : "\u2013");
    fill("emq-queues", router.queues.map(function (q) {
      return [[q.queue], [q.waiting, "num"], [q.in_flight, "num"], [duration(q.waiting_since_ms), "num"],
              [q.processed, "num"], [q.jobs_per_s === null ? "\u2013" : q.jobs_per_s.toFixed(1), "num"]];
    }), 6, router.reachable ? "no queues yet" : "router unreachable");
    fill("emq-managers", router.job_managers.map(function (m) {
      var queues = m.queues.map(function (wq) { return wq[1] + ":" + wq[0]; }).join(", ");
      var hb = m.heartbeat_ago_s === null ? "\u2013" : duration(m.heartbeat_ago_s * 1000) + " ago";
      return [[m.name], [queues], [m.free_slots, "num"], [m.in_flight, "num"], [hb, "num"]];
    }), 5, router.reachable ? "no job managers connected" : "router unreachable");
    fill("emq-jobs", (router.jobs || []).map(function (j) {
      var state = j.state === "handed_out" ? "handed out" : j.state;
      return [[j.msgid], [j.job], [j.queue], [j.jobmanager], [state],
              [j.pid === null ? "\u2013" : j.pid, "num"], [duration(j.age * 1000), "num"]];
    }), 7, router.reachable ? "no jobs running or prefetched" : "router unreachable");
    fill("emq-failures", data.failures.map(function (f) {
      return [[new Date(f.when).toLocaleString(), null, f.url], [f.job], [f.queue], [f.status], [f.error]];
    }), 5, "no failures recorded");
    fill("emq-schedules", data.schedules.map(function (s) {
      return [[new Date(s.next_run).toLocaleString()], [s.name, null, s.url], [s.queue], [s.timing]];
    }), 4, "no schedules");
    var names = queueNames(data.samples);
    var now = Date.parse(data.now) / 1000;
    chart("emq-depth-chart", data.samples, "waiting", names, now);
    chart("emq-rate-chart", data.samples, "rate", names, now);
    legend(names);
    renderRouters(data);
    var root = $("emq-dashboard");
    root.dataset.polls = String(Number(root.dataset.polls) + 1);
    root.dataset.reachable = String(router.reachable);
  }

  function start() {
    var root = $("emq-dashboard");
    if (!root) { return; }
    var url = root.dataset.url;
    var every = Number(root.dataset.pollMs) || 2000;
    function poll() {
      fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } })
        .then(function (response) {
          if (!response.ok) { throw new Error("HTTP " + response.status); }
          return response.json();
        })
        .then(render)
        .catch(function (error) {
          var state = $("emq-state");
          state.textContent = "dashboard data unavailable (" + error.message + ")";
          state.className = "emq-down";
        })
        .finally(function () { window.setTimeout(poll, every); });
    }
    poll();
  }

  document.addEventListener("DOMContentLoaded", start);
})();
