// Live updates: server-sent events (LISTEN wake-ups) make the page refresh its content at
// once; the timed refresh in hx-trigger remains the fallback NOTIFY cannot replace.
(function () {
  var body = document.body;
  var url = body.getAttribute("data-events");
  var badge = document.getElementById("live");
  if (!url || !window.EventSource) {
    return;
  }
  var source = new EventSource(url);
  // Closed before leaving: an open stream can hold up the next page's navigation.
  window.addEventListener("beforeunload", function () { source.close(); });
  window.addEventListener("pagehide", function () { source.close(); });
  var received = 0;
  source.addEventListener("open", function () {
    badge.textContent = "live";
    badge.className = "live on";
  });
  source.addEventListener("lonnymq", function (event) {
    received += 1;
    body.setAttribute("data-events-received", String(received));
    var data = {};
    try { data = JSON.parse(event.data); } catch (e) { /* refresh anyway */ }
    badge.textContent = "live · " + (data.queue || "") + " " + (data.event || "") +
      " " + new Date().toLocaleTimeString();
    htmx.trigger(body, "lonnymq");
  });
  source.addEventListener("error", function () {
    badge.textContent = "timed refresh";
    badge.className = "live off";
  });
})();
