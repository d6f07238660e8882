//! The endpoint table: every operation the service answers, as one [`Endpoint`] enum
//! with its API, method, path pattern and the shard that answers it ([`ShardBy`]) in one
//! place ([`endpoints!`] below). Routing
//! returns the variant; parsing ([`crate::api`]), the OpenAPI document
//! ([`crate::openapi`]) and the simulation's requests match on it exhaustively, so a new
//! endpoint does not compile until each of them says what it does with it.

/// Which API a route belongs to (and so which credential it needs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Api {
    /// `/api/v2/reseller`: bearer API key, rate-limited.
    Reseller,
    /// `/admin/v1`: bearer admin token.
    Admin,
    /// `/sandbox/v1`: bearer admin token.
    Sandbox,
    /// No credential (the OpenAPI documents).
    Public,
}

pub const RESELLER_BASE: &str = "/api/v2/reseller";

/// Which shard answers an endpoint's requests when the service is sharded (decision
/// 171): a column of the table, so a new endpoint says it where it is declared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShardBy {
    /// The bearer key's shard: every reseller call (the key's account holds all it names).
    Key,
    /// Any shard answers alike: shard 0.
    Any,
    /// A new account: the node places it (round-robin, decision 169).
    NewAccount,
    /// The shard of the path's first parameter, an account id.
    AccountId,
    /// The shard of the path's first parameter, an API key.
    ApiKey,
    /// The shard of the path's first parameter, an ICCID.
    Iccid,
    /// Every shard, the answers merged.
    Every(FanOut),
    /// The shard of the query's `account_id`, else every shard.
    AccountQueryOrEvery(FanOut),
}

/// Declares [`Endpoint`], its list [`Endpoint::ALL`] and its table (api, method, path
/// pattern, shard) from one list, so none of them can miss a variant.
macro_rules! endpoints {
    ($($name:ident => $api:ident $method:ident $pattern:literal by $shard:expr,)*) => {
        /// One operation of the service (reseller, public, admin and sandbox APIs).
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Endpoint {
            $($name,)*
        }

        impl Endpoint {
            /// Every endpoint, in table order (the order routing tries them).
            pub const ALL: &'static [Endpoint] = &[$(Endpoint::$name,)*];

            /// The API it belongs to (and so the credential it needs).
            pub const fn api(self) -> Api {
                match self {
                    $(Endpoint::$name => Api::$api,)*
                }
            }

            /// Its name (`FundEsim`): the `endpoint` label of its metrics, never the path,
            /// so that ids and keys never become labels.
            pub const fn name(self) -> &'static str {
                match self {
                    $(Endpoint::$name => stringify!($name),)*
                }
            }

            /// Its HTTP method.
            pub const fn method(self) -> &'static str {
                match self {
                    $(Endpoint::$name => stringify!($method),)*
                }
            }

            /// Its path pattern, `{name}` standing for one non-empty segment; reseller and
            /// public patterns are relative to [`RESELLER_BASE`] (see [`Endpoint::full_pattern`]).
            pub const fn pattern(self) -> &'static str {
                match self {
                    $(Endpoint::$name => $pattern,)*
                }
            }

            /// Which shard answers it when the service is sharded ([`crate::shards::route`]).
            pub const fn shard_by(self) -> ShardBy {
                use ShardBy::*;
                match self {
                    $(Endpoint::$name => $shard,)*
                }
            }
        }
    };
}

