//! Warming a batch (issue 15: the engine mix at a million eSIMs): a short first pass
//! over the commands of a batch that only reads what they will read first (the caller's
//! key record, the eSIM record an ICCID names, its wallet's ledger slots, its account's
//! record and ledger slots), before the batch is applied.
//!
//! At a million eSIMs those records are far apart and out of the caches: applied one
//! after the other, every command waits for a dozen misses in turn, and the misses of
//! one command depend on each other (the index entry gives the record, the record gives
//! the ledger slots). Here the loads of all the batch's commands are issued stage by
//! stage in short loops of independent loads, so the CPU waits for many misses at once;
//! the commands then find their records in the caches. The pass changes nothing: it
//! reads, folds what it read into a number and hands it to `black_box` (so the loads are
//! made), and what a command answers, journals or emits is exactly what it would without
//! it. Nothing here reaches an output.

use crate::command::{Command, ResellerOp, SandboxOp};
use crate::engine::Engine;
use crate::secret::KeyDigest;
use crate::state::{AccountIx, EsimIx, Funding, Wallet};

/// Commands one warm pass reads ahead for, at most: a batch's loads must still be in the
/// caches when its last command runs (64 commands' records are about 100 KB, the size
/// of the core's L2 share); the rest of a longer batch is warmed by the next call.
pub const WARM_COMMANDS_MAX: usize = 64;

impl Command {
    /// The key a command is called with and the ICCID it names, if any: what
    /// [`Engine::warm`] reads ahead.
    pub fn warm_target(&self) -> (Option<&KeyDigest>, Option<&str>) {
        match self {
            Command::Reseller(request) => {
                let iccid = match &request.op {
                    ResellerOp::GetEsim { iccid }
                    | ResellerOp::EsimQrCode { iccid }
                    | ResellerOp::Enable { iccid }
                    | ResellerOp::Disable { iccid }
                    | ResellerOp::Terminate { iccid }
                    | ResellerOp::Throttle { iccid, .. }
                    | ResellerOp::Fund { iccid, .. }
                    | ResellerOp::Defund { iccid }
                    | ResellerOp::AddGroupEsim { iccid, .. }
                    | ResellerOp::RemoveGroupEsim { iccid, .. } => Some(iccid.as_str()),
                    _ => None,
                };
                (Some(&request.key_digest), iccid)
            }
            Command::Sandbox(SandboxOp::Usage { iccid, .. } | SandboxOp::Install { iccid }) => {
                (None, Some(iccid.as_str()))
            }
            _ => (None, None),
        }
    }
}

/// A fixed-capacity list on the stack (the pass allocates nothing).
struct Few<T: Copy, const N: usize> {
    items: [T; N],
    len: usize,
}

impl<T: Copy, const N: usize> Few<T, N> {
    fn new(fill: T) -> Self {
        Few { items: [fill; N], len: 0 }
    }
    fn push(&mut self, item: T) {
        if self.len < N {
            self.items[self.len] = item;
            self.len += 1;
        }
    }
    fn as_slice(&self) -> &[T] {
        &self.items[..self.len]
    }
}

impl Engine {
    /// Reads ahead what a batch of commands will read first (see the module docs), for
    /// the first [`WARM_COMMANDS_MAX`] of `targets` (each a command's
    /// [`Command::warm_target`]). Changes nothing and returns nothing: what the commands
    /// do afterwards is exactly what they would do without it, only sooner.
    pub fn warm<'a>(&self, targets: impl IntoIterator<Item = (Option<&'a KeyDigest>, Option<&'a str>)>) {
        let mut touched = 0u64;
        let mut accounts = Few::<AccountIx, WARM_COMMANDS_MAX>::new(AccountIx(0));
        let mut sims = Few::<EsimIx, WARM_COMMANDS_MAX>::new(EsimIx(0));
        // Stage 1: the key records and the ICCID index's entries (independent loads).
        for (key, iccid) in targets.into_iter().take(WARM_COMMANDS_MAX) {
            if let Some(record) = key.and_then(|key| self.keys.get(&key.id())) {
                touched ^= u64::from(record.digest.0[31]);
                accounts.push(record.account);
            }
            if let Some(sim) = iccid.and_then(crate::ids::iccid_number).and_then(|n| self.iccid_index.get(n)) {
                sims.push(sim);
            }
        }
        touched = touched.wrapping_add(self.warm_records(sims.as_slice(), accounts.as_slice()));
        std::hint::black_box(touched);
    }

    /// Stages 2 and 3 of [`Engine::warm`]: the records, then what they point at.
    fn warm_records(&self, sims: &[EsimIx], accounts: &[AccountIx]) -> u64 {
        let mut touched = 0u64;
        // Stage 2: the eSIM records (every cache line of each) and the account records.
        for &sim in sims {
            let esim = &self.esims[sim];
            let times =
                esim.created_at.0 ^ esim.activated_at.map_or(0, |at| at.0) ^ esim.terminated_at.map_or(0, |at| at.0);
            touched = touched
                .wrapping_add(times as u64)
                .wrapping_add(u64::from(esim.id.as_bytes()[0]) ^ esim.status as u64 ^ esim.data_enabled as u64)
                .wrapping_add(esim.iccid.len() as u64 ^ esim.label.as_ref().map_or(0, String::len) as u64)
                .wrapping_add(u64::from(esim.wallet.slots.credit) ^ u64::from(esim.account.0))
                .wrapping_add(esim.wallet.reporting_paused_until.0 as u64);
        }
        for &account in accounts {
            let record = &self.accounts[account];
            touched = touched
                .wrapping_add(u64::from(record.frozen) ^ u64::from(record.slots.reseller))
                .wrapping_add(record.lifetime_usage.mantissa() as u64)
                .wrapping_add(u64::from(record.balance_alarm.flags().0));
        }
        // Stage 3: what the records point at: the texts on the heap, the wallets' ledger
        // slots (a member's are its group's), the accounts' ledger slots and counts.
        for &sim in sims {
            let esim = &self.esims[sim];
            let first = |text: Option<&String>| text.and_then(|t| t.bytes().next()).map_or(0, u64::from);
            touched = touched.wrapping_add(first(Some(&esim.iccid)) ^ first(esim.label.as_ref()));
            let wallet: &Wallet = match esim.funding {
                Funding::Member { group, .. } => &self.groups[group].wallet,
                _ => &esim.wallet,
            };
            touched = touched.wrapping_add(self.ledger.warm_wallet(wallet.slots));
        }
        for &account in accounts {
            let slots = self.accounts[account].slots;
            touched = touched.wrapping_add(self.ledger.warm_account(account, slots));
            if let Some(counts) = self.status_counts.get(account.0 as usize) {
                touched = touched.wrapping_add(u64::from(counts[1]));
            }
        }
        touched
    }
}
