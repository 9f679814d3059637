// TauGrid portal: the one script. A run's live log: new lines from the server (SSE) appended
// to the log; when the run ends, its phase is updated. The page works without it.
(function () {
  var log = document.getElementById("log");
  if (!log || log.dataset.live !== "yes" || !window.EventSource) return;
  var url = "/runs/" + encodeURIComponent(log.dataset.run) + "/log/stream?from=" + log.dataset.from;
  var source = new EventSource(url);
  source.onmessage = function (e) {
    var atEnd = log.scrollTop + log.clientHeight >= log.scrollHeight - 4;
    log.appendChild(document.createTextNode(e.data + "\n"));
    if (atEnd) log.scrollTop = log.scrollHeight;
  };
  source.addEventListener("end", function (e) {
    source.close();
    var phase = document.getElementById("phase");
    if (phase) { phase.textContent = e.data; phase.className = "phase phase-" + e.data.toLowerCase(); }
    window.location.reload();  // the ended run's page: its exit, outputs and full log
  });
  source.onerror = function () { source.close(); };
})();
