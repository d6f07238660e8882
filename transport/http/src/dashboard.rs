//! The developer dashboard (issue 18): three static files built into the binary and
//! served under `/dashboard/` on the service's one listener.
//!
//! The page is a client of the public API only (the reseller API with an API key, the
//! admin and sandbox APIs with the admin token, typed in by the user): there is no
//! private back door here, only files. They are answered in the connection task, like
//! `/healthz`, without a credential (they hold none) and never through the engine.
//!
//! Every answer carries a strict Content-Security-Policy: scripts only from this origin
//! (no inline script at all), requests only to this origin, images from this origin or
//! `data:` (the eSIM QR code is a data URL), no framing, no forms posted anywhere, no
//! `<base>`. `style-src` also allows inline styles, and only styles, because the finance
//! report's own HTML (inline `<style>`, `style=`) is shown in a sandboxed `srcdoc`
//! iframe, which inherits this policy (decision 133). The sandbox allows the same origin
//! and nothing else: no script runs there, and the page can read the report's height to
//! size the frame to it (decision 322).

use crate::api::error_response;
use bytes::Bytes;
use esim_engine::{ApiError, ErrorCode};

/// Where the dashboard lives; `/dashboard` alone redirects here.
pub const BASE: &str = "/dashboard/";

/// The Content-Security-Policy of every dashboard answer (decision 133).
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; connect-src 'self'; \
img-src 'self' data:; style-src 'self' 'unsafe-inline'; frame-ancestors 'none'; \
base-uri 'none'; form-action 'none'";

/// The dashboard's files: path under [`BASE`], content type, bytes.
const FILES: [(&str, &str, &str); 3] = [
    ("", "text/html; charset=utf-8", include_str!("../dashboard/index.html")),
    ("app.js", "text/javascript; charset=utf-8", include_str!("../dashboard/app.js")),
    ("app.css", "text/css; charset=utf-8", include_str!("../dashboard/app.css")),
];

/// Whether a request is the dashboard's: a GET of `/dashboard` or anything under it.
pub fn is_dashboard(method: &http::Method, path: &str) -> bool {
    method == http::Method::GET && (path == "/dashboard" || path.starts_with(BASE))
}

/// The answer to a GET of `path` (one that [`is_dashboard`] accepted): a file, the
/// redirect from `/dashboard`, or 404 `ROUTE_NOT_FOUND` with the API's error body. The
/// security headers go on all of them.
pub fn answer(path: &str) -> http::Response<Bytes> {
    let mut response = if path == "/dashboard" {
        http::Response::builder()
            .status(http::StatusCode::PERMANENT_REDIRECT)
            .header(http::header::LOCATION, BASE)
            .body(Bytes::new())
            .expect("a valid response")
    } else {
        let name = path.strip_prefix(BASE).unwrap_or(path);
        match FILES.iter().find(|(file, _, _)| *file == name) {
            Some((_, content_type, text)) => http::Response::builder()
                .header(http::header::CONTENT_TYPE, *content_type)
                .body(Bytes::from_static(text.as_bytes()))
                .expect("a valid response"),
            None => error_response(ApiError::new(ErrorCode::RouteNotFound, format!("no route for {path}"))),
        }
    };
    let headers = response.headers_mut();
    headers.insert(http::header::CONTENT_SECURITY_POLICY, http::HeaderValue::from_static(CONTENT_SECURITY_POLICY));
    headers.insert(http::header::X_CONTENT_TYPE_OPTIONS, http::HeaderValue::from_static("nosniff"));
    headers.insert(http::header::REFERRER_POLICY, http::HeaderValue::from_static("no-referrer"));
    headers.insert(http::header::X_FRAME_OPTIONS, http::HeaderValue::from_static("DENY"));
    // Decision 134: the files are small and change with the binary; `no-cache` makes
    // the browser ask again each time, so an upgraded service never runs an old script.
    headers.insert(http::header::CACHE_CONTROL, http::HeaderValue::from_static("no-cache"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_redirect_and_not_found_all_carry_the_policy() {
        for (path, status, content_type) in [
            ("/dashboard/", 200, Some("text/html; charset=utf-8")),
            ("/dashboard/app.js", 200, Some("text/javascript; charset=utf-8")),
            ("/dashboard/app.css", 200, Some("text/css; charset=utf-8")),
            ("/dashboard", 308, None),
            ("/dashboard/nothing", 404, Some("application/json")),
            ("/dashboard/app.js/", 404, Some("application/json")),
        ] {
            let response = answer(path);
            assert_eq!(response.status().as_u16(), status, "{path}");
            let headers = response.headers();
            assert_eq!(headers[http::header::CONTENT_SECURITY_POLICY], CONTENT_SECURITY_POLICY, "{path}");
            assert_eq!(headers[http::header::X_CONTENT_TYPE_OPTIONS], "nosniff");
            assert_eq!(headers[http::header::REFERRER_POLICY], "no-referrer");
            assert_eq!(headers.get(http::header::CONTENT_TYPE).map(|v| v.to_str().unwrap()), content_type, "{path}");
        }
        assert_eq!(answer("/dashboard").headers()[http::header::LOCATION], "/dashboard/");
        let body: serde_json::Value = serde_json::from_slice(answer("/dashboard/x").body()).unwrap();
        assert_eq!(body["code"], "ROUTE_NOT_FOUND");
        assert!(is_dashboard(&http::Method::GET, "/dashboard"));
        assert!(!is_dashboard(&http::Method::POST, "/dashboard/"));
        assert!(!is_dashboard(&http::Method::GET, "/dashboards"));
    }

    #[test]
    fn no_script_is_inline_and_no_data_goes_in_through_inner_html() {
        let (_, _, html) = FILES[0];
        assert!(!html.contains("<script>") && html.contains("<script src=\"app.js\""), "no inline script");
        // No inline event handler (` onclick=`, ` onload=`...) and no inline style.
        for (at, _) in html.match_indices(" on") {
            let name: String = html[at + 3..].chars().take_while(char::is_ascii_alphabetic).collect();
            assert!(!html[at + 3 + name.len()..].starts_with('='), "inline handler on{name}");
        }
        assert!(!html.contains("style="), "no inline style");
        // The script's code (its `//` comment lines name what it never does).
        let (_, _, script) = FILES[1];
        let code: String = script.lines().filter(|line| !line.trim_start().starts_with("//")).collect();
        for never in [
            "innerHTML",
            "outerHTML",
            "insertAdjacentHTML",
            "document.write",
            "eval(",
            "localStorage",
            "document.cookie",
        ] {
            assert!(!code.contains(never), "the script uses {never}");
        }
    }
}
