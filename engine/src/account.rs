//! Reseller accounts: the operator's admin commands, the reseller balance and its
//! events, and auto-refill with its simulated card.

use crate::command::{AdminOp, CardBehavior};
use crate::engine::Engine;
use crate::error::{ApiError, ErrorCode};
use crate::event::{BalanceEvent, TopUpSource};
use crate::ledger::{Reason, Slot};
use crate::limits;
use crate::money;
use crate::random::Purpose;
use crate::reply::*;
use crate::state::*;
use crate::time::Millis;
use crate::timer::Timer;
use crate::wallet::{CrossingAlarm, Rearm};
use rust_decimal::Decimal;
use serde_json::json;

impl Engine {
    pub(crate) fn handle_admin(&mut self, op: AdminOp) -> Response {
        match op {
            AdminOp::CreateAccount { contact_email, company_name, api_key_digest, api_key_prefix } => {
                self.create_account(contact_email, company_name, api_key_digest, api_key_prefix)
            }
            AdminOp::SetInsecureWebhooks { allowed } => {
                self.config.allow_insecure_webhooks = allowed;
                Ok(Reply::AdminUpdated(json!({ "allow_insecure_webhooks": allowed })))
            }
            AdminOp::TopUp { account_id, amount_usd } => {
                let account = self.account_by_id(&account_id)?;
                self.top_up(account, amount_usd)
            }
            AdminOp::CreateKey { account_id, api_key_digest, api_key_prefix } => {
                let account = self.account_by_id(&account_id)?;
                self.add_api_key(account, api_key_digest, api_key_prefix);
                Ok(Reply::KeyCreated(KeyCreated { api_key: String::new() }))
            }
            AdminOp::RevokeKey { api_key_digest } => self.admin_revoke_key(api_key_digest),
            AdminOp::Freeze { account_id, frozen } => {
                let account = self.account_by_id(&account_id)?;
                self.accounts[account].frozen = frozen;
                Ok(Reply::AdminUpdated(json!({ "account_id": account_id, "data_suspended": frozen })))
            }
            AdminOp::SetAutoRefill { account_id, enabled, amount_usd, card } => {
                self.admin_set_auto_refill(account_id, enabled, amount_usd, card)
            }
            AdminOp::SetLimits { account_id, max_groups, max_group_size } => {
                self.set_limits(account_id, max_groups, max_group_size)
            }
            AdminOp::SetInventory { available } => {
                self.inventory = available;
                Ok(Reply::AdminUpdated(json!({ "available": available })))
            }
            AdminOp::GrantInventory { count } => {
                // Saturating: a pool never holds more than u64, but a replayed journal
                // must not panic whatever it holds.
                self.inventory = self.inventory.saturating_add(count);
                Ok(Reply::AdminUpdated(json!({ "granted": count, "available": self.inventory })))
            }
        }
    }

    /// The operator revokes a key by its digest; revoking a revoked key
    /// again (within its retention) changes nothing.
    fn admin_revoke_key(&mut self, digest: crate::secret::KeyDigest) -> Response {
        match self.keys.get(&digest.id()).filter(|record| record.digest == digest) {
            Some(_) => {
                self.revoke_key(digest.id());
                Ok(Reply::Success(Success { success: true }))
            }
            None => Err(ApiError::new(ErrorCode::NotFound, "unknown API key")),
        }
    }

    /// The operator's auto-refill settings of an account: at least one of them given.
    fn admin_set_auto_refill(
        &mut self,
        account_id: String,
        enabled: Option<bool>,
        amount_usd: Option<Decimal>,
        card: Option<CardBehavior>,
    ) -> Response {
        let account = self.account_by_id(&account_id)?;
        if enabled.is_none() && amount_usd.is_none() && card.is_none() {
            return Err(ApiError::validation("give at least one of enabled, amount_usd, card"));
        }
        self.set_auto_refill(account, enabled, amount_usd, card)?;
        let refill = &self.accounts[account].auto_refill;
        Ok(Reply::AdminUpdated(json!({
            "account_id": account_id,
            "enabled": refill.enabled,
            "amount_usd": refill.amount,
            "card": refill.card,
        })))
    }

    /// The operator's group limits of an account, each 1 to 100000 when given.
    fn set_limits(&mut self, account_id: String, max_groups: Option<u32>, max_group_size: Option<u32>) -> Response {
        let account = self.account_by_id(&account_id)?;
        for (name, value) in [("max_groups", max_groups), ("max_group_size", max_group_size)] {
            if value.is_some_and(|v| !(1..=limits::OPERATOR_LIMIT_MAX).contains(&v)) {
                return Err(ApiError::validation(format!("{name} must be 1 to {}", limits::OPERATOR_LIMIT_MAX)));
            }
        }
        let record = &mut self.accounts[account];
        record.max_groups = max_groups.unwrap_or(record.max_groups);
        record.max_group_size = max_group_size.unwrap_or(record.max_group_size);
        Ok(Reply::AdminUpdated(json!({
            "account_id": account_id,
            "max_groups": record.max_groups,
            "max_group_size": record.max_group_size,
        })))
    }

