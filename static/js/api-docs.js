// The API documentation page: starts Swagger UI (drf-spectacular-sidecar's bundle) on the schema the page names.
// A static file, as the CSP forbids inline scripts.
(function () {
  "use strict";

  function csrfToken() {
    try {
      return JSON.parse(document.body.getAttribute("hx-headers") || "{}")["X-CSRFToken"] || "";
    } catch (e) {
      return "";
    }
  }

  document.addEventListener("DOMContentLoaded", function () {
    var root = document.getElementById("swagger-ui");
    if (!root || typeof window.SwaggerUIBundle === "undefined") return;
    window.SwaggerUIBundle({
      url: root.getAttribute("data-schema-url"),
      domNode: root,
      presets: [window.SwaggerUIBundle.presets.apis],
      layout: "BaseLayout",
      // Without deep links an operation's path is plain text, not a link nested in the button that opens it.
      deepLinking: false,
      // No badge fetched from a validator elsewhere: the CSP allows images from this origin only.
      validatorUrl: null,
      persistAuthorization: false,
      // A browser signed in to the portal may try writes with its session: Django then asks for the CSRF token.
      requestInterceptor: function (request) {
        var method = (request.method || "GET").toUpperCase();
        if (method !== "GET" && method !== "HEAD" && !request.headers.Authorization) {
          request.headers["X-CSRFToken"] = csrfToken();
        }
        return request;
      },
    });
  });
})();
