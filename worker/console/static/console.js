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

function stamp(ms) {
  return new Date(ms).toISOString().replace("T", " ").slice(0, 19) + "Z";
}

// While the fragment does not come back (Redis down: 503; the console gone), the last
// data stays, dimmed, under a banner that says since when; each poll retries.
function poll(live) {
  var every = parseInt(live.dataset.ms, 10) || 2000;
  var banner = document.getElementById("stale-banner");
  var updated = document.getElementById("updated");
  var shown = function (ok, why) {
    live.classList.toggle("stale", !ok);
    if (ok) {
      live.dataset.updated = Date.now();
      updated.textContent = "updated " + stamp(Date.now());
    }
    banner.hidden = ok;
    if (!ok) {
      banner.textContent = why + " Showing the data of " + stamp(+live.dataset.updated) +
        "; retrying every " + every / 1000 + " s.";
    }
  };
  live.dataset.updated = Date.now();
  var tick = function () {
    fetch(live.dataset.src, { credentials: "same-origin", cache: "no-store" })
      .then(function (response) {
        if (response.status === 401) { window.location = "/login"; return null; }
        if (!response.ok) {
          shown(false, response.status === 503 ? "Redis does not answer." :
            "The console answered " + response.status + ".");
          return null;
        }
        return response.text();
      })
      .then(function (html) {
        if (html !== null) { live.innerHTML = html; shown(true); }
      })
      .catch(function () { shown(false, "The console does not answer."); })
      .finally(function () { setTimeout(tick, every); });
  };
  setTimeout(tick, every);
}

document.addEventListener("DOMContentLoaded", function () {
  placeBars(document);
  var live = document.getElementById("live");
  if (live) { poll(live); }
  var retry = document.getElementById("retry");
  if (retry) {  // the 503 page: load the page again until Redis answers
    setTimeout(function () { window.location.reload(); }, parseInt(retry.dataset.ms, 10));
  }
});