// Literal segments must come before parameters at the same place ("/esim/list" before
// "/esim/{iccid}"): routing takes the first match in this order.
endpoints! {
    ProvisionEsim => Reseller POST "/esim/provision" by Key,
    ListEsims => Reseller GET "/esim/list" by Key,
    GetEsim => Reseller GET "/esim/{iccid}" by Key,
    EsimQrCode => Reseller GET "/esim/{iccid}/qr-code" by Key,
    EnableEsim => Reseller POST "/esim/{iccid}/enable" by Key,
    DisableEsim => Reseller POST "/esim/{iccid}/disable" by Key,
    TerminateEsim => Reseller POST "/esim/{iccid}/terminate" by Key,
    ThrottleEsim => Reseller POST "/esim/{iccid}/throttle" by Key,
    FundEsim => Reseller POST "/esim/{iccid}/fund" by Key,
    DefundEsim => Reseller POST "/esim/{iccid}/defund" by Key,
    ListGroups => Reseller GET "/groups" by Key,
    CreateGroup => Reseller POST "/groups" by Key,
    GetGroup => Reseller GET "/groups/{id}" by Key,
    UpdateGroup => Reseller PATCH "/groups/{id}" by Key,
    FundGroup => Reseller POST "/groups/{id}/fund" by Key,
    DefundGroup => Reseller POST "/groups/{id}/defund" by Key,
    ListGroupEsims => Reseller GET "/groups/{id}/esims" by Key,
    AddGroupEsim => Reseller POST "/groups/{id}/esims" by Key,
    RemoveGroupEsim => Reseller DELETE "/groups/{id}/esims/{iccid}" by Key,
    WalletBalance => Reseller GET "/wallet/balance" by Key,
    Rates => Reseller GET "/rates" by Key,
    Account => Reseller GET "/account" by Key,
    ListWebhooks => Reseller GET "/webhooks" by Key,
    CreateWebhook => Reseller POST "/webhooks" by Key,
    GetWebhook => Reseller GET "/webhooks/{id}" by Key,
    UpdateWebhook => Reseller PUT "/webhooks/{id}" by Key,
    DeleteWebhook => Reseller DELETE "/webhooks/{id}" by Key,
    TestWebhook => Reseller POST "/webhooks/{id}/test" by Key,
    RotateWebhookSecret => Reseller POST "/webhooks/{id}/rotate-secret" by Key,
    ListDeliveries => Reseller GET "/webhooks/{id}/deliveries" by Key,
    ListEvents => Reseller GET "/events" by Key,
    GetEvent => Reseller GET "/events/{id}" by Key,
    ResendEvent => Reseller POST "/events/{id}/resend" by Key,
    ListApiKeys => Reseller GET "/keys" by Key,
    CreateApiKey => Reseller POST "/keys" by Key,
    RevokeApiKey => Reseller DELETE "/keys/{id}" by Key,
    GetAutoRefill => Reseller GET "/auto-refill" by Key,
    UpdateAutoRefill => Reseller PUT "/auto-refill" by Key,
    OpenApi => Public GET "/openapi.json" by Any,
    AdminOpenApi => Public GET "/admin/v1/openapi.json" by Any,
    SandboxOpenApi => Public GET "/sandbox/v1/openapi.json" by Any,
    CreateAccount => Admin POST "/admin/v1/accounts" by NewAccount,
    ListAccounts => Admin GET "/admin/v1/accounts" by Every(FanOut::ListAccounts),
    TopUp => Admin POST "/admin/v1/accounts/{account_id}/topups" by AccountId,
    CreateKey => Admin POST "/admin/v1/accounts/{account_id}/keys" by AccountId,
    RevokeKey => Admin DELETE "/admin/v1/keys/{api_key}" by ApiKey,
    Freeze => Admin PUT "/admin/v1/accounts/{account_id}/freeze" by AccountId,
    SetAutoRefill => Admin PUT "/admin/v1/accounts/{account_id}/auto-refill" by AccountId,
    SetLimits => Admin PUT "/admin/v1/accounts/{account_id}/limits" by AccountId,
    SetInventory => Admin PUT "/admin/v1/inventory" by Every(FanOut::SetInventory),
    ConservationReport => Admin GET "/admin/v1/reports/conservation" by AccountQueryOrEvery(FanOut::Report),
    State => Admin GET "/admin/v1/state" by Every(FanOut::State),
    Clock => Sandbox GET "/sandbox/v1/clock" by Any,
    AdvanceClock => Sandbox POST "/sandbox/v1/clock/advance" by Every(FanOut::AdvanceClock),
    Install => Sandbox POST "/sandbox/v1/esims/{iccid}/install" by Iccid,
    Usage => Sandbox POST "/sandbox/v1/esims/{iccid}/usage" by Iccid,
    SetFaults => Sandbox PUT "/sandbox/v1/faults" by Every(FanOut::SetFaults),
    Pending => Sandbox GET "/sandbox/v1/pending" by Every(FanOut::Pending),
}

