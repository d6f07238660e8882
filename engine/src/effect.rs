//! What the engine asks the shell to carry out: webhook deliveries to POST.

use crate::event_name::EventName;
use crate::secret::SealedSecret;
use crate::time::Millis;
use serde::{Deserialize, Serialize};

/// Something the shell must carry out.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Effect {
    /// POST `body` to `url` with the headers of [`Delivery::headers`], then report the
    /// outcome with [`crate::Command::DeliveryOutcome`].
    Deliver(Delivery),
}

/// One webhook POST the shell makes for the engine, with everything it needs to sign
/// and send it without reading the state.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Delivery {
    /// Names the outcome the shell reports back ([`crate::Command::DeliveryOutcome`]).
    pub delivery_id: u64,
    /// The webhook it goes to (for logs; the engine routes by `delivery_id`).
    pub webhook_id: String,
    /// Where to POST, as registered (the sender still refuses private addresses).
    pub url: String,
    /// `X-Service-Event-Id`: receivers de-duplicate retries by it.
    pub event_id: String,
    /// The event's name.
    pub event: EventName,
    /// The exact bytes to sign and send.
    pub body: String,
    /// The webhook's signing secret, sealed: the sender opens it and signs `body`
    /// (the engine never holds the secret itself).
    pub signing_secret: SealedSecret,
    /// The secret before a rotation, during its overlap: the sender signs with both.
    pub previous_signing_secret: Option<SealedSecret>,
    /// `X-Service-Timestamp` of this attempt.
    pub timestamp: Millis,
    /// `X-Service-Delivery-Attempt`: 1 for the first POST.
    pub attempt: u32,
    /// A manual resend (`POST /events/{id}/resend`): one attempt, never retried.
    #[serde(default)]
    pub manual: bool,
}
