//! A crash or restart of the service process: held deliveries die with their
//! connections, and a crash rebuilds the engine from the journal's bytes alone.

use super::compare::compare;
use super::log::Fact;
use super::World;
use esim_api::ClockMode;
use esim_engine::Millis;
use esim_store::journal::{self, SegmentBuffer, SegmentHeader};

impl World {
    /// The service process stops and starts again (see [`Op::Restart`](crate::op::Op::Restart)).
    /// Connections die with it: deliveries the receivers were holding are never answered,
    /// and the restarted service hands them out again (the next `drain` answers them).
    pub(super) fn restart(&mut self, rebuild: bool) {
        self.commit_journal();
        let rebuilt = rebuild.then(|| {
            let header = SegmentHeader {
                version: journal::FORMAT_VERSION,
                config: self.config.clone(),
                clock: ClockMode::Virtual,
                start: Millis::VIRTUAL_EPOCH,
                first_index: 0,
            };
            let mut segment = SegmentBuffer::new(&header);
            segment.append(&self.journal);
            match journal::replay_segment(segment.bytes()) {
                #[cfg_attr(not(feature = "test-switches"), allow(unused_mut))]
                Ok((mut engine, _, _)) => {
                    #[cfg(feature = "test-switches")]
                    engine.inject_bug_for_test(self.bug);
                    let compared = compare(self.service.engine(), &engine);
                    self.service.replace_engine(engine);
                    Ok(compared)
                }
                Err(error) => Err(error.to_string()),
            }
        });
        self.log.facts.push(Fact::Restarted { rebuild: rebuilt });
        self.held.clear();
        self.service.restart();
    }
}