impl Endpoint {
    /// The full path pattern (`/api/v2/reseller/esim/{iccid}`, `/admin/v1/keys/{api_key}`).
    pub fn full_pattern(self) -> String {
        full_path(self.api(), self.pattern())
    }

    /// The API whose OpenAPI document lists it: its own, or for a public endpoint the
    /// API whose path it lives under (each API's document is one of them).
    pub fn documented_in(self) -> Api {
        match self.api() {
            Api::Public => match api_of_path(&self.full_pattern()) {
                Some(api) => api,
                None => unreachable!("{self:?} lives under an API's path"),
            },
            api => api,
        }
    }

    /// The names of its path parameters, in order (`["id", "iccid"]`).
    pub fn parameters(self) -> impl Iterator<Item = &'static str> {
        self.pattern().split('/').filter_map(|segment| segment.strip_prefix('{')?.strip_suffix('}'))
    }

    /// A concrete full path: each `{name}` of the pattern replaced, in order, by a
    /// parameter, percent-encoded (what [`find`] decodes back).
    ///
    /// Panics when the number of parameters is not the pattern's (a caller's bug).
    pub fn path(self, params: &[&str]) -> String {
        assert_eq!(self.parameters().count(), params.len(), "parameters of {self:?}");
        let mut params = params.iter();
        self.full_pattern()
            .split('/')
            .map(|segment| match segment.starts_with('{') {
                true => percent_encode(params.next().expect("counted above")),
                false => segment.to_string(),
            })
            .collect::<Vec<_>>()
            .join("/")
    }
}

