//! Coverage: what a run reached, item by item, so that a generator change that stops
//! reaching something the checkers guard shows (FoundationDB counts each of its "buggify"
//! points the same way).
//!
//! The items are fixed here, in one [`catalogue`]: every error code the service can
//! answer (from the engine's one list, [`ErrorCode::ALL`]), every event, the eSIM and
//! group state transitions, each fault the simulation injects, each webhook outcome, the
//! auto-refill outcomes, and each checker's evaluations. An item not required says why
//! ([`Item::unreachable`]: unreachable by design, or not reached yet by the generated
//! worlds) and is shown as such; every other item reached 0 times fails
//! `--require-coverage`.
//!
//! A [`Recorder`] follows one seed: after every step it reads the op, the step log and
//! the engine's records (a few dozen at most), keeping only the last state of each eSIM,
//! group and webhook to see what changed.

use crate::op::Op;
use crate::world::{Fact, StepLog};
use esim_engine::state::{EsimStatus, Funding};
use esim_engine::{money, DeliveryResult, Engine, ErrorCode, EventName};
use std::sync::OnceLock;

/// One thing a run can reach.
#[derive(Clone, Debug)]
pub struct Item {
    /// What kind of thing (`code`, `event`, `eSIM`, `group`, `fault`, `webhook`,
    /// `auto-refill`, `checker`).
    pub family: &'static str,
    pub name: &'static str,
    /// Why the simulated worlds do not reach it, for an item not required: unreachable
    /// by design, or (said so) out of the generated worlds' reach for now.
    pub unreachable: Option<&'static str>,
}

/// Error codes no simulated world can get, and why.
fn code_unreachable(code: ErrorCode) -> Option<&'static str> {
    match code {
        ErrorCode::ClockNotVirtual => Some("by design: the simulated service always runs the virtual clock"),
        ErrorCode::RequestTimeout => {
            Some("by design: the socket edge's answer to a slow body; the world hands whole requests over")
        }
        ErrorCode::ApiKeyLimitReached => Some(
            "not reached yet: 20 active keys on one account take 20 key calls of that account; a world makes a \
             few (the engine's key tests reach the limit)",
        ),
        ErrorCode::PayloadTooLarge => {
            Some("by design: the 1 MiB body bound; the world's bodies are small (the HTTP tests send a larger one)")
        }
        _ => None,
    }
}

/// Auto-refill outcomes the worlds do not reach, and why.
fn refill_unreachable(name: &str) -> Option<&'static str> {
    (name == "failed: daily_limit_reached (depleted)").then_some(
        "not reached yet: ten charges in 24 h need ten provisionings that each leave the balance under $5 \
         after a refill; 10,000 swarm seeds of 200 steps made none (the engine's auto-refill tests reach it)",
    )
}

/// The eSIM states: the status, `+paused` while its data is paused for a return on its
/// way (its own defund or move, or its group's defund).
const ESIM_STATES: [&str; 8] = [
    "pending",
    "pending+paused",
    "active",
    "active+paused",
    "suspended",
    "suspended+paused",
    "terminated",
    "terminated+paused",
];

/// The eSIM transitions counted (status moves whatever the pause, then the pauses).
const ESIM_ITEMS: [&str; 16] = [
    "new -> pending",
    "pending -> active",
    "pending -> suspended",
    "active -> suspended",
    "suspended -> active",
    "suspended -> pending",
    "pending -> terminated",
    "active -> terminated",
    "suspended -> terminated",
    "pending -> pending+paused",
    "pending+paused -> pending",
    "active -> active+paused",
    "active+paused -> active",
    "suspended -> suspended+paused",
    "suspended+paused -> suspended",
    "paused -> terminated",
];

/// Group balance states: `zero` (shows $0), `low` (below its threshold), `ok`.
const GROUP_ITEMS: [&str; 15] = [
    "new",
    "balance zero -> low",
    "balance zero -> ok",
    "balance low -> zero",
    "balance low -> ok",
    "balance ok -> zero",
    "balance ok -> low",
    "defund requested",
    "defund settled",
    "members empty -> some",
    "members empty -> full",
    "members some -> empty",
    "members some -> full",
    "members full -> some",
    "members full -> empty",
];

