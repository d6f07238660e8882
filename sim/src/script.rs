//! Scenario scripts: one op per line (the text form of [`Op`]), plus `expect` lines that
//! assert on what the last op did. The format is documented in `scenarios/README.md`.
//! Every checker runs after every op of a script too, so a script is a simulation with a
//! hand-written trace. A run gives a transcript (requests, responses, events and
//! deliveries, with ids replaced by the script's names) for snapshot tests.

use crate::checkers::{self, Ctx};
use crate::op::{tokenize, Op};
use crate::world::{decimal, StepLog, World};
use esim_engine::EventName;
use rust_decimal::Decimal;
use serde_json::Value;
use std::fmt::Write;
use std::str::FromStr;

/// The engine seed of every script (ids in transcripts depend on it).
pub const SCRIPT_SEED: u64 = 1;

/// Most repetitions of one `repeat` line.
const MAX_REPEAT: usize = 1_000;

/// Consecutive identical exchanges shown once, with a count.
const FOLD_REPEATS_AFTER: usize = 2;

/// One line of a script.
#[derive(Clone, Debug, PartialEq)]
pub enum Line {
    Op(Op),
    Expect(Expect),
}

/// An assertion about the last op (or, for entity reads, the state now).
#[derive(Clone, Debug, PartialEq)]
pub enum Expect {
    /// `expect status 402`: the status of the last response.
    Status(u16),
    /// `expect code INSUFFICIENT_BALANCE`: the error code of the last response.
    Code(String),
    /// `expect retry-after 60`: the Retry-After header of the last response.
    RetryAfter(String),
    /// `expect body.PATH VALUE`: a field of the last response.
    Body { path: String, value: String },
    /// `expect NAME.PATH VALUE`: a field of the entity as its owner reads it now.
    Read { name: String, path: String, value: String },
    /// `expect report.ACCOUNT.LINE VALUE`: a line of the conservation report.
    Report { account: String, line: String, value: String },
    /// `expect event NAME [SUBJECT] [FIELD=VALUE...]`: the last op emitted it.
    Event { name: String, subject: Option<String>, fields: Vec<(String, String)> },
    /// `expect no-event NAME [SUBJECT]`.
    NoEvent { name: String, subject: Option<String> },
    /// `expect events NAME COUNT`: how many the last op emitted.
    Events { name: String, count: usize },
    /// `expect delivered WEBHOOK EVENT [attempt=N] [answer=STATUS]`: handed out by the last op.
    Delivered { webhook: String, event: String, attempt: Option<u32> },
    /// `expect no-delivery WEBHOOK`.
    NoDelivery { webhook: String },
    /// `expect conserved`: every account's conservation difference is exactly 0.
    Conserved,
}

/// The lines of a script, or the first parse error with its line number.
pub fn parse(text: &str) -> Result<Vec<(usize, Line)>, String> {
    let mut lines = Vec::new();
    for (index, raw) in text.lines().enumerate() {
        let number = index + 1;
        let trimmed = raw.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        if let Some(rest) = trimmed.strip_prefix("expect ") {
            let expect = parse_expect(rest).map_err(|e| format!("line {number}: {e}"))?;
            lines.push((number, Line::Expect(expect)));
            continue;
        }
        // `repeat N OP`: the op N times.
        let (times, op_text) = match trimmed.strip_prefix("repeat ") {
            Some(rest) => {
                let (count, op) = rest.trim_start().split_once(char::is_whitespace).unwrap_or((rest, ""));
                let count: usize = count.parse().map_err(|_| format!("line {number}: repeat needs a count"))?;
                if !(1..=MAX_REPEAT).contains(&count) {
                    return Err(format!("line {number}: repeat 1 to {MAX_REPEAT} times"));
                }
                (count, op.trim())
            }
            None => (1, trimmed),
        };
        let op = Op::from_str(op_text).map_err(|e| format!("line {number}: {e}"))?;
        for _ in 0..times {
            lines.push((number, Line::Op(op.clone())));
        }
    }
    Ok(lines)
}

