//! One step of a simulation, and its text form.
//!
//! The same vocabulary serves the random worlds, the shrunk traces of a violation and the
//! scenario scripts of `scenarios/`: an op names entities (`alice`, `s1`, `g1`, `w1`)
//! instead of holding ids, so a trace prints as a script and a script parses back into
//! the same ops. A name that is not bound is sent as it is, which is how scripts (and
//! shrunk traces whose creating step was removed) reach unknown ids.

use esim_engine::CardBehavior;
use rust_decimal::Decimal;
use std::fmt;
use std::str::FromStr;

/// How the webhook receiver played by the simulation answers deliveries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Receiver {
    /// HTTP 200.
    Ok,
    /// HTTP 500.
    Fail,
    /// HTTP 500 for the next `count` answers, then 200.
    FailTimes { count: u32 },
    /// No answer within the delivery timeout.
    Timeout,
    /// Keeps deliveries in flight, unanswered, until the mode changes.
    Hold,
    /// Connection refused for this long from now, then 200.
    Down { ms: i64 },
    /// HTTP 410 Gone: the endpoint is gone for good (the webhook is disabled at once).
    Gone,
}

/// A call of the reseller API. Entities are names (see the module docs).
#[derive(Clone, Debug, PartialEq)]
pub enum Call {
    Provision {
        bind: Option<String>,
        group: Option<String>,
        label: Option<String>,
        reference: Option<String>,
    },
    List {
        status: Option<String>,
        limit: Option<u64>,
        offset: Option<u64>,
    },
    Get {
        sim: String,
    },
    Enable {
        sim: String,
    },
    Disable {
        sim: String,
    },
    Terminate {
        sim: String,
    },
    Throttle {
        sim: String,
        speed: String,
    },
    Fund {
        sim: String,
        amount: Decimal,
    },
    Defund {
        sim: String,
    },
    Groups,
    CreateGroup {
        bind: Option<String>,
        name: String,
        threshold: Option<Decimal>,
        refill: Option<Decimal>,
    },
    GetGroup {
        group: String,
    },
    UpdateGroup {
        group: String,
        name: Option<String>,
        threshold: Option<Decimal>,
        refill: Option<Decimal>,
    },
    FundGroup {
        group: String,
        amount: Decimal,
    },
    DefundGroup {
        group: String,
    },
    Members {
        group: String,
        limit: Option<u64>,
        offset: Option<u64>,
    },
    Add {
        group: String,
        sim: String,
    },
    Remove {
        group: String,
        sim: String,
    },
    Wallet,
    Rates {
        country: Option<String>,
        continent: Option<String>,
    },
    AccountInfo,
    Webhooks,
    CreateWebhook {
        bind: Option<String>,
        events: Vec<String>,
        url: Option<String>,
    },
    GetWebhook {
        webhook: String,
    },
    UpdateWebhook {
        webhook: String,
        events: Option<Vec<String>>,
        active: Option<bool>,
        url: Option<String>,
    },
    DeleteWebhook {
        webhook: String,
    },
    TestWebhook {
        webhook: String,
    },
    /// `POST /webhooks/{id}/rotate-secret`.
    RotateSecret {
        webhook: String,
    },
    /// `GET /webhooks/{id}/deliveries`.
    Deliveries {
        webhook: String,
    },
    /// `POST /events/{id}/resend` to `webhook` (`event` is an event id).
    Resend {
        event: String,
        webhook: String,
    },
    /// `GET /keys`: the caller's active keys (decision 128).
    Keys,
    /// `POST /keys`: a new key, which the caller uses from then on.
    MakeKey,
    /// `DELETE /keys/{id}` of the caller's own key: its calls get 401 until `newkey`
    /// (refused while it is the account's last key).
    RevokeOwnKey,
    /// `GET /auto-refill` (decision 129).
    GetRefill,
    /// `PUT /auto-refill`.
    SetRefill {
        enabled: Option<bool>,
        amount: Option<Decimal>,
    },
}

