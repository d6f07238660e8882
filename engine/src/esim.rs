//! eSIMs: provisioning, reads, the data switch, throttle, terminate, and the
//! preconditions of fund and defund (their wallet rules are in `wallet`).

use crate::codes;
use crate::engine::Engine;
use crate::error::{ApiError, ErrorCode};
use crate::event::EsimEvent;
use crate::ledger::Reason;
use crate::limits::{self, page};
use crate::money;
use crate::random::Purpose;
use crate::reply::*;
use crate::state::*;
use crate::wallet::{CrossingAlarm, Return};
use rust_decimal::Decimal;

/// The throttle speeds the spec accepts: NO_LIMIT, 100 to 3000 Kbps in steps of 100,
/// then 3500, 4000, 4500 and 5000.
pub fn is_valid_speed(speed: &str) -> bool {
    if speed == "NO_LIMIT" {
        return true;
    }
    let Some(kbps) = speed.strip_prefix("SPEED_").and_then(|s| s.strip_suffix("_KBPS")) else {
        return false;
    };
    if kbps.starts_with('0') || !kbps.bytes().all(|b| b.is_ascii_digit()) || kbps.len() > 4 {
        return false;
    }
    let Ok(value) = kbps.parse::<u32>() else { return false };
    (value % 100 == 0 && (100..=3_000).contains(&value)) || matches!(value, 3_500 | 4_000 | 4_500 | 5_000)
}

pub(crate) fn check_text(field: &str, value: &Option<String>) -> Result<(), ApiError> {
    match value {
        Some(text) if text.chars().count() > limits::MAX_TEXT_LEN => {
            Err(ApiError::validation(format!("{field} is longer than {} characters", limits::MAX_TEXT_LEN)))
        }
        _ => Ok(()),
    }
}

impl Engine {
    /// Whether [`Engine::status_counts`] holds every account (it is empty after a
    /// snapshot is read, until [`Engine::ensure_status_counts`]).
    pub(crate) fn status_counts_built(&self) -> bool {
        self.status_counts.len() == self.accounts.len()
    }

    /// Builds the per-account status counts if they are not (after a snapshot was read):
    /// one pass over the eSIMs, once.
    pub(crate) fn ensure_status_counts(&mut self) {
        if self.status_counts_built() {
            return;
        }
        let mut counts = vec![[0u32; 4]; self.accounts.len()];
        for esim in &self.esims {
            counts[esim.account.0 as usize][esim.status.index()] += 1;
        }
        self.status_counts = counts;
    }

    /// How many of the account's eSIMs have `status`: counted as they change, or by a
    /// scan when the counts are not built.
    pub(crate) fn status_count(&self, account: AccountIx, status: EsimStatus) -> u64 {
        if self.status_counts_built() {
            return u64::from(self.status_counts[account.0 as usize][status.index()]);
        }
        self.accounts[account].esims.iter().filter(|&&esim| self.esims[esim].status == status).count() as u64
    }

    /// Sets an eSIM's status, keeping its account's counts.
    pub(crate) fn set_status(&mut self, esim: EsimIx, status: EsimStatus) {
        let built = self.status_counts_built();
        let record = &mut self.esims[esim];
        let before = std::mem::replace(&mut record.status, status);
        assert!(before.may_become(status), "eSIM {}: no rule moves {before:?} to {status:?}", record.iccid);
        if built {
            let counts = &mut self.status_counts[record.account.index()];
            assert!(counts[before.index()] > 0, "the counts hold every eSIM of the account");
            counts[before.index()] -= 1;
            counts[status.index()] += 1;
        }
    }

    /// The eSIM of `iccid` on `account`; another account's eSIM is as unknown as a missing one.
    pub(crate) fn esim_of(&self, account: AccountIx, iccid: &str) -> Result<EsimIx, ApiError> {
        match crate::ids::iccid_number(iccid).and_then(|n| self.iccid_index.get(n)) {
            Some(esim) if self.esims[esim].account == account => Ok(esim),
            _ => Err(ApiError::new(ErrorCode::EsimNotFound, format!("no eSIM with ICCID {iccid}"))),
        }
    }

