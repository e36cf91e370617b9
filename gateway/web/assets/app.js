// ratekeeper gateway dashboard: counts down each bucket's reset every
// second, and reloads the server-rendered content every 10 seconds and
// when a reset passes.
(function () {
  "use strict";
  var skew = 0; // server clock minus this browser's clock, in ms

  function human(sec) {
    sec = Math.max(0, Math.round(sec));
    function two(n) { return (n < 10 ? "0" : "") + n; }
    if (sec >= 3600) return Math.floor(sec / 3600) + "h " + two(Math.floor(sec % 3600 / 60)) + "m";
    if (sec >= 60) return Math.floor(sec / 60) + "m " + two(sec % 60) + "s";
    return sec + "s";
  }

  function syncClock() {
    var main = document.getElementById("dashboard");
    var now = main && Date.parse(main.getAttribute("data-now"));
    if (now) skew = now - Date.now();
  }

  // A reset that passes makes the page ask the server again (after the
  // grace the gateway gives a reset, at most a second), which shows the
  // window rolled over rather than "resets in 0s" until the next reload.
  var rolling = false;

  function tick() {
    var now = Date.now() + skew;
    var passed = false;
    var cells = document.querySelectorAll("td.resets-in[data-reset]");
    for (var i = 0; i < cells.length; i++) {
      var reset = Date.parse(cells[i].getAttribute("data-reset"));
      if (isNaN(reset)) continue;
      cells[i].textContent = human((reset - now) / 1000);
      if (reset <= now) passed = true;
    }
    if (passed && !rolling) {
      rolling = true;
      setTimeout(function () { refresh(); rolling = false; }, 1500);
    }
  }

  function refresh() {
    fetch(window.location.pathname, { cache: "no-store", credentials: "same-origin" })
      .then(function (r) { if (!r.ok) throw new Error(r.status); return r.text(); })
      .then(function (html) {
        var doc = new DOMParser().parseFromString(html, "text/html");
        var fresh = doc.getElementById("dashboard");
        var old = document.getElementById("dashboard");
        if (fresh && old) {
          old.replaceWith(document.adoptNode(fresh));
          syncClock();
          tick();
        }
      })
      .catch(function () { /* keep the last view; try again next time */ });
  }

  syncClock();
  setInterval(tick, 1000);
  setInterval(refresh, 10000);
})();