impl Call {
    /// The script verb, also the name counted in the summary.
    pub fn verb(&self) -> &'static str {
        match self {
            Call::Provision { .. } => "provision",
            Call::List { .. } => "list",
            Call::Get { .. } => "get",
            Call::Enable { .. } => "enable",
            Call::Disable { .. } => "disable",
            Call::Terminate { .. } => "terminate",
            Call::Throttle { .. } => "throttle",
            Call::Fund { .. } => "fund",
            Call::Defund { .. } => "defund",
            Call::Groups => "groups",
            Call::CreateGroup { .. } => "group",
            Call::GetGroup { .. } => "getgroup",
            Call::UpdateGroup { .. } => "patchgroup",
            Call::FundGroup { .. } => "fundgroup",
            Call::DefundGroup { .. } => "defundgroup",
            Call::Members { .. } => "members",
            Call::Add { .. } => "add",
            Call::Remove { .. } => "remove",
            Call::Wallet => "wallet",
            Call::Rates { .. } => "rates",
            Call::AccountInfo => "accountinfo",
            Call::Webhooks => "webhooks",
            Call::CreateWebhook { .. } => "webhook",
            Call::GetWebhook { .. } => "getwebhook",
            Call::UpdateWebhook { .. } => "putwebhook",
            Call::DeleteWebhook { .. } => "deletewebhook",
            Call::TestWebhook { .. } => "testwebhook",
            Call::RotateSecret { .. } => "rotate",
            Call::Deliveries { .. } => "deliveries",
            Call::Resend { .. } => "resend",
            Call::Keys => "keys",
            Call::MakeKey => "makekey",
            Call::RevokeOwnKey => "revokekey",
            Call::GetRefill => "getrefill",
            Call::SetRefill { .. } => "refill",
        }
    }

    /// Reads change nothing (no idempotency, no facts about money).
    pub fn is_read(&self) -> bool {
        matches!(
            self,
            Call::List { .. }
                | Call::Get { .. }
                | Call::Groups
                | Call::GetGroup { .. }
                | Call::Members { .. }
                | Call::Wallet
                | Call::Rates { .. }
                | Call::AccountInfo
                | Call::Webhooks
                | Call::GetWebhook { .. }
                | Call::Deliveries { .. }
                | Call::Keys
                | Call::GetRefill
        )
    }
}

/// One step.
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    // The operator (admin API).
    Account {
        name: String,
    },
    TopUp {
        account: String,
        amount: Decimal,
    },
    Freeze {
        account: String,
        frozen: bool,
    },
    AutoRefill {
        account: String,
        enabled: bool,
        amount: Option<Decimal>,
        card: Option<CardBehavior>,
    },
    Limits {
        account: String,
        groups: Option<u32>,
        size: Option<u32>,
    },
    Inventory {
        available: u64,
    },
    /// A block of `count` eSIM profiles from the global pool, as a sharded shell grants
    /// it (decision 185): the engine command itself, journaled (no HTTP route).
    Grant {
        count: u64,
    },
    /// A new API key; the account's calls use it from now on.
    NewKey {
        account: String,
    },
    /// Revokes the account's current key; its calls get 401 until `newkey`.
    Revoke {
        account: String,
    },
    // Resellers.
    Call {
        caller: String,
        call: Call,
        idempotency_key: Option<String>,
    },
    /// Any request, as bytes: `caller` is an account, `admin` or `anonymous`. `{name}`
    /// in the path is replaced by the bound id; a path not under `/admin` or `/sandbox`
    /// is under the reseller base path.
    Raw {
        caller: String,
        method: String,
        path: String,
        body: String,
    },
    /// `count` wallet reads at the same instant (to reach the rate limit).
    Burst {
        caller: String,
        count: u32,
    },
    // The world (sandbox API) and the webhook receivers.
    Install {
        sim: String,
    },
    Usage {
        sim: String,
        mb: Decimal,
        country: String,
        operator: Option<String>,
    },
    Faults {
        upstream_pause_fails: Option<bool>,
        network_read_fails: Option<bool>,
    },
    Advance {
        ms: i64,
    },
    Receiver {
        webhook: String,
        mode: Receiver,
    },
    /// The service process dies and starts again. `crash` (`rebuild`): the engine is
    /// rebuilt from the journal's bytes, as a restart after SIGKILL does. `restart`: the
    /// engine is kept, and only what any restart loses is lost (the rate windows; the
    /// deliveries in flight are handed out again). The two must give identical results.
    Restart {
        rebuild: bool,
    },
    // The journal's store (issue 17): the service is the owner node of an in-memory
    // store, with a hot standby following it.
    /// The owner pauses until its lease runs out; the standby takes the shard over
    /// (a new epoch), catches up and serves; the old owner stays around as a zombie.
    Failover,
    /// The zombie (the owner before the last failover) wakes and tries to append: it
    /// must be fenced and acknowledge nothing. Nothing happens before a failover.
    Zombie,
    /// The owner's next commit is applied but its outcome is lost: it must read the
    /// outcome back before answering, and not append the batch twice.
    LostCommit,
    /// The standby follows nothing for the next `steps` steps (it is behind; a failover
    /// meanwhile catches it up before it serves).
    StandbyLag {
        steps: u32,
    },
    /// The owner encodes a snapshot of its engine after the step's entries. `snapshot`:
    /// it is written into the store (newer standbys and rebuilds from the store start
    /// from it). `snapshot_crash`: the process dies after encoding it and before writing
    /// it; the engine is rebuilt from the store (its older snapshot and the rows after).
    Snapshot {
        crash: bool,
    },
    /// The store holds the append of the next change's batch for `ms` of virtual time
    /// (a frozen disk or database). Past the append deadline the request is answered 503
    /// with Retry-After; the batch commits when the stall ends (decision 220).
    Stall {
        ms: i64,
    },
}

