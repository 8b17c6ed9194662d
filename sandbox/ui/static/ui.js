// sandbox ui: the page's own small script (no framework). Actions send the token in a header.
(function () {
  "use strict";
  var token = document.querySelector("meta[name=sandbox-token]").content;
  var boot = JSON.parse(document.body.dataset.boot || "{}");

  function toast(text, bad) {
    var t = document.getElementById("toast");
    t.textContent = text;
    t.className = bad ? "show bad" : "show";
    setTimeout(function () { t.className = ""; }, 6000);
  }

  function get(url) {
    return fetch(url, { credentials: "same-origin" }).then(function (r) { return r.text(); });
  }

  function post(url, body) {
    return fetch(url, {
      method: "POST",
      credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-Sandbox-Token": token },
      body: JSON.stringify(body || {})
    }).then(function (r) {
      return r.json().then(function (data) { data.status = r.status; return data; });
    });
  }

  function load(el, url) {
    if (!el) return Promise.resolve();
    return get(url).then(function (html) { el.innerHTML = html; });
  }

  function picked() {
    var ids = [];
    document.querySelectorAll("input.pick:checked").forEach(function (b) { ids.push(b.dataset.hunk); });
    return ids;
  }

  function diffUrl(extra) {
    var el = document.getElementById("diff");
    var split = document.getElementById("split");
    var url = el.dataset.src + "?view=" + (split && split.checked ? "split" : "unified");
    return url + (extra || "");
  }

  function refresh(withDiff) {
    var run = encodeURIComponent(boot.run);
    var jobs = [load(document.getElementById("timeline"), "/run/" + run + "/timeline")];
    if (withDiff) {
      jobs.push(load(document.getElementById("diff"), diffUrl()));
      var c = document.getElementById("conflicts");
      if (c) jobs.push(load(c, c.dataset.src));
    }
    return Promise.all(jobs);
  }

  function report(data) {
    var box = document.getElementById("result");
    var lines = [data.message || (data.ok ? "Done." : "Refused.")];
    var rep = data.report;
    if (rep && rep.conflicts && rep.conflicts.length) {
      lines.push("Conflicts (nothing was written):");
      rep.conflicts.forEach(function (c) { lines.push("  " + c.path + ": " + c.reason + " — " + c.hint); });
    }
    if (box) {
      box.textContent = lines.join("\n");
      box.className = "result " + (data.ok ? "ok" : "refused");
    }
    toast(lines[0], !data.ok);
  }

  function act(action) {
    var run = encodeURIComponent(boot.run);
    var body = {};
    var name = action;
    if (action === "apply" || action === "preview") {
      body.hunks = picked();
      if (!body.hunks.length) { toast("Pick one or more hunks first (or 'Apply everything').", true); return; }
    }
    if (action === "apply-all") name = "apply";
    return post("/api/run/" + run + "/" + name, body).then(function (data) {
      report(data);
      if (data.ok && name !== "preview") return refresh(true);
    });
  }

  // -- the run page ---------------------------------------------------------------------------
  if (boot.page === "run") {
    var conflicts = document.getElementById("conflicts");
    if (conflicts) load(conflicts, conflicts.dataset.src);

    document.querySelectorAll(".actions button[data-action]").forEach(function (b) {
      b.addEventListener("click", function () { act(b.dataset.action); });
    });
    var split = document.getElementById("split");
    if (split) split.addEventListener("change", function () { load(document.getElementById("diff"), diffUrl()); });

    document.addEventListener("change", function (ev) {
      var t = ev.target;
      if (t.classList && t.classList.contains("pick-file")) {
        t.closest(".file").querySelectorAll("input.pick").forEach(function (b) { b.checked = t.checked; });
      }
    });

    document.addEventListener("click", function (ev) {
      var t = ev.target;
      var page = t.closest && t.closest("a[data-page]");
      if (page) { ev.preventDefault(); load(document.getElementById("diff"), diffUrl("&page=" + page.dataset.page)); return; }
      var more = t.closest && t.closest("a.more");
      if (more) {
        ev.preventDefault();
        get(more.dataset.src).then(function (html) { more.parentNode.outerHTML = html; });
        return;
      }
      var row = t.closest && t.closest("tr.call");
      if (row && !t.closest("a, button, input")) toggle(row);
    });

    function toggle(row) {
      var detail = document.querySelector("tr.calldiff[data-for='" + CSS.escape(row.dataset.call) + "']");
      if (!detail) return;
      if (!detail.hidden) { detail.hidden = true; return; }
      detail.hidden = false;
      var cell = detail.firstElementChild;
      if (!row.dataset.diff) { cell.innerHTML = "<p class='muted'>This call changed no files.</p>"; return; }
      load(cell, row.dataset.diff);
    }

    document.addEventListener("keydown", function (ev) {
      if (ev.target.closest && ev.target.closest("input, textarea")) return;
      var rows = Array.prototype.slice.call(document.querySelectorAll("tr.call"));
      var at = rows.indexOf(document.activeElement);
      if (ev.key === "j" || ev.key === "k") {
        var next = ev.key === "j" ? Math.min(rows.length - 1, at + 1) : Math.max(0, at - 1);
        if (rows[next]) { rows[next].focus(); rows[next].scrollIntoView({ block: "nearest" }); }
        ev.preventDefault();
      } else if (ev.key === "Enter" && at >= 0) {
        toggle(rows[at]);
      } else if (ev.key === "a") {
        act("apply");
      } else if (ev.key === "u") {
        act("undo");
      } else if (ev.key === "?") {
        toast("j/k: next/previous call · Enter: its diff · a: apply the picked hunks · u: undo");
      }
    });

    // Live: follow a running agent (the ledger's tip), without losing hunks already picked.
    setInterval(function () {
      get("/api/tips").then(function (text) {
        var tips = JSON.parse(text);
        var tip = tips[boot.run];
        if (tip !== undefined && tip !== boot.tip) {
          boot.tip = tip;
          refresh(picked().length === 0);
        }
      }).catch(function () {});
    }, 2000);
  }

  // -- approvals and the runs list --------------------------------------------------------------
  document.querySelectorAll("button[data-call][data-run]").forEach(function (b) {
    b.addEventListener("click", function () {
      var body = { call_id: b.dataset.call };
      if (b.dataset.action === "deny") {
        var why = window.prompt("Why deny it? (the agent is told)", "");
        if (why === null) return;
        body.reason = why || null;
      }
      post("/api/run/" + encodeURIComponent(b.dataset.run) + "/" + b.dataset.action, body).then(function (data) {
        report(data);
        if (data.ok) setTimeout(function () { location.reload(); }, 400);
      });
    });
  });

  if (boot.page === "runs" || boot.page === "approvals") {
    setInterval(function () {
      get("/api/tips").then(function (text) {
        if (boot.tips && text.replace(/\s/g, "") !== JSON.stringify(boot.tips).replace(/\s/g, "")) location.reload();
      }).catch(function () {});
    }, 3000);
  }
})();
