//! The checks a start makes before its first write (decision 237): the settings among
//! themselves, and a recovered state against this host's wall clock. (The key file's
//! checks are in [`super::key_file`].)

use super::key_file::KeyFile;
use super::ServeOptions;
use crate::store_pg;
use crate::ClockMode;
use esim_engine::{Engine, Millis};

/// How far a recovered state's service time may be ahead of the wall clock at a start
/// on it (a host clock stepped back a little, NTP) before the start is refused.
pub const TIME_AHEAD_TOLERANCE_MS: i64 = 5 * 60 * 1000;

/// The settings that cannot go together, refused before anything is read or made.
pub fn check_settings(options: &ServeOptions) -> Result<(), String> {
    if options.clock == ClockMode::Virtual && options.speed.is_some() {
        return Err("--speed applies to the wall clock only: with --clock virtual, time moves only through \
                    POST /sandbox/v1/clock/advance"
            .into());
    }
    let nodes = options.own_shards.is_some() || options.advertise_url.is_some() || options.standby_shards.is_some();
    if options.store.is_none() && nodes {
        return Err("--own-shards, --standby-shards and --advertise-url need --store: shards of a data \
                    dir are all served by the process that locks it"
            .into());
    }
    Ok(())
}

/// With `--take-over`, the store's state (shard `shard`, else the one shard) is read
/// and checked before its lease is taken: taking a live owner's lease fences it for
/// good, so a process that could not serve the state must not take it. (Without the
/// flag only a lease that has run out is taken; a failed check gives it back at once.)
pub fn check_before_taking(
    options: &ServeOptions,
    keys: &KeyFile,
    url: &str,
    shard: Option<u32>,
) -> Result<(), String> {
    if !options.take_over {
        return Ok(());
    }
    let (what, shard) = match shard {
        Some(shard) => (format!("shard {shard}"), shard as i32),
        None => ("the store".to_string(), store_pg::SHARD),
    };
    let (recovery, _) = store_pg::read_only_shard(url, shard, None).map_err(|e| format!("{what}: {e}"))?;
    if let Some(engine) = &recovery.engine {
        let refused = |why: String| format!("--take-over refused: this process cannot serve {what}: {why}");
        keys.check(engine, &what).map_err(refused)?;
        check_time_ahead(options, engine, &what).map_err(refused)?;
    }
    Ok(())
}

/// The recovered state `what` ("this data dir", "shard 2") checked against the key file
/// and this host's wall clock.
pub fn check_recovered(options: &ServeOptions, keys: &KeyFile, engine: &Engine, what: &str) -> Result<(), String> {
    keys.check(engine, what)?;
    check_time_ahead(options, engine, what)
}

/// On the wall clock at speed 1, a state whose last service time is ahead of the wall
/// clock by more than [`TIME_AHEAD_TOLERANCE_MS`] (made on the virtual clock and
/// advanced, or at a higher speed) is refused: served, it would run that far ahead for
/// good. `--allow-time-ahead` starts it anyway; `--clock virtual` keeps its own time.
pub fn check_time_ahead(options: &ServeOptions, engine: &Engine, what: &str) -> Result<(), String> {
    time_ahead(options, engine.now(), Millis(crate::server::real_now_ms()), what)
}

/// [`check_time_ahead`] of a state at service time `now` against the wall clock `wall`.
pub fn time_ahead(options: &ServeOptions, now: Millis, wall: Millis, what: &str) -> Result<(), String> {
    if options.clock != ClockMode::Wall || options.speed.unwrap_or(1) != 1 || options.allow_time_ahead {
        return Ok(());
    }
    let ahead_ms = now.0 - wall.0;
    if ahead_ms <= TIME_AHEAD_TOLERANCE_MS {
        return Ok(());
    }
    Err(format!(
        "{what}'s last service time {now} is {} ahead of the wall clock ({wall}), more than the {} min allowed: on the \
         wall clock it would stay that far ahead for good. Serve it on its own clock (--clock virtual), or start it \
         anyway with --allow-time-ahead (ESIM_ALLOW_TIME_AHEAD=1)",
        shown_duration(ahead_ms),
        TIME_AHEAD_TOLERANCE_MS / 60_000
    ))
}

