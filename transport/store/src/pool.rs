//! The global eSIM inventory of a sharded service, as it is kept durably (issue 17;
//! decisions 185 to 189).
//!
//! With one shard the engine's own counter is the whole inventory and nothing here runs.
//! With N > 1 shards the inventory is ONE pool, a small durable record of the node
//! ([`InventoryPool`]; [`FilePool`] keeps it in `DIR/pool` for the file journals, and a
//! PostgreSQL store can keep it in a row: `UPDATE inventory_pool SET available =
//! available - $k WHERE available >= $k`, [`crate::store_pg::PgPool`]). A shard takes a
//! block (or what is left) and journals the grant as a command of its own
//! (`AdminOp::GrantInventory`), so a replay never reads the pool.
//!
//! Order: the pool is decremented durably first, then the grant is journaled. A crash
//! between the two loses at most that one block from the pool; an eSIM is never granted
//! twice (decision 186).
//!
//! The owner task's side (when to take the next block, the provisionings waiting for
//! it) is the shell's: `esim_http::stock`.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// The pool's file in a sharded data dir.
pub const POOL_FILE: &str = "pool";

/// What a take gave: `count` eSIMs (0 when the pool is empty) out of the pool as it was
/// at `generation` (each [`InventoryPool::set`] starts a new one).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grant {
    pub count: u64,
    pub generation: u64,
}

/// The node's global eSIM inventory. Every change is durable before it returns; takes
/// from any number of threads never hand out more than is available.
pub trait InventoryPool: Send + Sync {
    /// Takes up to `count` eSIMs (what is left when fewer are), durably.
    fn take(&self, count: u64) -> io::Result<Grant>;
    /// The operator's `PUT /admin/v1/inventory`: the pool holds `available` from now on,
    /// in a new generation (returned): blocks taken before it are superseded.
    fn set(&self, available: u64) -> io::Result<u64>;
    /// eSIMs in the pool now (lock-free: the owner tasks read it on every refill check).
    fn available(&self) -> u64;
    /// The generation of the last [`InventoryPool::set`] (lock-free).
    fn generation(&self) -> u64;
    /// Reads the pool again where other processes change it too (a PostgreSQL store's
    /// row, shared by its nodes); a file pool is this process's alone: nothing to do.
    fn refresh(&self) -> io::Result<()> {
        Ok(())
    }
}

/// The pool's record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct PoolRecord {
    available: u64,
    generation: u64,
}

/// [`InventoryPool`] in a file, `DIR/pool` (mode 0600): JSON `{"available":N,
/// "generation":G}`, replaced atomically (write a temporary file, fsync, rename, fsync
/// the directory), so a crash leaves the old record or the new one, never a torn one.
pub struct FilePool {
    path: PathBuf,
    /// Held across the durable write: takes are serialized, so none sees a stale count.
    record: Mutex<PoolRecord>,
    available: AtomicU64,
    generation: AtomicU64,
}

impl FilePool {
    /// The pool of the data dir `dir`: its record, or a new one holding `initial` when
    /// there is none (decision 187 says what a data dir made before the pool starts with).
    pub fn open(dir: &Path, initial: u64) -> io::Result<FilePool> {
        let path = dir.join(POOL_FILE);
        let record = match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice::<PoolRecord>(&bytes).map_err(|e| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "the inventory pool {} is damaged ({e}); it should hold {{\"available\":N,\"generation\":G}}",
                        path.display()
                    ),
                )
            })?,
            Err(error) if error.kind() == io::ErrorKind::NotFound => {
                let record = PoolRecord { available: initial, generation: 0 };
                write_atomically(&path, &record)?;
                record
            }
            Err(error) => return Err(error),
        };
        Ok(FilePool {
            path,
            available: AtomicU64::new(record.available),
            generation: AtomicU64::new(record.generation),
            record: Mutex::new(record),
        })
    }

    /// Writes `next` durably, then makes it the pool's record (unchanged on an error).
    fn store(&self, record: &mut PoolRecord, next: PoolRecord) -> io::Result<()> {
        write_atomically(&self.path, &next)?;
        *record = next;
        self.available.store(next.available, Ordering::Release);
        self.generation.store(next.generation, Ordering::Release);
        Ok(())
    }
}