/// Percent-encodes a path segment or query value (unreserved characters stay).
pub fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b'~') {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// The full path of a route: reseller routes live under the base path; admin and
/// sandbox routes are written in full; a public route is written like the routes of the
/// API it serves (the reseller's document relative to its base, the admin's and the
/// sandbox's in full).
pub fn full_path(api: Api, pattern: &str) -> String {
    let in_full = |pattern: &str| pattern.starts_with("/admin/") || pattern.starts_with("/sandbox/");
    match api {
        Api::Public if in_full(pattern) => pattern.to_string(),
        Api::Reseller | Api::Public => format!("{RESELLER_BASE}{pattern}"),
        Api::Admin | Api::Sandbox => pattern.to_string(),
    }
}

/// A request's route as its connection task found it, handed to the owner task with the
/// request (an extension) so that the path is matched once. Only for a request handed on
/// unchanged: a part made for a fan-out carries none and is matched where it lands.
#[derive(Clone, Debug)]
pub struct Matched(pub Endpoint, pub Vec<String>);

/// What matching a path gave.
#[derive(Debug, PartialEq, Eq)]
pub enum Match<'a> {
    /// The endpoint and its path parameters (percent-decoded), in order.
    Found(Endpoint, Vec<String>),
    /// The path exists with other methods (405); the `Allow` list.
    WrongMethod(Vec<&'a str>),
    NotFound,
}

/// One endpoint of the table, prepared once (routing and logging run on every request).
struct Compiled {
    endpoint: Endpoint,
    /// [`Endpoint::full_pattern`], kept for log lines (no allocation per request).
    full_pattern: String,
    /// The full pattern's segments.
    segments: Vec<String>,
}

/// The endpoint table, in [`Endpoint::ALL`] order.
fn compiled() -> &'static [Compiled] {
    static COMPILED: std::sync::OnceLock<Vec<Compiled>> = std::sync::OnceLock::new();
    COMPILED.get_or_init(|| {
        Endpoint::ALL
            .iter()
            .map(|&endpoint| {
                let full_pattern = endpoint.full_pattern();
                let segments = full_pattern.trim_matches('/').split('/').map(str::to_string).collect();
                Compiled { endpoint, full_pattern, segments }
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
            params.push(percent_decode(have));
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
    for Compiled { endpoint, segments, .. } in compiled() {
        // Literal segments win over parameters: "/esim/list" before "/esim/{iccid}",
        // which the table order already guarantees.
        if let Some(params) = segments_match(segments, &path) {
            let route_method = endpoint.method();
            if route_method == method {
                return Match::Found(*endpoint, params);
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

/// Prefixes people and old clients write for each API's base (an older version, a base
/// without its API's name, or the name without the version), most specific first.
const NEAR_PREFIXES: [(&str, &[&str]); 3] = [
    (
        RESELLER_BASE,
        &[
            "/api/v1/reseller",
            "/api/reseller",
            "/v2/reseller",
            "/v1/reseller",
            "/reseller",
            "/api/v1",
            "/api/v2",
            "/api",
        ],
    ),
    ("/admin/v1", &["/api/v2/admin", "/api/v1/admin", "/api/admin", "/admin/v2", "/admin"]),
    ("/sandbox/v1", &["/api/v2/sandbox", "/api/v1/sandbox", "/api/sandbox", "/sandbox/v2", "/sandbox"]),
];

/// The path meant by a path that no route has, when it starts with a near prefix of an
/// API's base (`/api/v1/esim/list` for `/api/v2/reseller/esim/list`): the same rest
/// under the real base when a route has it, else the base itself.
pub fn suggestion(path: &str) -> Option<String> {
    let path = format!("/{}", path.trim_start_matches('/'));
    for (base, near) in NEAR_PREFIXES {
        if path == base || path.starts_with(&format!("{base}/")) {
            return None; // under the real base: a wrong route, not a wrong prefix
        }
        let Some(rest) = near.iter().find_map(|prefix| path.strip_prefix(prefix).filter(|r| r.starts_with('/'))) else {
            continue;
        };
        let meant = format!("{base}{rest}");
        // Any method: a path routed for another one answers 405, not 404.
        let routed = !matches!(find("GET", &meant), Match::NotFound);
        return Some(if routed { meant } else { format!("{base}/...") });
    }
    None
}

/// The message of a 404 for a path no route has, with the path meant when it is near.
pub fn not_found_message(path: &str) -> String {
    match suggestion(path) {
        Some(meant) => format!("no route for {path}; did you mean {meant}?"),
        None => format!("no route for {path}"),
    }
}

/// What a log line says of a request's path: its route's pattern
/// (`/admin/v1/keys/{api_key}`), never the path text, which may hold a credential.
pub fn log_label(method: &str, path: &str) -> &'static str {
    label_of(&find(method, path))
}

/// [`log_label`] of a request already matched.
pub fn label_of(matched: &Match<'_>) -> &'static str {
    match matched {
        Match::Found(endpoint, _) => {
            let entry = &compiled()[*endpoint as usize];
            assert_eq!(entry.endpoint, *endpoint, "the table is in Endpoint::ALL order");
            &entry.full_pattern
        }
        Match::WrongMethod(_) | Match::NotFound => "(no route)",
    }
}

/// The requests that name no shard and concern every one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FanOut {
    /// `GET /admin/v1/accounts`: pages merged shard by shard.
    ListAccounts,
    /// `GET /admin/v1/reports/conservation` without `account_id`: a row per shard and the total.
    Report,
    /// `GET /admin/v1/state`: each shard's digest and one over all.
    State,
    /// `POST /sandbox/v1/clock/advance`: every shard to the same time.
    AdvanceClock,
    /// `PUT /admin/v1/inventory`: the stock split over the shards.
    SetInventory,
    /// `PUT /sandbox/v1/faults`: the same faults on every shard.
    SetFaults,
    /// `GET /sandbox/v1/pending`: every shard's timers, merged by due time.
    Pending,
}

/// Decodes `%XX` escapes (and `+` as space in queries is left to the caller).
pub fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let (Some(high), Some(low)) = (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                out.push((high * 16 + low) as u8);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_endpoint_is_found_back_from_its_own_path() {
        let mut seen = std::collections::BTreeSet::new();
        for &endpoint in Endpoint::ALL {
            assert!(seen.insert((endpoint.method(), endpoint.full_pattern())), "{endpoint:?} twice in the table");
            let values = ["89 44/é?", "x%2F", "id"];
            let params: Vec<&str> = values.iter().copied().take(endpoint.parameters().count()).collect();
            let path = endpoint.path(&params);
            assert!(!path.contains(' ') && !path.contains('?'), "{path}");
            let expected: Vec<String> = params.iter().map(|p| p.to_string()).collect();
            assert_eq!(find(endpoint.method(), &path), Match::Found(endpoint, expected), "{path}");
            assert_eq!(label_of(&find(endpoint.method(), &path)), endpoint.full_pattern());
        }
        assert_eq!(Endpoint::RemoveGroupEsim.path(&["g", "89"]), "/api/v2/reseller/groups/g/esims/89");
        assert_eq!(Endpoint::RevokeKey.path(&["rsk_1"]), "/admin/v1/keys/rsk_1");
        assert_eq!(find("PATCH", "/api/v2/reseller/groups"), Match::WrongMethod(vec!["GET", "POST"]));
        assert_eq!(find("GET", "/api/v2/reseller/nothing"), Match::NotFound);
        assert_eq!(find("GET", "/admin/v1/openapi.json"), Match::Found(Endpoint::AdminOpenApi, vec![]));
        assert_eq!(Endpoint::SandboxOpenApi.full_pattern(), "/sandbox/v1/openapi.json");
        assert_eq!(Endpoint::OpenApi.full_pattern(), "/api/v2/reseller/openapi.json");
        let documented = |api| Endpoint::ALL.iter().filter(|e| e.documented_in() == api).count();
        assert_eq!([documented(Api::Reseller), documented(Api::Admin), documented(Api::Sandbox)], [39, 12, 7]);
        assert!(Endpoint::ALL.iter().all(|e| e.documented_in() != Api::Public));
    }

    #[test]
    fn a_path_under_a_near_prefix_suggests_the_one_meant() {
        for (path, meant) in [
            ("/api/v1/esim/list", Some("/api/v2/reseller/esim/list")),
            ("/api/v1/reseller/groups/g1/esims", Some("/api/v2/reseller/groups/g1/esims")),
            ("/api/v2/wallet/balance", Some("/api/v2/reseller/wallet/balance")),
            ("/api/v1/nothing/here", Some("/api/v2/reseller/...")),
            ("/admin/accounts", Some("/admin/v1/accounts")),
            ("/admin/v2/state", Some("/admin/v1/state")),
            ("/sandbox/clock/advance", Some("/sandbox/v1/clock/advance")),
            ("/api/v2/reseller/nowhere", None),
            ("/admin/v1/nothing", None),
            ("/elsewhere", None),
            ("/apixyz/esim/list", None),
        ] {
            assert_eq!(suggestion(path).as_deref(), meant, "{path}");
        }
        assert_eq!(
            not_found_message("/api/v1/esim/list"),
            "no route for /api/v1/esim/list; did you mean /api/v2/reseller/esim/list?"
        );
        assert_eq!(not_found_message("/elsewhere"), "no route for /elsewhere");
    }
}
