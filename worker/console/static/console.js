// relevo console: live fleet updates (polling a server-rendered fragment) and the
// attempt bars' geometry. No inline script or style: the CSP allows neither.
"use strict";

function placeBars(root) {
  root.querySelectorAll(".bar[data-left]").forEach(function (bar) {
    bar.style.left = bar.dataset.left + "%";
    bar.style.width = bar.dataset.width + "%";
  });
  root.querySelectorAll(".fb[data-at]").forEach(function (mark) {
    mark.style.left = mark.dataset.at + "%";
  });
}

function poll(live) {
  var every = parseInt(live.dataset.ms, 10) || 2000;
  var tick = function () {
    fetch(live.dataset.src, { credentials: "same-origin", cache: "no-store" })
      .then(function (response) {
        if (response.status === 401) { window.location = "/login"; return null; }
        live.classList.toggle("stale", !response.ok);
        return response.ok ? response.text() : null;
      })
      .then(function (html) {
        if (html !== null) { live.innerHTML = html; live.dataset.updated = Date.now(); }
      })
      .catch(function () { live.classList.add("stale"); })
      .finally(function () { setTimeout(tick, every); });
  };
  setTimeout(tick, every);
}

document.addEventListener("DOMContentLoaded", function () {
  placeBars(document);
  var live = document.getElementById("live");
  if (live) { poll(live); }
});
