//! The shell's secrets: new API keys and webhook signing secrets drawn from OS entropy,
//! and the sealing key that keeps signing secrets encrypted at rest.
//!
//! The engine never makes or holds a secret (see `esim_engine::secret`): an API key
//! enters it as its SHA-256, a signing secret sealed with ChaCha20-Poly1305 under a
//! 256-bit key kept in a file outside the data dir (like a web framework's secret key
//! base, apart from its database). A copy of the data dir, a backup or the journal
//! therefore reveals no key and no secret; the sender opens a secret only to sign.

use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{ChaCha20Poly1305, Key, Nonce};
use esim_engine::secret::unhex;
use esim_engine::{KeyDigest, SealedSecret};
use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha20Rng;
use sha2::{Digest, Sha256};
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Version byte of the sealed form: `[version][key id: 8][nonce: 12][ciphertext + tag]`.
const SEALED_VERSION: u8 = 1;
const KEY_ID_BYTES: usize = 8;
const NONCE_BYTES: usize = 12;
/// Binds a sealed secret to its purpose (associated data of the AEAD).
const SEALED_CONTEXT: &[u8] = b"esim webhook signing secret";
/// Random bytes in a new API key (`rsk_` + 64 hex characters).
const API_KEY_BYTES: usize = 32;
/// Random bytes in a new signing secret (`whsec_` + their base64, as Standard Webhooks
/// libraries expect; decision 114).
const SIGNING_SECRET_BYTES: usize = 32;

/// Where new secrets get their randomness: the OS in production, a seeded stream in the
/// simulation and tests (whose runs must repeat).
pub trait Entropy: Send {
    fn fill(&mut self, bytes: &mut [u8]);
}

/// The operating system's random source (`getrandom`). A failure is fatal: a service
/// that cannot draw keys must not make predictable ones.
pub struct OsEntropy;

impl Entropy for OsEntropy {
    fn fill(&mut self, bytes: &mut [u8]) {
        getrandom::getrandom(bytes).expect("the OS random source failed: no key can be drawn safely");
    }
}

/// A seeded stream (simulation and tests only: never secret).
pub struct SeededEntropy(ChaCha20Rng);

impl SeededEntropy {
    pub fn new(seed: u64) -> SeededEntropy {
        SeededEntropy(ChaCha20Rng::seed_from_u64(seed ^ 0x5ec2_e75e_ed00_0001))
    }
}

impl Entropy for SeededEntropy {
    fn fill(&mut self, bytes: &mut [u8]) {
        self.0.fill_bytes(bytes);
    }
}

/// Draws random bytes from the OS (the admin token, a new data dir's seed).
pub fn os_random<const N: usize>() -> [u8; N] {
    let mut bytes = [0u8; N];
    OsEntropy.fill(&mut bytes);
    bytes
}

/// Why a sealed secret could not be opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenError(pub String);

impl std::fmt::Display for OpenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The sealing key: seals new signing secrets and opens them to sign.
pub struct SealingKey {
    cipher: ChaCha20Poly1305,
    key_id: [u8; KEY_ID_BYTES],
}

impl SealingKey {
    pub fn from_bytes(key: [u8; 32]) -> SealingKey {
        let digest = Sha256::new().chain_update(b"esim sealing key id").chain_update(key).finalize();
        SealingKey {
            cipher: ChaCha20Poly1305::new(Key::from_slice(&key)),
            key_id: digest[..KEY_ID_BYTES].try_into().expect("8 bytes"),
        }
    }

    /// A public fingerprint of the key (safe to log): which key sealed what.
    pub fn key_id(&self) -> String {
        hex(&self.key_id)
    }

    /// Seals `secret` with a fresh nonce from `entropy`.
    pub fn seal(&self, secret: &str, entropy: &mut dyn Entropy) -> SealedSecret {
        let mut nonce = [0u8; NONCE_BYTES];
        entropy.fill(&mut nonce);
        let aad = self.associated_data();
        let ciphertext = self
            .cipher
            .encrypt(Nonce::from_slice(&nonce), Payload { msg: secret.as_bytes(), aad: &aad })
            .expect("sealing a short secret cannot fail");
        let mut sealed = Vec::with_capacity(1 + KEY_ID_BYTES + NONCE_BYTES + ciphertext.len());
        sealed.push(SEALED_VERSION);
        sealed.extend_from_slice(&self.key_id);
        sealed.extend_from_slice(&nonce);
        sealed.extend_from_slice(&ciphertext);
        SealedSecret(sealed)
    }

