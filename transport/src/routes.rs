//! The route table: every method and path the service answers. Routing and the
//! OpenAPI document both read it, so a test can prove they agree.

/// Which API a route belongs to (and so which credential it needs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Api {
    /// `/api/v2/reseller`: bearer API key, rate-limited.
    Reseller,
    /// `/admin/v1`: bearer admin token.
    Admin,
    /// `/sandbox/v1`: bearer admin token.
    Sandbox,
    /// No credential (the OpenAPI document).
    Public,
}

pub const RESELLER_BASE: &str = "/api/v2/reseller";

/// (api, method, path pattern). `{name}` matches one non-empty segment.
pub const ROUTES: &[(Api, &str, &str)] = &[
    (Api::Reseller, "POST", "/esim/provision"),
    (Api::Reseller, "GET", "/esim/list"),
    (Api::Reseller, "GET", "/esim/{iccid}"),
    (Api::Reseller, "POST", "/esim/{iccid}/enable"),
    (Api::Reseller, "POST", "/esim/{iccid}/disable"),
    (Api::Reseller, "POST", "/esim/{iccid}/terminate"),
    (Api::Reseller, "POST", "/esim/{iccid}/throttle"),
    (Api::Reseller, "POST", "/esim/{iccid}/fund"),
    (Api::Reseller, "POST", "/esim/{iccid}/defund"),
    (Api::Reseller, "GET", "/groups"),
    (Api::Reseller, "POST", "/groups"),
    (Api::Reseller, "GET", "/groups/{id}"),
    (Api::Reseller, "PATCH", "/groups/{id}"),
    (Api::Reseller, "POST", "/groups/{id}/fund"),
    (Api::Reseller, "POST", "/groups/{id}/defund"),
    (Api::Reseller, "GET", "/groups/{id}/esims"),
    (Api::Reseller, "POST", "/groups/{id}/esims"),
    (Api::Reseller, "DELETE", "/groups/{id}/esims/{iccid}"),
    (Api::Reseller, "GET", "/wallet/balance"),
    (Api::Reseller, "GET", "/rates"),
    (Api::Reseller, "GET", "/account"),
    (Api::Reseller, "GET", "/webhooks"),
    (Api::Reseller, "POST", "/webhooks"),
    (Api::Reseller, "GET", "/webhooks/{id}"),
    (Api::Reseller, "PUT", "/webhooks/{id}"),
    (Api::Reseller, "DELETE", "/webhooks/{id}"),
    (Api::Reseller, "POST", "/webhooks/{id}/test"),
    (Api::Public, "GET", "/openapi.json"),
    (Api::Admin, "POST", "/admin/v1/accounts"),
    (Api::Admin, "POST", "/admin/v1/accounts/{account_id}/topups"),
    (Api::Admin, "POST", "/admin/v1/accounts/{account_id}/keys"),
    (Api::Admin, "DELETE", "/admin/v1/keys/{api_key}"),
    (Api::Admin, "PUT", "/admin/v1/accounts/{account_id}/freeze"),
    (Api::Admin, "PUT", "/admin/v1/accounts/{account_id}/auto-refill"),
    (Api::Admin, "PUT", "/admin/v1/accounts/{account_id}/limits"),
    (Api::Admin, "PUT", "/admin/v1/inventory"),
    (Api::Admin, "GET", "/admin/v1/reports/conservation"),
    (Api::Admin, "GET", "/admin/v1/state"),
    (Api::Sandbox, "GET", "/sandbox/v1/clock"),
    (Api::Sandbox, "POST", "/sandbox/v1/clock/advance"),
    (Api::Sandbox, "POST", "/sandbox/v1/esims/{iccid}/install"),
    (Api::Sandbox, "POST", "/sandbox/v1/esims/{iccid}/usage"),
    (Api::Sandbox, "PUT", "/sandbox/v1/faults"),
];

/// The full path of a route (reseller and public routes live under the base path).
pub fn full_path(api: Api, pattern: &str) -> String {
    match api {
        Api::Reseller | Api::Public => format!("{RESELLER_BASE}{pattern}"),
        Api::Admin | Api::Sandbox => pattern.to_string(),
    }
}

/// What matching a path gave.
#[derive(Debug, PartialEq, Eq)]
pub enum Match<'a> {
    /// The route's index in [`ROUTES`] and its path parameters, in order.
    Found(usize, Vec<String>),
    /// The path exists with other methods (405); the `Allow` list.
    WrongMethod(Vec<&'a str>),
    NotFound,
}

/// The route table split into path segments once (routing runs on every request).
fn compiled() -> &'static [Vec<String>] {
    static COMPILED: std::sync::OnceLock<Vec<Vec<String>>> = std::sync::OnceLock::new();
    COMPILED.get_or_init(|| {
        ROUTES
            .iter()
            .map(|(api, _, pattern)| {
                full_path(*api, pattern).trim_matches('/').split('/').map(str::to_string).collect()
            })
            .collect()
    })
}

fn segments_match(pattern: &[String], path: &[&str]) -> Option<Vec<String>> {
    if pattern.len() != path.len() {
        return None;
    }
    let mut params = Vec::new();
    for (want, have) in pattern.iter().zip(path) {
        if want.starts_with('{') {
            if have.is_empty() {
                return None;
            }
            params.push(crate::api::percent_decode(have));
        } else if want != have {
            return None;
        }
    }
    Some(params)
}

/// Finds the route of `method` and `path` (the path without its query).
pub fn find(method: &str, path: &str) -> Match<'static> {
    let path: Vec<&str> = path.trim_matches('/').split('/').collect();
    let mut allowed = Vec::new();
    for (index, pattern) in compiled().iter().enumerate() {
        // Literal segments win over parameters: "/esim/list" before "/esim/{iccid}",
        // which the table order already guarantees.
        if let Some(params) = segments_match(pattern, &path) {
            let route_method = ROUTES[index].1;
            if route_method == method {
                return Match::Found(index, params);
            }
            if !allowed.contains(&route_method) {
                allowed.push(route_method);
            }
        }
    }
    if allowed.is_empty() {
        Match::NotFound
    } else {
        Match::WrongMethod(allowed)
    }
}

/// The API a path belongs to by its prefix, matched route or not (so an unknown path of
/// an API still asks that API's credential first: decision 55). `None` outside them.
pub fn api_of_path(path: &str) -> Option<Api> {
    let trimmed = format!("/{}", path.trim_start_matches('/'));
    let under = |base: &str| trimmed == base || trimmed.starts_with(&format!("{base}/"));
    if under(RESELLER_BASE) {
        Some(Api::Reseller)
    } else if under("/admin") {
        Some(Api::Admin)
    } else if under("/sandbox") {
        Some(Api::Sandbox)
    } else {
        None
    }
}

/// What a log line says of a request's path: its route's pattern
/// (`/admin/v1/keys/{api_key}`), never the path text, which may hold a credential.
pub fn log_label(method: &str, path: &str) -> String {
    label_of(&find(method, path))
}

/// [`log_label`] of a request already matched.
pub fn label_of(matched: &Match<'_>) -> String {
    match matched {
        Match::Found(index, _) => {
            let (api, _, pattern) = ROUTES[*index];
            full_path(api, pattern)
        }
        Match::WrongMethod(_) | Match::NotFound => "(no route)".to_string(),
    }
}
