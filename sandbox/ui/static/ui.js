// sandbox ui: the page's own small script (no framework), started by boot.js once the page is in.
// Every request sends the tab's token in a header (sandbox/ui/auth.py: no cookie carries authority).
(function () {
  "use strict";
  var token = sessionStorage.getItem("sandbox-ui-token") || "";
  var boot = JSON.parse(document.body.dataset.boot || "{}");

  function toast(text, bad) {
    var t = document.getElementById("toast");
    t.textContent = text;
    t.className = bad ? "show bad" : "show";
    setTimeout(function () { t.className = ""; }, 6000);
  }

  function get(url) {
    return fetch(url, { credentials: "omit", headers: { "X-Sandbox-Token": token } }).then(function (r) {
      return r.text();
    });
  }

  function post(url, body) {
    return fetch(url, {
      method: "POST",
      credentials: "omit",
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

  // Only the newest diff asked for lands (a slow answer to an older selection never overwrites it).
  var diffAsked = 0;
  function loadDiff(extra) {
    var el = document.getElementById("diff");
    var mine = ++diffAsked;
    return get(diffUrl(extra)).then(function (html) {
      if (mine !== diffAsked) return;
      // The tree's folded directories stay folded through a reload of the diff (a live update).
      var closed = {};
      el.querySelectorAll("details[data-dir]:not([open])").forEach(function (d) { closed[d.dataset.dir] = true; });
      el.innerHTML = html;
      el.querySelectorAll("details[data-dir]").forEach(function (d) { if (closed[d.dataset.dir]) d.open = false; });
      markViewed();
      highlightIn(el);
    });
  }

  // -- the "viewed" marks: this tab's (sessionStorage), per run, each held to its file's revision --
  function viewedKey() { return "sandbox-viewed:" + boot.run; }

  function viewedMarks() {
    try { return JSON.parse(sessionStorage.getItem(viewedKey()) || "{}"); } catch (e) { return {}; }
  }

  function fold(file, yes) {
    file.classList.toggle("folded", yes);
    var b = file.querySelector("button.fold");
    if (b) { b.textContent = yes ? "unfold" : "fold"; b.setAttribute("aria-expanded", yes ? "false" : "true"); }
  }

  // A file viewed as it is now is marked and folded; one the agent changed since is not.
  function markViewed() {
    var marks = viewedMarks();
    document.querySelectorAll("#diff .file[data-rev]").forEach(function (f) {
      var seen = marks[f.dataset.path] === f.dataset.rev;
      var box = f.querySelector("input.viewed");
      if (box) box.checked = seen;
      f.classList.toggle("viewed", seen);
      if (seen) fold(f, true);
      var link = document.querySelector("#tree a.tree-file[data-path='" + CSS.escape(f.dataset.path) + "']");
      if (link) link.classList.toggle("viewed", seen);
    });
  }

  function setViewed(file, yes) {
    var marks = viewedMarks();
    if (yes) marks[file.dataset.path] = file.dataset.rev; else delete marks[file.dataset.path];
    sessionStorage.setItem(viewedKey(), JSON.stringify(marks));
    markViewed();
    if (!yes) fold(file, false);
  }

  // -- image previews: each <img data-src> fetched with the token, shown from a blob: address --
  function showImages(root) {
    if (!root) return;
    root.querySelectorAll("img[data-src]:not([src])").forEach(function (img) {
      img.setAttribute("src", "data:,");  // asked once
      fetch(img.dataset.src, { credentials: "omit", headers: { "X-Sandbox-Token": token } }).then(function (r) {
        if (!r.ok) throw new Error(String(r.status));
        return r.blob();
      }).then(function (b) {
        img.onload = function () { img.dataset.shown = "1"; };
        img.src = URL.createObjectURL(b);
      }).catch(function () { img.alt = img.alt + " (not shown)"; });
    });
  }

  // -- syntax colours: the vendored highlight.js, loaded after the page shows, on the diffs in view --
  var hl = { state: "none", queue: [], seen: null };

  function highlightIn(root) {
    showImages(root);
    if (!root || !root.querySelector("pre.diff, table.split")) return;
    if (hl.state === "none") {
      hl.state = "loading";
      var s = document.createElement("script");
      s.src = "/static/vendor/highlight.min.js";
      s.onload = function () { hl.state = "ready"; hl.queue.forEach(watch); hl.queue = []; };
      s.onerror = function () { hl.state = "failed"; };
      document.head.appendChild(s);
    }
    if (hl.state === "ready") watch(root); else if (hl.state === "loading") hl.queue.push(root);
  }

  function watch(root) {
    if (!("IntersectionObserver" in window)) { root.querySelectorAll("pre.diff, table.split").forEach(paint); return; }
    if (!hl.seen) {
      hl.seen = new IntersectionObserver(function (items) {
        items.forEach(function (it) { if (it.isIntersecting) { hl.seen.unobserve(it.target); paint(it.target); } });
      }, { rootMargin: "400px" });
    }
    root.querySelectorAll("pre.diff, table.split").forEach(function (b) { if (!b.dataset.hl) hl.seen.observe(b); });
  }

  function escapeHtml(text) {
    return text.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
  }

  // One diff block: each line coloured on its own (the +/-/space sign kept apart), the add/remove
  // backgrounds left as they are. highlight.js escapes what it returns.
  function paint(block) {
    if (block.dataset.hl || !window.hljs) return;
    block.dataset.hl = "1";
    var file = block.closest("[data-lang]");
    var lang = file && file.dataset.lang;
    if (!lang || !window.hljs.getLanguage(lang)) return;
    var split = block.tagName === "TABLE";
    block.querySelectorAll(split ? "td" : "span").forEach(function (el) {
      if (el.classList.contains("hidden-chars")) return;  // its written-out characters stay marked
      var text = el.textContent;
      var sign = split ? "" : text.charAt(0);
      var rest = split ? text : text.slice(1);
      if (!rest.trim() || (!split && (text.indexOf("@@") === 0 || sign === "\\"))) return;
      var out = window.hljs.highlight(rest, { language: lang, ignoreIllegals: true }).value;
      el.innerHTML = escapeHtml(sign) + out;
      el.classList.add("hl");
    });
  }

  // The hunk ids picked; a whole-file unit (or a rename: two paths) carries its ids space-separated.
  function picked() {
    var ids = [];
    document.querySelectorAll("#diff input.pick:checked").forEach(function (b) {
      b.dataset.hunk.split(/\s+/).forEach(function (id) { if (id) ids.push(id); });
    });
    return ids;
  }

  // The selection shown (the boxes' text as last submitted): git pathspecs and calls, as the CLI takes them.
  var shown = { paths: "", calls: "" };

  function selectionQuery() {
    var q = "";
    if (shown.paths) q += "&paths=" + encodeURIComponent(shown.paths);
    if (shown.calls) q += "&calls=" + encodeURIComponent(shown.calls);
    return q;
  }

  function diffUrl(extra) {
    var el = document.getElementById("diff");
    var split = document.getElementById("split");
    var ws = document.getElementById("ignore-ws");
    var url = el.dataset.src + "?view=" + (split && split.checked ? "split" : "unified");
    if (ws && ws.checked) url += "&ws=ignore";
    return url + selectionQuery() + (extra || "");
  }

  // Replace an element's content where it is: open call diffs stay open, the focus stays, and when the
  // element is above the view and grows, the page moves by as much (the reader's place does not).
  function swapInPlace(el, html) {
    if (!el) return;
    var before = el.getBoundingClientRect();
    var opened = {};
    el.querySelectorAll("tr.calldiff:not([hidden])").forEach(function (r) {
      opened[r.dataset.for] = r.firstElementChild.innerHTML;
    });
    var focused = document.activeElement && el.contains(document.activeElement) ? document.activeElement.id : "";
    el.innerHTML = html;
    Object.keys(opened).forEach(function (id) {
      var r = el.querySelector("tr.calldiff[data-for='" + CSS.escape(id) + "']");
      if (r) { r.hidden = false; r.firstElementChild.innerHTML = opened[id]; }
    });
    var again = focused && document.getElementById(focused);
    if (again) again.focus({ preventScroll: true });
    if (before.bottom < 0) window.scrollBy(0, el.getBoundingClientRect().height - before.height);
  }

  // As for the diff: only the newest timeline asked for lands (two live updates a second apart, the
  // older answer last, would show the calls as they were until the run moved on again).
  var timelineAsked = 0;
  function refresh(withDiff) {
    var run = encodeURIComponent(boot.run);
    var timeline = document.getElementById("timeline");
    var mine = ++timelineAsked;
    var jobs = [get("/run/" + run + "/timeline").then(function (html) {
      if (mine === timelineAsked) swapInPlace(timeline, html);
    })];
    if (withDiff) {
      jobs.push(loadDiff());
      var c = document.getElementById("conflicts");
      if (c) jobs.push(load(c, c.dataset.src));
    }
    return Promise.all(jobs);
  }

  function report(data) {
    var box = document.getElementById("result");
    var lines = [data.message || (data.ok ? "Done." : "Refused.")];
    var rep = data.report;
    if (rep && data.ok) {
      // Each path written (or that would be), with why when only part of it: as 'sandbox apply' lists them.
      (rep.dry_run ? rep.would_apply || [] : rep.applied || []).concat(rep.restored || []).forEach(function (p) {
        lines.push("  " + p + (rep.reasons && rep.reasons[p] ? "  (" + rep.reasons[p] + ")" : ""));
      });
      (rep.skipped || []).forEach(function (p) {
        lines.push("  skipped " + p + ": " + ((rep.reasons && rep.reasons[p]) || "already there"));
      });
    }
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
    if (action === "apply" || action === "preview" || action === "apply-all" || action === "apply-3way") {
      body.paths = shown.paths;
      body.calls = shown.calls;
      var ids = picked();
      if (action === "apply" && !ids.length) { toast("Pick one or more hunks first (or 'Apply all shown').", true); return; }
      if (action !== "apply-all" && ids.length) body.hunks = ids;
    }
    if (action === "apply-3way") {
      var what = ids.length ? "the " + ids.length + " picked hunk(s)" : "all shown";
      if (!window.confirm("Apply " + what + " with a 3-way merge? Where you and the agent changed the same " +
        "lines, conflict markers are written into your file (Undo takes it back).")) return;
      body.three_way = true;
      name = "apply";
    }
    if (action === "apply-all") name = "apply";
    return post("/api/run/" + run + "/" + name, body).then(function (data) {
      report(data);
      if (data.ok && name !== "preview") return refresh(true);
    });
  }

  // -- the run page ---------------------------------------------------------------------------
  if (boot.page === "run") {
    // After the page has shown (not before DOMContentLoaded: a 500-call page must stay fast).
    setTimeout(function () { highlightIn(document.getElementById("diff")); }, 0);
    var conflicts = document.getElementById("conflicts");
    if (conflicts) load(conflicts, conflicts.dataset.src);

    document.querySelectorAll(".actions button[data-action]").forEach(function (b) {
      b.addEventListener("click", function () { act(b.dataset.action); });
    });
    var split = document.getElementById("split");
    if (split) split.addEventListener("change", function () { loadDiff(); });
    var ws = document.getElementById("ignore-ws");
    if (ws) ws.addEventListener("change", function () { loadDiff(); });

    var form = document.getElementById("pick");
    if (form) {
      form.addEventListener("submit", function (ev) {
        ev.preventDefault();
        shown.paths = document.getElementById("pick-paths").value.trim();
        shown.calls = document.getElementById("pick-calls").value.trim();
        loadDiff();
      });
      document.getElementById("pick-clear").addEventListener("click", function () {
        document.getElementById("pick-paths").value = "";
        document.getElementById("pick-calls").value = "";
        shown.paths = shown.calls = "";
        loadDiff();
      });
    }

    markViewed();

    document.addEventListener("change", function (ev) {
      var t = ev.target;
      if (t.classList && t.classList.contains("viewed")) { setViewed(t.closest(".file"), t.checked); return; }
      if (t.classList && t.classList.contains("pick-file")) {
        t.closest(".file").querySelectorAll("input.pick").forEach(function (b) { b.checked = t.checked; });
      }
    });

    document.addEventListener("click", function (ev) {
      var t = ev.target;
      var inConflicts = t.closest && t.closest("#conflicts button[data-action]");
      if (inConflicts) { act(inConflicts.dataset.action); return; }
      var foldButton = t.closest && t.closest("#diff button.fold");
      if (foldButton) { var f = foldButton.closest(".file"); fold(f, !f.classList.contains("folded")); return; }
      var leaf = t.closest && t.closest("#tree a.tree-file");
      if (leaf) {
        ev.preventDefault();
        var target = document.querySelector("#diff .file[data-path='" + CSS.escape(leaf.dataset.path) + "']");
        if (target) { fold(target, false); target.scrollIntoView({ block: "start" }); }
        return;
      }
      var page = t.closest && t.closest("a[data-page]");
      if (page) { ev.preventDefault(); loadDiff("&page=" + page.dataset.page); return; }
      var more = t.closest && t.closest("a.more");
      if (more) {
        ev.preventDefault();
        var holder = more.parentNode;
        var file = holder.closest(".file");
        get(more.dataset.src).then(function (html) { holder.outerHTML = html; if (file) highlightIn(file); });
        return;
      }
      var only = t.closest && t.closest("a.pick-call");
      if (only) {
        ev.preventDefault();
        document.getElementById("pick-calls").value = only.dataset.call;
        document.getElementById("pick-paths").value = "";
        form.requestSubmit();
        document.getElementById("pick").scrollIntoView();
        return;
      }
      var numbered = t.closest && t.closest("#diff pre.diff > span[data-n]");
      if (numbered && ev.clientX - numbered.getBoundingClientRect().left < gutterWidth(numbered)) {
        commentBox(numbered);
        return;
      }
      var row = t.closest && t.closest("tr.call");
      if (row && !t.closest("a, button, input")) toggle(row);
    });

    function gutterWidth(span) {
      return parseFloat(getComputedStyle(span, "::before").width) || 0;
    }

    // A comment on a line of the changes: the box under the line, sent as 'sandbox comment' records it.
    function commentBox(span) {
      var next = span.nextElementSibling;
      if (next && next.classList.contains("comment-box")) { next.querySelector("textarea").focus(); return; }
      var file = span.closest(".file");
      var form = document.createElement("form");
      form.className = "comment-box";
      form.innerHTML = "<textarea aria-label='comment'></textarea><br><button type='submit' class='primary'>Comment</button> " +
        "<button type='button' class='cancel'>Cancel</button>";
      form.dataset.path = file ? file.dataset.path : "";
      form.dataset.line = span.dataset.n;
      span.parentNode.insertBefore(form, span.nextSibling);
      form.querySelector(".cancel").addEventListener("click", function () { form.remove(); });
      form.addEventListener("submit", function (ev) {
        ev.preventDefault();
        var text = form.querySelector("textarea").value;
        var body = { path: form.dataset.path, line: parseInt(form.dataset.line, 10), text: text };
        post("/api/run/" + encodeURIComponent(boot.run) + "/comment", body).then(function (data) {
          report(data);
          if (!data.ok) return;
          var said = document.createElement("div");
          said.className = "comment-box note";
          said.textContent = "Comment " + data.comment + ": " + text;
          form.replaceWith(said);
          refreshComments();
        });
      });
      form.querySelector("textarea").focus();
    }

    function refreshComments() {
      var box = document.getElementById("comments");
      if (box) load(box, "/run/" + encodeURIComponent(boot.run) + "/comments");
    }

    function detailOf(call) {
      return document.querySelector("tr.calldiff[data-for='" + CSS.escape(call) + "']");
    }

    function toggle(row) {
      var call = row.dataset.call;
      var detail = detailOf(call);
      if (!detail) return;
      if (!detail.hidden) { detail.hidden = true; return; }
      detail.hidden = false;
      var none = "<p class='muted'>This call changed no files.</p>";
      // Its output (the tails the ledger kept, escaped by the server) above its diff.
      var output = row.dataset.output ? get(row.dataset.output) : Promise.resolve("");
      var diff = row.dataset.diff ? get(row.dataset.diff) : Promise.resolve(none);
      Promise.all([output, diff]).then(function (got) {
        // Into the row as it is now: a live update may have replaced the timeline (and this row) meanwhile,
        // keeping it open but empty. Closed since, it is left closed.
        var now = detailOf(call);
        if (!now || now.hidden) return;
        var cell = now.firstElementChild;
        cell.innerHTML = got[0] + got[1];
        if (!row.dataset.diff || !cell.querySelector(".file")) return;  // nothing to pick (e.g. rolled back since)
        var only = document.createElement("p");
        only.innerHTML = "<a href='#' class='pick-call'>Show and pick only this call's changes</a>";
        only.firstChild.dataset.call = call;
        cell.insertBefore(only, cell.firstChild);
        highlightIn(cell);
      });
    }

    // A link to one call (#call-ID, from the compare page): open it where it is.
    if (location.hash.indexOf("#call-") === 0) {
      var target = document.getElementById(decodeURIComponent(location.hash.slice(1)));
      if (target) { target.focus(); toggle(target); }
    }

    document.addEventListener("keydown", function (ev) {
      if (ev.target.closest && ev.target.closest("input, textarea")) return;
      var rows = Array.prototype.slice.call(document.querySelectorAll("tr.call")).filter(function (r) {
        return r.offsetParent !== null;  // not hidden by the filter or a closed section
      });
      var at = rows.indexOf(document.activeElement);
      if (ev.key === "j" || ev.key === "k") {
        var next = ev.key === "j" ? Math.min(rows.length - 1, at + 1) : Math.max(0, at - 1);
        if (rows[next]) { rows[next].focus(); rows[next].scrollIntoView({ block: "nearest" }); }
        ev.preventDefault();
      } else if (ev.key === "Enter" && at >= 0) {
        toggle(rows[at]);
      } else if (ev.key === "n" || ev.key === "p" || ev.key === "N" || ev.key === "P") {
        jump(ev.key === "n" || ev.key === "N" ? 1 : -1, ev.key === "N" || ev.key === "P" ? "#diff .file" : "#diff .hunk");
      } else if (ev.key === "a") {
        var n = picked().length;
        if (!n) { toast("Pick one or more hunks first (or 'Apply all shown').", true); return; }
        if (window.confirm("Apply the " + n + " picked hunk(s) to your tree?")) act("apply");
      } else if (ev.key === "u") {
        if (window.confirm("Undo the last apply in your tree?")) act("undo");
      } else if (ev.key === "?") {
        toast("j/k: next/previous call · Enter: its diff · n/p: next/previous hunk · N/P: next/previous file · " +
          "a: apply the picked hunks · u: undo (each asks first)");
      }
    });

    // The next (dir 1) or previous (-1) hunk or file below (above) the top of the view, brought to it.
    function jump(dir, selector) {
      var items = Array.prototype.slice.call(document.querySelectorAll(selector));
      var tops = items.map(function (el) { return el.getBoundingClientRect().top; });
      var at = -1;
      for (var i = 0; i < items.length; i++) {
        if (dir > 0 && tops[i] > 2) { at = i; break; }
        if (dir < 0 && tops[i] < -2) at = i;
      }
      if (at < 0) return;
      document.querySelectorAll(".at").forEach(function (el) { el.classList.remove("at"); });
      items[at].classList.add("at");
      items[at].scrollIntoView({ block: "start" });
    }

    var hide = document.getElementById("hide-empty");
    if (hide) {
      hide.checked = sessionStorage.getItem("sandbox-hide-empty") === "1";
      document.body.classList.toggle("hide-empty", hide.checked);
      hide.addEventListener("change", function () {
        sessionStorage.setItem("sandbox-hide-empty", hide.checked ? "1" : "0");
        document.body.classList.toggle("hide-empty", hide.checked);
      });
    }

    // Live: follow a running agent (the ledger's tip) in place: the header's counts, the calls, and the
    // diff unless hunks are picked (scroll, open calls and picks kept).
    var factsAsked = 0;
    setInterval(function () {
      get("/api/tips").then(function (text) {
        var tips = JSON.parse(text);
        var tip = tips[boot.run];
        if (tip !== undefined && tip !== boot.tip) {
          boot.tip = tip;
          var mine = ++factsAsked;
          get("/run/" + encodeURIComponent(boot.run) + "/facts").then(function (html) {
            if (mine !== factsAsked) return;  // a newer one is on its way
            var doc = new DOMParser().parseFromString(html, "text/html");
            ["p.facts", "#calls-count"].forEach(function (sel) {
              var now = document.querySelector(sel), fresh = doc.querySelector(sel);
              if (now && fresh) now.innerHTML = fresh.innerHTML;
            });
          });
          refresh(picked().length === 0);
        }
      }).catch(function () {});
    }, 1000);
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
    var runsAsked = 0;
    setInterval(function () {
      get("/api/tips").then(function (text) {
        if (!boot.tips || text.replace(/\s/g, "") === JSON.stringify(boot.tips).replace(/\s/g, "")) return;
        var rows = document.querySelector("table.runs tbody");
        if (boot.page !== "runs" || !rows) { location.reload(); return; }
        // The runs list in place: the boxes checked for comparing stay checked; only the newest answer lands.
        var mine = ++runsAsked;
        get("/").then(function (html) {
          if (mine !== runsAsked) return;
          var fresh = new DOMParser().parseFromString(html, "text/html").querySelector("table.runs tbody");
          if (!fresh) { location.reload(); return; }
          var checked = {};
          rows.querySelectorAll("input[name=run]:checked").forEach(function (b) { checked[b.value] = true; });
          rows.innerHTML = fresh.innerHTML;
          rows.querySelectorAll("input[name=run]").forEach(function (b) { b.checked = !!checked[b.value]; });
          boot.tips = JSON.parse(text);
        });
      }).catch(function () {});
    }, 3000);
  }
})();
