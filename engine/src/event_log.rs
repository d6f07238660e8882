//! The events API's store (`GET /events`, `GET /events/{id}`): every event an account's
//! resources emitted in the last [`limits::EVENT_RETENTION_MS`], with the exact envelope
//! that was (or would have been) delivered.
//!
//! Bounded: events are kept in emission order, which is time order, so the expired ones
//! are always at the front and leave one by one as new ones come ([`EventLog::push`]).
//! A read never shows an expired event even if it has not left yet. Test probes
//! (`POST /webhooks/{id}/test`) are not kept: they belong to no resource (decision 113).

use crate::error::ApiError;
use crate::event_name::EventName;
use crate::ids::{iccid_number, AccountIx, EsimIx, GroupIx, IccidIndex};
use crate::limits;
use crate::state::EsimStatus;
use crate::time::Millis;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};

pub(crate) use crate::ids::EventId;

/// What a kept event's `data` is made of. The two events every eSIM emits keep only
/// indexes: their envelope is rendered when it is read, by the code that rendered it
/// when it was emitted, from values no command changes after provisioning (an eSIM's
/// ICCID, activation code, `end_user_reference` and `label`, a group's id), so the bytes
/// are those delivered (decision 155). Every other event keeps its `data` JSON text.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) enum KeptData {
    /// `esim.provisioned`: `lpa_string` is the eSIM's, `status` `pending`, `created_at`
    /// the event's, `group_id` the group's id.
    Provisioned {
        #[serde(rename = "sim")]
        esim: EsimIx,
        group: Option<GroupIx>,
    },
    /// `esim.activated`: `activated_at` is the event's time, `euicc_state` `ENABLED`.
    Activated {
        #[serde(rename = "sim")]
        esim: EsimIx,
        status: EsimStatus,
    },
    /// Any other event (boxed: they are rarer, and the two above stay small).
    Json(Box<JsonData>),
    /// An event read from a snapshot written before decision 155, as it was kept then:
    /// its envelope text and the ICCID and group id of its data (decision 157).
    Legacy(Box<LegacyData>),
}

/// An event kept before decision 155 (see [`KeptData::Legacy`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct LegacyData {
    name: EventName,
    iccid: Option<Box<str>>,
    group_id: Option<Box<str>>,
    pub(crate) envelope: Box<str>,
}

/// A kept event's `data` object as JSON text, and the eSIM and group it names (its
/// `iccid` and `group_id`, for the filters).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct JsonData {
    pub(crate) name: EventName,
    #[serde(rename = "sim")]
    pub(crate) esim: Option<EsimIx>,
    pub(crate) group: Option<GroupIx>,
    pub(crate) data: Box<str>,
}

impl KeptData {
    /// The eSIM whose `iccid` the event carries.
    fn esim(&self) -> Option<EsimIx> {
        match *self {
            KeptData::Provisioned { esim, .. } | KeptData::Activated { esim, .. } => Some(esim),
            KeptData::Json(ref json) => json.esim,
            KeptData::Legacy(_) => None,
        }
    }

    /// The event this is (the variant of a typed one: a name beside it would cost a
    /// kept event 8 bytes of padding).
    pub(crate) fn name(&self) -> EventName {
        match self {
            KeptData::Provisioned { .. } => EventName::EsimProvisioned,
            KeptData::Activated { .. } => EventName::EsimActivated,
            KeptData::Json(json) => json.name,
            KeptData::Legacy(legacy) => legacy.name,
        }
    }

    /// The group whose `group_id` the event carries.
    fn group(&self) -> Option<GroupIx> {
        match *self {
            KeptData::Provisioned { group, .. } => group,
            KeptData::Json(ref json) => json.group,
            KeptData::Legacy(_) => None,
            KeptData::Activated { .. } => None,
        }
    }
}

/// One kept event: what the filters look at, and what its envelope is rendered from.
/// Its place in the log is its `seq` (`first_seq` plus its position).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct KeptEvent {
    pub(crate) created_at: Millis,
    pub(crate) id: EventId,
    pub(crate) account: AccountIx,
    pub(crate) data: KeptData,
}

