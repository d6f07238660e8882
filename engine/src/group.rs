//! Shared-balance groups: records, members, the preconditions of fund, defund and
//! moves (their wallet rules are in `wallet`), and group.balance_low held back for
//! auto-refill.

use crate::engine::Engine;
use crate::error::{ApiError, ErrorCode};
use crate::event::{EsimEvent, GroupEvent};
use crate::limits::page;
use crate::money;
use crate::reply::*;
use crate::state::*;
use crate::wallet::{CrossingAlarm, Return};
use rust_decimal::Decimal;

/// Longest group name.
const MAX_GROUP_NAME_LEN: usize = 100;

fn check_name(name: &str) -> Result<String, ApiError> {
    let name = name.trim();
    if name.is_empty() || name.chars().count() > MAX_GROUP_NAME_LEN {
        return Err(ApiError::validation("name must be 1 to 100 characters"));
    }
    Ok(name.to_string())
}

/// Threshold: 0 to 10000 USD; refill amount: 0.01 to 10000 USD (a fund call's bounds).
fn check_group_amount(field: &str, value: Decimal, allow_zero: bool) -> Result<Decimal, ApiError> {
    let ok = match money::to_cents(value) {
        Some(0) => allow_zero,
        Some(cents) => (1..=money::MAX_FUND_CENTS).contains(&cents),
        None => false,
    };
    if !ok {
        let low = if allow_zero { "0" } else { "0.01" };
        return Err(ApiError::validation(format!("{field} must be {low} to 10000 with at most 2 decimals")));
    }
    Ok(value.normalize())
}

impl Engine {
    pub(crate) fn group_of(&self, account: AccountIx, group_id: &str) -> Result<GroupIx, ApiError> {
        match self.group_index.get(group_id) {
            Some(&group) if self.groups[group].account == account => Ok(group),
            _ => Err(ApiError::new(ErrorCode::GroupNotFound, format!("no group {group_id}"))),
        }
    }

    pub(crate) fn require_group_room(&self, group: GroupIx) -> Result<(), ApiError> {
        let record = &self.groups[group];
        let max = self.accounts[record.account].max_group_size;
        if record.members.len() as u64 + u64::from(record.incoming_moves) >= u64::from(max) {
            return Err(ApiError::new(
                ErrorCode::GroupFull,
                format!("the group already holds the maximum of {max} eSIMs"),
            ));
        }
        Ok(())
    }

    pub(crate) fn group_record(&self, group: GroupIx) -> GroupRecord {
        let record = &self.groups[group];
        GroupRecord {
            id: record.id.clone(),
            name: record.name.clone(),
            balance_usd: self.shown_balance(WalletOwner::Group(group)),
            low_balance_threshold_usd: record.low_balance_threshold,
            refill_amount_usd: record.refill_amount,
            esim_count: record.members.len() as u64,
            total_data_charged_usd: self.ledger.balance(record.wallet.slots.reported).normalize(),
            status: if record.defund.is_some() { "defund_pending" } else { "active" },
            created_at: record.created_at,
            updated_at: record.updated_at,
        }
    }

    pub(crate) fn list_groups(&self, account: AccountIx) -> Response {
        let groups: Vec<GroupRecord> =
            self.accounts[account].groups.iter().rev().map(|&g| self.group_record(g)).collect();
        Ok(Reply::GroupList(GroupList { total: groups.len() as u64, groups }))
    }