const FAULT_ITEMS: [&str; 15] = [
    "upstream pause fails (switched on)",
    "network read fails (switched on)",
    "crash after an append (rebuilt from the journal)",
    "restart (engine kept)",
    "snapshot written",
    "crash during a snapshot (rebuilt from the rows)",
    "crash during a snapshot (rebuilt from an older snapshot)",
    "failover",
    "failover with the standby behind",
    "zombie append refused",
    "lost commit outcome read back",
    "standby lag",
    "crash with deliveries held",
    "store stall",
    "store stall past the append deadline (503)",
];

const WEBHOOK_ITEMS: [&str; 12] = [
    "answered 2xx",
    "answered non-2xx",
    "answered 410",
    "timed out",
    "connection refused",
    "held, answered later",
    "retry (attempt > 1)",
    "manual resend",
    "test probe",
    "auto-disabled (failures)",
    "auto-disabled (410)",
    "re-enabled after auto-disable",
];

const REFILL_ITEMS: [&str; 5] = [
    "succeeded",
    "failed: card_declined",
    "failed: authentication_required",
    "failed: expired_card",
    "failed: daily_limit_reached (depleted)",
];

/// Where each family starts in the catalogue.
struct Layout {
    codes: usize,
    events: usize,
    esim: usize,
    group: usize,
    faults: usize,
    webhook: usize,
    refill: usize,
    checkers: usize,
}

const EVENTS: usize = EventName::SUBSCRIBABLE.len();

const LAYOUT: Layout = {
    let codes = 0;
    let events = codes + ErrorCode::ALL.len();
    let esim = events + EVENTS;
    let group = esim + ESIM_ITEMS.len();
    let faults = group + GROUP_ITEMS.len();
    let webhook = faults + FAULT_ITEMS.len();
    let refill = webhook + WEBHOOK_ITEMS.len();
    let checkers = refill + REFILL_ITEMS.len();
    Layout { codes, events, esim, group, faults, webhook, refill, checkers }
};

/// Every item, in table order; the checkers last, in the order they run.
pub fn catalogue() -> &'static [Item] {
    static ITEMS: OnceLock<Vec<Item>> = OnceLock::new();
    ITEMS.get_or_init(|| {
        let item = |family, name, unreachable| Item { family, name, unreachable };
        let mut items: Vec<Item> =
            ErrorCode::ALL.iter().map(|code| item("code", code.as_str(), code_unreachable(*code))).collect();
        items.extend(EventName::SUBSCRIBABLE.iter().map(|name| item("event", name.as_str(), None)));
        items.extend(ESIM_ITEMS.iter().map(|name| item("eSIM", name, None)));
        items.extend(GROUP_ITEMS.iter().map(|name| item("group", name, None)));
        items.extend(FAULT_ITEMS.iter().map(|name| item("fault", name, None)));
        items.extend(WEBHOOK_ITEMS.iter().map(|name| item("webhook", name, None)));
        items.extend(REFILL_ITEMS.iter().map(|name| item("auto-refill", name, refill_unreachable(name))));
        items.extend(crate::checkers::names().into_iter().map(|name| item("checker", name, None)));
        debug_assert_eq!(items.len(), LAYOUT.checkers + crate::checkers::names().len());
        items
    })
}

/// Counts per item of [`catalogue`], added over seeds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Coverage {
    pub counts: Vec<u64>,
}

impl Default for Coverage {
    fn default() -> Self {
        Coverage { counts: vec![0; catalogue().len()] }
    }
}

impl Coverage {
    pub fn add(&mut self, other: &Coverage) {
        for (mine, theirs) in self.counts.iter_mut().zip(&other.counts) {
            *mine += theirs;
        }
    }

    /// The count of the item `family` / `name`, if there is one.
    pub fn count(&self, family: &str, name: &str) -> Option<u64> {
        let index = catalogue().iter().position(|i| i.family == family && i.name == name)?;
        Some(self.counts[index])
    }