/// The kept events of every account, oldest first. Only the events and `first_seq`
/// are written (state digest, snapshots); the two indexes are derived from them, rebuilt
/// when a snapshot is read.
#[derive(Clone, Debug, Default)]
pub struct EventLog {
    /// Every kept event, oldest first (expiry order).
    kept: VecDeque<KeptEvent>,
    /// The `seq` of `kept[0]`: `kept[i]` has seq `first_seq + i`.
    first_seq: u64,
    /// [`EventId::key`] to the [`Slot`] of the event that has it (decision 154).
    by_id: BTreeMap<u64, Slot>,
    /// Kept events whose key another kept event already had in `by_id` (almost never).
    by_id_shared: BTreeMap<EventId, Slot>,
    /// Per account, the slots of its kept events, oldest first.
    by_account: BTreeMap<AccountIx, VecDeque<Slot>>,
}

/// A kept event's `seq` in the indexes: its low 32 bits, half the bytes of the seq.
/// Fewer than 2^32 events are ever kept at once, so the kept seqs' low bits tell them
/// apart ([`EventLog::seq_of`]).
type Slot = u32;

/// What an [`EventLog`] writes: its events and the seq of the first.
#[derive(Serialize)]
struct EventLogForm<'a> {
    events: &'a VecDeque<KeptEvent>,
    first_seq: u64,
}

/// What an [`EventLog`] reads: the form above, or the one written before decision 155
/// (`kept`, with whole envelopes; its indexes are not read, they are rebuilt).
#[derive(Deserialize)]
struct EventLogRead {
    events: Option<VecDeque<KeptEvent>>,
    kept: Option<Vec<LegacyKept>>,
    first_seq: u64,
}

/// An event as snapshots written before decision 155 hold it.
#[derive(Deserialize)]
struct LegacyKept {
    id: String,
    account: AccountIx,
    name: EventName,
    created_at: Millis,
    iccid: Option<String>,
    group_id: Option<String>,
    envelope: String,
}

impl LegacyKept {
    fn into_kept(self) -> Result<KeptEvent, String> {
        let id = EventId::parse(&self.id).ok_or_else(|| format!("{:?} is not an event id", self.id))?;
        let data = LegacyData {
            name: self.name,
            iccid: self.iccid.map(String::into_boxed_str),
            group_id: self.group_id.map(String::into_boxed_str),
            envelope: self.envelope.into_boxed_str(),
        };
        Ok(KeptEvent { created_at: self.created_at, id, account: self.account, data: KeptData::Legacy(Box::new(data)) })
    }
}

impl Serialize for EventLog {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        EventLogForm { events: &self.kept, first_seq: self.first_seq }.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for EventLog {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let form = EventLogRead::deserialize(deserializer)?;
        let legacy = form.kept.into_iter().flatten().map(LegacyKept::into_kept);
        EventLog::rebuilt(form.first_seq, form.events.into_iter().flatten().map(Ok).chain(legacy))
            .map_err(serde::de::Error::custom)
    }
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

    /// The filter against kept events: the eSIM and group it names as indexes (`None`
    /// when it names none; `Err` when it names one that does not exist, which no event
    /// carries).
    pub(crate) fn resolve(
        &self,
        iccids: &IccidIndex,
        groups: &BTreeMap<String, GroupIx>,
    ) -> Result<ResolvedFilter<'_>, ()> {
        let esim = match &self.iccid {
            None => None,
            Some(iccid) => Some(iccid_number(iccid).and_then(|n| iccids.get(n)).ok_or(())?),
        };
        let group = match &self.group_id {
            None => None,
            Some(id) => Some(*groups.get(id.as_str()).ok_or(())?),
        };
        Ok(ResolvedFilter { text: self, esim, group })
    }
}

/// An [`EventFilter`] whose ICCID and group id are indexes: an eSIM's ICCID and a
/// group's id never change and name one record, so comparing indexes is comparing them.
/// (Events read from an old snapshot are compared by text.)
pub(crate) struct ResolvedFilter<'a> {
    text: &'a EventFilter,
    esim: Option<EsimIx>,
    group: Option<GroupIx>,
}