    pub(crate) fn create_group(
        &mut self,
        account: AccountIx,
        name: String,
        threshold: Option<Decimal>,
        refill: Option<Decimal>,
    ) -> Response {
        let name = check_name(&name)?;
        let threshold = check_group_amount("low_balance_threshold_usd", threshold.unwrap_or(Decimal::TEN), true)?;
        let refill = check_group_amount("refill_amount_usd", refill.unwrap_or(Decimal::new(25, 0)), false)?;
        self.require_unique_name(account, &name, None)?;
        let max = self.accounts[account].max_groups;
        if self.accounts[account].groups.len() as u32 >= max {
            return Err(ApiError::new(
                ErrorCode::GroupLimitReached,
                format!("the account already has the maximum of {max} groups"),
            ));
        }
        let id = self.random_uuid();
        let slots = self.ledger.open_group_wallet(account);
        let group = GroupIx(self.groups.len() as u32);
        // A new group is at $0: nothing to cross until it is funded.
        let wallet = Wallet::new(slots, CrossingAlarm::DISARMED);
        self.groups.push(Group {
            id: id.clone(),
            account,
            name,
            low_balance_threshold: threshold,
            refill_amount: refill,
            wallet,
            members: Default::default(),
            incoming_moves: 0,
            defund: None,
            low_event_waiting_until: None,
            created_at: self.now,
            updated_at: self.now,
        });
        let previous = self.group_index.insert(id, group);
        assert!(previous.is_none(), "group ids are unique");
        self.accounts[account].groups.push(group);
        assert!(self.accounts[account].groups.len() as u32 <= max, "an account holds at most its groups");
        Ok(Reply::GroupCreated(self.group_record(group)))
    }

    fn require_unique_name(&self, account: AccountIx, name: &str, except: Option<GroupIx>) -> Result<(), ApiError> {
        let taken = self.accounts[account].groups.iter().any(|&g| Some(g) != except && self.groups[g].name == name);
        if taken {
            return Err(ApiError::new(ErrorCode::GroupNameTaken, format!("a group named {name:?} already exists")));
        }
        Ok(())
    }

    pub(crate) fn get_group(&self, account: AccountIx, group_id: &str) -> Response {
        let group = self.group_of(account, group_id)?;
        Ok(Reply::Group(self.group_record(group)))
    }

    pub(crate) fn update_group(
        &mut self,
        account: AccountIx,
        group_id: &str,
        name: Option<String>,
        threshold: Option<Decimal>,
        refill: Option<Decimal>,
    ) -> Response {
        let group = self.group_of(account, group_id)?;
        if name.is_none() && threshold.is_none() && refill.is_none() {
            return Err(ApiError::validation(
                "give at least one of name, low_balance_threshold_usd, refill_amount_usd",
            ));
        }
        let name = name.map(|n| check_name(&n)).transpose()?;
        let threshold = threshold.map(|t| check_group_amount("low_balance_threshold_usd", t, true)).transpose()?;
        let refill = refill.map(|r| check_group_amount("refill_amount_usd", r, false)).transpose()?;
        if let Some(name) = &name {
            self.require_unique_name(account, name, Some(group))?;
        }
        let now = self.now;
        let record = &mut self.groups[group];
        if let Some(name) = name {
            record.name = name;
        }
        if let Some(threshold) = threshold {
            record.low_balance_threshold = threshold;
        }
        if let Some(refill) = refill {
            record.refill_amount = refill;
        }
        record.updated_at = now;
        if threshold.is_some() {
            // The balance may now be above the threshold (re-arms) or below it (notifies).
            self.check_group_alarms(group);
        }
        Ok(Reply::Group(self.group_record(group)))
    }

    /// `POST /groups/{group_id}/fund`. Which error wins, in order: 1. not found 404
    /// GROUP_NOT_FOUND; 2. the amount 400 VALIDATION_ERROR; 3. a return on its way 409
    /// GROUP_DEFUND_PENDING; 4. frozen 403 ACCOUNT_SUSPENDED; 5. the reseller balance 402
    /// INSUFFICIENT_BALANCE. Then [`Engine::fund_wallet`] and `group.funded`.
    pub(crate) fn fund_group(&mut self, account: AccountIx, group_id: &str, amount: Decimal) -> Response {
        let group = self.group_of(account, group_id)?;
        let cents = money::check_fund_amount(amount).map_err(ApiError::validation)?;
        if self.groups[group].defund.is_some() {
            return Err(ApiError::new(ErrorCode::GroupDefundPending, "a group balance return is in progress"));
        }
        self.require_not_frozen(account)?;
        let amount = amount.normalize();
        self.require_balance(account, amount)?;
        let shown = self.fund_wallet(WalletOwner::Group(group), amount, cents);
        self.groups[group].updated_at = self.now;
        self.emit_group(group, GroupEvent::Funded { amount_usd: amount });
        Ok(Reply::GroupFunded(GroupFunded {
            success: true,
            group_id: group_id.to_string(),
            funded_usd: amount,
            balance_usd: shown,
            account_balance_remaining: self.reseller_balance(account),
        }))
    }

