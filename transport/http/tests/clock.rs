//! The sandbox clock read follows service time on a wall clock too (it moves between
//! inputs, not only when a command arrives).

use bytes::Bytes;
use esim_engine::{Engine, EngineConfig, Millis};
use esim_http::{ClockMode, Outcome, Service};

fn clock_now(service: &mut Service, wall_now: Millis) -> String {
    let request =
        http::Request::get("/sandbox/v1/clock").header("authorization", "Bearer t").body(Bytes::new()).unwrap();
    let Outcome::Respond(response) = service.handle(wall_now, &request) else { panic!() };
    assert_eq!(response.status(), 200);
    let body: serde_json::Value = serde_json::from_slice(response.body()).unwrap();
    assert_eq!(body["mode"], "wall");
    body["now"].as_str().unwrap().to_string()
}

#[test]
fn a_wall_clock_read_moves_with_the_wall_clock() {
    let start = Millis::VIRTUAL_EPOCH;
    let mut service = Service::new(
        Engine::new(EngineConfig::default(), start),
        "t".into(),
        ClockMode::Wall,
        esim_http::secrets::Secrets::seeded(1),
    );
    assert_eq!(clock_now(&mut service, start), "2026-01-01T00:00:00.000Z");
    assert_eq!(clock_now(&mut service, start.plus_ms(120_000)), "2026-01-01T00:02:00.000Z");
    // Never backwards, even if the wall clock is.
    assert_eq!(clock_now(&mut service, start.plus_ms(60_000)), "2026-01-01T00:02:00.000Z");
}