    /// Required items (not [`Item::unreachable`]) that were reached 0 times.
    pub fn missing(&self) -> Vec<&'static Item> {
        catalogue()
            .iter()
            .zip(&self.counts)
            .filter(|(item, count)| item.unreachable.is_none() && **count == 0)
            .map(|(i, _)| i)
            .collect()
    }

    /// The table: one line per item, `family  name  count` (or why it is unreachable).
    pub fn table(&self) -> String {
        let mut out = String::from("coverage (times reached)\n");
        let spec_codes = spec_code_count();
        for (index, (item, count)) in catalogue().iter().zip(&self.counts).enumerate() {
            let name = format!("{} {}", item.family, item.name);
            let line = match item.unreachable {
                Some(why) => format!("  {name:<58} {count:>10}  not required: {why}\n"),
                None if *count == 0 => format!("  {name:<58} {count:>10}  NOT REACHED\n"),
                None => format!("  {name:<58} {count:>10}\n"),
            };
            if index == LAYOUT.codes + spec_codes {
                out.push_str("  (codes below: beyond the spec's table)\n");
            }
            out.push_str(&line);
        }
        let missing = self.missing().len();
        let unreachable = catalogue().iter().filter(|i| i.unreachable.is_some()).count();
        out.push_str(&format!(
            "  {} items: {} reached, {missing} not reached, {unreachable} not required\n",
            catalogue().len(),
            catalogue().len() - missing - unreachable
        ));
        out
    }
}

/// The codes of the spec's own table come first in [`ErrorCode::ALL`], up to
/// NO_ESIMS_AVAILABLE.
fn spec_code_count() -> usize {
    ErrorCode::ALL.iter().position(|c| *c == ErrorCode::NoEsimsAvailable).map_or(0, |i| i + 1)
}

/// The `code` of an error body, found without parsing the JSON.
fn error_code(body: &[u8]) -> Option<usize> {
    const KEY: &[u8] = b"\"code\":\"";
    let start = body.windows(KEY.len()).position(|w| w == KEY)? + KEY.len();
    let end = start + body[start..].iter().position(|b| *b == b'"')?;
    let code = &body[start..end];
    ErrorCode::ALL.iter().position(|c| c.as_str().as_bytes() == code)
}

fn esim_state(engine: &Engine, index: usize) -> u8 {
    let esim = &engine.esims()[index];
    let status = EsimStatus::ALL.iter().position(|s| *s == esim.status).unwrap_or(0) as u8;
    let paused = match &esim.funding {
        Funding::Returning(_) => true,
        Funding::Member { group, .. } => engine.groups().get(group.0 as usize).is_some_and(|g| g.defund.is_some()),
        _ => false,
    };
    status * 2 + u8::from(paused)
}

/// The item of a move between two eSIM states, if it is one counted.
fn esim_item(from: u8, to: u8) -> Option<&'static str> {
    let (from_status, to_status) = (from / 2, to / 2);
    if from_status != to_status {
        if to_status == 3 && from % 2 == 1 {
            return Some("paused -> terminated");
        }
        let name = format!("{} -> {}", ESIM_STATES[from_status as usize * 2], ESIM_STATES[to_status as usize * 2]);
        return ESIM_ITEMS.iter().find(|i| **i == name).copied();
    }
    let name = format!("{} -> {}", ESIM_STATES[from as usize], ESIM_STATES[to as usize]);
    ESIM_ITEMS.iter().find(|i| **i == name).copied()
}

/// A group's (balance, defund on its way, members) summary.
#[derive(Clone, Copy, PartialEq, Eq)]
struct GroupState {
    balance: u8,
    defund: bool,
    members: u8,
}

fn group_state(engine: &Engine, index: usize) -> GroupState {
    let group = &engine.groups()[index];
    let shown = money::displayed(engine.ledger().balance(group.wallet.slots.credit));
    let balance = if shown.is_zero() {
        0
    } else if shown < group.low_balance_threshold {
        1
    } else {
        2
    };
    let size = engine.accounts().get(group.account.0 as usize).map_or(u32::MAX, |a| a.max_group_size);
    let held = group.members.len() as u32 + group.incoming_moves;
    let members = if held == 0 {
        0
    } else if held >= size {
        2
    } else {
        1
    };
    GroupState { balance, defund: group.defund.is_some(), members }
}

/// Follows one seed and counts what it reached.
#[derive(Default)]
pub struct Recorder {
    pub coverage: Coverage,
    esims: Vec<u8>,
    groups: Vec<GroupState>,
    /// Per engine webhook: active at the end of the last step, and disabled by the engine.
    webhooks: Vec<(bool, bool)>,
}

impl Recorder {
    fn hit(&mut self, index: usize) {
        self.coverage.counts[index] += 1;
    }