    /// `POST /groups/{group_id}/defund`. Which error wins, in order: 1. not found 404
    /// GROUP_NOT_FOUND; 2. a return on its way 409 GROUP_DEFUND_PENDING; 3. shows $0 400
    /// NO_BALANCE_TO_RETURN; 4. the upstream pause 502 UPSTREAM_ERROR (in
    /// [`Engine::request_return`]).
    pub(crate) fn defund_group(&mut self, account: AccountIx, group_id: &str) -> Response {
        let group = self.group_of(account, group_id)?;
        if self.groups[group].defund.is_some() {
            return Err(ApiError::new(ErrorCode::GroupDefundPending, "a group balance return is already in progress"));
        }
        let estimate = self.shown_balance(WalletOwner::Group(group));
        if estimate.is_zero() {
            return Err(ApiError::new(ErrorCode::NoBalanceToReturn, "the group holds nothing to return"));
        }
        self.request_return(WalletOwner::Group(group), Return::Defund)?;
        Ok(Reply::GroupDefundAccepted(GroupDefundAccepted {
            success: true,
            group_id: group_id.to_string(),
            status: "defund_pending",
            estimated_return_usd: estimate,
            settles_in_minutes: self.settles_in_minutes(),
        }))
    }

    pub(crate) fn list_group_esims(
        &self,
        account: AccountIx,
        group_id: &str,
        limit: Option<u64>,
        offset: Option<u64>,
    ) -> Response {
        let group = self.group_of(account, group_id)?;
        let (limit, offset) = page(limit, offset)?;
        let members = &self.groups[group].members;
        let page: Vec<EsimIx> =
            members.iter().skip(offset.min(usize::MAX as u64) as usize).take(limit as usize).copied().collect();
        let esims = self.esim_items(&page);
        Ok(Reply::GroupMembers(GroupMembers {
            group_id: group_id.to_string(),
            esims,
            total: members.len() as u64,
            limit,
            offset,
        }))
    }

    /// `POST /groups/{group_id}/esims`. Which error wins, in order: 1. group not found
    /// 404 GROUP_NOT_FOUND; 2. eSIM not found 404 ESIM_NOT_FOUND; 3. terminated 400
    /// ESIM_ALREADY_TERMINATED; 4. in a group already 409 ESIM_ALREADY_IN_GROUP; 5. a
    /// return on its way 409 MOVE_PENDING or DEFUND_PENDING; 6. no room 429 GROUP_FULL.
    /// A balance that shows $0 joins at once (decision 29); otherwise 7. the upstream
    /// pause 502 UPSTREAM_ERROR (in [`Engine::request_return`]), and the move waits.
    pub(crate) fn add_group_esim(&mut self, account: AccountIx, group_id: &str, iccid: &str) -> Response {
        let group = self.group_of(account, group_id)?;
        let esim = self.esim_of(account, iccid)?;
        let record = &self.esims[esim];
        if record.status == EsimStatus::Terminated {
            return Err(ApiError::new(ErrorCode::EsimAlreadyTerminated, "the eSIM is terminated"));
        }
        if let Some(current) = record.funding.group() {
            return Err(ApiError::new(
                ErrorCode::EsimAlreadyInGroup,
                format!("the eSIM is already a member of group {}", self.groups[current].id),
            ));
        }
        match record.funding.pending() {
            Some(PendingReturn::Move { .. }) => {
                return Err(ApiError::new(ErrorCode::MovePending, "a move of this eSIM is already in progress"))
            }
            Some(PendingReturn::Defund { .. }) => {
                return Err(ApiError::new(ErrorCode::DefundPending, "a balance return for this eSIM is in progress"))
            }
            None => {}
        }
        self.require_group_room(group)?;
        if self.shown_balance(WalletOwner::Esim(esim)).is_zero() {
            // Nothing worth returning: a sub-cent rest goes to dust, the move is immediate.
            self.drop_sub_cent_credit(esim);
            self.join_group(esim, group, None);
            return Ok(Reply::GroupMemberAdded(GroupMemberChange {
                success: true,
                group_id: group_id.to_string(),
                iccid: iccid.to_string(),
                status: "assigned",
                settles_in_minutes: None,
                estimated_return_usd: None,
            }));
        }
        let amount = self.request_return(WalletOwner::Esim(esim), Return::MoveInto(group))?;
        Ok(Reply::GroupMovePending(GroupMemberChange {
            success: true,
            group_id: group_id.to_string(),
            iccid: iccid.to_string(),
            status: "move_pending",
            settles_in_minutes: Some(self.settles_in_minutes()),
            estimated_return_usd: Some(money::displayed(amount)),
        }))
    }

