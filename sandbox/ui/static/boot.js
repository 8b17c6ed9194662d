// sandbox ui: the shell's script. The token is a capability of this tab: taken once from the address's
// fragment (never sent to a server), kept in sessionStorage, sent only in a header. No cookie exists.
(function () {
  "use strict";
  var KEY = "sandbox-ui-token";
  var given = /^#token=([A-Za-z0-9_-]+)$/.exec(location.hash);
  if (given) {
    sessionStorage.setItem(KEY, given[1]);
    history.replaceState(null, "", location.pathname + location.search);  // out of the address bar and history
  }
  var token = sessionStorage.getItem(KEY);
  var note = document.getElementById("boot-note");
  function refuse(text) {
    note.textContent = text;
    note.className = "refused";
  }
  if (!token) {
    refuse("This page needs the address 'sandbox ui' printed (with #token=...); open that address in this tab.");
    return;
  }
  fetch(location.pathname + location.search, { headers: { "X-Sandbox-Token": token }, credentials: "omit" })
    .then(function (r) {
      return r.text().then(function (text) {
        if (r.status === 401) {
          sessionStorage.removeItem(KEY);  // a token of a page that stopped: the new address brings the new one
          refuse(text);
          return;
        }
        var doc = new DOMParser().parseFromString(text, "text/html");
        doc.querySelectorAll("script").forEach(function (s) { s.remove(); });
        if (doc.title) document.title = doc.title;
        document.documentElement.replaceChild(document.adoptNode(doc.body), document.body);
        var script = document.createElement("script");
        script.src = "/static/ui.js";
        script.onload = function () {  // the page's own DOMContentLoaded: in place, its script running
          performance.mark("sandbox-shown");
          document.documentElement.dataset.shown = "1";
        };
        document.body.appendChild(script);
      });
    })
    .catch(function () { refuse("The page did not answer: is 'sandbox ui' still running?"); });
})();
