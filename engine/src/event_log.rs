//! The events API's store (`GET /events`, `GET /events/{id}`): every event an account's
//! resources emitted in the last [`limits::EVENT_RETENTION_MS`], with the exact envelope
//! that was (or would have been) delivered.
//!
//! Bounded: events are kept in emission order, which is time order, so the expired ones
//! are always at the front and leave one by one as new ones come ([`EventLog::push`]).
//! A read never shows an expired event even if it has not left yet. Test probes
//! (`POST /webhooks/{id}/test`) are not kept: they belong to no resource (decision 113).

use crate::config::limits;
use crate::engine::Engine;
use crate::error::{ApiError, ErrorCode};
use crate::event::{Event, EventName};
use crate::reply::{EventEnvelope, EventPage, Reply, Response};
use crate::state::AccountIx;
use crate::time::Millis;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};

/// One kept event: what the filters look at, and its envelope.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct KeptEvent {
    /// Its place in the log (increasing; the index of `by_id`).
    seq: u64,
    /// The event id (`evt_...`).
    id: String,
    account: AccountIx,
    name: EventName,
    created_at: Millis,
    iccid: Option<String>,
    group_id: Option<String>,
    /// The exact envelope bytes (JSON) delivered to receivers.
    envelope: String,
}

/// The kept events of every account, oldest first.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct EventLog {
    /// Every kept event, oldest first (expiry order).
    kept: VecDeque<KeptEvent>,
    /// The `seq` of `kept[0]`: `kept[i].seq == first_seq + i`.
    first_seq: u64,
    /// Event id to its `seq`.
    by_id: BTreeMap<String, u64>,
    /// Per account, the `seq`s of its kept events, oldest first.
    #[serde(with = "crate::state::map_as_pairs")]
    by_account: BTreeMap<AccountIx, VecDeque<u64>>,
}

/// The filters of `GET /events`, parsed.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct EventFilter {
    /// Only this event (`type=esim.provisioned`).
    pub name: Option<EventName>,
    /// Only events created strictly after this time.
    pub created_after: Option<Millis>,
    /// Only events created strictly before this time.
    pub created_before: Option<Millis>,
    /// Only events of this eSIM.
    pub iccid: Option<String>,
    /// Only events of this group (`group.*`, and an eSIM's `group_id` where it has one).
    pub group_id: Option<String>,
}

impl EventFilter {
    /// The filter of the query values; a bad one is a validation error naming it.
    pub fn parse(
        event_type: Option<&str>,
        created_after: Option<&str>,
        created_before: Option<&str>,
        iccid: Option<&str>,
        group_id: Option<&str>,
    ) -> Result<EventFilter, ApiError> {
        let time = |name: &str, text: Option<&str>| match text {
            None => Ok(None),
            Some(text) => Millis::parse_rfc3339(text)
                .map(Some)
                .ok_or_else(|| ApiError::validation(format!("{name} must be an RFC 3339 date-time"))),
        };
        let name = match event_type {
            None => None,
            Some(text) => match EventName::parse(text) {
                Some(name) if name != EventName::Test => Some(name),
                _ => return Err(ApiError::validation(format!("type {text:?} is not an event name"))),
            },
        };
        Ok(EventFilter {
            name,
            created_after: time("created_after", created_after)?,
            created_before: time("created_before", created_before)?,
            iccid: iccid.map(str::to_string),
            group_id: group_id.map(str::to_string),
        })
    }

    fn admits(&self, event: &KeptEvent) -> bool {
        self.name.is_none_or(|name| event.name == name)
            && self.created_after.is_none_or(|after| event.created_at > after)
            && self.created_before.is_none_or(|before| event.created_at < before)
            && self.iccid.as_ref().is_none_or(|iccid| event.iccid.as_ref() == Some(iccid))
            && self.group_id.as_ref().is_none_or(|group| event.group_id.as_ref() == Some(group))
    }
}

/// Expired events dropped per event kept: after a burst (a day of a million
/// provisionings), 30 days later each new event takes a few of the old ones with it
/// instead of one command dropping them all (8.2 s for 2 million events in the scale
/// bench). Reads never show an expired event that has not left yet (decision 113).
const EXPIRE_PER_PUSH: usize = 4;

