// The API reference page: Redoc renders one of the service's three OpenAPI documents,
// chosen by `?api=` (reseller, admin or sandbox; Redoc itself owns the URL's #fragment
// for its deep links). Everything comes from this origin: no inline script, no remote
// source, and the page never writes HTML from data (Redoc renders the document).
"use strict";

const DOCUMENTS = {
  reseller: "/api/v2/reseller/openapi.json",
  admin: "/admin/v1/openapi.json",
  sandbox: "/sandbox/v1/openapi.json",
};

function chosen() {
  const asked = new URLSearchParams(window.location.search).get("api");
  return Object.prototype.hasOwnProperty.call(DOCUMENTS, asked) ? asked : "reseller";
}

function render() {
  const api = chosen();
  const url = DOCUMENTS[api];
  document.getElementById("api-" + api).setAttribute("aria-current", "page");
  document.getElementById("document").setAttribute("href", url);
  const target = document.getElementById("redoc");
  const options = {
    hideHostname: true,
    expandResponses: "200,201,202",
    jsonSampleExpandLevel: 2,
    scrollYOffset: "header.bar",
    theme: { sidebar: { width: "260px" } },
  };
  window.Redoc.init(url, options, target, (error) => {
    // The page's state for tests and people: rendered, or why not.
    document.body.dataset.rendered = error ? "error" : api;
    if (error) {
      target.textContent = "The reference could not be rendered: " + String(error);
    }
  });
}

document.addEventListener("DOMContentLoaded", render);
