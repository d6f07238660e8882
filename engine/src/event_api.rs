//! The events API (`GET /events`, `GET /events/{id}`, and a resend's body): reads of
//! the event log ([`crate::event_log::EventLog`]), rendered as the envelopes that were
//! (or would have been) delivered.

use crate::engine::Engine;
use crate::error::{ApiError, ErrorCode};
use crate::event_log::EventFilter;
use crate::event_name::EventName;
use crate::ids::AccountIx;
use crate::limits::page;
use crate::reply::{EventEnvelope, EventPage, Reply, Response};

impl Engine {
    /// `GET /events`: the account's kept events, newest first, filtered, one page.
    pub(crate) fn list_events(
        &self,
        account: AccountIx,
        filter: &EventFilter,
        limit: Option<u64>,
        offset: Option<u64>,
    ) -> Response {
        let (limit, offset) = page(limit, offset)?;
        let mut total = 0u64;
        let mut events = Vec::new();
        // A filter naming an eSIM or group that does not exist admits nothing.
        if let Ok(filter) = filter.resolve(&self.iccid_index, &self.group_index) {
            for event in self.event_log.newest_first(account, self.now).filter(|event| filter.admits(event)) {
                if total >= offset && (events.len() as u64) < limit {
                    events.push(EventEnvelope::from_json(self.kept_envelope_text(event)));
                }
                total += 1;
            }
        }
        Ok(Reply::EventPage(EventPage { events, total, limit, offset }))
    }

    /// `GET /events/{id}`: the exact envelope; another account's event is as unknown
    /// as a missing or expired one.
    pub(crate) fn get_event(&self, account: AccountIx, event_id: &str) -> Response {
        match self.event_log.account_event(account, event_id, self.now) {
            Some(event) => Ok(Reply::Event(EventEnvelope::from_json(self.kept_envelope_text(event)))),
            None => Err(ApiError::new(ErrorCode::NotFound, format!("no event {event_id}"))),
        }
    }

    /// The name and exact envelope of one of `account`'s kept events (a resend's body).
    pub(crate) fn kept_envelope(&self, account: AccountIx, event_id: &str) -> Option<(EventName, String)> {
        let event = self.event_log.account_event(account, event_id, self.now)?;
        Some((event.data.name(), self.kept_envelope_text(event)))
    }
}