impl Op {
    /// The script verb (the kind counted in the summary).
    pub fn verb(&self) -> &'static str {
        match self {
            Op::Account { .. } => "account",
            Op::TopUp { .. } => "topup",
            Op::Freeze { frozen: true, .. } => "freeze",
            Op::Freeze { frozen: false, .. } => "unfreeze",
            Op::AutoRefill { .. } => "autorefill",
            Op::Limits { .. } => "limits",
            Op::Inventory { .. } => "inventory",
            Op::Grant { .. } => "grant",
            Op::NewKey { .. } => "newkey",
            Op::Revoke { .. } => "revoke",
            Op::Call { call, .. } => call.verb(),
            Op::Raw { .. } => "raw",
            Op::Burst { .. } => "burst",
            Op::Install { .. } => "install",
            Op::Usage { .. } => "usage",
            Op::Faults { .. } => "faults",
            Op::Advance { .. } => "advance",
            Op::Receiver { .. } => "receiver",
            Op::Restart { rebuild: true } => "crash",
            Op::Restart { rebuild: false } => "restart",
            Op::Failover => "failover",
            Op::Zombie => "zombie",
            Op::LostCommit => "lost_commit",
            Op::StandbyLag { .. } => "standby_lag",
            Op::Snapshot { crash: false } => "snapshot",
            Op::Snapshot { crash: true } => "snapshot_crash",
            Op::Stall { .. } => "stall",
        }
    }

    /// The ops of the journal's store ([`Op::Failover`] and the others after it).
    pub fn is_store_fault(&self) -> bool {
        matches!(
            self,
            Op::Failover | Op::Zombie | Op::LostCommit | Op::StandbyLag { .. } | Op::Snapshot { .. } | Op::Stall { .. }
        )
    }

    /// Simpler versions of this op, for shrinking (smaller amounts, shorter waits,
    /// no idempotency key).
    pub fn simplifications(&self) -> Vec<Op> {
        let mut out = Vec::new();
        match self {
            Op::Call { caller, call, idempotency_key: Some(_) } => {
                out.push(Op::Call { caller: caller.clone(), call: call.clone(), idempotency_key: None });
            }
            Op::Advance { ms } if *ms > 1_000 => {
                // Round down to a whole minute, then halve.
                let minute = 60_000;
                if *ms % minute != 0 && *ms > minute {
                    out.push(Op::Advance { ms: *ms / minute * minute });
                }
                out.push(Op::Advance { ms: *ms / 2 });
            }
            Op::Usage { sim, mb, country, operator } => {
                if operator.is_some() {
                    out.push(Op::Usage { sim: sim.clone(), mb: *mb, country: country.clone(), operator: None });
                }
                if *mb > Decimal::ONE {
                    let half = (*mb / Decimal::TWO).trunc();
                    out.push(Op::Usage { sim: sim.clone(), mb: half, country: country.clone(), operator: None });
                }
            }
            _ => {}
        }
        out
    }
}

// ----- text form -----

/// Formats a token, quoting it when it would not read back as one token.
fn token(text: &str) -> String {
    let plain = !text.is_empty() && !text.chars().any(|c| c.is_whitespace() || c == '"' || c == '#');
    if plain {
        text.to_string()
    } else {
        format!("\"{}\"", text.replace('\\', "\\\\").replace('"', "\\\""))
    }
}

/// Formats a duration with the largest unit that divides it exactly.
pub fn duration_text(ms: i64) -> String {
    for (unit, size) in [("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1_000)] {
        if ms != 0 && ms % size == 0 {
            return format!("{}{unit}", ms / size);
        }
    }
    format!("{ms}ms")
}

/// Parses `90s`, `16m`, `3h`, `1d`, `1500ms` (or a bare number of seconds).
pub fn parse_duration(text: &str) -> Result<i64, String> {
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let value: i64 = number.parse().map_err(|_| format!("bad duration {text:?}"))?;
    let size = match unit {
        "ms" => 1,
        "" | "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return Err(format!("bad duration unit in {text:?} (use ms, s, m, h or d)")),
    };
    value.checked_mul(size).ok_or_else(|| format!("duration {text:?} is too long"))
}

fn on_off(value: bool) -> &'static str {
    if value {
        "on"
    } else {
        "off"
    }
}

