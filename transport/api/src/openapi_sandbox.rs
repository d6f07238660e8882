//! What the sandbox API's OpenAPI document says of each operation
//! (`openapi_operator.rs` builds the document from these).

use crate::bodies::*;
use crate::openapi::Operation;
use crate::routes::Endpoint;
use esim_engine::ErrorCode;
use serde_json::{json, Value};

pub(crate) const DESCRIPTION: &str = "The sandbox: the simulated world around the service, for tests and demos. Move the virtual clock (a service started with --clock virtual), install a profile on a device, use data in a country, and make the simulated upstream fail. Every call but this document needs `Authorization: Bearer <admin token>`; errors carry the Error body.";

pub(crate) fn tags() -> Value {
    json!([
        { "name": "Clock", "description": "The service clock" },
        { "name": "Devices", "description": "What a customer's device does with an eSIM" },
        { "name": "Faults", "description": "Failures of the simulated upstream" },
        { "name": "Meta", "description": "This document" },
    ])
}

const NO_ESIM: (ErrorCode, &str) = (ErrorCode::EsimNotFound, "no eSIM of any account has that ICCID");

/// The query of `GET /sandbox/v1/pending` (schema only: the API reads it).
#[derive(schemars::JsonSchema)]
#[allow(dead_code)]
struct PendingQuery {
    /// Timers to list; values above 100 are clamped to 100
    #[schemars(range(min = 1, max = 100), extend("default" = 50))]
    limit: u64,
}

/// The documented operation of a sandbox endpoint; `None` for another endpoint.
pub(crate) fn operation(endpoint: Endpoint) -> Option<Operation> {
    use Endpoint as E;
    use ErrorCode::*;
    Some(match endpoint {
        E::Clock => Operation::new("getClock", "Clock", "Read the service clock").ok(200, "ServiceClock", "The service time"),
        E::AdvanceClock => Operation::new("advanceClock", "Clock", "Move the virtual clock forward")
            .describe("Everything due in between happens (settlements, retries, expiries), in order. Only on the virtual clock.")
            .ok(200, "ServiceClock", "The service time after the move")
            .body::<ClockAdvanceRequest>(true)
            .errors(&[
                (ValidationError, "seconds missing, not a number, 0 or less, or more than a leap year"),
                (ClockNotVirtual, "the service runs on the wall clock"),
            ]),
        E::Install => Operation::new("installEsim", "Devices", "Install the profile on a device")
            .describe("The first install activates the eSIM (esim.activated); a later one changes nothing.")
            .ok(200, "Installed", "The eSIM as the network now reports it")
            .errors(&[NO_ESIM, (EsimAlreadyTerminated, "the eSIM is terminated")]),
        E::Usage => Operation::new("useData", "Devices", "Use data")
            .describe("A data session of an installed eSIM in a country, charged to its wallet (or its group's) at the network's rate, cut off where the credit runs out.")
            .ok(200, "UsageResult", "What was used and charged")
            .body::<UsageRequest>(true)
            .errors(&[
                (ValidationError, "mb not above 0 or above the session maximum, country not an ISO2 code of the rates table, or operator not serving it"),
                NO_ESIM,
            ]),
        E::SetFaults => Operation::new("setFaults", "Faults", "Make the simulated upstream fail")
            .describe("Absent fields keep their value.")
            .ok(200, "FaultsSet", "The faults as they now are")
            .body::<FaultsRequest>(true),
        E::Pending => Operation::new("listPending", "Clock", "List what is still to fall due")
            .describe("The timers the service waits for, soonest first: usage reports after the reporting pause, returns, card charges, webhook retries. A read: nothing changes.")
            .ok(200, "PendingTimers", "The pending timers")
            .query::<PendingQuery>()
            .errors(&[(ValidationError, "limit is not a whole number of at least 1")]),
        E::SandboxOpenApi => Operation::document("getSandboxOpenApiDocument"),
        _ => return None,
    })
}