    /// Opens a sealed secret; an error names the key it was sealed under when that is
    /// another key.
    pub fn open(&self, sealed: &SealedSecret) -> Result<String, OpenError> {
        let bytes = &sealed.0;
        let header = 1 + KEY_ID_BYTES + NONCE_BYTES;
        if bytes.len() < header || bytes[0] != SEALED_VERSION {
            return Err(OpenError("not a sealed secret of this version".into()));
        }
        let key_id = &bytes[1..1 + KEY_ID_BYTES];
        if key_id != self.key_id {
            return Err(OpenError(format!(
                "sealed under key id {}, but the secret key file holds key id {}",
                hex(key_id),
                self.key_id()
            )));
        }
        let nonce = Nonce::from_slice(&bytes[1 + KEY_ID_BYTES..header]);
        let aad = self.associated_data();
        let plain = self
            .cipher
            .decrypt(nonce, Payload { msg: &bytes[header..], aad: &aad })
            .map_err(|_| OpenError("the sealed secret fails its authentication tag".into()))?;
        String::from_utf8(plain).map_err(|_| OpenError("the sealed secret is not text".into()))
    }

    fn associated_data(&self) -> Vec<u8> {
        let mut aad = SEALED_CONTEXT.to_vec();
        aad.push(SEALED_VERSION);
        aad.extend_from_slice(&self.key_id);
        aad
    }

    /// Reads the key file: `None` when it does not exist. Never changes it: a file its
    /// group or others may read is refused, naming the fix, rather than quietly made
    /// private (a key that was readable may have been read: the operator decides).
    pub fn load(path: &Path) -> Result<Option<SealingKey>, String> {
        let shown = path.display();
        let metadata = match fs::metadata(path) {
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(error) => return Err(format!("cannot read the secret key file {shown}: {error}")),
            Ok(metadata) => metadata,
        };
        if let Some(mode) = shared_mode(&metadata) {
            return Err(format!(
                "the secret key file {shown} has mode {mode:04o}: its group or others may read it. Make it private                  (chmod 600 {shown}), and replace the key if others may have read it"
            ));
        }
        let text = fs::read_to_string(path).map_err(|e| format!("cannot read the secret key file {shown}: {e}"))?;
        let bytes = unhex(text.trim()).filter(|b| b.len() == 32).ok_or_else(|| {
            format!("the secret key file {shown} must hold 64 hex characters (a 256-bit key); it does not")
        })?;
        Ok(Some(SealingKey::from_bytes(bytes.try_into().expect("32 bytes"))))
    }

    /// Reads the key file, or makes it (mode 0600, its directory 0700) with a key from
    /// OS entropy when it does not exist; `true` when made. Safe against two starts
    /// racing to make it. A start calls it only once every other check has passed, so a
    /// start that fails leaves no new key file behind.
    pub fn load_or_create(path: &Path) -> Result<(SealingKey, bool), String> {
        if let Some(key) = SealingKey::load(path)? {
            return Ok((key, false));
        }
        create_key_file(path).map_err(|e| format!("cannot create the secret key file {}: {e}", path.display()))?;
        let key = SealingKey::load(path)?
            .ok_or_else(|| format!("the secret key file {} vanished as it was made", path.display()))?;
        Ok((key, true))
    }
}

/// The permission bits of a file its group or others may use, else `None`.
fn shared_mode(metadata: &fs::Metadata) -> Option<u32> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = metadata.permissions().mode() & 0o777;
        (mode & 0o077 != 0).then_some(mode)
    }
    #[cfg(not(unix))]
    {
        let _ = metadata;
        None
    }
}