/// A duration for people: minutes, hours or days.
pub fn shown_duration(ms: i64) -> String {
    let minutes = ms / 60_000;
    match minutes {
        0..=119 => format!("{minutes} min"),
        120..=2879 => format!("{} h", minutes / 60),
        _ => format!("{} days {} h", minutes / 1_440, minutes % 1_440 / 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WALL: Millis = Millis(1_800_000_000_000);

    fn wall_clock() -> ServeOptions {
        ServeOptions::default()
    }

    #[test]
    fn a_state_a_little_ahead_of_the_wall_clock_starts() {
        let options = wall_clock();
        assert!(time_ahead(&options, WALL, WALL, "this data dir").is_ok());
        let edge = Millis(WALL.0 + TIME_AHEAD_TOLERANCE_MS);
        assert!(time_ahead(&options, edge, WALL, "this data dir").is_ok(), "the tolerance itself is allowed");
        let behind = Millis(WALL.0 - 86_400_000);
        assert!(time_ahead(&options, behind, WALL, "this data dir").is_ok(), "behind is caught up, not refused");
    }

    #[test]
    fn a_state_far_ahead_is_refused_naming_both_times_and_the_ways_out() {
        let ahead = Millis(WALL.0 + TIME_AHEAD_TOLERANCE_MS + 1);
        let error = time_ahead(&wall_clock(), ahead, WALL, "shard 2").unwrap_err();
        assert!(error.starts_with("shard 2's last service time"), "{error}");
        assert!(error.contains(&ahead.to_string()) && error.contains(&WALL.to_string()), "{error}");
        assert!(error.contains("5 min ahead") && error.contains("--allow-time-ahead"), "{error}");
        assert!(error.contains("--clock virtual"), "{error}");
    }

    #[test]
    fn the_time_ahead_check_yields_to_the_flag_the_virtual_clock_and_a_speed() {
        let ahead = Millis(WALL.0 + 30 * 86_400_000);
        let allowed = ServeOptions { allow_time_ahead: true, ..wall_clock() };
        let own_clock = ServeOptions { clock: ClockMode::Virtual, ..wall_clock() };
        let faster = ServeOptions { speed: Some(60), ..wall_clock() };
        let speed_one = ServeOptions { speed: Some(1), ..wall_clock() };
        for options in [&allowed, &own_clock, &faster] {
            assert!(time_ahead(options, ahead, WALL, "this data dir").is_ok(), "{options:?}");
        }
        assert!(time_ahead(&speed_one, ahead, WALL, "this data dir").is_err(), "speed 1 is the wall clock");
    }

    #[test]
    fn durations_are_shown_in_minutes_hours_or_days() {
        assert_eq!(shown_duration(5 * 60_000 + 1), "5 min");
        assert_eq!(shown_duration(119 * 60_000), "119 min");
        assert_eq!(shown_duration(120 * 60_000), "2 h");
        assert_eq!(shown_duration(47 * 3_600_000 + 59 * 60_000), "47 h");
        assert_eq!(shown_duration(3 * 86_400_000 + 5 * 3_600_000), "3 days 5 h");
    }

    #[test]
    fn settings_that_cannot_go_together_are_refused() {
        let virtual_speed = ServeOptions { clock: ClockMode::Virtual, speed: Some(10), ..wall_clock() };
        assert!(check_settings(&virtual_speed).unwrap_err().contains("--speed applies to the wall clock only"));
        for options in [
            ServeOptions { own_shards: Some(vec![0]), ..wall_clock() },
            ServeOptions { standby_shards: Some(vec![1]), ..wall_clock() },
            ServeOptions { advertise_url: Some("http://10.0.0.1:8080".into()), ..wall_clock() },
        ] {
            assert!(check_settings(&options).unwrap_err().contains("need --store"), "{options:?}");
            let with_store = ServeOptions { store: Some("postgres://localhost/esim".into()), ..options };
            assert!(check_settings(&with_store).is_ok());
        }
        assert!(check_settings(&wall_clock()).is_ok());
    }
}