/// Appends ` key value` for a present option.
fn opt<T: fmt::Display>(out: &mut String, key: &str, value: &Option<T>) {
    if let Some(value) = value {
        out.push_str(&format!(" {key} {}", token(&value.to_string())));
    }
}

impl fmt::Display for Receiver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Receiver::Ok => f.write_str("ok"),
            Receiver::Fail => f.write_str("fail"),
            Receiver::FailTimes { count } => write!(f, "fail {count}"),
            Receiver::Timeout => f.write_str("timeout"),
            Receiver::Hold => f.write_str("hold"),
            Receiver::Down { ms } => write!(f, "down {}", duration_text(*ms)),
            Receiver::Gone => f.write_str("gone"),
        }
    }
}

impl fmt::Display for Call {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The caller is written by `Op`; this is what follows it.
        let mut out = String::new();
        match self {
            Call::Provision { bind, group, label, reference } => {
                opt(&mut out, "as", bind);
                opt(&mut out, "group", group);
                opt(&mut out, "label", label);
                opt(&mut out, "ref", reference);
            }
            Call::List { status, limit, offset } => {
                opt(&mut out, "status", status);
                opt(&mut out, "limit", limit);
                opt(&mut out, "offset", offset);
            }
            Call::Members { group, limit, offset } => {
                out.push_str(&format!(" {}", token(group)));
                opt(&mut out, "limit", limit);
                opt(&mut out, "offset", offset);
            }
            Call::Get { sim }
            | Call::Enable { sim }
            | Call::Disable { sim }
            | Call::Terminate { sim }
            | Call::Defund { sim } => out.push_str(&format!(" {}", token(sim))),
            Call::Throttle { sim, speed } => out.push_str(&format!(" {} {}", token(sim), token(speed))),
            Call::Fund { sim, amount } => out.push_str(&format!(" {} {amount}", token(sim))),
            Call::Groups
            | Call::Wallet
            | Call::AccountInfo
            | Call::Webhooks
            | Call::Keys
            | Call::MakeKey
            | Call::RevokeOwnKey
            | Call::GetRefill => {}
            Call::SetRefill { enabled, amount } => {
                opt(&mut out, "enabled", enabled);
                opt(&mut out, "amount", amount);
            }
            Call::CreateGroup { bind, name, threshold, refill } => {
                opt(&mut out, "as", bind);
                out.push_str(&format!(" {}", token(name)));
                opt(&mut out, "threshold", threshold);
                opt(&mut out, "refill", refill);
            }
            Call::GetGroup { group } | Call::DefundGroup { group } => out.push_str(&format!(" {}", token(group))),
            Call::UpdateGroup { group, name, threshold, refill } => {
                out.push_str(&format!(" {}", token(group)));
                opt(&mut out, "name", name);
                opt(&mut out, "threshold", threshold);
                opt(&mut out, "refill", refill);
            }
            Call::FundGroup { group, amount } => out.push_str(&format!(" {} {amount}", token(group))),
            Call::Add { group, sim } | Call::Remove { group, sim } => {
                out.push_str(&format!(" {} {}", token(group), token(sim)))
            }
            Call::Rates { country, continent } => {
                opt(&mut out, "country", country);
                opt(&mut out, "continent", continent);
            }
            Call::CreateWebhook { bind, events, url } => {
                opt(&mut out, "as", bind);
                out.push_str(&format!(" {}", token(&events.join(","))));
                opt(&mut out, "url", url);
            }
            Call::GetWebhook { webhook }
            | Call::DeleteWebhook { webhook }
            | Call::TestWebhook { webhook }
            | Call::RotateSecret { webhook }
            | Call::Deliveries { webhook } => out.push_str(&format!(" {}", token(webhook))),
            Call::Resend { event, webhook } => out.push_str(&format!(" {} {}", token(event), token(webhook))),
            Call::UpdateWebhook { webhook, events, active, url } => {
                out.push_str(&format!(" {}", token(webhook)));
                opt(&mut out, "events", &events.as_ref().map(|e| e.join(",")));
                opt(&mut out, "active", active);
                opt(&mut out, "url", url);
            }
        }
        f.write_str(&out)
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let verb = self.verb();
        match self {
            Op::Account { name } => write!(f, "{verb} {}", token(name)),
            Op::TopUp { account, amount } => write!(f, "{verb} {} {amount}", token(account)),
            Op::Freeze { account, .. } | Op::NewKey { account } | Op::Revoke { account } => {
                write!(f, "{verb} {}", token(account))
            }
            Op::AutoRefill { account, enabled, amount, card } => {
                let mut out = format!("{verb} {} {}", token(account), on_off(*enabled));
                opt(&mut out, "amount", amount);
                opt(&mut out, "card", card);
                f.write_str(&out)
            }
            Op::Limits { account, groups, size } => {
                let mut out = format!("{verb} {}", token(account));
                opt(&mut out, "groups", groups);
                opt(&mut out, "size", size);
                f.write_str(&out)
            }
            Op::Inventory { available } => write!(f, "{verb} {available}"),
            Op::Grant { count } => write!(f, "{verb} {count}"),
            Op::Call { caller, call, idempotency_key } => {
                write!(f, "{verb} {}{call}", token(caller))?;
                match idempotency_key {
                    Some(key) => write!(f, " idem {}", token(key)),
                    None => Ok(()),
                }
            }
            Op::Raw { caller, method, path, body } => {
                write!(f, "{verb} {} {method} {}", token(caller), token(path))?;
                if body.is_empty() {
                    Ok(())
                } else {
                    write!(f, " {body}")
                }
            }
            Op::Burst { caller, count } => write!(f, "{verb} {} {count}", token(caller)),
            Op::Install { sim } => write!(f, "{verb} {}", token(sim)),
            Op::Usage { sim, mb, country, operator } => {
                let mut out = format!("{verb} {} {mb} {}", token(sim), token(country));
                opt(&mut out, "operator", operator);
                f.write_str(&out)
            }
            Op::Faults { upstream_pause_fails, network_read_fails } => {
                let mut out = verb.to_string();
                opt(&mut out, "pause", &upstream_pause_fails.map(on_off));
                opt(&mut out, "read", &network_read_fails.map(on_off));
                f.write_str(&out)
            }
            Op::Advance { ms } => write!(f, "{verb} {}", duration_text(*ms)),
            Op::Receiver { webhook, mode } => write!(f, "{verb} {} {mode}", token(webhook)),
            Op::Restart { .. } | Op::Failover | Op::Zombie | Op::LostCommit | Op::Snapshot { .. } => f.write_str(verb),
            Op::StandbyLag { steps } => write!(f, "{verb} {steps}"),
            Op::Stall { ms } => write!(f, "{verb} {}", duration_text(*ms)),
        }
    }
}

