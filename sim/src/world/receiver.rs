//! The webhook receivers: events and deliveries drained from the service after every
//! step, each delivery answered (or held) the way its receiver's [`Mode`] says.

use super::log::DeliveryRecord;
use super::{Entity, World};
use crate::op::Receiver;
use bytes::Bytes;
use esim_engine::{Delivery, DeliveryResult, Effect, Millis};

/// Events the world remembers for resends.
const RECENT_EVENTS: usize = 32;

/// Answering a delivery cannot start new deliveries, but the loop is bounded anyway.
const MAX_DRAIN_ROUNDS: usize = 16;

/// How a receiver answers, with `down` turned into a deadline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Ok,
    Fail,
    /// Fails this many more answers, then answers 200.
    FailTimes(u32),
    Timeout,
    Hold,
    DownUntil(Millis),
    /// 410 Gone.
    Gone,
}

impl World {
    /// Sets how a receiver answers from now on (`down` becomes a deadline).
    pub(super) fn set_receiver(&mut self, webhook: &str, mode: Receiver) {
        if let Some(Entity::Webhook(i)) = self.entity(webhook) {
            self.webhooks[i].mode = match mode {
                Receiver::Ok => Mode::Ok,
                Receiver::Fail => Mode::Fail,
                Receiver::FailTimes { count } => Mode::FailTimes(count),
                Receiver::Timeout => Mode::Timeout,
                Receiver::Hold => Mode::Hold,
                Receiver::Down { ms } => Mode::DownUntil(self.now.plus_ms(ms)),
                Receiver::Gone => Mode::Gone,
            };
        }
    }

    /// Drains events and deliveries after an op, and lets the receivers answer.
    pub(super) fn drain(&mut self) {
        for _ in 0..MAX_DRAIN_ROUNDS {
            let before = (self.log.events.len(), self.log.deliveries.len());
            if let Some(event) = self.service.poll_event() {
                // Receivers answer after this, so these are the flags at emission.
                let flags = self.service.engine().webhooks().iter().map(|w| w.active && !w.deleted).collect();
                self.log.webhooks_active.push((self.log.events.len(), flags));
                self.keep_recent(&event);
                self.stats.events += 1;
                self.log.events.push(event);
            }
            while let Some(event) = self.service.poll_event() {
                self.keep_recent(&event);
                self.stats.events += 1;
                self.log.events.push(event);
            }
            self.process_effects(None);
            self.answer_held();
            if (self.log.events.len(), self.log.deliveries.len()) == before {
                break;
            }
        }
    }

    /// Remembers an event for resends (the newest [`RECENT_EVENTS`]).
    fn keep_recent(&mut self, event: &esim_engine::Event) {
        if event.name == esim_engine::EventName::Test {
            return;
        }
        if self.recent_events.len() == RECENT_EVENTS {
            self.recent_events.remove(0);
        }
        self.recent_events.push((event.account.0, event.name, event.id.clone()));
    }

    fn webhook_rec(&self, webhook_id: &str) -> Option<usize> {
        match self.ids.get(webhook_id) {
            Some(Entity::Webhook(i)) => Some(*i),
            _ => None,
        }
    }

    fn webhook_engine(&self, webhook_id: &str) -> Option<u32> {
        self.webhook_rec(webhook_id).map(|i| self.webhooks[i].engine)
    }

    fn answer_for(&mut self, webhook_id: &str, test: bool) -> Option<DeliveryResult> {
        let rec = self.webhook_rec(webhook_id);
        let mode = rec.map_or(Mode::Ok, |i| self.webhooks[i].mode);
        match mode {
            Mode::Ok | Mode::FailTimes(0) => Some(DeliveryResult::Status(200)),
            Mode::Fail => Some(DeliveryResult::Status(500)),
            Mode::FailTimes(left) => {
                if let Some(i) = rec {
                    self.webhooks[i].mode = Mode::FailTimes(left - 1);
                }
                Some(DeliveryResult::Status(500))
            }
            Mode::Timeout => Some(DeliveryResult::Timeout),
            Mode::Gone => Some(DeliveryResult::Status(410)),
            Mode::Hold if test => Some(DeliveryResult::Timeout),
            Mode::Hold => None,
            Mode::DownUntil(until) if self.now < until => Some(DeliveryResult::Failed("connection refused".into())),
            Mode::DownUntil(_) => Some(DeliveryResult::Status(200)),
        }
    }

    /// What the step log keeps of a delivery, its signing secrets opened as the sender
    /// opens them.
    fn record_of(&self, delivery: &Delivery, handed_out: bool, answer: Option<DeliveryResult>) -> DeliveryRecord {
        let secrets = self.service.secrets();
        let current = secrets.open(&delivery.signing_secret).ok();
        let previous = delivery.previous_signing_secret.as_ref().map(|sealed| secrets.open(sealed).ok());
        let secrets = match (current, previous) {
            (Some(current), None) => Some((current, None)),
            (Some(current), Some(Some(previous))) => Some((current, Some(previous))),
            _ => None,
        };
        DeliveryRecord {
            delivery_id: delivery.delivery_id,
            webhook: self.webhook_engine(&delivery.webhook_id),
            webhook_id: delivery.webhook_id.clone(),
            event_id: delivery.event_id.clone(),
            event: delivery.event,
            attempt: delivery.attempt,
            manual: delivery.manual,
            timestamp: delivery.timestamp,
            secrets,
            handed_out,
            answer,
            body: delivery.body.clone(),
        }
    }

    /// Takes every delivery the engine handed out; answers it now unless its receiver
    /// holds it. Returns the answer to the test delivery `test`, if it was among them.
    pub(super) fn process_effects(&mut self, test: Option<u64>) -> Option<http::Response<Bytes>> {
        let mut test_response = None;
        while let Some(effect) = self.service.poll_effect() {
            let Effect::Deliver(delivery) = effect;
            self.stats.deliveries += 1;
            let is_test = test == Some(delivery.delivery_id);
            let answer = self.answer_for(&delivery.webhook_id, is_test);
            let response = match &answer {
                Some(result) => {
                    Some(self.service.delivery_outcome(self.now, delivery.delivery_id, result.clone(), None))
                }
                None => None,
            };
            if is_test {
                test_response = response;
            }
            if answer.as_ref().is_some_and(DeliveryResult::is_success) {
                self.stats.deliveries_ok += 1;
            }
            let record = self.record_of(&delivery, true, answer.clone());
            self.log.deliveries.push(record);
            if answer.is_none() {
                self.held.push(delivery);
            }
        }
        test_response
    }

    /// Held deliveries whose receiver stopped holding are answered now.
    fn answer_held(&mut self) {
        let held = std::mem::take(&mut self.held);
        // Receivers that stopped holding answer in the order they received.
        for delivery in held {
            match self.answer_for(&delivery.webhook_id, false) {
                None => self.held.push(delivery),
                Some(result) => {
                    let _ = self.service.delivery_outcome(self.now, delivery.delivery_id, result.clone(), None);
                    if result.is_success() {
                        self.stats.deliveries_ok += 1;
                    }
                    let record = self.record_of(&delivery, false, Some(result));
                    self.log.deliveries.push(record);
                }
            }
        }
    }
}