    fn create_account(
        &mut self,
        contact_email: String,
        company_name: Option<String>,
        api_key_digest: crate::secret::KeyDigest,
        api_key_prefix: String,
    ) -> Response {
        let email = contact_email.trim();
        if email.len() > limits::MAX_TEXT_LEN || !email.contains('@') || email.starts_with('@') || email.ends_with('@')
        {
            return Err(ApiError::validation("contact_email must be an email address"));
        }
        if company_name.as_ref().is_some_and(|n| n.len() > limits::MAX_TEXT_LEN) {
            return Err(ApiError::validation("company_name is longer than 256 characters"));
        }
        let index = AccountIx(self.accounts.len() as u32);
        let id = self.random_id(Purpose::ResourceId, "acc_", 8);
        let slots = self.ledger.open_account(index);
        if self.status_counts_built() {
            self.status_counts.push([0; 4]);
        }
        self.accounts.push(Account {
            id: id.clone(),
            contact_email: email.to_string(),
            company_name,
            created_at: self.now,
            frozen: false,
            slots,
            lifetime_topup: Decimal::ZERO,
            lifetime_usage: Decimal::ZERO,
            // A new account starts disarmed (decision 16).
            balance_alarm: CrossingAlarm::DISARMED,
            esims: Vec::new(),
            groups: Vec::new(),
            webhooks: Vec::new(),
            max_groups: limits::MAX_GROUPS,
            max_group_size: limits::MAX_GROUP_SIZE,
            auto_refill: AutoRefill {
                enabled: false,
                amount: Decimal::new(50, 0),
                card: CardBehavior::Ok,
                recent_charges: Vec::new(),
                charge_in_flight: None,
                last_error: None,
            },
        });
        self.account_index.insert(id.clone(), index);
        self.add_api_key(index, api_key_digest, api_key_prefix);
        let account = self.account_record(index)?;
        // The shell, which drew the key, shows it in the answer.
        Ok(Reply::AccountCreated(AccountCreated { account_id: id, api_key: String::new(), account }))
    }

    pub(crate) fn account_by_id(&self, account_id: &str) -> Result<AccountIx, ApiError> {
        self.account_index
            .get(account_id)
            .copied()
            .ok_or_else(|| ApiError::new(ErrorCode::AccountNotFound, format!("no account {account_id}")))
    }

    fn top_up(&mut self, account: AccountIx, amount: Decimal) -> Response {
        match money::to_cents(amount) {
            Some(cents) if (1_000..=100_000_000).contains(&cents) => {}
            _ => return Err(ApiError::validation("amount_usd must be at least 10 (and at most 1000000, 2 decimals)")),
        }
        let amount = amount.normalize();
        assert!(amount >= Decimal::TEN, "a top-up brings at least $10");
        let slots = self.accounts[account].slots;
        self.ledger.transfer(slots.world, slots.reseller, amount, Reason::TopUp);
        self.accounts[account].lifetime_topup += amount;
        let topup_id = self.random_id(Purpose::PaymentId, "top_", 12);
        self.after_reseller_credit(account);
        let balance = self.reseller_balance(account);
        self.emit_balance(
            account,
            BalanceEvent::ToppedUp {
                amount_usd: amount,
                new_balance_usd: balance,
                balance_usd: balance,
                source: TopUpSource::Manual,
                topup_id: Some(topup_id.clone()),
            },
        );
        Ok(Reply::ToppedUp(ToppedUp { topup_id, amount_usd: amount, balance_usd: balance }))
    }

    // ----- the reseller balance -----

    pub(crate) fn reseller_balance(&self, account: AccountIx) -> Decimal {
        self.ledger.balance(self.accounts[account].slots.reseller).normalize()
    }

    /// Checks that the reseller balance covers `amount` (402 with both amounts otherwise).
    pub(crate) fn require_balance(&self, account: AccountIx, amount: Decimal) -> Result<(), ApiError> {
        // Compared as they are (scale does not matter to Decimal order); normalized only
        // to be shown.
        let available = self.ledger.balance(self.accounts[account].slots.reseller);
        if available < amount {
            return Err(ApiError::new(
                ErrorCode::InsufficientBalance,
                format!("required {} USD, available {} USD", amount.normalize(), available.normalize()),
            ));
        }
        Ok(())
    }

    pub(crate) fn require_not_frozen(&self, account: AccountIx) -> Result<(), ApiError> {
        if self.accounts[account].frozen {
            return Err(ApiError::new(
                ErrorCode::AccountSuspended,
                "the account is frozen by the operator (data_suspended); contact support",
            ));
        }
        Ok(())
    }