/// Writes a new random key to a temporary file and links it into place: a start that
/// loses the race reads the winner's key.
fn create_key_file(path: &Path) -> io::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        if !dir.exists() {
            fs::create_dir_all(dir)?;
            set_mode(dir, 0o700)?;
        }
    }
    let temporary = path.with_extension(format!("tmp{}", std::process::id()));
    {
        let mut file = private_file(&temporary)?;
        file.write_all(hex(&os_random::<32>()).as_bytes())?;
        file.write_all(b"\n")?;
        file.sync_all()?;
    }
    let linked = fs::hard_link(&temporary, path);
    fs::remove_file(&temporary)?;
    match linked {
        Err(error) if error.kind() != io::ErrorKind::AlreadyExists => Err(error),
        _ => Ok(()),
    }
}

/// A new file only its owner can read and write (whatever the umask).
pub fn private_file(path: &Path) -> io::Result<fs::File> {
    let mut options = fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let file = options.open(path)?;
    set_mode(path, 0o600)?;
    Ok(file)
}

/// Sets a file's or directory's permission bits explicitly (not through the umask).
pub fn set_mode(path: &Path, mode: u32) -> io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(path, fs::Permissions::from_mode(mode))
    }
    #[cfg(not(unix))]
    {
        let _ = (path, mode);
        Ok(())
    }
}

/// The default place of the secret key file: outside any data dir, in the user's
/// configuration directory (`$XDG_CONFIG_HOME/esim/secret-key`, else
/// `$HOME/.config/esim/secret-key`).
pub fn default_key_file() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CONFIG_HOME").filter(|v| !v.is_empty()).map(PathBuf::from).or_else(|| {
        std::env::var_os("HOME").filter(|v| !v.is_empty()).map(|home| PathBuf::from(home).join(".config"))
    })?;
    Some(base.join("esim").join("secret-key"))
}

impl std::fmt::Debug for SealingKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SealingKey(key id {})", self.key_id())
    }
}

/// What the shell needs to issue secrets: the sealing key and an entropy source.
pub struct Secrets {
    key: Arc<SealingKey>,
    entropy: Box<dyn Entropy>,
    /// On a sharded service, the shard whose index is the first byte of every API key
    /// drawn here (decision 168); `None` unsharded.
    shard: Option<u8>,
}

/// A new API key: shown once, then only its digest exists.
pub struct IssuedKey {
    pub api_key: String,
    pub digest: KeyDigest,
}

/// A new signing secret: shown once, kept sealed.
pub struct IssuedSecret {
    pub secret: String,
    pub sealed: SealedSecret,
}

impl Secrets {
    pub fn new(key: Arc<SealingKey>, entropy: Box<dyn Entropy>) -> Secrets {
        Secrets { key, entropy, shard: None }
    }

    /// The keys drawn from now on name shard `shard` of `shards` (nothing changes with
    /// one shard): their first random byte is the shard's index, so a node routes a
    /// request by its key without a lookup. A key keeps 248 random bits.
    pub fn set_shard(&mut self, shard: u32, shards: u32) {
        self.shard = (shards > 1).then(|| u8::try_from(shard).expect("at most 64 shards"));
    }

    /// Production: OS entropy.
    pub fn from_os(key: Arc<SealingKey>) -> Secrets {
        Secrets::new(key, Box::new(OsEntropy))
    }

    /// Simulation and tests: a key and a stream derived from `seed` (repeatable, never
    /// secret).
    pub fn seeded(seed: u64) -> Secrets {
        let key: [u8; 32] =
            Sha256::new().chain_update(b"esim seeded sealing key").chain_update(seed.to_le_bytes()).finalize().into();
        Secrets::new(Arc::new(SealingKey::from_bytes(key)), Box::new(SeededEntropy::new(seed)))
    }

    pub fn sealing_key(&self) -> Arc<SealingKey> {
        self.key.clone()
    }

    /// `rsk_` and 64 hex characters (68 in all), with its digest.
    pub fn new_api_key(&mut self) -> IssuedKey {
        let mut bytes = [0u8; API_KEY_BYTES];
        self.entropy.fill(&mut bytes);
        if let Some(shard) = self.shard {
            bytes[0] = shard;
        }
        let api_key = format!("rsk_{}", hex(&bytes));
        let digest = KeyDigest::of(&api_key);
        IssuedKey { api_key, digest }
    }

