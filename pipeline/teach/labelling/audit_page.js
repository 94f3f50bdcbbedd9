// The audit page's episode timeline and answer browser. Plain JavaScript, no library, no network:
// the data is the JSON block `review-data` that pipeline/teach/labelling/review.py computes.
(function () {
  "use strict";
  var R = JSON.parse(document.getElementById("review-data").textContent);
  var B = R.browse, C = {};
  B.columns.forEach(function (c, i) { C[c] = i; });
  var STATUS_COLOUR = { ok: "#1e7b34", regex_fallback: "#7fbf7f", not_reviewed: "#bbbbbb" };
  var statusColour = function (s) { return s == null ? "#eeeeee" : (STATUS_COLOUR[s] || "#d9534f"); };
  var el = function (id) { return document.getElementById(id); };
  var esc = function (s) {
    return String(s == null ? "" : s).replace(/[&<>"]/g, function (c) {
      return { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" }[c];
    });
  };
  var frameImg = function (key, size) {
    var src = B.frames[key];
    return src ? '<img src="' + src + '" style="width:' + size + "px;height:" + size +
      'px;image-rendering:pixelated;border:1px solid #ccc" alt="frame ' + esc(key) + '">'
      : '<span class="note">(frame not embedded: ' + Object.keys(B.frames).length + " of " +
        B.frames_total + " frames are)</span>";
  };

  // ---- timeline ------------------------------------------------------------------------------
  var episodes = Object.keys(R.timelines).map(Number).sort(function (a, b) { return a - b; });
  var select = el("tl-episode");
  // a page of several rounds numbers episodes across them: each one's round and own number
  var episodeName = function (e) { return (R.episode_names || {})[e] || String(e); };
  select.innerHTML = episodes.map(function (e) {
    return '<option value="' + e + '">' + esc(episodeName(e)) + "</option>";
  }).join("");
  var W = 1000, LANE = 56, STRIP = 8, PAD = 90;

  function lanePath(values, n, lo, hi, y0) {
    var d = "", pen = false;
    for (var i = 0; i < n; i++) {
      var v = values[i];
      if (v == null) { pen = false; continue; }
      var x = PAD + (W - PAD - 10) * (n > 1 ? i / (n - 1) : 0);
      var y = y0 + LANE - STRIP - 4 - (LANE - STRIP - 10) * (v - lo) / ((hi - lo) || 1);
      d += (pen ? "L" : "M") + x.toFixed(1) + " " + y.toFixed(1);
      pen = true;
    }
    return d;
  }

  function drawTimeline() {
    var line = R.timelines[select.value], n = line.t.length, tasks = Object.keys(line.tasks);
    var H = LANE * tasks.length, svg = [];
    var xOf = function (i) { return PAD + (W - PAD - 10) * (n > 1 ? i / (n - 1) : 0); };
    var colours = ["#4a7fc1", "#e08a1e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2"];
    tasks.forEach(function (task, k) {
      var lane = line.tasks[task], y0 = k * LANE, w = (W - PAD - 10) / Math.max(n - 1, 1);
      svg.push('<text x="4" y="' + (y0 + 20) + '" font-size="12">' + task + "</text>");
      for (var i = 0; i < n; i++) {
        svg.push('<rect x="' + (xOf(i) - w / 2).toFixed(1) + '" y="' + (y0 + LANE - STRIP) +
          '" width="' + Math.max(w, 1).toFixed(1) + '" height="' + STRIP + '" fill="' +
          statusColour(lane.status[i]) + '"><title>t=' + line.t[i] + " " + (lane.status[i] || "") +
          "</title></rect>");
        if (lane.queried[i]) {
          svg.push('<line x1="' + xOf(i).toFixed(1) + '" x2="' + xOf(i).toFixed(1) + '" y1="' +
            (y0 + LANE - STRIP - 3) + '" y2="' + (y0 + LANE - STRIP) + '" stroke="#333"/>');
        }
      }
      var series = [];
      if (task === "milestone") series.push({ v: lane.potential, lo: 0, hi: 1 });
      else if (task === "judge") series.push({ v: lane.value.map(function (v) { return v == null ? null : +v; }), lo: 0, hi: 1 });
      else if (task === "action" && R.action_choices) series.push({ v: lane.value, lo: 0, hi: R.action_choices.length - 1 });
      else if (task === "action") {
        R.action_names.forEach(function (_, d) {
          series.push({ v: lane.value.map(function (a) { return a == null ? null : a[d]; }), lo: -1, hi: 1 });
        });
      }
      series.forEach(function (s, d) {
        svg.push('<path d="' + lanePath(s.v, n, s.lo, s.hi, y0) + '" fill="none" stroke="' +
          colours[d % colours.length] + '" stroke-width="1.5"/>');
      });
      if (task === "action" && !R.action_choices) {
        svg.push('<text x="4" y="' + (y0 + 34) + '" font-size="10" fill="#666">' +
          R.action_names.map(function (nm, d) {
            return '<tspan fill="' + colours[d % colours.length] + '">' + esc(nm) + "</tspan>";
          }).join(" ") + "</text>");
      }
    });
    svg.push('<line id="tl-cursor" x1="0" x2="0" y1="0" y2="' + H + '" stroke="#b3261e"/>');
    el("tl").innerHTML = '<svg width="' + W + '" height="' + H + '" viewBox="0 0 ' + W + " " + H +
      '">' + svg.join("") + '</svg><br><input type="range" id="tl-slider" min="0" max="' +
      (n - 1) + '" value="0" style="width:' + (W - PAD) + "px;margin-left:" + PAD + 'px">';
    var slider = el("tl-slider");
    var show = function () {
      var i = +slider.value, key = line.sample_keys[i], x = xOf(i).toFixed(1);
      var cursor = el("tl-cursor");
      cursor.setAttribute("x1", x); cursor.setAttribute("x2", x);
      var rows = tasks.map(function (task) {
        var lane = line.tasks[task], v = lane.value[i];
        var text = v == null ? "-" : Array.isArray(v) ? v.map(function (z) {
          return typeof z === "number" ? z.toFixed(2) : z; }).join(", ") : String(v);
        if (task === "action" && R.action_choices && v != null) text = R.action_choices[v];
        return "<tr><td class=\"l\">" + task + '</td><td class="l">' + esc(text) +
          '</td><td class="l" style="color:' + statusColour(lane.status[i]) + '">' +
          esc(lane.status[i] || "") + '</td><td class="l">' + (lane.queried[i] ? "queried" : "carried") + "</td></tr>";
      });
      el("tl-frame").innerHTML = frameImg(key, 128) + "<div><b>" + esc(key) + "</b> · t = " +
        line.t[i] + "<table>" + rows.join("") + "</table></div>";
    };
    slider.oninput = show;
    show();
  }
  select.onchange = drawTimeline;
  if (episodes.length) drawTimeline();

  // ---- browser -------------------------------------------------------------------------------
  var PAGE = 50, page = 0, chosen = [], sortBy = null, sortDir = 1;
  function options(id, values, label) {
    el(id).innerHTML = '<option value="">any</option>' + values.map(function (v, i) {
      return '<option value="' + i + '">' + esc(label ? label(v) : v) + "</option>";
    }).join("");
  }
  var episodeList = episodes.slice();
  var rounds = [];
  B.rows.forEach(function (r) { if (rounds.indexOf(r[C.round]) < 0) rounds.push(r[C.round]); });
  rounds.sort(function (a, b) { return a - b; });
  var manyRounds = rounds.length > 1;
  options("f-task", B.tasks);
  options("f-status", B.statuses);
  options("f-teacher", B.teachers);
  options("f-episode", episodeList, episodeName);
  options("f-round", rounds);
  if (!manyRounds) el("f-round-label").style.display = "none";
  // the text filter: a case-insensitive substring of the shown value or of the raw answer
  function contains(r, text) {
    return String(r[C.value] == null ? "" : r[C.value]).toLowerCase().indexOf(text) >= 0 ||
      String(r[C.raw] == null ? "" : r[C.raw]).toLowerCase().indexOf(text) >= 0;
  }
  function applyFilters() {
    var task = el("f-task").value, status = el("f-status").value, teacher = el("f-teacher").value;
    var episode = el("f-episode").value, queried = el("f-queried").checked;
    var round = el("f-round").value, against = el("f-against") ? el("f-against").value : "";
    var reference = el("f-reference").value, text = el("f-text").value.trim().toLowerCase();
    chosen = [];
    for (var i = 0; i < B.rows.length; i++) {
      var r = B.rows[i];
      if ((task === "" || r[C.task] === +task) && (status === "" || r[C.status] === +status) &&
          (teacher === "" || r[C.teacher] === +teacher) &&
          (episode === "" || r[C.episode] === episodeList[+episode]) && (!queried || r[C.queried]) &&
          (round === "" || r[C.round] === rounds[+round]) &&
          (against === "" || r[C.agrees_b] === +against) &&
          (reference === "" || r[C.agrees] === +reference) && (text === "" || contains(r, text))) {
        chosen.push(i);
      }
    }
    sortChosen();
    page = 0;
    drawPage();
  }
  // sort keys per column: frames in (episode, t) order, tasks in the table's order, names as text
  var SORT_KEYS = {
    round: function (r) { return [r[C.round], r[C.episode], r[C.t]]; },
    frame: function (r) { return [r[C.episode], r[C.t]]; },
    task: function (r) { return [r[C.task]]; },
    status: function (r) { return [B.statuses[r[C.status]]]; },
    value: function (r) { return [String(r[C.value] == null ? "" : r[C.value])]; },
    raw: function (r) { return [String(r[C.raw] == null ? "" : r[C.raw])]; }
  };
  function compareKeys(a, b) {
    for (var k = 0; k < a.length; k++) { if (a[k] < b[k]) return -1; if (a[k] > b[k]) return 1; }
    return 0;
  }
  function sortChosen() {
    if (sortBy === null) return;  // the table's own order: episode, t, task
    var key = SORT_KEYS[sortBy];
    chosen.sort(function (i, j) { return sortDir * compareKeys(key(B.rows[i]), key(B.rows[j])) || i - j; });
  }
  function drawPage() {
    var start = page * PAGE, end = Math.min(start + PAGE, chosen.length);
    el("br-count").textContent = chosen.length ? "rows " + (start + 1) + "-" + end + " of " +
      chosen.length + " (of " + B.rows.length + " in the table)" : "no row matches";
    var columns = [["frame", "frame"], ["task", "task"], ["status", "status"], ["value", "value"],
      ["raw", "raw answer"]];
    if (manyRounds) columns.unshift(["round", "round"]);
    var html = ["<tr>" + columns.map(function (c) {
      var mark = sortBy === c[0] ? (sortDir > 0 ? " &#9650;" : " &#9660;") : "";
      return '<th data-col="' + c[0] + '" style="cursor: pointer" title="sort">' + c[1] + mark + "</th>";
    }).join("") + "</tr>"];
    for (var j = start; j < end; j++) {
      var r = B.rows[chosen[j]];
      html.push('<tr data-i="' + chosen[j] + '">' + (manyRounds ? "<td>" + r[C.round] + "</td>" : "") +
        "<td>" + esc(r[C.sample_key]) + "</td><td>" +
        B.tasks[r[C.task]] + '</td><td style="color:' + statusColour(B.statuses[r[C.status]]) +
        '">' + esc(B.statuses[r[C.status]]) + "</td><td>" + esc(r[C.value]) + "</td><td>" +
        esc(r[C.raw]) + "</td></tr>");
    }
    el("br-table").innerHTML = html.join("");
    el("br-prev").disabled = page === 0;
    el("br-next").disabled = end >= chosen.length;
  }
  function detail(i) {
    var r = B.rows[i], key = r[C.sample_key];
    var prompt = r[C.prompt] >= 0 ? B.prompts[r[C.prompt]]
      : (r[C.queried] ? "(prompt not embedded for this frame)" : "(carried from " + r[C.source_key] + ")");
    el("br-detail").innerHTML = frameImg(key, 168) + "<p><b>" + esc(key) + "</b> · " +
      B.tasks[r[C.task]] + " · " + esc(B.statuses[r[C.status]]) + (r[C.detail] ? " · " +
      esc(r[C.detail]) : "") + "<br>teacher <code>" + esc(B.teachers[r[C.teacher]]) +
      "</code><br>value <b>" + esc(r[C.value]) + "</b></p><b>raw answer</b><pre>" +
      esc(r[C.raw] == null ? "(no answer)" : r[C.raw]) + "</pre><b>context</b><pre>" +
      esc(JSON.stringify(B.contexts[key], null, 1)) + "</pre><b>prompt</b><pre>" + esc(prompt) + "</pre>";
  }
  el("br-table").onclick = function (ev) {
    var th = ev.target.closest("th[data-col]");
    if (th) {  // a header: sort by it, again to reverse
      var col = th.getAttribute("data-col");
      sortDir = sortBy === col ? -sortDir : 1;
      sortBy = col;
      sortChosen();
      page = 0;
      drawPage();
      return;
    }
    var tr = ev.target.closest("tr[data-i]");
    if (!tr) return;
    Array.prototype.forEach.call(el("br-table").querySelectorAll("tr.sel"), function (t) { t.className = ""; });
    tr.className = "sel";
    detail(+tr.getAttribute("data-i"));
  };
  el("br-prev").onclick = function () { page--; drawPage(); };
  el("br-next").onclick = function () { page++; drawPage(); };
  ["f-task", "f-status", "f-teacher", "f-round", "f-episode", "f-queried", "f-reference", "f-against"].forEach(function (id) {
    if (el(id)) el(id).onchange = applyFilters;  // f-against: with a second teacher only
  });
  el("f-text").oninput = applyFilters;
  // the listed rows as (sample_key, task) pairs, for `stages.review export --selection`
  el("br-export").onclick = function () {
    var pairs = chosen.map(function (i) {
      return { sample_key: B.rows[i][C.sample_key], task: B.tasks[B.rows[i][C.task]] };
    });
    var link = document.createElement("a");
    link.href = URL.createObjectURL(new Blob([JSON.stringify(pairs, null, 1)], { type: "application/json" }));
    link.download = "selection.json";
    document.body.appendChild(link);
    link.click();
    link.remove();
    el("br-export").setAttribute("data-exported", pairs.length);
  };
  Array.prototype.forEach.call(document.querySelectorAll("a.jump"), function (a) {
    a.onclick = function (ev) {
      ev.preventDefault();
      var task = a.getAttribute("data-task");
      for (var i = 0; i < B.rows.length; i++) {
        if (B.rows[i][C.sample_key] === a.getAttribute("data-key") &&
            (task === null || B.tasks[B.rows[i][C.task]] === task)) { detail(i); break; }
      }
      el("br-detail").scrollIntoView();
    };
  });
  el("br-note").textContent = "Every label row (" + B.rows.length + "); frames and exact prompts " +
    "are embedded for " + Object.keys(B.frames).length + " of " + B.frames_total +
    " frames (spread over the table); the others show answer, status, detail and context.";
  applyFilters();
})();
