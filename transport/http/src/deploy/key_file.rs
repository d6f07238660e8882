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
    path: PathBuf,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::secrets::Secrets;
    use crate::{ClockMode, Service};
    use esim_engine::{AdminOp, Command, EngineConfig, KeyDigest, Millis, Reply, ResellerOp, ResellerRequest};

    /// A service whose state holds one webhook, its signing secret sealed by `key`.
    fn state_sealed_with(key: Arc<SealingKey>) -> Service {
        let engine = Engine::new(EngineConfig::default(), Millis::VIRTUAL_EPOCH);
        let mut service = Service::new(engine, "adm".into(), ClockMode::Virtual, Secrets::from_os(key));
        let now = Millis::VIRTUAL_EPOCH;
        let created = service.apply_command(
            now,
            Command::Admin(AdminOp::CreateAccount {
                contact_email: "a@example.com".into(),
                company_name: None,
                api_key_digest: Default::default(),
                api_key_prefix: String::new(),
            }),
        );
        let Ok(Reply::AccountCreated(account)) = created else { panic!("account made") };
        let webhook = ResellerOp::CreateWebhook {
            url: "https://hooks.example.com/esim".into(),
            events: vec!["*".into()],
            signing_secret: Default::default(),
        };
        let key_digest = KeyDigest::of(&account.api_key);
        let request = ResellerRequest { key_digest, idempotency_key: None, op: webhook };
        let made = service.apply_command(now, Command::Reseller(request));
        assert!(made.is_ok(), "webhook made");
        assert_eq!(service.engine().webhooks().len(), 1);
        service
    }

    fn empty_state() -> Engine {
        Engine::new(EngineConfig::default(), Millis::VIRTUAL_EPOCH)
    }

    #[test]
    fn a_missing_key_file_is_made_only_when_asked_and_then_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let (path, data_dir) = (dir.path().join("keys/secret-key"), dir.path().join("data"));
        let mut keys = KeyFile::open(Some(&path), &data_dir).unwrap();
        assert_eq!(keys.path(), path);
        assert!(keys.check(&empty_state(), "this data dir").is_ok(), "a state without secrets needs no key");
        let error = keys.required("a standby").unwrap_err();
        assert!(error.contains("does not exist: a standby serves secrets sealed by the owner's key"), "{error}");
        assert!(!path.exists(), "reading and checking make nothing");
        let made = keys.key().unwrap();
        assert!(path.exists(), "made once every check has passed");
        let again = KeyFile::open(Some(&path), &data_dir).unwrap();
        assert_eq!(again.required("a standby").unwrap().key_id(), made.key_id(), "the same key read back");
    }

    #[cfg(unix)]
    #[test]
    fn a_key_file_others_may_read_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secret-key");
        KeyFile::open(Some(&path), dir.path()).unwrap().key().unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(KeyFile::open(Some(&path), &dir.path().join("data")).is_err(), "mode 0644 is refused");
    }

    #[test]
    fn a_state_is_served_only_with_the_key_that_sealed_its_secrets() {
        let dir = tempfile::tempdir().unwrap();
        let data_dir = dir.path().join("data");
        let (first, second) = (dir.path().join("first"), dir.path().join("second"));
        let mut sealer = KeyFile::open(Some(&first), &data_dir).unwrap();
        let service = state_sealed_with(sealer.key().unwrap());
        let state = service.engine();
        assert!(sealer.check(state, "this data dir").is_ok());

        let mut other = KeyFile::open(Some(&second), &data_dir).unwrap();
        let missing = other.check(state, "shard 2").unwrap_err();
        assert!(missing.contains("does not exist, but shard 2 holds signing secrets"), "{missing}");
        other.key().unwrap();
        let wrong = other.check(state, "shard 2").unwrap_err();
        assert!(wrong.contains("does not open the signing secret of webhook wh_"), "{wrong}");
        let check = other.serve_check(other.required("a standby").unwrap());
        assert!(check(state).is_err(), "a standby's check refuses it too");
    }
}