/// Splits a line into tokens: words, or double-quoted strings with `\"` and `\\`.
/// Stops at a `#` outside quotes (a comment).
pub fn tokenize(line: &str) -> Result<Vec<String>, String> {
    let mut tokens = Vec::new();
    let mut chars = line.chars().peekable();
    while let Some(&c) = chars.peek() {
        if c.is_whitespace() {
            chars.next();
        } else if c == '#' {
            break;
        } else if c == '"' {
            chars.next();
            let mut text = String::new();
            loop {
                match chars.next() {
                    None => return Err("unterminated quoted string".into()),
                    Some('"') => break,
                    Some('\\') => text.push(chars.next().ok_or("unterminated quoted string")?),
                    Some(other) => text.push(other),
                }
            }
            tokens.push(text);
        } else {
            let mut text = String::new();
            while let Some(&c) = chars.peek() {
                if c.is_whitespace() {
                    break;
                }
                text.push(c);
                chars.next();
            }
            tokens.push(text);
        }
    }
    Ok(tokens)
}

/// A cursor over the tokens of one line.
struct Args<'a> {
    tokens: &'a [String],
    at: usize,
}

impl<'a> Args<'a> {
    fn next(&mut self, what: &str) -> Result<&'a str, String> {
        let token = self.tokens.get(self.at).ok_or_else(|| format!("missing {what}"))?;
        self.at += 1;
        Ok(token)
    }

    fn string(&mut self, what: &str) -> Result<String, String> {
        self.next(what).map(str::to_string)
    }

    fn parse<T: FromStr>(&mut self, what: &str) -> Result<T, String> {
        let text = self.next(what)?;
        text.parse().map_err(|_| format!("bad {what}: {text:?}"))
    }

    fn decimal(&mut self, what: &str) -> Result<Decimal, String> {
        let text = self.next(what)?;
        Decimal::from_str(text).map_err(|_| format!("bad {what}: {text:?}"))
    }

    /// `as NAME` right after the caller: the name a creation binds, if given.
    fn bind(&mut self, what: &str) -> Result<Option<String>, String> {
        assert_eq!(self.at, 2, "`as NAME` is read right after the verb and the caller");
        if self.tokens.get(self.at).is_none_or(|t| t != "as") {
            return Ok(None);
        }
        self.next("as")?;
        Ok(Some(self.string(what)?))
    }

    /// The remaining `key value` pairs; each key at most once, from `allowed`.
    fn options(&mut self, allowed: &[&str]) -> Result<Options, String> {
        let mut options = Options(Vec::new());
        while self.at < self.tokens.len() {
            let key = self.next("option")?;
            if !allowed.contains(&key) {
                return Err(format!("unknown option {key:?} (expected one of {})", allowed.join(", ")));
            }
            let value = self.string(key)?;
            options.0.push((key.to_string(), value));
        }
        Ok(options)
    }

    fn done(&self) -> Result<(), String> {
        match self.tokens.get(self.at) {
            Some(extra) => Err(format!("unexpected {extra:?}")),
            None => Ok(()),
        }
    }
}