impl InventoryPool for FilePool {
    fn take(&self, count: u64) -> io::Result<Grant> {
        let mut record = self.record.lock().unwrap_or_else(|p| p.into_inner());
        let granted = count.min(record.available);
        if granted > 0 {
            let next = PoolRecord { available: record.available - granted, ..*record };
            self.store(&mut record, next)?;
        }
        Ok(Grant { count: granted, generation: record.generation })
    }

    fn set(&self, available: u64) -> io::Result<u64> {
        let mut record = self.record.lock().unwrap_or_else(|p| p.into_inner());
        let next = PoolRecord { available, generation: record.generation + 1 };
        self.store(&mut record, next)?;
        Ok(next.generation)
    }

    fn available(&self) -> u64 {
        self.available.load(Ordering::Acquire)
    }

    fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }
}

/// Replaces `path` with `record`: temporary file (0600), fsync, rename, fsync the dir.
fn write_atomically(path: &Path, record: &PoolRecord) -> io::Result<()> {
    use std::io::Write;
    let temporary = path.with_extension("tmp");
    let mut file = esim_api::secrets::private_file(&temporary)?;
    file.write_all(&serde_json::to_vec(record).map_err(io::Error::other)?)?;
    file.write_all(b"\n")?;
    file.sync_all()?;
    drop(file);
    std::fs::rename(&temporary, path)?;
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    std::fs::File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn dir() -> tempfile::TempDir {
        tempfile::tempdir().unwrap()
    }

    #[test]
    fn takes_give_what_is_left_and_persist() {
        let dir = dir();
        let pool = FilePool::open(dir.path(), 10).unwrap();
        assert_eq!(pool.take(3).unwrap(), Grant { count: 3, generation: 0 });
        assert_eq!(pool.take(3).unwrap().count, 3);
        assert_eq!(pool.take(3).unwrap().count, 3);
        assert_eq!(pool.take(3).unwrap().count, 1, "the last block is what is left");
        assert_eq!(pool.take(3).unwrap().count, 0);
        assert_eq!(pool.available(), 0);
        drop(pool);
        // The record outlives the process; `initial` applies only to a new pool.
        let pool = FilePool::open(dir.path(), 99).unwrap();
        assert_eq!(pool.available(), 0);
        assert_eq!(pool.set(7).unwrap(), 1);
        drop(pool);
        let pool = FilePool::open(dir.path(), 99).unwrap();
        assert_eq!((pool.available(), pool.generation()), (7, 1));
        assert_eq!(pool.take(5).unwrap(), Grant { count: 5, generation: 1 });
    }

    #[test]
    fn the_file_is_private_and_replaced_whole() {
        let dir = dir();
        let pool = FilePool::open(dir.path(), 4).unwrap();
        pool.take(1).unwrap();
        let path = dir.path().join(POOL_FILE);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        }
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text, "{\"available\":3,\"generation\":0}\n");
        assert!(!dir.path().join("pool.tmp").exists(), "the temporary file was renamed");
    }

    #[test]
    fn a_damaged_pool_is_a_clear_error() {
        let dir = dir();
        std::fs::write(dir.path().join(POOL_FILE), "garbage").unwrap();
        let error = FilePool::open(dir.path(), 10).err().expect("refused");
        assert_eq!(error.kind(), io::ErrorKind::InvalidData);
        assert!(error.to_string().contains("is damaged"), "{error}");
    }

    #[test]
    fn concurrent_takes_never_grant_more_than_available() {
        let dir = dir();
        let pool = Arc::new(FilePool::open(dir.path(), 100).unwrap());
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let pool = pool.clone();
                std::thread::spawn(move || {
                    let mut taken = 0;
                    loop {
                        let grant = pool.take(3).unwrap();
                        if grant.count == 0 {
                            return taken;
                        }
                        assert!(grant.count <= 3);
                        taken += grant.count;
                    }
                })
            })
            .collect();
        let total: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
        assert_eq!(total, 100, "every eSIM granted once, none twice");
        assert_eq!(pool.available(), 0);
        assert_eq!(FilePool::open(dir.path(), 0).unwrap().available(), 0);
    }
}