    /// A page of eSIM items: [`Engine::esim_item`] of each, after a first pass that only
    /// reads what the items will read (each record, its heap texts, its wallet's ledger
    /// slots). At a million eSIMs a page's records are far apart and out of cache; the
    /// first pass is a short loop of independent loads, so the CPU waits for many cache
    /// misses at once instead of one item's at a time inside the long loop that builds
    /// the items (issue 15: list pages at the largest offsets).
    pub(crate) fn esim_items(&self, page: &[EsimIx]) -> Vec<EsimItem> {
        let touched = page.iter().fold(0u64, |sum, &esim| {
            let record = &self.esims[esim];
            let text_bytes = |text: &Option<String>| text.as_ref().and_then(|t| t.bytes().next()).unwrap_or(0);
            let slots = record.wallet.slots;
            let times = record.created_at.0
                ^ record.activated_at.map_or(0, |at| at.0)
                ^ record.terminated_at.map_or(0, |at| at.0);
            let kinds =
                record.status as u64 ^ record.euicc_cached as u64 ^ record.funding.group().map_or(0, |g| g.0 as u64);
            sum.wrapping_add(u64::from(record.iccid.as_bytes()[0]))
                .wrapping_add(times as u64 ^ kinds ^ u64::from(record.id.as_bytes()[0]))
                .wrapping_add(u64::from(text_bytes(&record.label) ^ text_bytes(&record.end_user_reference)))
                .wrapping_add(self.ledger.balance(slots.credit).mantissa() as u64)
                .wrapping_add(self.ledger.balance(slots.reported).mantissa() as u64)
        });
        std::hint::black_box(touched);
        page.iter().map(|&esim| self.esim_item(esim, None)).collect()
    }

    pub(crate) fn esim_item(&self, esim: EsimIx, euicc: Option<EuiccState>) -> EsimItem {
        let record = &self.esims[esim];
        let group = record.funding.group().map(|g| &self.groups[g]);
        EsimItem {
            // Encoded into a buffer, not through `Display` (every eSIM read shows it).
            id: record.id.hyphenated().encode_lower(&mut uuid::Uuid::encode_buffer()).to_owned(),
            iccid: record.iccid.to_string(),
            status: record.status.as_str(),
            euicc_state: Some(euicc.unwrap_or(record.euicc_cached).as_str()),
            end_user_reference: record.end_user_reference.clone(),
            label: record.label.clone(),
            wallet_balance_usd: self.shown_balance(WalletOwner::Esim(esim)),
            total_data_charged_usd: match group {
                Some(_) => None,
                None => Some(self.ledger.balance(record.wallet.slots.reported).normalize()),
            },
            activated_at: record.activated_at,
            terminated_at: record.terminated_at,
            created_at: record.created_at,
            group_id: group.map(|g| g.id.clone()),
        }
    }

    /// `POST /esims`: checks first (texts, the group, the account, the fee, the stock),
    /// then the fee is taken, the profile drawn (serial, matching id, id) and the eSIM
    /// kept; `esim.provisioned` goes out.
    pub(crate) fn provision(
        &mut self,
        account: AccountIx,
        end_user_reference: Option<String>,
        label: Option<String>,
        group_id: Option<String>,
    ) -> Response {
        check_text("end_user_reference", &end_user_reference)?;
        check_text("label", &label)?;
        let group = self.provision_group(account, group_id.as_deref())?;
        self.require_not_frozen(account)?;
        let fee = self.take_provisioning_fee(account)?;
        let iccid = self.next_iccid();
        let lpa_string = codes::lpa_string(&codes::matching_id(self.random_bytes::<16>(Purpose::MatchingId)));
        let id = self.random_uuid();
        let uuid = uuid::Uuid::try_parse(&id).expect("a drawn id is a UUID");
        let slots = self.ledger.open_esim_wallet(account);
        let esim = self.keep_esim(Esim {
            id: uuid,
            iccid,
            account,
            lpa: ActivationCode::new(&lpa_string),
            status: EsimStatus::Pending,
            euicc_network: EuiccState::Released,
            euicc_cached: EuiccState::Released,
            end_user_reference: end_user_reference.clone(),
            label: label.clone(),
            created_at: self.now,
            activated_at: None,
            terminated_at: None,
            data_enabled: true,
            throttle: Throttle::NO_LIMIT,
            // Armed only once the balance shows $5 or more (decision 56).
            wallet: Wallet::new(slots, CrossingAlarm::UNARMED),
            funding: match group {
                Some(group) => Funding::Member { group, own_wallet: false },
                None => Funding::NoWallet,
            },
        });
        let created_at = self.now;
        self.emit_esim(
            esim,
            EsimEvent::Provisioned {
                lpa_string: lpa_string.clone(),
                status: "pending",
                created_at,
                group_id: group_id.clone(),
            },
        );
        let balance_remaining = self.reseller_balance(account);
        if balance_remaining < money::low_balance_threshold_usd() {
            self.start_auto_refill(account);
        }
        Ok(Reply::Provisioned(ProvisionedEsim {
            id,
            iccid: iccid.to_string(),
            qr_code: QrCodeDataUrl::new(lpa_string.clone()),
            direct_install_url: codes::direct_install_url(&lpa_string),
            lpa_string,
            status: "pending",
            euicc_state: "RELEASED",
            end_user_reference,
            label,
            cost: fee,
            balance_remaining,
            created_at,
            group_id,
        }))
    }