struct Options(Vec<(String, String)>);

impl Options {
    fn text(&self, key: &str) -> Option<String> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone())
    }

    fn parse<T: FromStr>(&self, key: &str) -> Result<Option<T>, String> {
        self.text(key).map(|v| v.parse().map_err(|_| format!("bad {key}: {v:?}"))).transpose()
    }

    fn decimal(&self, key: &str) -> Result<Option<Decimal>, String> {
        self.text(key).map(|v| Decimal::from_str(&v).map_err(|_| format!("bad {key}: {v:?}"))).transpose()
    }

    fn switch(&self, key: &str) -> Result<Option<bool>, String> {
        self.text(key)
            .map(|v| match v.as_str() {
                "on" | "true" => Ok(true),
                "off" | "false" => Ok(false),
                _ => Err(format!("bad {key}: {v:?} (on or off)")),
            })
            .transpose()
    }
}

fn events_list(text: &str) -> Vec<String> {
    text.split(',').filter(|e| !e.is_empty()).map(str::to_string).collect()
}

impl FromStr for Op {
    type Err = String;

    /// Parses one script line (without its comment; see [`tokenize`]).
    fn from_str(line: &str) -> Result<Op, String> {
        let tokens = tokenize(line)?;
        let Some(verb) = tokens.first() else { return Err("empty line".into()) };
        let mut args = Args { tokens: &tokens, at: 1 };
        let op = match verb.as_str() {
            "account" => Op::Account { name: args.string("account name")? },
            "topup" => Op::TopUp { account: args.string("account")?, amount: args.decimal("amount")? },
            "freeze" | "unfreeze" => Op::Freeze { account: args.string("account")?, frozen: verb == "freeze" },
            "autorefill" => {
                let account = args.string("account")?;
                let enabled = match args.next("on or off")? {
                    "on" => true,
                    "off" => false,
                    other => return Err(format!("bad switch {other:?} (on or off)")),
                };
                let options = args.options(&["amount", "card"])?;
                let card = match options.text("card") {
                    Some(text) => Some(text.parse::<CardBehavior>().map_err(|_| format!("bad card {text:?}"))?),
                    None => None,
                };
                Op::AutoRefill { account, enabled, amount: options.decimal("amount")?, card }
            }
            "limits" => {
                let account = args.string("account")?;
                let options = args.options(&["groups", "size"])?;
                Op::Limits { account, groups: options.parse("groups")?, size: options.parse("size")? }
            }
            "inventory" => Op::Inventory { available: args.parse("count")? },
            "grant" => Op::Grant { count: args.parse("count")? },
            "newkey" => Op::NewKey { account: args.string("account")? },
            "revoke" => Op::Revoke { account: args.string("account")? },
            "raw" => return parse_raw(line),
            "burst" => Op::Burst { caller: args.string("caller")?, count: args.parse("count")? },
            "install" => Op::Install { sim: args.string("eSIM")? },
            "usage" => {
                let sim = args.string("eSIM")?;
                let mb = args.decimal("megabytes")?;
                let country = args.string("country")?;
                let options = args.options(&["operator"])?;
                Op::Usage { sim, mb, country, operator: options.text("operator") }
            }
            "faults" => {
                let options = args.options(&["pause", "read"])?;
                Op::Faults {
                    upstream_pause_fails: options.switch("pause")?,
                    network_read_fails: options.switch("read")?,
                }
            }
            "advance" => Op::Advance { ms: parse_duration(args.next("duration")?)? },
            "crash" => Op::Restart { rebuild: true },
            "restart" => Op::Restart { rebuild: false },
            "failover" => Op::Failover,
            "zombie" => Op::Zombie,
            "lost_commit" => Op::LostCommit,
            "standby_lag" => Op::StandbyLag { steps: args.parse("step count")? },
            "snapshot" => Op::Snapshot { crash: false },
            "snapshot_crash" => Op::Snapshot { crash: true },
            "stall" => Op::Stall { ms: parse_duration(args.next("duration")?)? },
            "receiver" => {
                let webhook = args.string("webhook")?;
                let mode = match args.next("mode")? {
                    "ok" => Receiver::Ok,
                    "fail" => match args.tokens.get(args.at) {
                        Some(_) => Receiver::FailTimes { count: args.parse("failure count")? },
                        None => Receiver::Fail,
                    },
                    "timeout" => Receiver::Timeout,
                    "hold" => Receiver::Hold,
                    "gone" => Receiver::Gone,
                    "down" => Receiver::Down { ms: parse_duration(args.next("duration")?)? },
                    other => return Err(format!("bad receiver mode {other:?}")),
                };
                Op::Receiver { webhook, mode }
            }
            _ => return parse_call(verb, &tokens),
        };
        args.done()?;
        Ok(op)
    }
}

