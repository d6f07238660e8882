//! Group commit on the journal's own thread.
//!
//! The owner task applies requests and hands each applied batch here: its journal
//! entries, and what waits for them to be durable (answers, deliveries: a `G` this
//! module never looks into). The journal's thread appends everything handed over since
//! its last append in one write and one sync, puts those batches' groups on the durable
//! list, wakes the owner task to release them ([`Committer::take_durable`]), and starts
//! the next append at once: the disk never waits for the owner task to be scheduled,
//! and answers are sent from the runtime's worker (a wake-up from another thread costs
//! more for each of them than one for the owner task).
//!
//! A failed append stops the thread from taking batches; it reloads the durable state
//! and reports a [`Failure`] with the batches it was writing. The owner task takes the
//! batches queued behind them back ([`Committer::take_back`]), answers all of them again
//! from the durable state, and lets the thread go on.
//!
//! A journal that does not block (no disk) is written on the owner task itself, through
//! the same steps.

use crate::journal::{EncodedSnapshot, SnapshotEncoder};
use crate::server::JournalSink;
use crate::service::JournalEntry;
use esim_engine::Engine;
use std::collections::VecDeque;
use std::io;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use tokio::sync::{mpsc, oneshot, Notify};

/// One applied batch handed to the journal.
struct Handed<G> {
    entries: Vec<JournalEntry>,
    /// A snapshot of the engine at the end of these entries, to write once they are
    /// appended.
    snapshot: Option<EncodedSnapshot>,
    /// The owner task took the snapshot offer for this batch (its snapshot may have
    /// failed to encode): the thread may offer again after it.
    took_offer: bool,
    /// Requests waiting in `group` (back-pressure).
    requests: usize,
    group: G,
}

/// What the owner task and the journal's thread share.
struct Queue<G> {
    batches: VecDeque<Handed<G>>,
    /// An append failed: the thread takes no batch until the owner task has taken the
    /// queued ones back.
    failed: bool,
    /// A probe asked for while changes are refused, with where its result goes.
    probe: Option<oneshot::Sender<io::Result<()>>>,
    /// A snapshot is due: how to encode it, for the owner task to take.
    offer: Option<SnapshotEncoder>,
    /// Groups whose entries are durable, in order, for the owner task to release.
    durable: Vec<G>,
    stop: bool,
    /// The thread waits for work: a hand-over wakes it (otherwise it finds the batch
    /// when its append returns, and no wake-up is spent).
    sleeping: bool,
}

struct Shared<G> {
    queue: Mutex<Queue<G>>,
    wake: Condvar,
    /// Batches made durable or taken back (the owner task counts those it handed over).
    finished: AtomicU64,
    /// Requests handed over and not yet durable or taken back.
    waiting_requests: AtomicUsize,
    /// Wakes the owner task when groups were made durable (or an append failed).
    durable_or_failed: Notify,
}

impl<G> Shared<G> {
    fn lock(&self) -> MutexGuard<'_, Queue<G>> {
        self.queue.lock().expect("the journal's queue is never poisoned: a panic ends the process")
    }
}

/// A failed append, reported to the owner task.
pub struct Failure<G> {
    pub error: io::Error,
    /// Why no append can succeed again in this process, if so.
    pub wedged: Option<String>,
    /// The durable state to continue from.
    pub reloaded: Result<Engine, String>,
    /// Entries in the journal (the position the next handed entry takes).
    pub next_index: u64,
    /// The groups of the failed append, in order.
    pub groups: Vec<G>,
}

/// Where the journal runs.
enum Place<G> {
    /// On the owner task (the journal does not block).
    Inline { journal: Box<dyn JournalSink>, writer: Writer<G> },
    /// On the journal's own thread.
    Thread(Option<std::thread::JoinHandle<()>>),
}

/// The owner task's side of the group commit.
pub struct Committer<G: Send + 'static> {
    shared: Arc<Shared<G>>,
    place: Place<G>,
    /// Batches handed over so far.
    handed: u64,
    /// Entries handed over so far, counted from the start of the journal: the position
    /// a snapshot taken now covers.
    entries_handed: u64,
}

/// What appends: the journal, and what it does with the outcome.
struct Writer<G> {
    shared: Arc<Shared<G>>,
    failures: mpsc::UnboundedSender<Failure<G>>,
    /// A snapshot offer is out (offered and not yet come back with a batch).
    offer_out: bool,
}