    /// Spends from the reseller balance into `to`; counts in `lifetime_usage_usd` and
    /// raises balance.low / balance.depleted on the way down.
    pub(crate) fn spend(&mut self, account: AccountIx, to: Slot, amount: Decimal, reason: Reason) {
        let reseller = self.accounts[account].slots.reseller;
        self.ledger.transfer(reseller, to, amount, reason);
        self.after_reseller_debit(account);
    }

    /// balance.low / balance.depleted once per crossing, on every debit (decision 16).
    pub(crate) fn after_reseller_debit(&mut self, account: AccountIx) {
        let balance = self.ledger.balance(self.accounts[account].slots.reseller);
        let threshold = money::low_balance_threshold_usd();
        let alarms = self.accounts[account].balance_alarm.observe(balance, threshold, Rearm::AtThreshold);
        if alarms.low {
            self.emit_balance(
                account,
                BalanceEvent::Low {
                    balance_usd: balance.normalize(),
                    threshold_usd: money::low_balance_threshold_usd(),
                },
            );
        }
        if alarms.depleted {
            self.emit_balance(account, BalanceEvent::Depleted { balance_usd: balance.normalize() });
        }
    }

    /// Re-arms the reseller balance events once the balance is back up.
    pub(crate) fn after_reseller_credit(&mut self, account: AccountIx) {
        let balance = self.reseller_balance(account);
        let threshold = money::low_balance_threshold_usd();
        self.accounts[account].balance_alarm.rearm(balance, threshold, Rearm::AtThreshold);
    }

    pub(crate) fn wallet_balance(&self, account: AccountIx) -> Response {
        let record = &self.accounts[account];
        Ok(Reply::WalletBalance(WalletBalance {
            balance_usd: self.reseller_balance(account),
            lifetime_topup_usd: record.lifetime_topup.normalize(),
            lifetime_usage_usd: record.lifetime_usage.normalize(),
            data_suspended: record.frozen,
            currency: "USD",
        }))
    }

    pub(crate) fn account_record(&self, account: AccountIx) -> Result<AccountRecord, ApiError> {
        let record = &self.accounts[account];
        let active = self.status_count(account, EsimStatus::Active);
        Ok(AccountRecord {
            id: record.id.clone(),
            company_name: record.company_name.clone(),
            contact_email: record.contact_email.clone(),
            balance_usd: self.reseller_balance(account),
            esim_count: EsimCount { active, total: record.esims.len() as u64 },
            account_status: if record.frozen { "suspended" } else { "active" },
            data_suspended: record.frozen,
            created_at: record.created_at,
            auto_refill_enabled: record.auto_refill.enabled,
            auto_refill_last_error: record.auto_refill.last_error.as_ref().map(|RefillError { code, message, at }| {
                AutoRefillError { code: code.clone(), message: message.clone(), at: *at }
            }),
        })
    }

    // ----- auto-refill -----

    /// Changes the given auto-refill settings (the operator's and the reseller's calls
    /// share it): all or nothing, the amount checked first.
    fn set_auto_refill(
        &mut self,
        account: AccountIx,
        enabled: Option<bool>,
        amount_usd: Option<Decimal>,
        card: Option<CardBehavior>,
    ) -> Result<(), ApiError> {
        Self::check_refill_amount(amount_usd)?;
        let refill = &mut self.accounts[account].auto_refill;
        if let Some(enabled) = enabled {
            refill.enabled = enabled;
        }
        if let Some(amount) = amount_usd {
            refill.amount = amount.normalize();
        }
        if let Some(card) = card {
            refill.card = card;
        }
        Ok(())
    }

    /// An auto-refill amount must be 10 to 1,000,000 USD in whole cents.
    fn check_refill_amount(amount_usd: Option<Decimal>) -> Result<(), ApiError> {
        match amount_usd.map(money::to_cents) {
            None => Ok(()),
            Some(Some(cents)) if (1_000..=100_000_000).contains(&cents) => Ok(()),
            Some(_) => Err(ApiError::validation("amount_usd must be 10 to 1000000 with at most 2 decimals")),
        }
    }

    /// `GET /auto-refill` (decision 129): the settings and what the daily limit has left.
    pub(crate) fn auto_refill_settings(&self, account: AccountIx) -> Response {
        let refill = &self.accounts[account].auto_refill;
        let now = self.now;
        let charges_last_24h = refill.recent_charges.iter().filter(|at| now.0 - at.0 < Millis::DAY).count();
        Ok(Reply::AutoRefill(AutoRefillSettings {
            enabled: refill.enabled,
            amount_usd: refill.amount,
            card: refill.card,
            charges_last_24h: charges_last_24h as u64,
            max_charges_per_24h: limits::AUTO_REFILL_MAX_PER_DAY as u64,
            charge_in_flight_usd: refill.charge_in_flight,
            last_error: refill.last_error.as_ref().map(|RefillError { code, message, at }| AutoRefillError {
                code: code.clone(),
                message: message.clone(),
                at: *at,
            }),
        }))
    }