/// `raw CALLER METHOD PATH [BODY...]`: the body is the rest of the line, verbatim.
fn parse_raw(line: &str) -> Result<Op, String> {
    let mut rest = line.trim_start().strip_prefix("raw").ok_or("not a raw line")?;
    let mut words = Vec::new();
    for _ in 0..3 {
        rest = rest.trim_start();
        let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
        if end == 0 {
            return Err("raw needs CALLER METHOD PATH [BODY]".into());
        }
        words.push(rest[..end].to_string());
        rest = &rest[end..];
    }
    let [caller, method, path] = <[String; 3]>::try_from(words).map_err(|_| "raw needs CALLER METHOD PATH")?;
    Ok(Op::Raw { caller, method, path, body: rest.trim().to_string() })
}

/// `VERB CALLER ARGS... [idem KEY]`: a reseller's call. Each part of the interface reads
/// its own verbs (and answers `None` for the rest, reading nothing); a verb that no part
/// knows is an unknown step.
fn parse_call(verb: &str, tokens: &[String]) -> Result<Op, String> {
    // A trailing `idem KEY` applies to every call.
    let (tokens, idempotency_key) = match tokens {
        [head @ .., idem, key] if idem == "idem" => (head, Some(key.clone())),
        _ => (tokens, None),
    };
    let mut args = Args { tokens, at: 1 };
    let caller = args.string("caller")?;
    let mut call = None;
    for part in [esim_call, group_call, webhook_call, account_call] {
        if call.is_none() {
            call = part(verb, &mut args)?;
        }
    }
    let call = call.ok_or_else(|| format!("unknown step {verb:?}"))?;
    args.done()?;
    Ok(Op::Call { caller, call, idempotency_key })
}

/// The eSIM verbs: `provision`, `list`, `get`, the state changes, `fund`, `defund`.
fn esim_call(verb: &str, args: &mut Args) -> Result<Option<Call>, String> {
    Ok(Some(match verb {
        "provision" => {
            let o = args.options(&["as", "group", "label", "ref"])?;
            Call::Provision {
                bind: o.text("as"),
                group: o.text("group"),
                label: o.text("label"),
                reference: o.text("ref"),
            }
        }
        "list" => {
            let o = args.options(&["status", "limit", "offset"])?;
            Call::List { status: o.text("status"), limit: o.parse("limit")?, offset: o.parse("offset")? }
        }
        "get" => Call::Get { sim: args.string("eSIM")? },
        "enable" => Call::Enable { sim: args.string("eSIM")? },
        "disable" => Call::Disable { sim: args.string("eSIM")? },
        "terminate" => Call::Terminate { sim: args.string("eSIM")? },
        "defund" => Call::Defund { sim: args.string("eSIM")? },
        "throttle" => Call::Throttle { sim: args.string("eSIM")?, speed: args.string("speed")? },
        "fund" => Call::Fund { sim: args.string("eSIM")?, amount: args.decimal("amount")? },
        _ => return Ok(None),
    }))
}

/// The group verbs: `groups`, `group [as NAME]`, reads and changes, money, members.
fn group_call(verb: &str, args: &mut Args) -> Result<Option<Call>, String> {
    Ok(Some(match verb {
        "groups" => Call::Groups,
        "group" => {
            let bind = args.bind("group name to bind")?;
            let name = args.string("group name")?;
            let o = args.options(&["threshold", "refill"])?;
            Call::CreateGroup { bind, name, threshold: o.decimal("threshold")?, refill: o.decimal("refill")? }
        }
        "getgroup" => Call::GetGroup { group: args.string("group")? },
        "patchgroup" => {
            let group = args.string("group")?;
            let o = args.options(&["name", "threshold", "refill"])?;
            let (threshold, refill) = (o.decimal("threshold")?, o.decimal("refill")?);
            Call::UpdateGroup { group, name: o.text("name"), threshold, refill }
        }
        "fundgroup" => Call::FundGroup { group: args.string("group")?, amount: args.decimal("amount")? },
        "defundgroup" => Call::DefundGroup { group: args.string("group")? },
        "members" => {
            let group = args.string("group")?;
            let o = args.options(&["limit", "offset"])?;
            Call::Members { group, limit: o.parse("limit")?, offset: o.parse("offset")? }
        }
        "add" => Call::Add { group: args.string("group")?, sim: args.string("eSIM")? },
        "remove" => Call::Remove { group: args.string("group")?, sim: args.string("eSIM")? },
        _ => return Ok(None),
    }))
}