impl ResolvedFilter<'_> {
    pub(crate) fn admits(&self, event: &KeptEvent) -> bool {
        let text = self.text;
        let names_them = match &event.data {
            KeptData::Legacy(legacy) => {
                text.iccid.as_deref().is_none_or(|iccid| legacy.iccid.as_deref() == Some(iccid))
                    && text.group_id.as_deref().is_none_or(|group| legacy.group_id.as_deref() == Some(group))
            }
            data => {
                self.esim.is_none_or(|esim| data.esim() == Some(esim))
                    && self.group.is_none_or(|group| data.group() == Some(group))
            }
        };
        text.name.is_none_or(|name| event.data.name() == name)
            && text.created_after.is_none_or(|after| event.created_at > after)
            && text.created_before.is_none_or(|before| event.created_at < before)
            && names_them
    }
}

/// Expired events dropped per event kept: after a burst (a day of a million
/// provisionings), 30 days later each new event takes a few of the old ones with it
/// instead of one command dropping them all (8.2 s for 2 million events in the scale
/// bench). Reads never show an expired event that has not left yet (decision 113).
const EXPIRE_PER_PUSH: usize = 4;

/// A deque whose length fell below a quarter of its capacity gives back all but twice
/// its length (not below this many slots): after a burst expires, the log no longer
/// keeps the burst's capacity, and since a shrink happens only after the deque lost
/// three quarters of its peak, its copying costs at most a third of the pushes that
/// filled it (decision 156).
const SHRINK_FLOOR_SLOTS: usize = 64;

fn shrink_after_burst<T>(deque: &mut VecDeque<T>) {
    if deque.capacity() > SHRINK_FLOOR_SLOTS && deque.len() < deque.capacity() / 4 {
        deque.shrink_to((deque.len() * 2).max(SHRINK_FLOOR_SLOTS));
    }
}

impl EventLog {
    /// Keeps an emitted event, and lets up to [`EXPIRE_PER_PUSH`] of the ones older
    /// than the retention go.
    pub(crate) fn push(&mut self, event: KeptEvent, now: Millis) {
        self.expire(now);
        if let Some(last) = self.kept.back() {
            assert!(last.created_at <= event.created_at, "events are kept in time order");
        }
        self.index_and_keep(event).expect("event ids are unique");
    }

    /// The log of `events` (oldest first, the first at `first_seq`), as read back from a
    /// snapshot: the indexes [`EventLog::index_and_keep`] builds event by event, with
    /// `by_id` built from its keys sorted (a snapshot at 1 M eSIMs holds millions of
    /// events, and inserting each at a random place of the B-tree was a tenth of its
    /// read). The same indexes and the same refusal of an id kept twice.
    fn rebuilt(first_seq: u64, events: impl Iterator<Item = Result<KeptEvent, String>>) -> Result<EventLog, String> {
        let mut log = EventLog { first_seq, ..EventLog::default() };
        let mut keys: Vec<(u64, Slot)> = Vec::new();
        for event in events {
            let event = event?;
            if log.kept.len() >= Slot::MAX as usize {
                return Err("more events than the log's slots".into());
            }
            let slot = (first_seq + log.kept.len() as u64) as Slot;
            keys.push((event.id.key(), slot));
            log.by_account.entry(event.account).or_default().push_back(slot);
            log.kept.push_back(event);
        }
        // Stable: events sharing a key stay in seq order, and the oldest takes `by_id`.
        keys.sort_by_key(|&(key, _)| key);
        let id_at = |slot: Slot| log.kept[slot.wrapping_sub(first_seq as Slot) as usize].id;
        let mut by_id = Vec::with_capacity(keys.len());
        let mut by_id_shared = BTreeMap::new();
        for group in keys.chunk_by(|a, b| a.0 == b.0) {
            let (key, first) = group[0];
            by_id.push((key, first));
            for &(_, slot) in &group[1..] {
                let id = id_at(slot);
                if id == id_at(first) || by_id_shared.insert(id, slot).is_some() {
                    return Err(format!("event id {} is kept twice", id.text()));
                }
            }
        }
        log.by_id = by_id.into_iter().collect();
        log.by_id_shared = by_id_shared;
        Ok(log)
    }