impl<G: Send + 'static> Committer<G> {
    /// Starts committing to `journal`; `failures` gets each failed append.
    pub fn start(journal: Box<dyn JournalSink>, failures: mpsc::UnboundedSender<Failure<G>>) -> Committer<G> {
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue {
                batches: VecDeque::new(),
                failed: false,
                probe: None,
                offer: None,
                durable: Vec::new(),
                stop: false,
                sleeping: false,
            }),
            wake: Condvar::new(),
            finished: AtomicU64::new(0),
            waiting_requests: AtomicUsize::new(0),
            durable_or_failed: Notify::new(),
        });
        let entries_handed = journal.next_index();
        let mut writer = Writer { shared: shared.clone(), failures, offer_out: false };
        writer.offer_if_due(journal.as_ref());
        let place = if journal.blocks() {
            let thread = std::thread::Builder::new()
                .name("esim-journal".into())
                .spawn(move || writer.run(journal))
                .expect("the journal's thread starts");
            Place::Thread(Some(thread))
        } else {
            Place::Inline { journal, writer }
        };
        Committer { shared, place, handed: 0, entries_handed }
    }

    /// Whether every batch handed over is durable (or taken back): a group with no
    /// entries may then be released at once, after [`Committer::take_durable`].
    pub fn idle(&self) -> bool {
        self.shared.finished.load(Ordering::Acquire) == self.handed
    }

    /// Requests handed over and waiting for the disk.
    pub fn waiting_requests(&self) -> usize {
        self.shared.waiting_requests.load(Ordering::Acquire)
    }

    /// Resolves after groups were made durable or an append failed (possibly at once:
    /// a wake-up can be stale).
    pub fn durable_or_failed(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let shared = self.shared.clone();
        async move { shared.durable_or_failed.notified().await }
    }

    /// The groups made durable since the last call, in order: the owner task releases
    /// them.
    pub fn take_durable(&self, into: &mut Vec<G>) {
        let mut queue = self.shared.lock();
        if !queue.durable.is_empty() {
            into.append(&mut queue.durable);
        }
    }

    /// Hands a batch over. `engine` has applied exactly the entries handed over so far
    /// plus `entries`: when a snapshot is due, it is encoded from it now.
    pub fn hand(&mut self, engine: &Engine, entries: Vec<JournalEntry>, requests: usize, group: G) {
        self.entries_handed += entries.len() as u64;
        let offer = if entries.is_empty() { None } else { self.shared.lock().offer.take() };
        let took_offer = offer.is_some();
        let snapshot = offer.and_then(|encoder| match encoder.encode(engine, self.entries_handed) {
            Ok(snapshot) => Some(snapshot),
            Err(error) => {
                tracing::warn!(%error, "snapshot failed; the journal still holds everything");
                None
            }
        });
        self.handed += 1;
        self.shared.waiting_requests.fetch_add(requests, Ordering::AcqRel);
        let handed = Handed { entries, snapshot, took_offer, requests, group };
        let mut queue = self.shared.lock();
        match &mut self.place {
            // After a failure, batches wait in the queue to be taken back.
            Place::Inline { journal, writer } if !queue.failed => {
                drop(queue);
                writer.commit(journal.as_mut(), vec![handed]);
            }
            _ => {
                queue.batches.push_back(handed);
                let sleeping = queue.sleeping;
                drop(queue);
                if sleeping {
                    self.shared.wake.notify_one();
                }
            }
        }
    }

    /// After a [`Failure`]: the batches queued behind the failed ones, in order; the
    /// thread takes batches again. `failed_batches` is the number in the failure.
    pub fn take_back(&mut self, failure: &Failure<G>) -> Vec<G> {
        let mut queue = self.shared.lock();
        let taken: Vec<Handed<G>> = queue.batches.drain(..).collect();
        queue.failed = false;
        drop(queue);
        let requests: usize = taken.iter().map(|handed| handed.requests).sum();
        self.shared.waiting_requests.fetch_sub(requests, Ordering::AcqRel);
        self.shared.finished.fetch_add((failure.groups.len() + taken.len()) as u64, Ordering::AcqRel);
        self.entries_handed = failure.next_index;
        self.shared.wake.notify_one();
        taken.into_iter().map(|handed| handed.group).collect()
    }

    /// Whether appends would succeed again (a full disk has room), appending nothing.
    pub async fn probe(&mut self) -> io::Result<()> {
        let (reply, answer) = oneshot::channel();
        match &mut self.place {
            Place::Inline { journal, .. } => return journal.probe(),
            Place::Thread(_) => {
                self.shared.lock().probe = Some(reply);
                self.shared.wake.notify_one();
            }
        }
        answer.await.unwrap_or_else(|_| Err(io::Error::other("the journal's thread has ended")))
    }

    /// Lets the thread finish what was handed over, then ends it.
    pub async fn finish(&mut self) {
        self.shared.lock().stop = true;
        self.shared.wake.notify_one();
        if let Place::Thread(thread) = &mut self.place {
            if let Some(thread) = thread.take() {
                let _ = tokio::task::spawn_blocking(move || thread.join()).await;
            }
        }
    }
}