    fn hit_named(&mut self, base: usize, names: &[&str], name: &str) {
        if let Some(offset) = names.iter().position(|n| *n == name) {
            self.hit(base + offset);
        }
    }

    /// A checker (its index in [`crate::checkers::all`]) was evaluated.
    pub fn checked(&mut self, checker: usize) {
        self.hit(LAYOUT.checkers + checker);
    }

    /// Counts what the step of `op` reached.
    pub fn step(&mut self, op: &Op, engine: &Engine, log: &StepLog) {
        for exchange in log.exchanges.iter().filter(|e| e.status >= 400) {
            if let Some(code) = error_code(&exchange.body) {
                self.hit(LAYOUT.codes + code);
            }
        }
        for event in &log.events {
            // The test probe is no event of the log: it is counted with the webhooks.
            if let Some(index) = EventName::SUBSCRIBABLE.iter().position(|n| *n == event.name) {
                self.hit(LAYOUT.events + index);
            }
            self.refill_event(event);
        }
        self.esims(engine);
        self.groups(engine);
        self.faults(op, log);
        self.webhooks(engine, log);
    }

    fn refill_event(&mut self, event: &esim_engine::Event) {
        let base = LAYOUT.refill;
        match &event.data {
            esim_engine::EventData::BalanceAutoRefillSucceeded(_) => self.hit(base),
            esim_engine::EventData::BalanceAutoRefillFailed(failed) => {
                let name = match failed.error_code {
                    "daily_limit_reached" => "failed: daily_limit_reached (depleted)",
                    "card_declined" => "failed: card_declined",
                    "authentication_required" => "failed: authentication_required",
                    "expired_card" => "failed: expired_card",
                    _ => return,
                };
                self.hit_named(base, &REFILL_ITEMS, name);
            }
            _ => {}
        }
    }

    fn esims(&mut self, engine: &Engine) {
        for index in 0..engine.esims().len() {
            let now = esim_state(engine, index);
            match self.esims.get(index).copied() {
                None => {
                    self.hit(LAYOUT.esim);
                    self.esims.push(now);
                    if now != 0 {
                        // Born and moved on within one step (a provision that failed later).
                        if let Some(name) = esim_item(0, now) {
                            self.hit_named(LAYOUT.esim, &ESIM_ITEMS, name);
                        }
                    }
                }
                Some(before) if before != now => {
                    if let Some(name) = esim_item(before, now) {
                        self.hit_named(LAYOUT.esim, &ESIM_ITEMS, name);
                    }
                    self.esims[index] = now;
                }
                Some(_) => {}
            }
        }
    }

    fn groups(&mut self, engine: &Engine) {
        const BALANCE: [&str; 3] = ["zero", "low", "ok"];
        const MEMBERS: [&str; 3] = ["empty", "some", "full"];
        for index in 0..engine.groups().len() {
            let now = group_state(engine, index);
            let before = match self.groups.get(index).copied() {
                Some(before) => before,
                None => {
                    self.hit(LAYOUT.group);
                    self.groups.push(now);
                    GroupState { balance: 0, defund: false, members: 0 }
                }
            };
            if before == now {
                continue;
            }
            if before.balance != now.balance {
                let name = format!("balance {} -> {}", BALANCE[before.balance as usize], BALANCE[now.balance as usize]);
                self.hit_named(LAYOUT.group, &GROUP_ITEMS, &name);
            }
            if before.defund != now.defund {
                let name = if now.defund { "defund requested" } else { "defund settled" };
                self.hit_named(LAYOUT.group, &GROUP_ITEMS, name);
            }
            if before.members != now.members {
                let name = format!("members {} -> {}", MEMBERS[before.members as usize], MEMBERS[now.members as usize]);
                self.hit_named(LAYOUT.group, &GROUP_ITEMS, &name);
            }
            self.groups[index] = now;
        }
    }

