//! The service core: the engine, the clock mode and the API layer, with no IO. The
//! hyper server drives it from one owner task; tests and the simulation drive it in
//! memory. It tells the driver what to journal, so durability slots in around it.

use crate::api::{self, json_response, respond, Routed};
use bytes::Bytes;
use esim_engine::{ApiError, Command, DeliveryResult, Effect, Engine, ErrorCode, Event, Millis, Reply, Response};
use serde::{Deserialize, Serialize};

/// How service time moves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ClockMode {
    /// Service time follows the wall clock (possibly sped up): the driver passes it in.
    Wall,
    /// Service time moves only through `POST /sandbox/v1/clock/advance`.
    Virtual,
}

/// One record of the journal: replaying them in order through the engine rebuilds
/// the exact state.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum JournalEntry {
    /// A state-changing command at its service time.
    Command { at: Millis, command: Command },
    /// Time moved and timers fired.
    Tick { at: Millis },
}

impl JournalEntry {
    /// Applies the entry to an engine (replay: no rate limit, outputs dropped).
    pub fn replay(self, engine: &mut Engine) {
        match self {
            JournalEntry::Command { at, command } => {
                let _ = engine.replay(at, command);
            }
            JournalEntry::Tick { at } => engine.handle_timeout(at),
        }
        while engine.poll_effect().is_some() {}
        while engine.poll_event().is_some() {}
    }
}

/// What a request came to.
#[derive(Debug)]
pub enum Outcome {
    Respond(http::Response<Bytes>),
    /// The webhook test endpoint: answer once this delivery's outcome is known, with
    /// [`Service::delivery_outcome`]'s response.
    AwaitDelivery(u64),
}

pub struct Service {
    engine: Engine,
    admin_token: String,
    clock: ClockMode,
    /// The latest service time: a virtual clock's position (moved only by
    /// `clock/advance`), or the latest time a wall clock showed (never shown going back,
    /// even when the wall clock does).
    clock_now: Millis,
    /// Entries to journal, drained by the driver after every call.
    journal: Vec<JournalEntry>,
    openapi: Bytes,
    /// Draw QR codes in provisioning responses (off only in the simulation).
    render_qr: bool,
}

impl Service {
    pub fn new(engine: Engine, admin_token: String, clock: ClockMode) -> Service {
        let clock_now = engine.now();
        Service {
            engine,
            admin_token,
            clock,
            clock_now,
            journal: Vec::new(),
            openapi: Bytes::from(crate::openapi::document()),
            render_qr: true,
        }
    }