impl<G: Send + 'static> Drop for Committer<G> {
    fn drop(&mut self) {
        self.shared.lock().stop = true;
        self.shared.wake.notify_one();
    }
}

impl<G> Writer<G> {
    /// The journal's thread: appends whatever was handed over since the last append,
    /// until stopped with nothing left.
    fn run(mut self, mut journal: Box<dyn JournalSink>) {
        loop {
            let (batches, probe) = {
                let mut queue = self.shared.lock();
                loop {
                    let takes = !queue.failed && !queue.batches.is_empty();
                    if takes || queue.probe.is_some() || (queue.stop && queue.batches.is_empty()) {
                        break;
                    }
                    queue.sleeping = true;
                    queue = self.shared.wake.wait(queue).expect("the journal's queue is never poisoned");
                    queue.sleeping = false;
                }
                let mut batches = Vec::new();
                if !queue.failed {
                    // Everything queued, up to the first batch with a snapshot: the
                    // snapshot covers exactly the journal at the end of its batch.
                    while let Some(handed) = queue.batches.pop_front() {
                        let snapshot = handed.snapshot.is_some();
                        batches.push(handed);
                        if snapshot {
                            break;
                        }
                    }
                }
                if batches.is_empty() && queue.probe.is_none() && queue.stop {
                    return;
                }
                (batches, queue.probe.take())
            };
            if let Some(reply) = probe {
                let _ = reply.send(journal.probe());
            }
            if !batches.is_empty() {
                self.commit(journal.as_mut(), batches);
            }
        }
    }

    /// Appends the batches' entries in one append; releases them, or reports the failure.
    fn commit(&mut self, journal: &mut dyn JournalSink, mut batches: Vec<Handed<G>>) {
        let mut entries = std::mem::take(&mut batches[0].entries);
        for handed in &mut batches[1..] {
            entries.append(&mut handed.entries);
        }
        let snapshot = batches.last_mut().and_then(|handed| handed.snapshot.take());
        if batches.iter().any(|handed| handed.took_offer) {
            self.offer_out = false;
        }
        match journal.append(&entries) {
            Ok(()) => {
                if let Some(snapshot) = snapshot {
                    if let Err(error) = journal.write_snapshot(snapshot) {
                        tracing::warn!(%error, "snapshot failed; the journal still holds everything");
                    }
                }
                self.offer_if_due(journal);
                let requests: usize = batches.iter().map(|handed| handed.requests).sum();
                let count = batches.len() as u64;
                self.shared.lock().durable.extend(batches.into_iter().map(|handed| handed.group));
                self.shared.waiting_requests.fetch_sub(requests, Ordering::AcqRel);
                self.shared.finished.fetch_add(count, Ordering::AcqRel);
                self.shared.durable_or_failed.notify_one();
            }
            Err(error) => {
                // Take nothing more until the owner task has taken the queued batches
                // back; an offer out is void (its batch is answered again).
                let mut queue = self.shared.lock();
                queue.failed = true;
                queue.offer = None;
                drop(queue);
                self.offer_out = false;
                let requests: usize = batches.iter().map(|handed| handed.requests).sum();
                self.shared.waiting_requests.fetch_sub(requests, Ordering::AcqRel);
                let failure = Failure {
                    error,
                    wedged: journal.wedged(),
                    reloaded: journal.reload(),
                    next_index: journal.next_index(),
                    groups: batches.into_iter().map(|handed| handed.group).collect(),
                };
                // The owner task may have ended (shutdown); nothing was acknowledged.
                let _ = self.failures.send(failure);
                self.shared.durable_or_failed.notify_one();
            }
        }
    }

    /// Offers a snapshot to the owner task when one is due and none is out.
    fn offer_if_due(&mut self, journal: &dyn JournalSink) {
        if self.offer_out {
            return;
        }
        if let Some(encoder) = journal.snapshot_offer() {
            self.shared.lock().offer = Some(encoder);
            self.offer_out = true;
        }
    }
}