    fn faults(&mut self, op: &Op, log: &StepLog) {
        let hit = |recorder: &mut Recorder, name: &str| recorder.hit_named(LAYOUT.faults, &FAULT_ITEMS, name);
        match op {
            Op::Faults { upstream_pause_fails, network_read_fails } => {
                if *upstream_pause_fails == Some(true) {
                    hit(self, "upstream pause fails (switched on)");
                }
                if *network_read_fails == Some(true) {
                    hit(self, "network read fails (switched on)");
                }
            }
            Op::Restart { rebuild: true } => hit(self, "crash after an append (rebuilt from the journal)"),
            Op::Restart { rebuild: false } => hit(self, "restart (engine kept)"),
            Op::StandbyLag { .. } => hit(self, "standby lag"),
            _ => {}
        }
        // A restart hands out again what was in flight, and nothing else in its step.
        let restarted = log.facts.iter().any(|f| matches!(f, Fact::Restarted { .. }));
        if restarted && log.deliveries.iter().any(|d| d.handed_out) {
            hit(self, "crash with deliveries held");
        }
        for fact in &log.facts {
            match fact {
                Fact::SnapshotWritten { .. } => hit(self, "snapshot written"),
                Fact::Stalled { late: false, .. } => hit(self, "store stall"),
                Fact::Stalled { late: true, .. } => hit(self, "store stall past the append deadline (503)"),
                Fact::RebuiltFromStore { from_snapshot: None } => {
                    hit(self, "crash during a snapshot (rebuilt from the rows)")
                }
                Fact::RebuiltFromStore { from_snapshot: Some(_) } => {
                    hit(self, "crash during a snapshot (rebuilt from an older snapshot)")
                }
                Fact::TookOver { from, head, .. } => {
                    hit(self, "failover");
                    if from < head {
                        hit(self, "failover with the standby behind");
                    }
                }
                Fact::ZombieTried { refusal: Some(_), .. } => hit(self, "zombie append refused"),
                Fact::Acknowledged { resolved: true, .. } => hit(self, "lost commit outcome read back"),
                _ => {}
            }
        }
    }

    fn webhooks(&mut self, engine: &Engine, log: &StepLog) {
        let base = LAYOUT.webhook;
        let mut gone = Vec::new();
        for delivery in &log.deliveries {
            let name = match &delivery.answer {
                None => None,
                Some(DeliveryResult::Status(410)) => Some("answered 410"),
                Some(answer) if answer.is_success() => Some("answered 2xx"),
                Some(DeliveryResult::Status(_)) => Some("answered non-2xx"),
                Some(DeliveryResult::Timeout) => Some("timed out"),
                Some(DeliveryResult::Failed(_)) => Some("connection refused"),
            };
            if let Some(name) = name {
                self.hit_named(base, &WEBHOOK_ITEMS, name);
            }
            if matches!(delivery.answer, Some(DeliveryResult::Status(410))) {
                gone.extend(delivery.webhook);
            }
            if !delivery.handed_out && delivery.answer.is_some() {
                self.hit_named(base, &WEBHOOK_ITEMS, "held, answered later");
            }
            if delivery.handed_out && delivery.attempt > 1 {
                self.hit_named(base, &WEBHOOK_ITEMS, "retry (attempt > 1)");
            }
            if delivery.handed_out && delivery.manual {
                self.hit_named(base, &WEBHOOK_ITEMS, "manual resend");
            }
            if delivery.handed_out && delivery.event == EventName::Test {
                self.hit_named(base, &WEBHOOK_ITEMS, "test probe");
            }
        }
        let mut set_by_reseller = Vec::new();
        for fact in &log.facts {
            if let Fact::WebhookSet { webhook, active, .. } = fact {
                set_by_reseller.push(*webhook);
                let was_disabled = self.webhooks.get(*webhook as usize).is_some_and(|w| w.1);
                if *active == Some(true) && was_disabled {
                    self.hit_named(base, &WEBHOOK_ITEMS, "re-enabled after auto-disable");
                    self.webhooks[*webhook as usize].1 = false;
                }
            }
        }
        let records = engine.webhooks();
        self.webhooks.resize(records.len(), (true, false));
        for (index, record) in records.iter().enumerate() {
            let active = record.active && !record.deleted;
            let (was_active, _) = self.webhooks[index];
            if was_active && !active && !record.deleted && !set_by_reseller.contains(&(index as u32)) {
                let name =
                    if gone.contains(&(index as u32)) { "auto-disabled (410)" } else { "auto-disabled (failures)" };
                self.hit_named(base, &WEBHOOK_ITEMS, name);
                self.webhooks[index].1 = true;
            }
            self.webhooks[index].0 = active;
        }
    }
}