    /// The eSIM becomes a member (immediately, or when its pending move settles).
    pub(crate) fn join_group(&mut self, esim: EsimIx, group: GroupIx, returned: Option<Decimal>) {
        let funding = &mut self.esims[esim].funding;
        assert!(funding.is_settled_standalone(), "only a standalone eSIM with nothing on its way joins");
        *funding = Funding::Member { group, own_wallet: funding.has_wallet() };
        self.groups[group].members.insert(esim);
        let record = &self.groups[group];
        let event = EsimEvent::GroupAssigned {
            group_id: record.id.clone(),
            group_name: record.name.clone(),
            returned_usd: returned,
        };
        self.emit_esim(esim, event);
    }

    pub(crate) fn remove_group_esim(&mut self, account: AccountIx, group_id: &str, iccid: &str) -> Response {
        let group = self.group_of(account, group_id)?;
        let esim = self.esim_of(account, iccid)?;
        if self.esims[esim].funding.group() != Some(group) {
            return Err(ApiError::new(
                ErrorCode::EsimNotFound,
                format!("eSIM {iccid} is not a member of group {group_id}"),
            ));
        }
        self.groups[group].members.remove(&esim);
        self.esims[esim].funding.leave_group();
        self.wallet_standalone_again(esim);
        let name = self.groups[group].name.clone();
        self.emit_esim(esim, EsimEvent::GroupRemoved { group_id: group_id.to_string(), group_name: name });
        Ok(Reply::GroupMemberRemoved(GroupMemberChange {
            success: true,
            group_id: group_id.to_string(),
            iccid: iccid.to_string(),
            status: "removed",
            settles_in_minutes: None,
            estimated_return_usd: None,
        }))
    }

    pub(crate) fn emit_group_low(&mut self, group: GroupIx, account_underfunded: bool) {
        let record = &self.groups[group];
        let event = GroupEvent::BalanceLow {
            suggested_amount_usd: record.refill_amount,
            threshold_usd: record.low_balance_threshold,
            account_underfunded,
        };
        self.emit_group(group, event);
    }

    /// A card charge ended: the held-back group.balance_low events go out now.
    pub(crate) fn release_waiting_group_events(&mut self, account: AccountIx, charge_failed: bool) {
        let waiting: Vec<GroupIx> = self.accounts[account]
            .groups
            .iter()
            .copied()
            .filter(|&g| self.groups[g].low_event_waiting_until.is_some())
            .collect();
        for group in waiting {
            self.groups[group].low_event_waiting_until = None;
            let underfunded = charge_failed || self.reseller_balance(account) < self.groups[group].refill_amount;
            self.emit_group_low(group, underfunded);
        }
    }

    /// About 30 minutes passed without a credit: the event goes out, underfunded.
    pub(crate) fn group_low_deadline(&mut self, group: GroupIx) {
        // Stale when the wait ended first (a credit, a failed charge, a fund or a defund
        // of the group released or dropped the event) or a later wait replaced it.
        let due = self.groups[group].low_event_waiting_until.is_some_and(|at| at <= self.now);
        if due {
            self.groups[group].low_event_waiting_until = None;
            self.emit_group_low(group, true);
        }
    }
}