fn parse_expect(text: &str) -> Result<Expect, String> {
    let tokens = tokenize(text)?;
    let word = |i: usize| tokens.get(i).cloned().ok_or_else(|| format!("expect {text}: missing a word"));
    let subject_and_fields = |from: usize| {
        let mut subject = None;
        let mut fields = Vec::new();
        for token in &tokens[from.min(tokens.len())..] {
            match token.split_once('=') {
                Some((k, v)) => fields.push((k.to_string(), v.to_string())),
                None if subject.is_none() => subject = Some(token.clone()),
                None => return Err(format!("unexpected {token:?}")),
            }
        }
        Ok((subject, fields))
    };
    let head = word(0)?;
    let expect = match head.as_str() {
        "status" => Expect::Status(word(1)?.parse().map_err(|_| "status must be a number")?),
        "code" => Expect::Code(word(1)?),
        "retry-after" => Expect::RetryAfter(word(1)?),
        "event" => {
            let (subject, fields) = subject_and_fields(2)?;
            Expect::Event { name: word(1)?, subject, fields }
        }
        "no-event" => Expect::NoEvent { name: word(1)?, subject: tokens.get(2).cloned() },
        "events" => Expect::Events { name: word(1)?, count: word(2)?.parse().map_err(|_| "count must be a number")? },
        "delivered" => {
            let (_, fields) = subject_and_fields(3)?;
            let attempt = match fields.iter().find(|(k, _)| k == "attempt") {
                Some((_, v)) => Some(v.parse().map_err(|_| "attempt must be a number")?),
                None => None,
            };
            Expect::Delivered { webhook: word(1)?, event: word(2)?, attempt }
        }
        "no-delivery" => Expect::NoDelivery { webhook: word(1)? },
        "conserved" => Expect::Conserved,
        path => {
            let value = word(1)?;
            let (name, rest) = path.split_once('.').ok_or_else(|| format!("unknown expectation {path:?}"))?;
            match name {
                "body" => Expect::Body { path: rest.to_string(), value },
                "report" => {
                    let (account, line) = rest.split_once('.').ok_or("report.ACCOUNT.LINE")?;
                    Expect::Report { account: account.to_string(), line: line.to_string(), value }
                }
                _ => Expect::Read { name: name.to_string(), path: rest.to_string(), value },
            }
        }
    };
    if tokens.len() > 3 && !matches!(expect, Expect::Event { .. } | Expect::Delivered { .. }) {
        return Err(format!("expect {text}: too many words"));
    }
    Ok(expect)
}

/// Follows a dotted path (`a.b.0.c`) into a JSON value.
fn lookup<'a>(value: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.').try_fold(value, |v, key| match v {
        Value::Array(items) => items.get(key.parse::<usize>().ok()?),
        _ => v.get(key),
    })
}

/// Whether `actual` is what the script wrote: numbers compare as decimals, `null`,
/// `true`, `false`, `absent` and `present` as themselves, anything else as text or JSON.
fn matches(actual: Option<&Value>, expected: &str) -> bool {
    match (expected, actual) {
        ("absent", None) => true,
        ("present", Some(_)) => true,
        (_, None) => false,
        (_, Some(Value::Number(_))) => {
            actual.and_then(decimal).zip(Decimal::from_str(expected).ok()).is_some_and(|(a, e)| a == e)
        }
        (_, Some(Value::String(text))) => text == expected,
        (_, Some(value)) => serde_json::from_str::<Value>(expected).is_ok_and(|e| &e == value),
    }
}

fn show(value: Option<&Value>) -> String {
    value.map_or_else(|| "absent".to_string(), Value::to_string)
}

/// What replaying a script gave.
#[derive(Clone, Debug, Default)]
pub struct ScriptRun {
    /// Requests, responses, events and deliveries of every op, with names for ids.
    pub transcript: String,
    /// Failed expectations, checker violations and parse errors, with line numbers.
    pub failures: Vec<String>,
    /// Ops applied.
    pub steps: usize,
}

/// Replays a script (see the module docs).
pub fn run_script(text: &str) -> ScriptRun {
    let mut run = ScriptRun::default();
    let lines = match parse(text) {
        Ok(lines) => lines,
        Err(error) => {
            run.failures.push(error);
            return run;
        }
    };
    let mut world = World::new(SCRIPT_SEED, None);
    let mut checkers = checkers::all();
    let mut fired = false;
    for (number, line) in lines {
        match line {
            Line::Op(op) => {
                world.apply(&op);
                run.steps += 1;
                let _ = writeln!(run.transcript, "> {op}");
                transcript(&world, &mut run.transcript);
                if !fired {
                    let ctx = Ctx { engine: world.engine(), log: world.log() };
                    for checker in checkers.iter_mut() {
                        if let Err(message) = checker.check(&ctx) {
                            run.failures.push(format!("line {number}: checker {}: {message}", checker.name()));
                            fired = true;
                            break;
                        }
                    }
                }
            }
            Line::Expect(expect) => {
                if let Err(error) = check_expect(&mut world, &expect) {
                    run.failures.push(format!("line {number}: {error}"));
                }
            }
        }
    }
    run
}

