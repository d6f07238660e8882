//! Two engines compared by their whole state: the bytes their state digests would hash,
//! compared as they are written, without hashing them. The crash, takeover and standby
//! checks compare several whole states per seed, and the digests are needed only to
//! report a difference.

use esim_engine::Engine;
use std::cell::RefCell;
use std::io;

/// Two engines' states: the same, or different with their state digests (first, second).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Compared {
    Same,
    Differ(String, String),
}

thread_local! {
    /// The first engine's state, kept between comparisons (a state is tens of KB).
    static FIRST: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Compares the states of `first` and `second`: the same serialization
/// [`Engine::state_digest`] hashes, so `Same` exactly when their digests are equal.
pub fn compare(first: &Engine, second: &Engine) -> Compared {
    let same = FIRST.with(|buffer| {
        let mut buffer = buffer.borrow_mut();
        buffer.clear();
        serde_json::to_writer(&mut *buffer, first).expect("state serializes");
        let mut against = Against { expected: &buffer, at: 0, equal: true };
        serde_json::to_writer(&mut against, second).expect("state serializes");
        against.equal && against.at == buffer.len()
    });
    match same {
        true => Compared::Same,
        false => Compared::Differ(first.state_digest(), second.state_digest()),
    }
}

/// A writer that checks what is written against the bytes expected.
struct Against<'a> {
    expected: &'a [u8],
    at: usize,
    equal: bool,
}

impl io::Write for Against<'_> {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        let end = self.at + bytes.len();
        self.equal = self.equal && self.expected.get(self.at..end) == Some(bytes);
        self.at = end;
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use esim_engine::{EngineConfig, Millis};

    #[test]
    fn the_same_state_compares_same_and_a_change_differs_with_the_digests() {
        let engine = Engine::new(EngineConfig::default(), Millis::VIRTUAL_EPOCH);
        let copy = engine.clone();
        assert_eq!(compare(&engine, &copy), Compared::Same);
        let mut later = engine.clone();
        later.handle_timeout(Millis::VIRTUAL_EPOCH.plus_ms(1000));
        assert_eq!(compare(&engine, &later), Compared::Differ(engine.state_digest(), later.state_digest()));
        assert_eq!(compare(&later, &engine), Compared::Differ(later.state_digest(), engine.state_digest()));
        assert_ne!(engine.state_digest(), later.state_digest());
    }
}
