//! The upstream network model (driven by the sandbox API and the simulation): profile
//! installs, metered usage that stops at $0, and injectable faults. The wallet it
//! charges, and its reporting pipeline, are in `wallet`.

use crate::command::SandboxOp;
use crate::engine::Engine;
use crate::error::{ApiError, ErrorCode};
use crate::event::EsimEvent;
use crate::limits;
use crate::rates::RateTable;
use crate::reply::*;
use crate::state::*;
use rust_decimal::{Decimal, RoundingStrategy};
use serde_json::json;

impl Engine {
    pub(crate) fn handle_sandbox(&mut self, op: &SandboxOp) -> Response {
        match op {
            SandboxOp::Install { iccid } => self.install(iccid),
            SandboxOp::Usage { iccid, mb, country, operator } => self.usage(iccid, *mb, country, operator.as_deref()),
            SandboxOp::SetFaults { upstream_pause_fails, network_read_fails } => {
                if let Some(value) = *upstream_pause_fails {
                    self.faults.upstream_pause_fails = value;
                }
                if let Some(value) = *network_read_fails {
                    self.faults.network_read_fails = value;
                }
                Ok(Reply::AdminUpdated(json!({
                    "upstream_pause_fails": self.faults.upstream_pause_fails,
                    "network_read_fails": self.faults.network_read_fails,
                })))
            }
        }
    }

    fn any_esim(&self, iccid: &str) -> Result<EsimIx, ApiError> {
        crate::ids::iccid_number(iccid)
            .and_then(|n| self.iccid_index.get(n))
            .ok_or_else(|| ApiError::new(ErrorCode::EsimNotFound, format!("no eSIM with ICCID {iccid}")))
    }

    /// The customer installs and boots the profile; the first time it becomes ENABLED.
    fn install(&mut self, iccid: &str) -> Response {
        let esim = self.any_esim(iccid)?;
        let now = self.now;
        let record = &mut self.esims[esim];
        if record.status == EsimStatus::Terminated {
            return Err(ApiError::new(ErrorCode::EsimAlreadyTerminated, "the eSIM is terminated"));
        }
        if record.activated_at.is_none() {
            record.euicc_network = EuiccState::Enabled;
            record.euicc_cached = EuiccState::Enabled;
            record.activated_at = Some(now);
            if record.status == EsimStatus::Pending {
                self.set_status(esim, EsimStatus::Active);
            }
            let status = self.esims[esim].status.as_str();
            self.emit_esim(esim, EsimEvent::Activated { activated_at: now, euicc_state: "ENABLED", status });
        }
        let record = &self.esims[esim];
        Ok(Reply::Installed(Installed {
            success: true,
            iccid: iccid.to_string(),
            status: record.status.as_str(),
            euicc_state: record.euicc_network.as_str(),
            activated_at: record.activated_at,
        }))
    }

    /// Why data cannot flow for this eSIM right now, if it cannot.
    fn data_blocked(&self, esim: EsimIx) -> Option<&'static str> {
        let record = &self.esims[esim];
        if record.status == EsimStatus::Terminated {
            return Some("terminated");
        }
        if record.euicc_network != EuiccState::Enabled {
            return Some("profile_not_installed");
        }
        if !record.data_enabled {
            return Some("data_disabled");
        }
        if self.accounts[record.account].frozen {
            return Some("account_frozen");
        }
        // Data pauses while a return of the wallet it spends is on its way.
        let paused = match &record.funding {
            Funding::Member { group, .. } => self.groups[*group].defund.is_some(),
            Funding::Returning(_) => true,
            Funding::NoWallet | Funding::Wallet => false,
        };
        if paused {
            return Some("data_paused");
        }
        None
    }

    /// A device uses `mb` of data in a country on an operator (default: the cheapest).
    /// Charged at the reseller per-MB price; cut off where the credit runs out.
    fn usage(&mut self, iccid: &str, mb: Decimal, country: &str, operator: Option<&str>) -> Response {
        let esim = self.any_esim(iccid)?;
        if mb <= Decimal::ZERO || mb > Decimal::from(limits::MAX_USAGE_MB) {
            return Err(ApiError::validation(format!("mb must be above 0 and at most {}", limits::MAX_USAGE_MB)));
        }
        let table = RateTable::builtin();
        let Some(place) = table.by_iso2(country) else {
            return Err(ApiError::validation(format!("country {country:?} is not an ISO2 code of the rates table")));
        };
        let Some(network) = table.network(country, operator) else {
            return Err(ApiError::validation(format!(
                "operator {:?} does not serve {}",
                operator.unwrap_or(""),
                place.iso2
            )));
        };
        let stopped = |reason| {
            Ok(Reply::Usage(UsageResult {
                used_mb: Decimal::ZERO,
                charged_usd: Decimal::ZERO,
                data_stopped: true,
                reason: Some(reason),
            }))
        };
        if !place.has_data {
            return stopped("no_data_coverage");
        }
        if let Some(reason) = self.data_blocked(esim) {
            return stopped(reason);
        }
        let owner = match self.esims[esim].funding.group() {
            Some(group) => WalletOwner::Group(group),
            None => WalletOwner::Esim(esim),
        };
        let slots = self.wallet(owner).slots;
        let credit = self.ledger.balance(slots.credit);
        if credit.is_zero() {
            return stopped("no_credit");
        }
        let per_mb = network.per_mb_usd;
        let wanted = mb.checked_mul(per_mb).ok_or_else(|| ApiError::validation("mb is out of range"))?;
        let (used_mb, charged, data_stopped) = if wanted >= credit {
            let used = (credit / per_mb).round_dp_with_strategy(6, RoundingStrategy::ToZero).min(mb);
            (used, credit, true)
        } else {
            (mb, wanted, false)
        };
        self.charge_usage(owner, charged);
        Ok(Reply::Usage(UsageResult {
            used_mb: used_mb.normalize(),
            charged_usd: charged.normalize(),
            data_stopped,
            reason: data_stopped.then_some("no_credit"),
        }))
    }
}