    /// The simulation renders millions of responses and never looks at QR pictures:
    /// it turns them off (the field then holds an empty PNG data URL).
    pub fn set_render_qr(&mut self, render: bool) {
        self.render_qr = render;
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    pub fn engine_mut(&mut self) -> &mut Engine {
        &mut self.engine
    }

    /// Continues from another engine state (the durable one after a failed append).
    pub fn replace_engine(&mut self, engine: Engine) {
        self.clock_now = self.clock_now.max(engine.now());
        self.engine = engine;
        self.journal.clear();
    }

    /// Applies a command as a request would (journaled), e.g. the demo account.
    pub fn apply_command(&mut self, now: Millis, command: Command) -> Response {
        self.apply(now, command)
    }

    pub fn clock(&self) -> ClockMode {
        self.clock
    }

    /// Service time of a request: the wall time given, or the virtual clock.
    pub fn now(&self, wall_now: Millis) -> Millis {
        match self.clock {
            ClockMode::Wall => wall_now.max(self.clock_now).max(self.engine.now()),
            ClockMode::Virtual => self.clock_now,
        }
    }

    /// Journal entries produced since the last drain (the driver makes them durable
    /// before it sends the responses of this call).
    pub fn drain_journal(&mut self) -> Vec<JournalEntry> {
        std::mem::take(&mut self.journal)
    }

    /// Effects (webhook deliveries) to carry out.
    pub fn poll_effect(&mut self) -> Option<Effect> {
        self.engine.poll_effect()
    }

    pub fn poll_event(&mut self) -> Option<Event> {
        self.engine.poll_event()
    }

    /// Fires due timers at `now`, journaling a tick when any fired.
    fn advance(&mut self, now: Millis) {
        if self.engine.poll_timeout().is_some_and(|deadline| deadline <= now) {
            self.engine.handle_timeout(now);
            self.journal.push(JournalEntry::Tick { at: now });
        }
    }

    /// The timer driver of a wall clock: fire what is due at `wall_now`.
    pub fn tick(&mut self, wall_now: Millis) {
        if self.clock == ClockMode::Wall {
            let now = self.now(wall_now);
            self.advance(now);
        }
    }

    /// Next deadline in service time (a wall-clock driver sleeps until then).
    pub fn poll_timeout(&self) -> Option<Millis> {
        self.engine.poll_timeout()
    }

    fn apply(&mut self, now: Millis, command: Command) -> Response {
        self.advance(now);
        if let Command::Reseller(request) = &command {
            if request.op.is_read() {
                // Nothing to journal: one pass authenticates, rate-limits and reads.
                return self.engine.handle(now, command);
            }
            // Refused by the rate limit: nothing changes, nothing is journaled.
            self.engine.admit(now, request)?;
        }
        self.journal.push(JournalEntry::Command { at: now, command: command.clone() });
        self.engine.replay(now, command)
    }

    /// Handles one request.
    pub fn handle(&mut self, wall_now: Millis, request: &http::Request<Bytes>) -> Outcome {
        let now = self.now(wall_now);
        self.clock_now = now;
        let response = match api::route(request, &self.admin_token) {
            Routed::Reject(error) => api::error_response(error),
            Routed::ResellerReject { api_key, error } => {
                self.advance(now);
                match self.engine.authenticate(now, &api_key) {
                    Err(refused) => respond(&Err(refused)),
                    Ok(()) => api::error_response(error),
                }
            }
            Routed::OpenApi => json_response(200, self.openapi.clone()),
            Routed::ClockRead => self.clock_body(now),
            Routed::StateDigest => {
                self.advance(now);
                let body = serde_json::json!({ "state_digest": self.engine.state_digest(), "now": now.to_rfc3339() });
                json_response(200, serde_json::to_vec(&body).expect("json"))
            }
            Routed::ClockAdvance { ms } => {
                if self.clock != ClockMode::Virtual {
                    api::error_response(ApiError::new(
                        ErrorCode::ClockNotVirtual,
                        "the service runs on the wall clock; start it with --clock virtual",
                    ))
                } else {
                    self.clock_now = self.clock_now.plus_ms(ms);
                    let now = self.clock_now;
                    // Always journaled: the virtual clock's position must survive a restart.
                    self.engine.handle_timeout(now);
                    self.journal.push(JournalEntry::Tick { at: now });
                    self.clock_body(now)
                }
            }
            Routed::Report { account_id, format } => {
                self.advance(now);
                match self.engine.conservation_report(account_id.as_deref()) {
                    Some(report) => {
                        let body = report.render(&format).expect("format checked by the router");
                        let content_type = match format.as_str() {
                            "csv" => "text/csv; charset=utf-8",
                            "md" => "text/markdown; charset=utf-8",
                            _ => "application/json",
                        };
                        let mut response = json_response(200, body);
                        response
                            .headers_mut()
                            .insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static(content_type));
                        response
                    }
                    None => api::error_response(ApiError::new(ErrorCode::AccountNotFound, "no such account")),
                }
            }
            Routed::Engine(command) => match self.apply(now, command) {
                Ok(Reply::WebhookTestDispatched { delivery_id }) => return Outcome::AwaitDelivery(delivery_id),
                Ok(mut reply) => {
                    reply.set_render_qr(self.render_qr);
                    respond(&Ok(reply))
                }
                other => respond(&other),
            },
        };
        Outcome::Respond(response)
    }

    /// The clock's answer at service time `now` (a wall clock moves between inputs).
    fn clock_body(&self, now: Millis) -> http::Response<Bytes> {
        json_response(
            200,
            serde_json::to_vec(&serde_json::json!({ "now": now.to_rfc3339(), "mode": self.clock })).expect("json"),
        )
    }

    /// Feeds back what became of a delivery; for a webhook test, the response is the
    /// caller's answer.
    pub fn delivery_outcome(
        &mut self,
        wall_now: Millis,
        delivery_id: u64,
        result: DeliveryResult,
    ) -> http::Response<Bytes> {
        let now = self.now(wall_now);
        respond(&self.apply(now, Command::DeliveryOutcome { delivery_id, result }))
    }
}