    /// The group a provisioning joins: a UUID of the account's groups, with room.
    fn provision_group(&self, account: AccountIx, group_id: Option<&str>) -> Result<Option<GroupIx>, ApiError> {
        match group_id {
            Some(id) if uuid::Uuid::try_parse(id).is_err() => Err(ApiError::validation("group_id must be a UUID")),
            Some(id) => {
                let group = self.group_of(account, id)?;
                self.require_group_room(group)?;
                Ok(Some(group))
            }
            None => Ok(None),
        }
    }

    /// The provisioning fee, taken from the reseller balance (the last precondition is
    /// a profile in stock, which it uses up). Returns the fee.
    fn take_provisioning_fee(&mut self, account: AccountIx) -> Result<Decimal, ApiError> {
        let fee = money::provisioning_fee_usd();
        self.require_balance(account, fee)?;
        if self.inventory == 0 {
            return Err(ApiError::new(ErrorCode::NoEsimsAvailable, "eSIM inventory is depleted; try again later"));
        }
        self.inventory -= 1;
        let fees = self.accounts[account].slots.fees;
        self.spend(account, fees, fee, Reason::ProvisioningFee);
        self.accounts[account].lifetime_usage += fee;
        Ok(fee)
    }

    /// The ICCID of the next serial. The first serial is drawn at random, so ICCIDs look
    /// issued from a real range; serials of shard k are k modulo the shard count
    /// (decision 168): unique across shards by construction, and an ICCID tells its shard.
    fn next_iccid(&mut self) -> codes::Iccid {
        if self.next_serial == 0 {
            self.next_serial = u64::from_le_bytes(self.random_bytes::<8>(Purpose::Serial)) % 100_000_000_000 + 1;
            if self.config.sharded() {
                let count = u64::from(self.config.shard_count);
                self.next_serial = self.next_serial - self.next_serial % count + u64::from(self.config.shard) + count;
            }
        }
        let iccid = codes::iccid_for_serial(self.next_serial);
        self.next_serial += u64::from(self.config.shard_count.max(1));
        iccid
    }

    /// Keeps a new eSIM and indexes it (ICCID, its account, the status counts, its group).
    fn keep_esim(&mut self, record: Esim) -> EsimIx {
        let esim = EsimIx(u32::try_from(self.esims.len()).expect("fewer than 2^32 eSIMs"));
        let (account, group) = (record.account, record.funding.group());
        let number = crate::ids::iccid_number(&record.iccid).expect("generated ICCIDs are 19 digits");
        debug_assert_eq!(record.status, EsimStatus::Pending, "a new eSIM is pending");
        self.esims.push(record);
        let previous = self.iccid_index.insert(number, esim);
        assert!(previous.is_none(), "ICCIDs are unique");
        self.accounts[account].esims.push(esim);
        if self.status_counts_built() {
            self.status_counts[account.index()][EsimStatus::Pending.index()] += 1;
        }
        if let Some(group) = group {
            self.groups[group].members.insert(esim);
        }
        esim
    }

