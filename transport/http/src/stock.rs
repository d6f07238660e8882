//! One shard's side of the global eSIM inventory, kept by its owner task (issue 17;
//! decisions 185 to 189). The pool itself, durable, is the store's
//! ([`esim_store::pool`]; both are re-exported as [`crate::pool`]).
//!
//! [`ShardStock`]: when the shard's counter falls to the low-water mark it takes the
//! next block of [`BLOCK_ESIMS`] (or what is left) on the blocking pool (the owner task
//! never waits for the pool's fsync), and a provisioning that finds the counter at 0
//! while the pool still holds eSIMs waits (bounded: [`STOCK_WAIT_MAX`],
//! [`STOCK_WAITERS_MAX`]) for that block instead of answering `NO_ESIMS_AVAILABLE`.

use esim_store::pool::{Grant, InventoryPool};
use std::collections::VecDeque;
use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// eSIMs a shard takes from the pool at once (the last block is what is left): large
/// enough that refills are rare (one fsync of the pool per thousand provisionings),
/// small enough that a shard holds little of a pool running low.
pub const BLOCK_ESIMS: u64 = 1_000;
/// Longest a provisioning waits for its shard's next block while the pool still holds
/// eSIMs; past it, 503 `SERVICE_UNAVAILABLE` (retry), never a false `NO_ESIMS_AVAILABLE`.
pub const STOCK_WAIT_MAX: Duration = Duration::from_secs(5);
/// Provisionings waiting for a block on one shard at most; beyond, a provisioning is
/// applied at once (and answered from the shard's counter).
pub const STOCK_WAITERS_MAX: usize = 1_024;
/// After a take failed (the pool cannot be written), the next is tried no sooner than
/// this: a full disk costs one attempt a second, not a busy loop.
pub const TAKE_RETRY_INTERVAL: Duration = Duration::from_secs(1);

/// The shard refills when its counter falls to a quarter of a block: the next block
/// then usually arrives before the counter reaches 0, so provisioning rarely waits.
pub fn low_water_esims(block_esims: u64) -> u64 {
    block_esims / 4
}

/// The pool as a server shares it: the pool and the block size of this start.
#[derive(Clone)]
pub struct PoolSettings {
    pub pool: Arc<dyn InventoryPool>,
    pub block_esims: u64,
}

/// What the owner task of one shard must do about its stock, as [`ShardStock`] decides.
#[derive(Debug, PartialEq, Eq)]
pub enum StockStep {
    /// Nothing.
    None,
    /// The pool was set anew (or a block of a newer generation came): journal
    /// `SetInventory { available: 0 }` first, the shard's old block is superseded.
    Zero,
}

/// One shard's side of the pool, kept by its owner task: the refill in flight, the
/// provisionings waiting for it (`T`, the owner's parked request) and the pool
/// generation the shard's counter belongs to.
pub struct ShardStock<T> {
    settings: PoolSettings,
    /// The pool generation the shard's counter belongs to.
    generation: u64,
    refill: Option<tokio::task::JoinHandle<io::Result<Grant>>>,
    waiting: VecDeque<(Instant, T)>,
    /// A block taken from the pool whose grant could not be journaled yet (changes were
    /// refused): granted at the next chance rather than lost.
    held_esims: u64,
    /// No take before this, after one failed.
    retry_at: Option<Instant>,
}

impl<T> ShardStock<T> {
    pub fn new(settings: PoolSettings) -> ShardStock<T> {
        let generation = settings.pool.generation();
        ShardStock { settings, generation, refill: None, waiting: VecDeque::new(), held_esims: 0, retry_at: None }
    }

    /// The pool was set since this shard last looked: its counter must go to 0 (the
    /// caller journals it) before anything else is applied.
    pub fn sync(&mut self) -> StockStep {
        let now = self.settings.pool.generation();
        if now == self.generation {
            return StockStep::None;
        }
        self.generation = now;
        // A block held for journaling belonged to the old pool too.
        self.held_esims = 0;
        StockStep::Zero
    }

