//! The front door (issue 37): `GET /`, a landing page for browsers and a JSON index for
//! API clients, and `/docs/`, the API reference rendered in the browser from the three
//! served OpenAPI documents by a vendored Redoc (`transport/http/docs-page/update.sh`). Files
//! built into the binary, answered in the connection task like the dashboard's
//! ([`crate::dashboard`]): no credential, never through the engine, and so offline.
//!
//! Content negotiation of `/`: an `Accept` naming `text/html` (what a browser sends) gets
//! the page, anything else (curl's `*/*`, `application/json`, none) the JSON index, with
//! `Vary: Accept` so a cache keeps both.
//!
//! Policies: the landing page runs no script at all; the reference page allows scripts
//! from this origin only, and what Redoc needs beyond the dashboard's policy: inline
//! styles (styled-components writes `<style>` elements) and a worker made from a `blob:`
//! URL (its search index). No remote source anywhere (decision 300).

use crate::api::error_response;
use crate::routes::{Endpoint, RESELLER_BASE};
use bytes::Bytes;
use esim_engine::{ApiError, ErrorCode};

/// Where the reference lives; `/docs` alone redirects here.
pub const BASE: &str = "/docs/";

/// The Content-Security-Policy of the landing page and its JSON index: no script.
pub const HOME_POLICY: &str = "default-src 'none'; style-src 'self'; img-src 'self' data:; \
frame-ancestors 'none'; base-uri 'none'; form-action 'none'";

/// The Content-Security-Policy of the reference page and its files (decision 300).
pub const DOCS_POLICY: &str = "default-src 'none'; script-src 'self'; worker-src blob:; connect-src 'self'; \
img-src 'self' data:; style-src 'self' 'unsafe-inline'; frame-ancestors 'none'; base-uri 'none'; \
form-action 'none'";

/// The Redoc version vendored (`transport/http/docs-page/update.sh` writes it).
pub const REDOC_VERSION: &str = include_str!("../docs-page/REDOC_VERSION");

/// The reference's files: path under [`BASE`], content type, bytes.
const FILES: [(&str, &str, &[u8]); 6] = [
    ("", "text/html; charset=utf-8", include_bytes!("../docs-page/index.html")),
    ("docs.js", "text/javascript; charset=utf-8", include_bytes!("../docs-page/docs.js")),
    ("site.css", "text/css; charset=utf-8", include_bytes!("../docs-page/site.css")),
    ("redoc.standalone.js", "text/javascript; charset=utf-8", include_bytes!("../docs-page/redoc.standalone.js")),
    ("redoc-LICENSE.txt", "text/plain; charset=utf-8", include_bytes!("../docs-page/redoc-LICENSE.txt")),
    (
        "redoc.standalone.js.LICENSE.txt",
        "text/plain; charset=utf-8",
        include_bytes!("../docs-page/redoc.standalone.js.LICENSE.txt"),
    ),
];

const HOME_PAGE: &[u8] = include_bytes!("../docs-page/home.html");

/// Whether a request is the front door's: a GET of `/`, `/docs` or anything under it.
pub fn is_front_door(method: &http::Method, path: &str) -> bool {
    method == http::Method::GET && (path == "/" || path == "/docs" || path.starts_with(BASE))
}

/// The answer to a GET of `path` (one that [`is_front_door`] accepted), with the
/// request's headers (for `/`'s negotiation). The security headers go on all of them.
pub fn answer(path: &str, headers: &http::HeaderMap) -> http::Response<Bytes> {
    let (mut response, policy) = match path {
        "/" if wants_html(headers) => (file("text/html; charset=utf-8", HOME_PAGE), HOME_POLICY),
        "/" => (index(), HOME_POLICY),
        "/docs" => (redirect(BASE), DOCS_POLICY),
        _ => {
            let name = path.strip_prefix(BASE).unwrap_or(path);
            match FILES.iter().find(|(file, _, _)| *file == name) {
                Some((_, content_type, bytes)) => (file(content_type, bytes), DOCS_POLICY),
                None => (not_found(path), DOCS_POLICY),
            }
        }
    };
    let headers = response.headers_mut();
    headers.insert(http::header::CONTENT_SECURITY_POLICY, http::HeaderValue::from_static(policy));
    headers.insert(http::header::X_CONTENT_TYPE_OPTIONS, http::HeaderValue::from_static("nosniff"));
    headers.insert(http::header::REFERRER_POLICY, http::HeaderValue::from_static("no-referrer"));
    headers.insert(http::header::X_FRAME_OPTIONS, http::HeaderValue::from_static("DENY"));
    // As the dashboard's (decision 134): the files change with the binary.
    headers.insert(http::header::CACHE_CONTROL, http::HeaderValue::from_static("no-cache"));
    if path == "/" {
        headers.insert(http::header::VARY, http::HeaderValue::from_static("Accept"));
    }
    response
}

/// Whether `Accept` names `text/html` (not refused with `q=0`): a browser's navigation.
fn wants_html(headers: &http::HeaderMap) -> bool {
    let accept = headers.get_all(http::header::ACCEPT).iter().filter_map(|value| value.to_str().ok());
    accept.flat_map(|value| value.split(',')).any(|range| {
        let mut parts = range.split(';').map(str::trim);
        let media = parts.next().unwrap_or_default();
        let refused =
            parts.any(|param| param.strip_prefix("q=").and_then(|q| q.parse::<f32>().ok()).is_some_and(|q| q <= 0.0));
        media.eq_ignore_ascii_case("text/html") && !refused
    })
}

/// The JSON index: what the service is and where its parts are (fields in this order).
#[derive(serde::Serialize)]
struct Index {
    service: &'static str,
    interface_version: &'static str,
    links: Links,
}

#[derive(serde::Serialize)]
struct Links {
    dashboard: &'static str,
    api_reference: &'static str,
    reseller_api: &'static str,
    reseller_openapi: String,
    admin_openapi: String,
    sandbox_openapi: String,
    health: &'static str,
    readiness: &'static str,
}

fn index() -> http::Response<Bytes> {
    let index = Index {
        service: "Reseller eSIM Connectivity Service",
        interface_version: "2.0",
        links: Links {
            dashboard: crate::dashboard::BASE,
            api_reference: BASE,
            reseller_api: RESELLER_BASE,
            reseller_openapi: Endpoint::OpenApi.full_pattern(),
            admin_openapi: Endpoint::AdminOpenApi.full_pattern(),
            sandbox_openapi: Endpoint::SandboxOpenApi.full_pattern(),
            health: "/healthz",
            readiness: "/readyz",
        },
    };
    let text = serde_json::to_vec_pretty(&index).expect("the index always serializes");
    http::Response::builder()
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(Bytes::from(text))
        .expect("a valid response")
}

fn file(content_type: &'static str, bytes: &'static [u8]) -> http::Response<Bytes> {
    http::Response::builder()
        .header(http::header::CONTENT_TYPE, content_type)
        .body(Bytes::from_static(bytes))
        .expect("a valid response")
}

fn redirect(to: &'static str) -> http::Response<Bytes> {
    http::Response::builder()
        .status(http::StatusCode::PERMANENT_REDIRECT)
        .header(http::header::LOCATION, to)
        .body(Bytes::new())
        .expect("a valid response")
}

fn not_found(path: &str) -> http::Response<Bytes> {
    error_response(ApiError::new(ErrorCode::RouteNotFound, format!("no route for {path}; the reference is at {BASE}")))
}

#[cfg(test)]
mod tests;