    pub(crate) fn list_esims(
        &self,
        account: AccountIx,
        status: Option<&str>,
        limit: Option<u64>,
        offset: Option<u64>,
    ) -> Response {
        let status =
            match status {
                None => None,
                Some(text) => Some(EsimStatus::parse(text).ok_or_else(|| {
                    ApiError::validation("status must be one of pending, active, suspended, terminated")
                })?),
            };
        let (limit, offset) = page(limit, offset)?;
        // The page costs what it shows, not what the account holds (decision 125): the
        // total comes from the counts, an unfiltered page is a slice, and a filtered one
        // is found from the nearer end of the account's eSIMs.
        let esims_of_account = &self.accounts[account].esims;
        let total = match status {
            None => esims_of_account.len() as u64,
            Some(status) => self.status_count(account, status),
        };
        let end = offset.saturating_add(limit).min(total);
        let page: Vec<EsimIx> = if offset >= total {
            Vec::new()
        } else {
            // Both fit in usize: they are at most the account's eSIM count.
            let (start, end) = (offset as usize, end as usize);
            match status {
                None => esims_of_account[start..end].to_vec(),
                Some(status) => {
                    let matching = |esim: &&EsimIx| self.esims[**esim].status == status;
                    if start <= total as usize - end {
                        esims_of_account.iter().filter(matching).skip(start).take(end - start).copied().collect()
                    } else {
                        let mut page: Vec<EsimIx> = esims_of_account
                            .iter()
                            .rev()
                            .filter(matching)
                            .skip(total as usize - end)
                            .take(end - start)
                            .copied()
                            .collect();
                        page.reverse();
                        page
                    }
                }
            }
        };
        let esims = self.esim_items(&page);
        Ok(Reply::EsimPage(EsimPage { esims, total, limit, offset }))
    }

    pub(crate) fn get_esim(&self, account: AccountIx, iccid: &str) -> Response {
        let esim = self.esim_of(account, iccid)?;
        let record = &self.esims[esim];
        // The live state comes from the network; when that read fails, the cached one.
        let euicc = if self.faults.network_read_fails { record.euicc_cached } else { record.euicc_network };
        let group_total = record.funding.group().map(|g| {
            let group = &self.groups[g];
            self.ledger.balance(group.wallet.slots.reported).normalize()
        });
        Ok(Reply::Esim(EsimDetail {
            item: self.esim_item(esim, Some(euicc)),
            lpa_string: record.lpa.text(),
            data_enabled: record.data_enabled,
            throttle: record.throttle.to_string(),
            group_total_data_charged_usd: group_total,
            pending: record.funding.pending().map(|p| match p {
                PendingReturn::Defund { .. } => "defund_pending",
                PendingReturn::Move { .. } => "move_pending",
            }),
        }))
    }

    /// `GET /esim/{iccid}/qr-code` (decision 130): the QR code of the eSIM's LPA string,
    /// drawn when the answer is serialized (in the connection task, as provisioning's).
    pub(crate) fn esim_qr_code(&self, account: AccountIx, iccid: &str) -> Response {
        let esim = self.esim_of(account, iccid)?;
        let record = &self.esims[esim];
        let lpa_string = record.lpa.text();
        Ok(Reply::EsimQrCode(EsimQrCode {
            iccid: iccid.to_string(),
            qr_code: QrCodeDataUrl::new(lpa_string.clone()),
            direct_install_url: codes::direct_install_url(&lpa_string),
            lpa_string,
        }))
    }

    fn require_not_terminated(&self, esim: EsimIx) -> Result<(), ApiError> {
        if self.esims[esim].status == EsimStatus::Terminated {
            return Err(ApiError::new(ErrorCode::EsimAlreadyTerminated, "the eSIM is terminated"));
        }
        Ok(())
    }

    /// Refuses a change while the eSIM's balance is on its way back or into a group.
    fn require_no_pending(&self, esim: EsimIx) -> Result<(), ApiError> {
        match self.esims[esim].funding.pending() {
            Some(PendingReturn::Defund { .. }) => Err(ApiError::new(
                ErrorCode::DefundPending,
                "a balance return for this eSIM is in progress; try again once it has settled",
            )),
            Some(PendingReturn::Move { .. }) => {
                Err(ApiError::new(ErrorCode::MovePending, "a move of this eSIM into a group is in progress"))
            }
            None => Ok(()),
        }
    }

