// Live updates: on a change of a record this page shows (server-sent
// events from /events), fetch the page again and swap its <main>. Without
// JavaScript the page is whole as served; reloading shows the same.
(function () {
  if (!window.EventSource || !window.fetch || !window.DOMParser) return;
  var scope = document.body.getAttribute("data-cluster");
  var busy = false, again = false;
  function refresh() {
    if (busy) { again = true; return; }
    busy = true;
    fetch(location.href, { headers: { Accept: "text/html" }, cache: "no-store" })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (text) {
        if (text === null) return;
        var next = new DOMParser().parseFromString(text, "text/html").getElementById("main");
        var now = document.getElementById("main");
        if (next && now) now.replaceWith(document.importNode(next, true));
        document.body.setAttribute("data-updated", String(Date.now()));
      })
      .catch(function () {})
      .then(function () {
        busy = false;
        if (again) { again = false; refresh(); }
      });
  }
  var source = new EventSource("/events");
  source.onmessage = function (e) {
    var change = {};
    try { change = JSON.parse(e.data); } catch (_) {}
    if (!scope || change.cluster === scope || change.cluster === "*") refresh();
  };
  source.onopen = function () { document.body.setAttribute("data-live", "open"); };
})();