/// The webhook verbs: `webhooks`, `webhook [as NAME] EVENTS`, reads and changes, the
/// test, the secret's rotation, the delivery log and a resend.
fn webhook_call(verb: &str, args: &mut Args) -> Result<Option<Call>, String> {
    Ok(Some(match verb {
        "webhooks" => Call::Webhooks,
        "webhook" => {
            let bind = args.bind("webhook name to bind")?;
            let events = events_list(args.next("events")?);
            let o = args.options(&["url"])?;
            Call::CreateWebhook { bind, events, url: o.text("url") }
        }
        "getwebhook" => Call::GetWebhook { webhook: args.string("webhook")? },
        "putwebhook" => {
            let webhook = args.string("webhook")?;
            let o = args.options(&["events", "active", "url"])?;
            let events = o.text("events").map(|e| events_list(&e));
            Call::UpdateWebhook { webhook, events, active: o.switch("active")?, url: o.text("url") }
        }
        "deletewebhook" => Call::DeleteWebhook { webhook: args.string("webhook")? },
        "testwebhook" => Call::TestWebhook { webhook: args.string("webhook")? },
        "rotate" => Call::RotateSecret { webhook: args.string("webhook")? },
        "deliveries" => Call::Deliveries { webhook: args.string("webhook")? },
        "resend" => Call::Resend { event: args.string("event")?, webhook: args.string("webhook")? },
        _ => return Ok(None),
    }))
}

/// The account's own verbs: the wallet, rates, the account, API keys, auto-refill.
fn account_call(verb: &str, args: &mut Args) -> Result<Option<Call>, String> {
    Ok(Some(match verb {
        "wallet" => Call::Wallet,
        "rates" => {
            let o = args.options(&["country", "continent"])?;
            Call::Rates { country: o.text("country"), continent: o.text("continent") }
        }
        "accountinfo" => Call::AccountInfo,
        "keys" => Call::Keys,
        "makekey" => Call::MakeKey,
        "revokekey" => Call::RevokeOwnKey,
        "getrefill" => Call::GetRefill,
        "refill" => {
            let o = args.options(&["enabled", "amount"])?;
            Call::SetRefill { enabled: o.switch("enabled")?, amount: o.decimal("amount")? }
        }
        _ => return Ok(None),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_round_trip() {
        let lines = [
            "account alice",
            "topup alice 100",
            "freeze alice",
            "unfreeze alice",
            "autorefill alice on amount 50 card requires_action",
            "autorefill alice off",
            "limits alice groups 2 size 1",
            "inventory 0",
            "grant 1000",
            "newkey alice",
            "revoke alice",
            "provision alice as s1 group g1 label \"Trip to Rome\" ref order-7",
            "list alice status active limit 5 offset 1",
            "fund alice s1 20.00 idem k1",
            "throttle alice s1 SPEED_100_KBPS",
            "group alice as g1 \"Team A\" threshold 10 refill 25",
            "patchgroup alice g1 name B threshold 0",
            "members alice g1 limit 2",
            "add alice g1 s1",
            "rates alice country DE",
            "webhook alice as w1 esim.provisioned,group.funded url https://hooks.example.com/a",
            "putwebhook alice w1 events * active true",
            "raw alice POST /esim/{s1}/fund {\"amount\": \"x\"}",
            "burst alice 101",
            "usage s1 500 DE operator Vodafone",
            "faults pause on read off",
            "advance 16m",
            "advance 1500ms",
            "receiver w1 down 3h",
            "receiver w1 fail 10",
            "receiver w1 fail",
            "crash",
            "restart",
            "failover",
            "zombie",
            "lost_commit",
            "stall 8s",
            "standby_lag 12",
            "snapshot",
            "snapshot_crash",
            "receiver w1 gone",
        ];
        for line in lines {
            let op: Op = line.parse().unwrap_or_else(|e| panic!("{line}: {e}"));
            assert_eq!(op.to_string(), line);
            assert_eq!(op.to_string().parse::<Op>().unwrap(), op);
        }
    }

    #[test]
    fn bad_lines_are_errors_not_panics() {
        for line in [
            "",
            "fund",
            "fund alice",
            "fund alice s1 x",
            "advance 3w",
            "receiver w1 maybe",
            "frobnicate a",
            "topup a 1 2",
            "crash now",
            "failover now",
            "standby_lag",
            "standby_lag -1",
            "zombie 2",
            "snapshot now",
            "stall",
        ] {
            assert!(line.parse::<Op>().is_err(), "{line}");
        }
    }
}
