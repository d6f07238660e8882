//! One process per data dir: an exclusive advisory lock on `DIR/lock`.
//!
//! `esim serve` (and `esim repair --cut-at-damage`) hold the lock for their whole life;
//! the holder writes its pid into the file after locking, so that a second process, and
//! `esim replay`/`esim report`, can name it. The lock is `flock(2)` through the `fs4`
//! crate: it belongs to the open file description, so it is released when the process
//! ends however it ends (SIGKILL included), and two descriptions conflict even inside
//! one process. The file itself is never removed (removing a lock file races with a
//! process that is opening it); a stale file without a holder locks nothing.

use fs4::{FileExt, TryLockError};
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The name of the lock file inside the data dir.
pub const LOCK_FILE: &str = "lock";

/// Tries before reporting the lock as held: a reader's brief shared check
/// ([`DataDirLock::holder`]) must not make a starting server fail.
const ACQUIRE_TRIES: u32 = 5;
const ACQUIRE_PAUSE: Duration = Duration::from_millis(20);

/// The lock on a data dir, held until dropped.
#[derive(Debug)]
pub struct DataDirLock {
    _file: File,
    path: PathBuf,
}

/// Why the lock could not be taken.
#[derive(Debug)]
pub enum LockError {
    /// Another process (or another open description in this one) holds it; `pid` is
    /// what the holder wrote into the file (`None` if it has not written it yet).
    Held { dir: PathBuf, pid: Option<u32> },
    /// The lock file could not be opened or locked.
    Io { path: PathBuf, error: io::Error },
}

impl std::fmt::Display for LockError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LockError::Held { dir, pid: Some(pid) } => {
                write!(f, "the data dir {} is in use by another esim process (pid {pid}); stop it first", dir.display())
            }
            LockError::Held { dir, pid: None } => {
                write!(f, "the data dir {} is in use by another esim process; stop it first", dir.display())
            }
            LockError::Io { path, error } => write!(f, "cannot lock {}: {error}", path.display()),
        }
    }
}

impl std::error::Error for LockError {}

fn read_pid(path: &Path) -> Option<u32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

impl DataDirLock {
    /// Takes the exclusive lock on `dir/lock` (creating the file, mode 0600) and writes
    /// this process's pid into it. Fails at once (after a few short tries) when another
    /// process holds it, naming that process.
    pub fn acquire(dir: &Path) -> Result<DataDirLock, LockError> {
        let path = dir.join(LOCK_FILE);
        let io_error = |error| LockError::Io { path: path.clone(), error };
        let file = open_lock_file(&path).map_err(io_error)?;
        let mut tries = 0;
        loop {
            match FileExt::try_lock(&file) {
                Ok(()) => break,
                Err(TryLockError::WouldBlock) if tries + 1 < ACQUIRE_TRIES => {
                    tries += 1;
                    std::thread::sleep(ACQUIRE_PAUSE);
                }
                Err(TryLockError::WouldBlock) => {
                    return Err(LockError::Held { dir: dir.to_path_buf(), pid: read_pid(&path) });
                }
                Err(TryLockError::Error(error)) => return Err(io_error(error)),
            }
        }
        let pid = format!("{}\n", std::process::id());
        (|| {
            file.set_len(0)?;
            std::os::unix::fs::FileExt::write_all_at(&file, pid.as_bytes(), 0)?;
            file.sync_data()
        })()
        .map_err(io_error)?;
        Ok(DataDirLock { _file: file, path })
    }

    /// Whether another open description holds the lock of `dir` right now, and the pid
    /// it wrote (0 if the holder has not written its pid yet). Changes nothing: a
    /// missing lock file means no holder.
    pub fn holder(dir: &Path) -> Option<u32> {
        let path = dir.join(LOCK_FILE);
        let file = File::open(&path).ok()?;
        match FileExt::try_lock_shared(&file) {
            Ok(()) => None,
            Err(TryLockError::WouldBlock) => {
                // The holder writes its pid right after locking.
                for _ in 0..ACQUIRE_TRIES {
                    if let Some(pid) = read_pid(&path) {
                        return Some(pid);
                    }
                    std::thread::sleep(ACQUIRE_PAUSE);
                }
                Some(0)
            }
            Err(TryLockError::Error(_)) => None,
        }
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

fn open_lock_file(path: &Path) -> io::Result<File> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let file =
        std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(false).mode(0o600).open(path)?;
    file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    Ok(file)
}