fn last_response(log: &StepLog) -> Result<(u16, Value, Option<String>), String> {
    let exchange = log.exchanges.last().ok_or("the last op sent no request")?;
    let body = serde_json::from_slice(&exchange.body).unwrap_or(Value::Null);
    Ok((exchange.status, body, exchange.retry_after.clone()))
}

fn event_subject_id(world: &World, subject: &Option<String>) -> Option<String> {
    subject.as_ref().map(|s| world.id_of(s))
}

/// An event's `data` as the JSON object receivers get: a script names its fields as they
/// are on the wire.
fn data_json(event: &esim_engine::Event) -> Value {
    serde_json::to_value(&event.data).expect("event payloads serialize")
}

/// Whether an event concerns `id` (an eSIM, group or account id).
fn event_about(event: &esim_engine::Event, world: &World, id: &str) -> bool {
    [event.data.iccid(), event.data.group_id()].contains(&Some(id))
        || world.engine().accounts().get(event.account.index()).is_some_and(|a| a.id == id)
}

/// Judges one `expect` line against the last op: its response, the state now, its
/// events or its deliveries, each in a function of its own.
fn check_expect(world: &mut World, expect: &Expect) -> Result<(), String> {
    match expect {
        Expect::Status(_) | Expect::Code(_) | Expect::RetryAfter(_) | Expect::Body { .. } => {
            expect_response(world.log(), expect)
        }
        Expect::Read { .. } | Expect::Report { .. } | Expect::Conserved => expect_state(world, expect),
        Expect::Event { .. } | Expect::NoEvent { .. } | Expect::Events { .. } => expect_events(world, expect),
        Expect::Delivered { .. } | Expect::NoDelivery { .. } => expect_deliveries(world, expect),
    }
}

/// `status`, `code`, `retry-after` and `body.PATH`: the last response of the last op.
fn expect_response(log: &StepLog, expect: &Expect) -> Result<(), String> {
    let (status, body, retry_after) = last_response(log)?;
    let failure = match expect {
        Expect::Status(want) => (status != *want).then(|| format!("expected status {want}, got {status} {body}")),
        Expect::Code(want) => (body.get("code").and_then(Value::as_str) != Some(want.as_str()))
            .then(|| format!("expected code {want}, got {status} {body}")),
        Expect::RetryAfter(want) => (retry_after.as_deref() != Some(want.as_str()))
            .then(|| format!("expected Retry-After {want}, got {retry_after:?}")),
        Expect::Body { path, value } => {
            let actual = lookup(&body, path);
            (!matches(actual, value)).then(|| format!("expected body.{path} = {value}, got {} in {body}", show(actual)))
        }
        other => unreachable!("{other:?} is no expectation of the response"),
    };
    failure.map_or(Ok(()), Err)
}

/// `NAME.PATH`, `report.ACCOUNT.LINE` and `conserved`: the state as it is now, read
/// through the engine.
fn expect_state(world: &mut World, expect: &Expect) -> Result<(), String> {
    match expect {
        Expect::Read { name, path, value } => {
            let record = world.read(name)?;
            let actual = lookup(&record, path);
            if !matches(actual, value) {
                return Err(format!("expected {name}.{path} = {value}, got {}", show(actual)));
            }
        }
        Expect::Report { account, line, value } => {
            let report = world.engine().conservation_report(None).ok_or("no report")?;
            let lines = if account == "TOTAL" {
                Some(&report.total)
            } else {
                let id = world.id_of(account);
                report.accounts.iter().find(|l| l.account_id == id)
            };
            let lines = lines.ok_or_else(|| format!("no account {account} in the report"))?;
            let json = serde_json::to_value(lines).map_err(|e| e.to_string())?;
            let actual = json.get(line);
            if !matches(actual, value) {
                return Err(format!("expected report.{account}.{line} = {value}, got {}", show(actual)));
            }
        }
        Expect::Conserved => {
            let report = world.engine().conservation_report(None).ok_or("no report")?;
            if !report.conserved {
                return Err(format!("not conserved:\n{}", report.to_markdown()));
            }
        }
        other => unreachable!("{other:?} is no expectation of the state"),
    }
    Ok(())
}

