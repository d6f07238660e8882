//! How an event is emitted: queued for observers, handed to every active webhook of the
//! account subscribed to it, and kept in the event log for the events API. The emitters
//! name the event with a payload of [`crate::event`]; the common fields come from the
//! eSIM or group record here.

use crate::engine::Engine;
use crate::event::*;
use crate::event_data::*;
use crate::event_log::{EventId, JsonData, KeptData, KeptEvent};
use crate::random::Purpose;
use crate::state::{AccountIx, EsimIx, EsimStatus, GroupIx, WalletOwner, WebhookIx};
use crate::time::Millis;

impl Engine {
    /// The common fields of an eSIM's events.
    fn esim_common(&self, esim: EsimIx) -> EsimCommon {
        let record = &self.esims[esim];
        EsimCommon {
            iccid: record.iccid,
            end_user_reference: record.end_user_reference.clone(),
            label: record.label.clone(),
        }
    }

    /// Emits an `esim.*` event: the common fields of the eSIM, then the event's own.
    pub(crate) fn emit_esim(&mut self, esim: EsimIx, event: EsimEvent) {
        let account = self.esims[esim].account;
        let typed = self.typed_esim_event(esim, &event);
        let group = match (&typed, &event) {
            (Some(_), _) => None,
            (None, EsimEvent::Provisioned { group_id: Some(id), .. })
            | (None, EsimEvent::GroupAssigned { group_id: id, .. })
            | (None, EsimEvent::GroupRemoved { group_id: id, .. }) => self.group_index.get(id.as_str()).copied(),
            _ => None,
        };
        let data = event.into_data(self.esim_common(esim));
        self.emit(account, data, typed, Some(esim), group);
    }

    /// The typed kept form of `esim.provisioned` and `esim.activated` (decision 155),
    /// only when it renders back to exactly `event`: every value it leaves out is one
    /// [`Engine::typed_event_data`] finds again, unchanged, in the eSIM or group record
    /// (provisioning sets an eSIM's texts; no command changes them, nor a group's id).
    fn typed_esim_event(&self, esim: EsimIx, event: &EsimEvent) -> Option<KeptData> {
        match event {
            EsimEvent::Provisioned { lpa_string, status: "pending", created_at, group_id }
                if *created_at == self.now && *lpa_string == self.esims[esim].lpa.text() =>
            {
                // A provisioning into a group names the eSIM's group.
                let group = match group_id {
                    None => None,
                    Some(id) => Some(self.esims[esim].funding.group().filter(|&g| self.groups[g].id == *id)?),
                };
                Some(KeptData::Provisioned { esim, group })
            }
            EsimEvent::Activated { activated_at, euicc_state: "ENABLED", status } if *activated_at == self.now => {
                let status = EsimStatus::ALL.into_iter().find(|s| s.as_str() == *status)?;
                Some(KeptData::Activated { esim, status })
            }
            _ => None,
        }
    }

    /// The `data` of a typed kept event created at `created_at`, built as it was when
    /// it was emitted; `None` for one kept as JSON text.
    fn typed_event_data(&self, data: &KeptData, created_at: Millis) -> Option<EventData> {
        let (esim, event) = match *data {
            KeptData::Provisioned { esim, group } => {
                let event = EsimEvent::Provisioned {
                    lpa_string: self.esims[esim].lpa.text(),
                    status: "pending",
                    created_at,
                    group_id: group.map(|group| self.groups[group].id.clone()),
                };
                (esim, event)
            }
            KeptData::Activated { esim, status } => {
                let event =
                    EsimEvent::Activated { activated_at: created_at, euicc_state: "ENABLED", status: status.as_str() };
                (esim, event)
            }
            KeptData::Json(_) | KeptData::Legacy(_) => return None,
        };
        Some(event.into_data(self.esim_common(esim)))
    }

    /// A kept event's envelope: the bytes that were delivered when it was emitted.
    pub(crate) fn kept_envelope_text(&self, event: &KeptEvent) -> String {
        let id = event.id.text();
        match &event.data {
            KeptData::Json(json) => envelope_text(&id, json.name, event.created_at, &json.data),
            KeptData::Legacy(legacy) => legacy.envelope.to_string(),
            typed => {
                let data = self.typed_event_data(typed, event.created_at).expect("not JSON text: typed");
                envelope_text(&id, typed.name(), event.created_at, &data.to_json())
            }
        }
    }

    /// Emits a `group.*` event: the group's id, name and shown balance, then its own.
    pub(crate) fn emit_group(&mut self, group: GroupIx, event: GroupEvent) {
        let record = &self.groups[group];
        let balance_usd = self.shown_balance(WalletOwner::Group(group));
        let common = GroupCommon { group_id: record.id.clone(), name: record.name.clone(), balance_usd };
        let account = record.account;
        self.emit(account, event.into_data(common), None, None, Some(group));
    }

    /// Emits a `balance.*` event of the account's reseller balance.
    pub(crate) fn emit_balance(&mut self, account: AccountIx, event: BalanceEvent) {
        self.emit(account, event.into_data(), None, None, None);
    }

    /// Emits an event of an account: queued for observers, handed to every active
    /// webhook of the account subscribed to it, and kept for the events API (`typed`,
    /// or else its `data` as JSON text with the eSIM and group it names). Only the typed
    /// emitters above call it.
    fn emit(
        &mut self,
        account: AccountIx,
        data: EventData,
        typed: Option<KeptData>,
        esim: Option<EsimIx>,
        group: Option<GroupIx>,
    ) {
        let name = data.name();
        let id = EventId(self.random_bytes::<12>(Purpose::EventId));
        let now = self.now;
        let targets: Vec<WebhookIx> = self.accounts[account]
            .webhooks
            .iter()
            .copied()
            .filter(|&w| {
                let webhook = &self.webhooks[w];
                webhook.active && !webhook.deleted && webhook.subscription.covers(name)
            })
            .collect();
        // The JSON text only where it is used: a typed event with no webhook to deliver
        // to (most, at scale) needs none (decision 155).
        let data_json = (typed.is_none() || !targets.is_empty()).then(|| data.to_json());
        let event = Event { id: id.text(), account, name, created_at: now, data };
        if let (Some(data_json), false) = (&data_json, targets.is_empty()) {
            let body = envelope_text(&event.id, name, now, data_json);
            for webhook in targets {
                self.start_delivery(webhook, &event, body.clone(), false);
            }
        }
        let data = match (typed, data_json) {
            (Some(typed), _) => typed,
            (None, data_json) => {
                let data = data_json.expect("written for every event kept as JSON").into_boxed_str();
                KeptData::Json(Box::new(JsonData { name, esim, group, data }))
            }
        };
        debug_assert_eq!(data.name(), name);
        self.event_log.push(KeptEvent { created_at: now, id, account, data }, now);
        self.events.push_back(event);
    }
}
