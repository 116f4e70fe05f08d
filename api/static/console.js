// modelreg console: refresh a running version's progress (the page's data-refresh URL), then reload the
// page once the version has stopped moving. No other script runs in the console.
(function () {
  "use strict";
  var url = document.body.getAttribute("data-refresh");
  if (!url) { return; }
  function poll() {
    fetch(url, { credentials: "same-origin", headers: { "Accept": "application/json" } })
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (doc) {
        if (!doc) { return; }
        var state = document.getElementById("state");
        var progress = document.getElementById("progress");
        if (state) { state.textContent = doc.state; }
        if (progress) { progress.textContent = doc.stored + " of " + doc.files + " files stored"; }
        if (!doc.running) { window.location.reload(); return; }
        window.setTimeout(poll, 3000);
      })
      .catch(function () { window.setTimeout(poll, 10000); });
  }
  window.setTimeout(poll, 3000);
}());