/// `event`, `no-event` and `events`: what the last op emitted.
fn expect_events(world: &World, expect: &Expect) -> Result<(), String> {
    let log = world.log();
    match expect {
        Expect::Event { name, subject, fields } => {
            let id = event_subject_id(world, subject);
            let found = log.events.iter().find(|e| {
                e.name.as_str() == name
                    && id.as_ref().is_none_or(|id| event_about(e, world, id))
                    && fields.iter().all(|(k, v)| matches(lookup(&data_json(e), k), v))
            });
            if found.is_none() {
                let seen: Vec<String> =
                    log.events.iter().map(|e| format!("{} {}", e.name.as_str(), e.data.to_json())).collect();
                return Err(format!("expected event {name} {subject:?} {fields:?}; the last op emitted {seen:?}"));
            }
        }
        Expect::NoEvent { name, subject } => {
            let id = event_subject_id(world, subject);
            if let Some(event) = log
                .events
                .iter()
                .find(|e| e.name.as_str() == name && id.as_ref().is_none_or(|id| event_about(e, world, id)))
            {
                return Err(format!("expected no {name}, got {}", event.data.to_json()));
            }
        }
        Expect::Events { name, count } => {
            let got = log.events.iter().filter(|e| e.name.as_str() == name).count();
            if got != *count {
                return Err(format!("expected {count} {name} events, got {got}"));
            }
        }
        other => unreachable!("{other:?} is no expectation of events"),
    }
    Ok(())
}

/// `delivered` and `no-delivery`: what the last op handed out to receivers.
fn expect_deliveries(world: &World, expect: &Expect) -> Result<(), String> {
    let log = world.log();
    match expect {
        Expect::Delivered { webhook, event, attempt } => {
            let id = world.id_of(webhook);
            let hit = log.deliveries.iter().any(|d| {
                d.handed_out
                    && d.webhook_id == id
                    && (event == "*" || d.event.as_str() == event)
                    && attempt.is_none_or(|a| d.attempt == a)
            });
            if !hit {
                let seen: Vec<String> = log
                    .deliveries
                    .iter()
                    .map(|d| format!("{} {} #{}", d.webhook_id, d.event.as_str(), d.attempt))
                    .collect();
                return Err(format!("expected delivery of {event} to {webhook} (attempt {attempt:?}); got {seen:?}"));
            }
        }
        Expect::NoDelivery { webhook } => {
            let id = world.id_of(webhook);
            if let Some(d) = log.deliveries.iter().find(|d| d.handed_out && d.webhook_id == id) {
                return Err(format!("expected no delivery to {webhook}, got {} #{}", d.event.as_str(), d.attempt));
            }
        }
        other => unreachable!("{other:?} is no expectation of deliveries"),
    }
    Ok(())
}

/// Appends the last step's requests, responses, events and deliveries, ids replaced.
fn transcript(world: &World, out: &mut String) {
    let redactions = world.redactions();
    let redact = |text: &str| {
        let mut text = text.to_string();
        for (id, name) in &redactions {
            if text.contains(id.as_str()) {
                text = text.replace(id.as_str(), &format!("{{{name}}}"));
            }
        }
        text
    };
    let log = world.log();
    let mut index = 0;
    while index < log.exchanges.len() {
        let exchange = &log.exchanges[index];
        let same = |other: &crate::world::Exchange| {
            other.path == exchange.path && other.status == exchange.status && other.body == exchange.body
        };
        let repeats = log.exchanges[index..].iter().take_while(|e| same(e)).count();
        let body = String::from_utf8_lossy(&exchange.request_body);
        let separator = if body.is_empty() { "" } else { " " };
        let _ = writeln!(out, "  {} {}{separator}{}", exchange.method, redact(&exchange.path), redact(&body));
        let response = String::from_utf8_lossy(&exchange.body);
        let _ = writeln!(out, "  {} {}", exchange.status, redact(&response));
        if repeats > FOLD_REPEATS_AFTER {
            let _ = writeln!(out, "  (the same {} times in all)", repeats);
            index += repeats;
        } else {
            index += 1;
        }
    }
    for event in &log.events {
        let _ = writeln!(out, "  event {} {}", event.name.as_str(), redact(&event.data.to_json()));
    }
    for delivery in &log.deliveries {
        let answer = match &delivery.answer {
            None => "held".to_string(),
            Some(esim_engine::DeliveryResult::Status(code)) => code.to_string(),
            Some(esim_engine::DeliveryResult::Timeout) => "timeout".to_string(),
            Some(esim_engine::DeliveryResult::Failed(why)) => why.clone(),
        };
        let late = if delivery.handed_out { "" } else { " (held, answered now)" };
        let _ = writeln!(
            out,
            "  deliver {} {} #{} -> {answer}{late}",
            redact(&delivery.webhook_id),
            delivery.event.as_str(),
            delivery.attempt
        );
    }
}

/// Every event name a script can expect (for documentation tests).
pub fn event_names() -> Vec<&'static str> {
    EventName::SUBSCRIBABLE.iter().chain([&EventName::Test]).map(|e| e.as_str()).collect()
}