    /// Whether a provisioning that finds the shard's counter at `counter` waits for the
    /// next block: the counter is 0 and the pool (or a block on its way) holds eSIMs.
    pub fn should_wait(&self, counter: u64) -> bool {
        counter == 0
            && self.waiting.len() < STOCK_WAITERS_MAX
            && (self.refill.is_some() || self.settings.pool.available() > 0)
    }

    /// Parks a provisioning until the next block (or [`STOCK_WAIT_MAX`]).
    pub fn park(&mut self, item: T) {
        self.waiting.push_back((Instant::now() + STOCK_WAIT_MAX, item));
    }

    /// Every parked provisioning, oldest first (to be applied again).
    pub fn unpark_all(&mut self) -> Vec<T> {
        self.waiting.drain(..).map(|(_, item)| item).collect()
    }

    /// The parked provisionings whose wait is over.
    pub fn expired(&mut self) -> Vec<T> {
        let now = Instant::now();
        let mut out = Vec::new();
        while self.waiting.front().is_some_and(|(deadline, _)| *deadline <= now) {
            out.extend(self.waiting.pop_front().map(|(_, item)| item));
        }
        out
    }

    /// When the oldest parked provisioning stops waiting.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.waiting.front().map(|(deadline, _)| *deadline)
    }

    pub fn has_waiting(&self) -> bool {
        !self.waiting.is_empty()
    }

    /// Starts taking the next block on the blocking pool when the counter is at the
    /// low-water mark, none is on its way and the pool holds eSIMs (`only_if_waiting`:
    /// while stopping, only for provisionings that wait).
    pub fn refill_if_low(&mut self, counter: u64, only_if_waiting: bool) {
        if self.refill.is_some() || self.settings.pool.available() == 0 || (only_if_waiting && self.waiting.is_empty())
        {
            return;
        }
        if counter > low_water_esims(self.settings.block_esims)
            || self.retry_at.is_some_and(|retry_at| Instant::now() < retry_at)
        {
            return;
        }
        let pool = self.settings.pool.clone();
        let block = self.settings.block_esims;
        self.refill = Some(tokio::task::spawn_blocking(move || pool.take(block)));
    }

    pub fn refilling(&self) -> bool {
        self.refill.is_some()
    }

    /// Waits for the block on its way (pending forever when none is: for a `select!`).
    pub async fn refilled(&mut self) -> io::Result<Grant> {
        match self.refill.as_mut() {
            Some(task) => {
                let taken = task.await.unwrap_or_else(|e| Err(io::Error::other(e)));
                self.refill = None;
                self.retry_at = taken.is_err().then(|| Instant::now() + TAKE_RETRY_INTERVAL);
                taken
            }
            None => std::future::pending().await,
        }
    }

    /// What a taken block comes to: the steps before its grant, and the eSIMs to grant
    /// (held ones included; 0 when it was superseded by a newer `set`).
    pub fn accept(&mut self, grant: Grant) -> (StockStep, u64) {
        if grant.generation < self.generation {
            // Taken from the pool before the operator set it anew: superseded.
            return (StockStep::None, std::mem::take(&mut self.held_esims));
        }
        let step = if grant.generation > self.generation {
            self.generation = grant.generation;
            self.held_esims = 0;
            StockStep::Zero
        } else {
            StockStep::None
        };
        (step, std::mem::take(&mut self.held_esims) + grant.count)
    }

    /// A grant of `count` that could not be journaled now: kept for the next chance.
    pub fn hold(&mut self, count: u64) {
        self.held_esims = self.held_esims.saturating_add(count);
    }

    /// eSIMs taken from the pool and not journaled yet.
    pub fn held(&self) -> u64 {
        self.held_esims
    }

    /// The held eSIMs, to journal now (the caller holds them again if it cannot).
    pub fn take_held(&mut self) -> u64 {
        std::mem::take(&mut self.held_esims)
    }

    pub fn pool(&self) -> &Arc<dyn InventoryPool> {
        &self.settings.pool
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use esim_store::pool::FilePool;
    use std::path::Path;

    fn dir() -> tempfile::TempDir {
        tempfile::tempdir().unwrap()
    }

    fn settings(dir: &Path, available: u64, block_esims: u64) -> PoolSettings {
        PoolSettings { pool: Arc::new(FilePool::open(dir, available).unwrap()), block_esims }
    }

    #[tokio::test]
    async fn a_shard_refills_at_the_low_water_mark_and_provisioning_waits_only_while_the_pool_holds_some() {
        let dir = dir();
        let mut stock: ShardStock<u32> = ShardStock::new(settings(dir.path(), 10, 4));
        assert_eq!(low_water_esims(4), 1);
        stock.refill_if_low(2, false);
        assert!(!stock.refilling(), "above the low-water mark");
        assert!(stock.should_wait(0), "the pool holds eSIMs");
        assert!(!stock.should_wait(1));
        stock.refill_if_low(1, false);
        assert!(stock.refilling());
        let grant = stock.refilled().await.unwrap();
        assert_eq!(stock.accept(grant), (StockStep::None, 4));
        stock.pool().take(100).unwrap();
        assert!(!stock.should_wait(0), "pool and block empty: NO_ESIMS_AVAILABLE at once");
        stock.refill_if_low(0, false);
        assert!(!stock.refilling());
    }

    #[tokio::test]
    async fn a_set_supersedes_older_blocks_and_zeroes_the_shard_once() {
        let dir = dir();
        let mut stock: ShardStock<u32> = ShardStock::new(settings(dir.path(), 10, 3));
        stock.refill_if_low(0, false);
        let old = stock.refilled().await.unwrap();
        stock.pool().set(5).unwrap();
        // The block taken before the set is superseded; the shard zeroes once.
        assert_eq!(stock.sync(), StockStep::Zero);
        assert_eq!(stock.sync(), StockStep::None);
        assert_eq!(stock.accept(old), (StockStep::None, 0));
        // A block of a newer generation than the shard has seen zeroes it first.
        let newer = stock.pool().take(2).unwrap();
        stock.pool().set(9).unwrap();
        let newest = stock.pool().take(3).unwrap();
        assert_eq!(stock.accept(newer), (StockStep::None, 2));
        assert_eq!(stock.accept(newest), (StockStep::Zero, 3));
        assert_eq!(stock.sync(), StockStep::None);
        // A grant that could not be journaled is granted with the next block.
        stock.hold(2);
        assert_eq!(stock.held(), 2);
        let next = stock.pool().take(1).unwrap();
        assert_eq!(stock.accept(next), (StockStep::None, 3));
    }

    /// A pool that cannot be written: every take fails.
    struct Broken;

    impl InventoryPool for Broken {
        fn take(&self, _count: u64) -> io::Result<Grant> {
            Err(io::Error::other("disk full"))
        }
        fn set(&self, _available: u64) -> io::Result<u64> {
            Err(io::Error::other("disk full"))
        }
        fn available(&self) -> u64 {
            5
        }
        fn generation(&self) -> u64 {
            0
        }
    }

    #[tokio::test]
    async fn a_failed_take_is_retried_no_sooner_than_the_interval() {
        let mut stock: ShardStock<u32> = ShardStock::new(PoolSettings { pool: Arc::new(Broken), block_esims: 3 });
        stock.refill_if_low(0, false);
        assert!(stock.refilled().await.is_err());
        stock.refill_if_low(0, false);
        assert!(!stock.refilling(), "no busy loop of failing takes");
    }

    #[tokio::test]
    async fn waiters_leave_in_order_and_at_their_deadline() {
        let dir = dir();
        let mut stock: ShardStock<u32> = ShardStock::new(settings(dir.path(), 10, 3));
        stock.park(1);
        stock.park(2);
        assert!(stock.expired().is_empty());
        assert!(stock.next_deadline().is_some_and(|d| d > Instant::now()));
        assert_eq!(stock.unpark_all(), vec![1, 2]);
        assert!(!stock.has_waiting());
    }
}