    pub(crate) fn enable(&mut self, account: AccountIx, iccid: &str) -> Response {
        let esim = self.esim_of(account, iccid)?;
        self.require_not_terminated(esim)?;
        self.require_no_pending(esim)?;
        if let Some(group) = self.esims[esim].funding.group() {
            // docs/architecture.md, rule 5: the same shape holds for a group defund.
            if self.groups[group].defund.is_some() {
                return Err(ApiError::new(ErrorCode::GroupDefundPending, "the group's balance return is in progress"));
            }
        }
        self.require_not_frozen(account)?;
        let balance = self.reseller_balance(account);
        if balance <= Decimal::ZERO {
            return Err(ApiError::new(
                ErrorCode::InsufficientBalance,
                format!("required more than 0 USD, available {balance} USD"),
            ));
        }
        let record = &mut self.esims[esim];
        if !record.data_enabled {
            record.data_enabled = true;
            let status = if record.activated_at.is_some() { EsimStatus::Active } else { EsimStatus::Pending };
            self.set_status(esim, status);
            self.emit_esim(esim, EsimEvent::DataResumed {});
        }
        Ok(Reply::DataToggled(DataToggled { success: true, iccid: iccid.to_string(), data_enabled: true }))
    }

    pub(crate) fn disable(&mut self, account: AccountIx, iccid: &str) -> Response {
        let esim = self.esim_of(account, iccid)?;
        self.require_not_terminated(esim)?;
        let record = &mut self.esims[esim];
        if record.data_enabled {
            record.data_enabled = false;
            self.set_status(esim, EsimStatus::Suspended);
            self.emit_esim(esim, EsimEvent::DataSuspended {});
        }
        Ok(Reply::DataToggled(DataToggled { success: true, iccid: iccid.to_string(), data_enabled: false }))
    }

    pub(crate) fn throttle(&mut self, account: AccountIx, iccid: &str, speed: String) -> Response {
        let esim = self.esim_of(account, iccid)?;
        if !is_valid_speed(&speed) {
            return Err(ApiError::validation(
                "speed must be NO_LIMIT, SPEED_100_KBPS to SPEED_3000_KBPS in 100 Kbps steps, or SPEED_3500_KBPS, SPEED_4000_KBPS, SPEED_4500_KBPS, SPEED_5000_KBPS",
            ));
        }
        self.require_not_terminated(esim)?;
        self.esims[esim].throttle = Throttle::parse(&speed).expect("a valid speed has a throttle");
        Ok(Reply::Throttled(Throttled { success: true, iccid: iccid.to_string(), throttle: speed }))
    }

    pub(crate) fn terminate(&mut self, account: AccountIx, iccid: &str) -> Response {
        let esim = self.esim_of(account, iccid)?;
        self.require_not_terminated(esim)?;
        let now = self.now;
        self.set_status(esim, EsimStatus::Terminated);
        let esim_record = &mut self.esims[esim];
        esim_record.terminated_at = Some(now);
        esim_record.data_enabled = false;
        if let Some(group) = esim_record.funding.leave_group() {
            // It leaves its group: subscribers tracking membership hear it first.
            let record = &mut self.groups[group];
            record.members.remove(&esim);
            let event = EsimEvent::GroupRemoved { group_id: record.id.clone(), group_name: record.name.clone() };
            self.emit_esim(esim, event);
        }
        let forfeited = self.forfeit_wallet(esim);
        self.emit_esim(
            esim,
            EsimEvent::Terminated {
                status: "terminated",
                terminated_at: now,
                forfeited_usd: money::displayed(forfeited),
            },
        );
        Ok(Reply::Terminated(Terminated { success: true, iccid: iccid.to_string(), status: "terminated" }))
    }

