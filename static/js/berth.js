// Berth: small progressive enhancements. Every page works without this file.
// Loaded as a static file because the CSP forbids inline scripts and on* attributes.
(function () {
  "use strict";

  // "Copy" buttons: <button data-copy="element-id">.
  document.addEventListener("click", function (event) {
    var button = event.target.closest("[data-copy]");
    if (!button || !navigator.clipboard) return;
    var source = document.getElementById(button.getAttribute("data-copy"));
    if (!source) return;
    navigator.clipboard.writeText(source.textContent.trim()).then(function () {
      // The label may hold visually hidden words ("Copy<span> token</span>"): put back the markup, not its text.
      var label = button.innerHTML;
      button.textContent = "Copied";
      window.setTimeout(function () { button.innerHTML = label; }, 2000);
    });
  });

  // Typed confirmation: <input data-confirm-value="name" data-confirm-button="button-id"> enables the button
  // once the value matches. The server checks the same thing; this only saves a round trip.
  function syncConfirm(input) {
    var button = document.getElementById(input.getAttribute("data-confirm-button"));
    if (button) button.disabled = input.value.trim() !== input.getAttribute("data-confirm-value");
  }
  document.addEventListener("input", function (event) {
    if (event.target.matches("[data-confirm-value]")) syncConfirm(event.target);
  });
  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("[data-confirm-value]").forEach(syncConfirm);
  });

  // Panels that are open on a wide screen start closed on a narrow one (<details data-close-when-narrow open>), so
  // what the page is about comes first; one tap opens them.
  document.addEventListener("DOMContentLoaded", function () {
    if (!window.matchMedia("(max-width: 700px)").matches) return;
    document.querySelectorAll("details[data-close-when-narrow]").forEach(function (panel) { panel.open = false; });
  });

  // After a form comes back with errors, focus goes to their summary, so a screen reader reads what to fix first.
  document.addEventListener("DOMContentLoaded", function () {
    var summary = document.querySelector(".error-summary");
    if (!summary) return;
    summary.setAttribute("tabindex", "-1");
    summary.focus();
  });

  // A failed background refresh says so instead of failing silently.
  document.addEventListener("htmx:responseError", function (event) {
    var region = document.getElementById("live-errors");
    if (!region) return;
    var status = event.detail.xhr ? event.detail.xhr.status : "";
    region.textContent = "Could not refresh part of this page" + (status ? " (HTTP " + status + ")" : "") + ". Reload to try again.";
    region.hidden = false;
  });
})();
