//! What the engine asks the shell to carry out: webhook deliveries to POST.

use crate::event::EventName;
use crate::secret::SealedSecret;
use crate::time::Millis;
use serde::{Deserialize, Serialize};

/// Something the shell must carry out.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Effect {
    /// POST `body` to `url` with the headers of [`Delivery::headers`], then report the
    /// outcome with [`Command::DeliveryOutcome`].
    Deliver(Delivery),
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Delivery {
    pub delivery_id: u64,
    pub webhook_id: String,
    pub url: String,
    pub event_id: String,
    pub event: EventName,
    pub body: String,
    /// The webhook's signing secret, sealed: the sender opens it and signs `body`
    /// (the engine never holds the secret itself).
    pub signing_secret: SealedSecret,
    pub timestamp: Millis,
    pub attempt: u32,
}