    /// Indexes `event` as the next seq and keeps it; refuses an id that is kept already.
    fn index_and_keep(&mut self, event: KeptEvent) -> Result<(), String> {
        use std::collections::btree_map::Entry;
        if self.kept.len() >= Slot::MAX as usize {
            return Err("more events than the log's slots".into());
        }
        let seq = self.first_seq + self.kept.len() as u64;
        let slot = seq as Slot;
        let twice = || format!("event id {} is kept twice", event.id.text());
        // One walk of the index for the common case: a key no kept id has.
        match self.by_id.entry(event.id.key()) {
            Entry::Vacant(entry) => {
                entry.insert(slot);
            }
            Entry::Occupied(entry) => {
                // Another kept id has the same key: it stays, this one goes aside.
                let other = &self.kept[entry.get().wrapping_sub(self.first_seq as Slot) as usize];
                if other.id == event.id {
                    return Err(twice());
                }
                match self.by_id_shared.entry(event.id) {
                    Entry::Vacant(entry) => entry.insert(slot),
                    Entry::Occupied(_) => return Err(twice()),
                };
            }
        }
        self.by_account.entry(event.account).or_default().push_back(slot);
        self.kept.push_back(event);
        Ok(())
    }

    /// The seq of the kept event with this id (expired or not).
    fn find(&self, id: &EventId) -> Option<u64> {
        if let Some(&slot) = self.by_id.get(&id.key()) {
            let seq = self.seq_of(slot);
            if self.get(seq).id == *id {
                return Some(seq);
            }
        }
        self.by_id_shared.get(id).map(|&slot| self.seq_of(slot))
    }

    /// Drops up to [`EXPIRE_PER_PUSH`] of the events created more than the retention
    /// before `now`, oldest first.
    fn expire(&mut self, now: Millis) {
        for _ in 0..EXPIRE_PER_PUSH {
            let Some(oldest) = self.kept.front() else { break };
            if !expired(oldest.created_at, now) {
                break;
            }
            let seq = self.first_seq;
            let oldest = self.kept.pop_front().expect("just seen");
            self.first_seq += 1;
            let key = oldest.id.key();
            let slot = seq as Slot;
            if self.by_id.get(&key) == Some(&slot) {
                self.by_id.remove(&key);
            } else {
                let shared = self.by_id_shared.remove(&oldest.id);
                assert_eq!(shared, Some(slot), "every kept event is indexed by its id");
            }
            let seqs = self.by_account.get_mut(&oldest.account).expect("every kept event is indexed");
            assert_eq!(seqs.pop_front(), Some(slot), "an account's oldest event leaves first");
            if seqs.is_empty() {
                self.by_account.remove(&oldest.account);
            } else {
                shrink_after_burst(seqs);
            }
        }
        shrink_after_burst(&mut self.kept);
    }

    /// The seq of a kept event's slot.
    fn seq_of(&self, slot: Slot) -> u64 {
        self.first_seq + u64::from(slot.wrapping_sub(self.first_seq as Slot))
    }

    fn get(&self, seq: u64) -> &KeptEvent {
        &self.kept[(seq - self.first_seq) as usize]
    }

    /// How many events are kept (expired ones that have not left yet included).
    pub fn len(&self) -> usize {
        self.kept.len()
    }

    /// Whether no event is kept.
    pub fn is_empty(&self) -> bool {
        self.kept.is_empty()
    }
}

impl EventLog {
    /// `account`'s kept events that have not expired at `now`, newest first.
    pub(crate) fn newest_first(&self, account: AccountIx, now: Millis) -> impl Iterator<Item = &KeptEvent> {
        let slots = self.by_account.get(&account).into_iter().flat_map(|slots| slots.iter().rev());
        // Newest first is time order: once one has expired every older one has too (they
        // leave a few per new event, decision 113), so the walk stops there.
        slots.map(|&slot| self.get(self.seq_of(slot))).take_while(move |event| !expired(event.created_at, now))
    }