    /// `whsec_` and the base64 of 32 random bytes (44 characters), with its sealed form.
    pub fn new_signing_secret(&mut self) -> IssuedSecret {
        use base64::Engine as _;
        let mut bytes = [0u8; SIGNING_SECRET_BYTES];
        self.entropy.fill(&mut bytes);
        let secret = format!("whsec_{}", base64::engine::general_purpose::STANDARD.encode(bytes));
        let sealed = self.key.seal(&secret, self.entropy.as_mut());
        IssuedSecret { secret, sealed }
    }

    pub fn open(&self, sealed: &SealedSecret) -> Result<String, OpenError> {
        self.key.open(sealed)
    }
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sealed_secrets_open_only_with_their_key_and_reveal_nothing() {
        let mut secrets = Secrets::seeded(7);
        let issued = secrets.new_signing_secret();
        assert!(issued.secret.starts_with("whsec_") && issued.secret.len() == 50);
        assert_eq!(secrets.open(&issued.sealed).unwrap(), issued.secret);
        let hex_secret = issued.secret.trim_start_matches("whsec_");
        let sealed_text = String::from_utf8_lossy(&issued.sealed.0).to_string();
        assert!(!sealed_text.contains(hex_secret));
        let other = Secrets::seeded(8);
        let refused = other.open(&issued.sealed).unwrap_err();
        assert!(refused.0.contains("key id"), "{refused}");
        let mut tampered = issued.sealed.clone();
        *tampered.0.last_mut().unwrap() ^= 1;
        assert!(secrets.open(&tampered).is_err());
    }

    #[test]
    fn api_keys_are_68_characters_and_only_their_digest_is_handed_on() {
        let mut secrets = Secrets::from_os(Arc::new(SealingKey::from_bytes([9; 32])));
        let first = secrets.new_api_key();
        let second = secrets.new_api_key();
        assert_eq!(first.api_key.len(), 68);
        assert_ne!(first.api_key, second.api_key);
        assert_eq!(first.digest, KeyDigest::of(&first.api_key));
    }

    #[test]
    fn the_key_file_is_made_once_with_mode_0600() {
        let dir = std::env::temp_dir().join(format!("esim-keyfile-{}", std::process::id()));
        let path = dir.join("nested").join("secret-key");
        let (first, _) = SealingKey::load_or_create(&path).unwrap();
        let (again, _) = SealingKey::load_or_create(&path).unwrap();
        assert_eq!(first.key_id(), again.key_id());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            assert_eq!(fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
            assert_eq!(fs::metadata(path.parent().unwrap()).unwrap().permissions().mode() & 0o777, 0o700);
        }
        fs::write(&path, "not a key").unwrap();
        assert!(SealingKey::load_or_create(&path).unwrap_err().contains("64 hex"));
        fs::remove_dir_all(&dir).unwrap();
    }

    #[cfg(unix)]
    #[test]
    fn a_key_file_others_may_read_is_refused_and_left_as_it_is() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("esim-keyfile-modes-{}", std::process::id()));
        let path = dir.join("secret-key");
        assert!(SealingKey::load(&path).unwrap().is_none(), "a missing file is not made by load");
        assert!(!path.exists());
        let (made, created) = SealingKey::load_or_create(&path).unwrap();
        assert!(created);
        for mode in [0o644, 0o640, 0o604, 0o660] {
            fs::set_permissions(&path, fs::Permissions::from_mode(mode)).unwrap();
            let refused = SealingKey::load_or_create(&path).unwrap_err();
            assert!(refused.contains(&format!("mode {mode:04o}")) && refused.contains("chmod 600"), "{refused}");
            assert_eq!(fs::metadata(&path).unwrap().permissions().mode() & 0o777, mode, "not chmodded");
        }
        for mode in [0o600, 0o400] {
            fs::set_permissions(&path, fs::Permissions::from_mode(mode)).unwrap();
            assert_eq!(SealingKey::load(&path).unwrap().unwrap().key_id(), made.key_id());
        }
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
        fs::remove_dir_all(&dir).unwrap();
    }
}