    /// `POST /esims/{iccid}/fund`. Which error wins, in order: 1. not found 404
    /// ESIM_NOT_FOUND; 2. the amount 400 VALIDATION_ERROR; 3. terminated 400
    /// ESIM_ALREADY_TERMINATED; 4. a group member 409 ESIM_IN_GROUP; 5. a return on its
    /// way 409 DEFUND_PENDING or MOVE_PENDING; 6. frozen 403 ACCOUNT_SUSPENDED; 7. the
    /// reseller balance 402 INSUFFICIENT_BALANCE. Then [`Engine::fund_wallet`]. (Before
    /// all of them, in builds with the `test-switches` feature only, the panic switch of
    /// decision 79.)
    pub(crate) fn fund(&mut self, account: AccountIx, iccid: &str, amount: Decimal) -> Response {
        #[cfg(feature = "test-switches")]
        if self.injected_bug == Some(crate::config::InjectedBug::PanicOnFund) {
            panic!("injected engine bug: a fund panics (test switch)");
        }
        let esim = self.esim_of(account, iccid)?;
        let cents = money::check_fund_amount(amount).map_err(ApiError::validation)?;
        self.require_not_terminated(esim)?;
        if let Some(group) = self.esims[esim].funding.group() {
            return Err(ApiError::new(
                ErrorCode::EsimInGroup,
                format!("the eSIM is a member of group {}; fund the group instead", self.groups[group].id),
            ));
        }
        self.require_no_pending(esim)?;
        self.require_not_frozen(account)?;
        let amount = amount.normalize();
        self.require_balance(account, amount)?;
        let shown = self.fund_wallet(WalletOwner::Esim(esim), amount, cents);
        Ok(Reply::Funded(Funded {
            success: true,
            iccid: iccid.to_string(),
            funded_usd: amount,
            wallet_balance_usd: shown,
            account_balance_remaining: self.reseller_balance(account),
        }))
    }

    /// `POST /esims/{iccid}/defund`. Which error wins, in order: 1. not found 404
    /// ESIM_NOT_FOUND; 2. terminated 400 ESIM_ALREADY_TERMINATED; 3. a group member 409
    /// ESIM_IN_GROUP; 4. a return on its way 409 DEFUND_ALREADY_PENDING or MOVE_PENDING;
    /// 5. never funded 400 WALLET_NOT_READY; 6. shows $0 400 NO_BALANCE_TO_RETURN; 7. the
    /// upstream pause 502 UPSTREAM_ERROR (in [`Engine::request_return`]).
    pub(crate) fn defund(&mut self, account: AccountIx, iccid: &str) -> Response {
        let esim = self.esim_of(account, iccid)?;
        self.require_not_terminated(esim)?;
        match &self.esims[esim].funding {
            Funding::Member { .. } => {
                return Err(ApiError::new(
                    ErrorCode::EsimInGroup,
                    "the eSIM is a group member; defund the group instead",
                ))
            }
            Funding::Returning(PendingReturn::Defund { .. }) => {
                return Err(ApiError::new(ErrorCode::DefundAlreadyPending, "a balance return is already in progress"))
            }
            Funding::Returning(PendingReturn::Move { .. }) => {
                return Err(ApiError::new(ErrorCode::MovePending, "a move of this eSIM into a group is in progress"))
            }
            Funding::NoWallet => {
                return Err(ApiError::new(ErrorCode::WalletNotReady, "the eSIM has no wallet yet: it was never funded"))
            }
            Funding::Wallet => {}
        }
        let estimate = self.shown_balance(WalletOwner::Esim(esim));
        if estimate.is_zero() {
            return Err(ApiError::new(ErrorCode::NoBalanceToReturn, "the wallet holds nothing to return"));
        }
        self.request_return(WalletOwner::Esim(esim), Return::Defund)?;
        Ok(Reply::DefundAccepted(DefundAccepted {
            success: true,
            iccid: iccid.to_string(),
            status: "defund_pending",
            estimated_return_usd: estimate,
            settles_in_minutes: self.settles_in_minutes(),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::is_valid_speed;

    #[test]
    fn throttle_speeds_are_exactly_the_spec_values() {
        let mut valid: Vec<String> = vec!["NO_LIMIT".into()];
        valid.extend((1..=30).map(|k| format!("SPEED_{}_KBPS", k * 100)));
        valid.extend([3_500, 4_000, 4_500, 5_000].map(|k| format!("SPEED_{k}_KBPS")));
        for speed in &valid {
            assert!(is_valid_speed(speed), "{speed}");
        }
        for speed in [
            "SPEED_50_KBPS",
            "SPEED_3100_KBPS",
            "SPEED_150_KBPS",
            "SPEED_0100_KBPS",
            "speed_100_kbps",
            "",
            "SPEED_6000_KBPS",
            "SPEED_KBPS",
            "NO_LIMIT ",
        ] {
            assert!(!is_valid_speed(speed), "{speed}");
        }
    }
}