impl EventLog {
    /// Keeps an emitted event, and lets up to [`EXPIRE_PER_PUSH`] of the ones older
    /// than the retention go.
    pub(crate) fn push(&mut self, event: &Event, envelope: &str, now: Millis) {
        self.expire(now);
        let text = |field: &str| event.data.get(field).and_then(serde_json::Value::as_str).map(str::to_string);
        let seq = self.first_seq + self.kept.len() as u64;
        if let Some(last) = self.kept.back() {
            assert!(last.created_at <= event.created_at, "events are kept in time order");
        }
        let previous = self.by_id.insert(event.id.clone(), seq);
        assert!(previous.is_none(), "event ids are unique");
        let account = AccountIx(event.account);
        self.by_account.entry(account).or_default().push_back(seq);
        self.kept.push_back(KeptEvent {
            seq,
            id: event.id.clone(),
            account,
            name: event.name,
            created_at: event.created_at,
            iccid: text("iccid"),
            group_id: text("group_id"),
            envelope: envelope.to_string(),
        });
    }

    /// Drops up to [`EXPIRE_PER_PUSH`] of the events created more than the retention
    /// before `now`, oldest first.
    fn expire(&mut self, now: Millis) {
        for _ in 0..EXPIRE_PER_PUSH {
            let Some(oldest) = self.kept.front() else { break };
            if !expired(oldest.created_at, now) {
                break;
            }
            let oldest = self.kept.pop_front().expect("just seen");
            self.first_seq += 1;
            self.by_id.remove(&oldest.id);
            let seqs = self.by_account.get_mut(&oldest.account).expect("every kept event is indexed");
            assert_eq!(seqs.pop_front(), Some(oldest.seq), "an account's oldest event leaves first");
            if seqs.is_empty() {
                self.by_account.remove(&oldest.account);
            }
        }
    }

    /// The name and exact envelope of one of `account`'s kept events (a resend's body).
    pub(crate) fn kept_envelope(&self, account: AccountIx, event_id: &str, now: Millis) -> Option<(EventName, &str)> {
        let event = self.get(*self.by_id.get(event_id)?);
        (event.account == account && !expired(event.created_at, now)).then_some((event.name, event.envelope.as_str()))
    }

    fn get(&self, seq: u64) -> &KeptEvent {
        let event = &self.kept[(seq - self.first_seq) as usize];
        debug_assert_eq!(event.seq, seq);
        event
    }
}

/// Whether an event created at `created_at` is past its retention at `now`.
fn expired(created_at: Millis, now: Millis) -> bool {
    now.0 - created_at.0 >= limits::EVENT_RETENTION_MS
}

impl Engine {
    /// `GET /events`: the account's kept events, newest first, filtered, one page.
    pub(crate) fn list_events(
        &self,
        account: AccountIx,
        filter: &EventFilter,
        limit: Option<u64>,
        offset: Option<u64>,
    ) -> Response {
        let (limit, offset) = crate::esim::page(limit, offset)?;
        let log = &self.event_log;
        let mut total = 0u64;
        let mut events = Vec::new();
        let newest_first = log.by_account.get(&account).into_iter().flat_map(|seqs| seqs.iter().rev());
        for &seq in newest_first {
            let event = log.get(seq);
            if expired(event.created_at, self.now) {
                // Newest first is time order: every older event has expired too (they
                // leave a few per new event, decision 113), so the scan stops here.
                break;
            }
            if !filter.admits(event) {
                continue;
            }
            if total >= offset && (events.len() as u64) < limit {
                events.push(EventEnvelope::from_json(event.envelope.clone()));
            }
            total += 1;
        }
        Ok(Reply::EventPage(EventPage { events, total, limit, offset }))
    }

    /// `GET /events/{id}`: the exact envelope; another account's event is as unknown
    /// as a missing or expired one.
    pub(crate) fn get_event(&self, account: AccountIx, event_id: &str) -> Response {
        let log = &self.event_log;
        match log.by_id.get(event_id).map(|&seq| log.get(seq)) {
            Some(event) if event.account == account && !expired(event.created_at, self.now) => {
                Ok(Reply::Event(EventEnvelope::from_json(event.envelope.clone())))
            }
            _ => Err(ApiError::new(ErrorCode::NotFound, format!("no event {event_id}"))),
        }
    }
}
