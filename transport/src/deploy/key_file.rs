//! The secret key file of a start: the key that seals webhook signing secrets at rest,
//! kept outside the data dir. A start serves a state only when this key opens every
//! secret in it (decision 235).

use crate::secrets::{self, SealingKey};
use crate::standby;
use esim_engine::Engine;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// This start's secret key file (the one named, or the default): read at once, made
/// only once every check of the start has passed (a start that fails leaves none
/// behind), and checked against every state the start is to serve.
pub struct KeyFile {
    pub(crate) path: PathBuf,
    /// `None` while the file does not exist.
    key: Option<Arc<SealingKey>>,
}

impl KeyFile {
    /// Reads the key file (`asked`, else the per-user default) when it exists; one its
    /// group or others may read is refused. One inside `data_dir` is warned about.
    pub fn open(asked: Option<&Path>, data_dir: &Path) -> Result<KeyFile, String> {
        let path = match asked {
            Some(path) => path.to_path_buf(),
            None => secrets::default_key_file().ok_or(
                "no place for the secret key file: set --secret-key-file or ESIM_SECRET_KEY_FILE (HOME is not set)",
            )?,
        };
        if path.starts_with(data_dir) {
            tracing::warn!(
                "the secret key file {} is inside the data dir: a copy of the data dir then holds the key",
                path.display()
            );
        }
        let key = SealingKey::load(&path)?.map(Arc::new);
        Ok(KeyFile { path, key })
    }

    /// The key file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The key opens every signing secret of `engine` (`what`: "this data dir", "shard
    /// 2"); a missing key file fails when the state holds any.
    pub fn check(&self, engine: &Engine, what: &str) -> Result<(), String> {
        match &self.key {
            Some(key) => opens_every_secret(key, &self.path, engine),
            None => match engine.webhooks().first() {
                None => Ok(()),
                Some(webhook) => Err(format!(
                    "the secret key file {} does not exist, but {what} holds signing secrets sealed with a key (webhook \
                     {} and others): serve it with the key file it was made with (--secret-key-file)",
                    self.path.display(),
                    webhook.id
                )),
            },
        }
    }

    /// A standby's key: the file must exist, since the shards it follows were made, and
    /// their secrets sealed, by another process with it.
    pub fn required(&self, role: &str) -> Result<Arc<SealingKey>, String> {
        self.key.clone().ok_or_else(|| {
            format!(
                "the secret key file {} does not exist: {role} serves secrets sealed by the owner's key, so it needs \
                 the same key file (--secret-key-file)",
                self.path.display()
            )
        })
    }

    /// The key, its file made now when missing: called once every check has passed.
    pub fn key(&mut self) -> Result<Arc<SealingKey>, String> {
        if let Some(key) = &self.key {
            return Ok(key.clone());
        }
        let (key, created) = SealingKey::load_or_create(&self.path)?;
        if created {
            tracing::info!(
                "made a new secret key file {} (key id {}); keep it apart from the data dir",
                self.path.display(),
                key.key_id()
            );
        }
        let key = Arc::new(key);
        self.key = Some(key.clone());
        Ok(key)
    }

    /// The standby's check of a state it follows (`crate::standby::ServeCheck`): `key`
    /// opens every signing secret in it.
    pub(crate) fn serve_check(&self, key: Arc<SealingKey>) -> standby::ServeCheck {
        let path = self.path.clone();
        Arc::new(move |engine: &Engine| opens_every_secret(&key, &path, engine))
    }
}

/// Whether `key` (read from `path`) opens every signing secret `engine` holds, the
/// previous one of a rotation included.
pub fn opens_every_secret(key: &SealingKey, path: &Path, engine: &Engine) -> Result<(), String> {
    for webhook in engine.webhooks() {
        let previous = webhook.previous_secret.iter().map(|(sealed, _)| sealed);
        for sealed in std::iter::once(&webhook.signing_secret).chain(previous) {
            if let Err(why) = key.open(sealed) {
                return Err(format!(
                    "the secret key file {} does not open the signing secret of webhook {} ({why}); serve this state \
                     with the key file it was made with (--secret-key-file)",
                    path.display(),
                    webhook.id
                ));
            }
        }
    }
    Ok(())
}
