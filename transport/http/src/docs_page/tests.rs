use super::*;

fn accept(value: &str) -> http::HeaderMap {
    let mut headers = http::HeaderMap::new();
    headers.insert(http::header::ACCEPT, http::HeaderValue::from_str(value).unwrap());
    headers
}

#[test]
fn files_redirect_and_not_found_all_carry_a_policy() {
    let none = http::HeaderMap::new();
    for (path, status, content_type, policy) in [
        ("/docs/", 200, Some("text/html; charset=utf-8"), DOCS_POLICY),
        ("/docs/docs.js", 200, Some("text/javascript; charset=utf-8"), DOCS_POLICY),
        ("/docs/redoc.standalone.js", 200, Some("text/javascript; charset=utf-8"), DOCS_POLICY),
        ("/docs/site.css", 200, Some("text/css; charset=utf-8"), DOCS_POLICY),
        ("/docs/redoc-LICENSE.txt", 200, Some("text/plain; charset=utf-8"), DOCS_POLICY),
        ("/docs", 308, None, DOCS_POLICY),
        ("/docs/nothing", 404, Some("application/json"), DOCS_POLICY),
        ("/", 200, Some("application/json"), HOME_POLICY),
    ] {
        let response = answer(path, &none);
        assert_eq!(response.status().as_u16(), status, "{path}");
        let headers = response.headers();
        assert_eq!(headers[http::header::CONTENT_SECURITY_POLICY], policy, "{path}");
        assert_eq!(headers[http::header::X_CONTENT_TYPE_OPTIONS], "nosniff");
        assert_eq!(headers[http::header::REFERRER_POLICY], "no-referrer");
        assert_eq!(headers.get(http::header::CONTENT_TYPE).map(|v| v.to_str().unwrap()), content_type, "{path}");
    }
    assert_eq!(answer("/docs", &none).headers()[http::header::LOCATION], "/docs/");
    let body: serde_json::Value = serde_json::from_slice(answer("/docs/x", &none).body()).unwrap();
    assert_eq!(body["code"], "ROUTE_NOT_FOUND");
    assert!(is_front_door(&http::Method::GET, "/") && is_front_door(&http::Method::GET, "/docs"));
    assert!(!is_front_door(&http::Method::POST, "/") && !is_front_door(&http::Method::GET, "/docsx"));
}

#[test]
fn the_root_answers_a_browser_with_the_page_and_a_client_with_the_index() {
    let browser = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8";
    for (accept_value, html) in [
        (browser, true),
        ("TEXT/HTML", true),
        ("*/*", false),
        ("application/json", false),
        ("text/html;q=0, application/json", false),
        ("text/html; q=0.5", true),
    ] {
        let response = answer("/", &accept(accept_value));
        let content_type = response.headers()[http::header::CONTENT_TYPE].to_str().unwrap();
        assert_eq!(content_type.starts_with("text/html"), html, "{accept_value}: {content_type}");
        assert_eq!(response.headers()[http::header::VARY], "Accept");
    }
    let text = answer("/", &accept("*/*")).into_body();
    assert!(text.starts_with(b"{\n  \"service\": "), "what the service is comes first");
    let index: serde_json::Value = serde_json::from_slice(&text).unwrap();
    assert_eq!(index["interface_version"], "2.0");
    assert_eq!(index["links"]["admin_openapi"], "/admin/v1/openapi.json");
    assert_eq!(index["links"]["reseller_openapi"], "/api/v2/reseller/openapi.json");
    // The page links every part the index names.
    let page = String::from_utf8(HOME_PAGE.to_vec()).unwrap();
    for (name, link) in index["links"].as_object().unwrap() {
        if !matches!(name.as_str(), "reseller_api" | "readiness") {
            assert!(page.contains(&format!("href=\"{}\"", link.as_str().unwrap())), "the page links {name}");
        }
    }
}

#[test]
fn the_pages_run_no_inline_script_and_load_nothing_remote() {
    let text = |bytes: &[u8]| String::from_utf8(bytes.to_vec()).unwrap();
    let (home, docs) = (text(HOME_PAGE), text(FILES[0].2));
    assert!(!home.contains("<script"), "the landing page runs no script");
    assert!(!docs.contains("<script>") && docs.contains("<script src=\"docs.js\""), "no inline script");
    for page in [&home, &docs] {
        assert!(!page.contains("style=") && !page.contains("http://") && !page.contains("https://"));
        for (at, _) in page.match_indices(" on") {
            let name: String = page[at + 3..].chars().take_while(char::is_ascii_alphabetic).collect();
            assert!(!page[at + 3 + name.len()..].starts_with('='), "inline handler on{name}");
        }
    }
    let script = text(FILES[1].2);
    let code: String = script.lines().filter(|line| !line.trim_start().starts_with("//")).collect();
    for never in ["innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("] {
        assert!(!code.contains(never), "docs.js uses {never}");
    }
    // The vendored bundle was updated by the script: no source map, no remote logo.
    let bundle = text(FILES[3].2);
    assert!(!bundle.contains("cdn.redoc.ly"), "the logo is no remote image");
    assert!(!bundle.lines().any(|line| line.starts_with("//# sourceMappingURL=")), "no source map comment");
    assert!(bundle.starts_with("/*! For license information please see redoc.standalone.js.LICENSE.txt */"));
    assert_eq!(REDOC_VERSION.trim(), "2.5.4");
    for policy in [HOME_POLICY, DOCS_POLICY] {
        assert!(policy.starts_with("default-src 'none';") && !policy.contains("http") && !policy.contains('*'));
        assert!(!policy.contains("'unsafe-eval'") && !policy.contains("script-src 'self' 'unsafe"));
    }
}