    /// `PUT /auto-refill` (decision 129): the reseller turns auto-refill on or off and
    /// sets its amount; the saved card is not the reseller's to change here. A frozen
    /// account may not turn it on (403 after the body's checks); turning it off or
    /// changing the amount only spends less, and stays open (decision 233).
    pub(crate) fn update_auto_refill(
        &mut self,
        account: AccountIx,
        enabled: Option<bool>,
        amount_usd: Option<Decimal>,
    ) -> Response {
        if enabled.is_none() && amount_usd.is_none() {
            return Err(ApiError::validation("give at least one of enabled, amount_usd"));
        }
        Self::check_refill_amount(amount_usd)?;
        if enabled == Some(true) {
            self.require_not_frozen(account)?;
        }
        self.set_auto_refill(account, enabled, amount_usd, None)?;
        self.auto_refill_settings(account)
    }

    /// Starts a card charge if auto-refill is on and none is on its way. Returns whether
    /// a charge is now on its way. Only real spend calls this, never a transfer.
    pub(crate) fn start_auto_refill(&mut self, account: AccountIx) -> bool {
        let now = self.now;
        let refill = &mut self.accounts[account].auto_refill;
        if !refill.enabled {
            return false;
        }
        if refill.charge_in_flight.is_some() {
            return true;
        }
        refill.recent_charges.retain(|at| now.0 - at.0 < Millis::DAY);
        let amount = refill.amount;
        if refill.recent_charges.len() >= limits::AUTO_REFILL_MAX_PER_DAY {
            let message = format!(
                "auto-refill charged {} times in 24 hours and switched itself off; top up manually and re-enable it",
                limits::AUTO_REFILL_MAX_PER_DAY
            );
            refill.enabled = false;
            refill.last_error =
                Some(RefillError { code: "daily_limit_reached".into(), message: message.clone(), at: now });
            let balance = self.reseller_balance(account);
            let event = BalanceEvent::AutoRefillFailed {
                amount_usd: amount,
                error_code: "daily_limit_reached",
                error_message: message,
                balance_usd: balance,
            };
            self.emit_balance(account, event);
            self.release_waiting_group_events(account, true);
            return false;
        }
        refill.recent_charges.push(now);
        assert!(refill.recent_charges.len() <= limits::AUTO_REFILL_MAX_PER_DAY, "at most the daily charges");
        refill.charge_in_flight = Some(amount);
        let deadline = now.plus_ms(self.config.card_settle_ms);
        self.schedule(deadline, Timer::CardSettles(account));
        true
    }

    pub(crate) fn card_settles(&mut self, account: AccountIx) {
        let refill = &mut self.accounts[account].auto_refill;
        // One charge at a time (a second waits for this one), and only this timer ends it.
        let amount = refill.charge_in_flight.take().expect("a card timer settles the charge in flight");
        let failure = match refill.card {
            CardBehavior::Ok => None,
            CardBehavior::Declined => Some(("card_declined", "the card was declined")),
            CardBehavior::RequiresAction => {
                Some(("authentication_required", "the card needs extra authentication (3-D Secure)"))
            }
            CardBehavior::Expired => Some(("expired_card", "the card has expired")),
        };
        if let Some((code, message)) = failure {
            refill.enabled = false;
            refill.last_error =
                Some(RefillError { code: code.to_string(), message: message.to_string(), at: self.now });
            let balance = self.reseller_balance(account);
            let event = BalanceEvent::AutoRefillFailed {
                amount_usd: amount,
                error_code: code,
                error_message: message.to_string(),
                balance_usd: balance,
            };
            self.emit_balance(account, event);
            self.release_waiting_group_events(account, true);
            return;
        }
        let slots = self.accounts[account].slots;
        self.ledger.transfer(slots.world, slots.reseller, amount, Reason::AutoRefill);
        self.accounts[account].lifetime_topup += amount;
        self.after_reseller_credit(account);
        let payment_intent_id = self.random_id(Purpose::PaymentId, "pi_", 12);
        let balance = self.reseller_balance(account);
        self.emit_balance(
            account,
            BalanceEvent::ToppedUp {
                amount_usd: amount,
                new_balance_usd: balance,
                balance_usd: balance,
                source: TopUpSource::AutoRefill,
                topup_id: None,
            },
        );
        self.emit_balance(
            account,
            BalanceEvent::AutoRefillSucceeded { amount_usd: amount, payment_intent_id, balance_usd: balance },
        );
        self.release_waiting_group_events(account, false);
    }
}