    /// One of `account`'s kept events that has not expired, by its id text.
    pub(crate) fn account_event(&self, account: AccountIx, event_id: &str, now: Millis) -> Option<&KeptEvent> {
        let event = self.get(self.find(&EventId::parse(event_id)?)?);
        (event.account == account && !expired(event.created_at, now)).then_some(event)
    }
}

/// Whether an event created at `created_at` is past its retention at `now`.
fn expired(created_at: Millis, now: Millis) -> bool {
    now.0 - created_at.0 >= limits::EVENT_RETENTION_MS
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(id: [u8; 12], account: u32, created_at: i64) -> KeptEvent {
        KeptEvent {
            created_at: Millis(created_at),
            id: EventId(id),
            account: AccountIx(account),
            data: KeptData::Activated { esim: EsimIx(account), status: EsimStatus::Active },
        }
    }

    fn id_of(n: u64, tail: u32) -> [u8; 12] {
        let mut id = [0u8; 12];
        id[..8].copy_from_slice(&n.to_le_bytes());
        id[8..].copy_from_slice(&tail.to_le_bytes());
        id
    }

    /// Two events an eSIM emits cost this much inline, however long their envelopes;
    /// the one before decision 155 took 144 bytes plus five heap strings.
    #[test]
    fn a_kept_event_is_small() {
        assert!(std::mem::size_of::<KeptEvent>() <= 40, "{}", std::mem::size_of::<KeptEvent>());
        assert!(std::mem::size_of::<KeptData>() <= 16, "{}", std::mem::size_of::<KeptData>());
    }

    #[test]
    fn event_ids_read_back_only_as_drawn() {
        let id = EventId([0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef, 0x00, 0xff, 0x10, 0x9a]);
        assert_eq!(id.text(), "evt_0123456789abcdef00ff109a");
        assert_eq!(EventId::parse(&id.text()), Some(id));
        for bad in [
            "evt_0123456789ABCDEF00ff109a",
            "evt_0123456789abcdef00ff109",
            "0123456789abcdef00ff109a",
            "evt_0123456789abcdef00ff109g",
            "evt_é123456789abcdef00ff109",
        ] {
            assert_eq!(EventId::parse(bad), None, "{bad}");
        }
        let written = serde_json::to_string(&id).unwrap();
        assert_eq!(serde_json::from_str::<EventId>(&written).unwrap(), id);
    }

    /// Ids that share the index key (their first 8 bytes) are both found, and leave
    /// cleanly in either order; a repeated id is refused.
    #[test]
    fn ids_sharing_a_key_are_found_and_leave() {
        let mut log = EventLog::default();
        let start = 1_000_000;
        log.push(event(id_of(7, 1), 1, start), Millis(start));
        log.push(event(id_of(7, 2), 2, start), Millis(start));
        log.push(event(id_of(8, 2), 1, start + 1), Millis(start + 1));
        assert_eq!(log.by_id_shared.len(), 1);
        for (id, seq) in [(id_of(7, 1), 0), (id_of(7, 2), 1), (id_of(8, 2), 2)] {
            assert_eq!(log.find(&EventId(id)), Some(seq));
        }
        assert_eq!(log.find(&EventId(id_of(7, 3))), None);
        assert!(log.index_and_keep(event(id_of(7, 2), 3, start + 1)).is_err());
        // After the retention, each new event takes up to four old ones with it.
        let later = start + 1 + limits::EVENT_RETENTION_MS;
        log.push(event(id_of(9, 0), 1, later), Millis(later));
        assert_eq!((log.len(), log.first_seq), (1, 3));
        assert!(log.by_id_shared.is_empty() && log.by_id.len() == 1);
        assert_eq!(log.by_account.keys().copied().collect::<Vec<_>>(), [AccountIx(1)]);
        assert_eq!(log.find(&EventId(id_of(7, 2))), None);
        assert_eq!(log.find(&EventId(id_of(9, 0))), Some(3));
    }

    /// Slots are the low 32 bits of a seq: they still name the right events when the
    /// seqs cross a multiple of 2^32.
    #[test]
    fn slots_name_the_right_events_across_a_wrap() {
        let mut log = EventLog { first_seq: u64::from(u32::MAX) - 2, ..EventLog::default() };
        for n in 0..6u64 {
            log.push(event(id_of(n, 0), (n % 2) as u32, n as i64), Millis(n as i64));
        }
        for n in 0..6u64 {
            assert_eq!(log.find(&EventId(id_of(n, 0))), Some(u64::from(u32::MAX) - 2 + n));
            assert_eq!(log.get(log.find(&EventId(id_of(n, 0))).unwrap()).id, EventId(id_of(n, 0)));
        }
        let later = 2 + limits::EVENT_RETENTION_MS;
        log.push(event(id_of(9, 0), 1, later), Millis(later));
        assert_eq!(log.first_seq, u64::from(u32::MAX) + 1, "the three oldest left");
        assert_eq!(log.find(&EventId(id_of(4, 0))), Some(u64::from(u32::MAX) + 2));
    }

    /// After a burst has expired, the deques give their capacity back (decision 156);
    /// the log written and read back indexes the same events.
    #[test]
    fn a_burst_leaves_no_capacity_behind_and_indexes_are_rebuilt_when_read() {
        let mut log = EventLog::default();
        let burst = 20_000u64;
        for n in 0..burst {
            log.push(event(id_of(n, 0), (n % 3) as u32, 0), Millis(0));
        }
        let peak = log.kept.capacity();
        assert!(peak >= burst as usize);
        let later = limits::EVENT_RETENTION_MS;
        for n in 0..burst / 4 + 10 {
            log.push(event(id_of(burst + n, 0), 0, later), Millis(later));
        }
        assert_eq!(log.first_seq, burst, "every expired event has left");
        assert!(peak > 6 * log.len(), "{peak} for {}", log.len());
        assert!(
            log.kept.capacity() < 4 * log.len().max(SHRINK_FLOOR_SLOTS),
            "{} for {}",
            log.kept.capacity(),
            log.len()
        );
        let account = &log.by_account[&AccountIx(0)];
        assert!(account.capacity() < 4 * account.len().max(SHRINK_FLOOR_SLOTS), "{}", account.capacity());
        let back: EventLog = serde_json::from_str(&serde_json::to_string(&log).unwrap()).unwrap();
        assert_eq!(
            (back.first_seq, back.len(), &back.by_id, &back.by_account),
            (log.first_seq, log.len(), &log.by_id, &log.by_account)
        );
        assert_eq!(back.kept, log.kept);
    }

    /// Read back in bulk, a log has exactly the indexes it had when its events were kept
    /// one by one: ids sharing keys (the oldest in `by_id`), slots across a wrap of
    /// 2^32; an id kept twice is refused either way.
    #[test]
    fn a_log_read_back_has_the_indexes_it_was_built_with() {
        let mut log = EventLog { first_seq: u64::from(u32::MAX) - 40, ..EventLog::default() };
        let mut events = Vec::new();
        for n in 0..100u64 {
            // Keys 0..30 repeat: up to four events share one.
            let event = event(id_of(n % 30, (n / 30) as u32), (n % 7) as u32, n as i64);
            events.push(event.clone());
            log.index_and_keep(event).unwrap();
        }
        assert!(log.by_id_shared.len() >= 60);
        let back: EventLog = serde_json::from_str(&serde_json::to_string(&log).unwrap()).unwrap();
        assert_eq!(
            (back.first_seq, &back.by_id, &back.by_id_shared, &back.by_account),
            (log.first_seq, &log.by_id, &log.by_id_shared, &log.by_account)
        );
        assert_eq!(back.kept, log.kept);
        for event in &events {
            assert_eq!(back.find(&event.id), log.find(&event.id));
        }
        for twice in [
            vec![events[3].clone(), events[3].clone()],
            vec![events[40].clone(), events[10].clone(), events[40].clone()],
        ] {
            let built = EventLog::rebuilt(0, twice.clone().into_iter().map(Ok));
            assert!(built.is_err_and(|why| why.contains("kept twice")));
            let mut one_by_one = EventLog::default();
            assert!(twice.into_iter().map(|e| one_by_one.index_and_keep(e)).any(|kept| kept.is_err()));
        }
    }
}
